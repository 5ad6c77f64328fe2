"""One registry API for every kind of plug-in (aer_trl/plugins.py): methods, data sources and rewards are registered,
found and listed by the same three calls, refuse a second object under a taken name unless asked to replace it, and
name the config field in the error for an unknown name."""

import pytest

import aer_trl.methods as method_registry
from aer_trl.app import data, rewards


def _source(name):
    return data.DataSource(name=name, about="a test source", load=lambda split, args, fmt: None)


def _method(name):
    return method_registry.Method(name=name, help="a test method", title="a test method")


def _reward(completions, **kwargs):
    return [0.0 for _ in completions]


KINDS = [
    # (registry, register, get, listing, a new plug-in called `name`, the field an unknown name's error names)
    (method_registry.METHODS, method_registry.register_method, method_registry.get_method, method_registry.methods,
     _method, "method"),
    (data.SOURCE_REGISTRY, data.register_source, data.SOURCE_REGISTRY.get, data.sources, _source, "dataset_name"),
    (rewards.REWARDS, rewards.register_reward, rewards.get_reward, rewards.rewards, None, "reward_funcs"),
]  # fmt: skip


@pytest.mark.parametrize("registry, register, get, listing, make, field", KINDS, ids=["methods", "sources", "rewards"])
def test_every_kind_of_plugin_has_the_same_api(monkeypatch, registry, register, get, listing, make, field):
    monkeypatch.setattr(registry, "_entries", dict(registry._entries))  # the real registry is left as it was
    first = make("plug_a") if make else _reward
    name = "plug_a" if make else "_reward"
    assert register(first) is first and get(name) is first and listing()[name] is first  # its own name by default
    assert register(first) is first  # registering the same object again is harmless
    second = make("plug_a") if make else (lambda completions, **kwargs: [1.0 for _ in completions])
    with pytest.raises(ValueError, match=f"named {name!r} is registered already"):
        register(second, name=name)
    assert register(second, name=name, replace=True) is second and get(name) is second
    assert register(first, name="plug_b") is first and get("plug_b") is first  # any name may be given
    with pytest.raises(TypeError):
        listing()["x"] = first  # the listing is read-only
    with pytest.raises(ValueError, match=f"^{field}: unknown .* 'nope'; known .* are \\["):
        get("nope")


def test_an_object_of_another_kind_is_refused():
    with pytest.raises(TypeError, match="is not a method"):
        method_registry.register_method(_source("not_a_method"))
    with pytest.raises(TypeError, match="is not a data source"):
        data.register_source(_method("not_a_source"))
