"""The method registry (aer_trl/methods.py): one place per method, read by the config, the trainer, the card, the
tables and the recipe generator; a method registered from outside the package works end to end."""

import logging
from pathlib import Path

import pytest
import torch

import aer_trl.methods as method_registry
from aer_trl.methods import Method, TokenBatch, get_method, method_title, register_method
from tests import helpers


def _half_advantages(batch: TokenBatch, config):
    """A method of our own: every token's advantage halved (scaled by `config.ent_adv_alpha` to read a field)."""
    base = batch.advantages.unsqueeze(1) if batch.advantages.dim() == 1 else batch.advantages
    return 0.5 * base.expand_as(batch.logps).to(batch.logps.dtype), {"half_adv/scale": 0.5}


@pytest.fixture
def half_adv():
    method = register_method(
        Method(
            name="half_adv",
            help="GRPO with every advantage halved (a test method)",
            title="GRPO with halved advantages",
            token_hook=_half_advantages,
            sets={"beta": 0.0},
            recipe={"learning_rate": 1e-3},
        )
    )
    yield method
    method_registry.METHODS._entries.pop("half_adv")


def test_a_method_registered_from_outside_trains_and_appears_in_card_and_table(tmp_path, half_adv):
    tokenizer = helpers.make_tokenizer()
    args = helpers.make_config(tmp_path, method="half_adv", max_steps=2, aer_measurements=True)
    assert method_registry.get_method(args.method).aer is False
    assert args.aer_measurements is True and args.method_settings == {}
    trainer = helpers.make_trainer(tokenizer, args)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert trainer.state.global_step == 2
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert [r["half_adv/scale"] for r in trainer.state.log_history if "half_adv/scale" in r] == [0.5, 0.5]
    assert all(r["aer/alpha"] == 0.0 for r in trainer.state.log_history if "aer/alpha" in r)  # no AER bonus
    trainer.create_model_card()
    card = (tmp_path / "README.md").read_text()
    assert "GRPO with halved advantages" in card and "GRPO with every advantage halved" in card
    assert method_registry.method_title("half_adv") == "GRPO with halved advantages"  # how tables name it
    assert method_registry.method_title("my run") == "my run"  # a label that is not a method stays as it is


def test_a_token_method_needs_a_token_level_loss(tmp_path, half_adv):
    with pytest.raises(ValueError, match="method='half_adv' acts on per-token"):
        helpers.make_config(tmp_path, method="half_adv", importance_sampling_level="sequence")


def test_registering_a_taken_name_is_refused_unless_replaced(half_adv):
    with pytest.raises(ValueError, match="registered already"):
        register_method(Method("half_adv", "x", "y"))
    assert register_method(Method("half_adv", "x", "y"), replace=True).title == "y"
    with pytest.raises(ValueError, match="must be an identifier"):
        Method("two words", "x", "y")


def test_unknown_method_lists_the_registered_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown method 'nope'; known methods are \['grpo'"):
        helpers.make_config(tmp_path, method="nope")
    assert method_title("aer") == "AER-GRPO" and get_method("kl_cov").token_hook is not None


@pytest.mark.parametrize(
    "method, field, value",
    [
        ("aer_c1", "aer_adaptive", True),  # C1 only fixes α
        ("aer_c2c3", "aer_difficulty_aware", True),  # C2&C3 only drops the difficulty weighting
        ("aer_fixed", "aer_adaptive", True),
    ],
)
def test_a_method_never_silently_overrides_an_explicit_setting(tmp_path, method, field, value):
    kw = {"aer_alpha_init": 0.1} if method in ("aer_c1", "aer_fixed") else {}
    with pytest.raises(ValueError, match=rf"method='{method}' sets {field}=.*but {field}={value} was set explicitly"):
        helpers.make_config(tmp_path, method=method, **{field: value}, **kw)
    # the value the method sets, given explicitly, is accepted
    config = helpers.make_config(tmp_path, method=method, **{field: not value}, **kw)
    assert getattr(config, field) is (not value)


def test_the_full_aer_method_takes_a_component_switched_off_by_hand(tmp_path):
    assert helpers.make_config(tmp_path, method="aer").aer_adaptive is True
    config = helpers.make_config(tmp_path, method="aer", aer_adaptive=False, aer_alpha_init=0.1)
    assert config.aer_adaptive is False and config.aer_difficulty_aware is True
    with pytest.raises(ValueError, match=r"or choose a method that sets it \(\['aer_c1', 'aer_fixed'\]\)"):
        helpers.make_config(tmp_path, method="aer_c2c3", aer_adaptive=False)


@pytest.mark.parametrize("field", ["aer_adaptive", "aer_difficulty_aware"])
def test_aer_switches_on_a_method_without_aer_are_refused(tmp_path, field):
    with pytest.raises(ValueError, match=f"{field}=True only applies to the AER methods"):
        helpers.make_config(tmp_path, method="grpo", **{field: True})


def test_what_a_method_sets_is_logged_once_at_start(tmp_path, caplog):
    tokenizer = helpers.make_tokenizer()
    with caplog.at_level(logging.INFO, logger="aer_trl.adapter"):
        helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, method="clip_higher"))
    lines = [r.getMessage() for r in caplog.records if "sets" in r.getMessage()]
    assert lines == ["method='clip_higher' sets {'epsilon': 0.2, 'epsilon_high': 0.28}"]


def test_recipes_are_generated_from_the_registry():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "recipes" / "make_recipes.py"
    spec = importlib.util.spec_from_file_location("make_recipes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = module.render("method: aer\noutput_dir: runs/x/aer\naer_alpha_init: 0.1\n", "kl_cov", lab=False)
    assert "method: kl_cov" in text and "aer_alpha_init" not in text
    assert "kl_cov_ratio: 0.002" in text and get_method("kl_cov").recipe_note in text


def test_an_installed_package_declares_a_method_by_entry_point(tmp_path, monkeypatch):
    """`method: plugin_adv` in a recipe finds a method that an installed package declares in the `aer_trl.methods`
    entry-point group, without anything importing it first; a wrong object there is a clear error."""
    (tmp_path / "aer_plugin").mkdir()
    (tmp_path / "aer_plugin" / "__init__.py").write_text(
        "from aer_trl.methods import Method\n"
        "PLUGIN = Method('plugin_adv', 'a plugin method', 'GRPO with a plugin')\n"
        "WRONG = 'not a method'\n"
    )
    info = tmp_path / "aer_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: aer-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[aer_trl.methods]\nplugin_adv = aer_plugin:PLUGIN\nplugin_wrong = aer_plugin:WRONG\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        method_registry.METHODS, "_entries", dict(method_registry.METHODS._entries)
    )  # leave the real registry as it was
    assert "plugin_adv" not in method_registry.methods()
    config = helpers.make_config(tmp_path / "out", method="plugin_adv")
    assert config.method == "plugin_adv" and method_title("plugin_adv") == "GRPO with a plugin"
    with pytest.raises(TypeError, match="must be a method named 'plugin_wrong'"):
        get_method("plugin_wrong")


def test_the_add_a_method_example_in_the_docs_runs_as_written(tmp_path, monkeypatch):
    import re

    docs = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text()
    code = re.search(r"```python\n(.*?)```", docs[docs.index("## 6. Add a method") :], re.S).group(1)
    monkeypatch.setattr(method_registry.METHODS, "_entries", dict(method_registry.METHODS._entries))
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(compile(code, "docs/design.md", "exec"), namespace)
    args = namespace["args"]
    assert args.method == "half_adv" and get_method("half_adv").title == "GRPO with halved advantages"
    batch = TokenBatch(torch.tensor([2.0]), *[torch.zeros(1, 3)] * 4, torch.Generator())
    advantages, metrics = namespace["half_advantages"](batch, args)
    assert advantages.tolist() == [[1.0, 1.0, 1.0]] and metrics == {"half_adv/scale": 0.5}
