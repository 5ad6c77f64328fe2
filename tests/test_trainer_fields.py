"""Every AER setting on every trainer: each field of `AERArguments` and of each AER config's own, set away from its
default on each of the three trainers' configs, either builds (the trainer acts on it) or is refused at construction
naming the field and the trainer that honours it; nothing is accepted and ignored. The table in docs/usage.md is
generated from the same source (`aer_trl.config_docs.settings_table`) and checked here."""

import os
from dataclasses import fields
from pathlib import Path

import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from aer_trl.app.trainers import config_class_for as _config_class  # noqa: E402
from aer_trl.app.trainers import is_aer_field, setting_status, settings_table  # noqa: E402
from aer_trl.config import AERArguments  # noqa: E402
from aer_trl.config_checks import LOCAL_WORKER_REFUSES  # noqa: E402
from aer_trl.families import FAMILIES, HONOURED_BY, family  # noqa: E402
from aer_trl.methods import methods  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs" / "usage.md"

# a valid value away from the default for every AER setting (a new field fails `test_every_setting_has_a_value`)
VALUES = {
    "epsilon": 0.3, "gradient_checkpointing": False, "aer_measurements": True, "aer_rho": 0.3, "aer_tau": 0.5,
    "aer_eta": 0.01, "aer_alpha_init": 0.1, "aer_alpha_max": 1.0, "aer_eps": 1e-6, "aer_correctness_reward": "r",
    "aer_correctness_threshold": 0.7, "aer_difficulty_aware": True, "aer_adaptive": True, "aer_anchor_rollouts": 2,
    "aer_bonus_cap": 1.0, "aer_bonus_quantile": 0.5, "chat_template_path": "plain",
    "vllm_enable_expert_parallel": True, "vllm_logp_gap_limit": 0.5, "aer_fixed_target": 0.3,
    "ent_adv_alpha": 0.5, "ent_adv_kappa": 3.0, "clip_cov_ratio": 1e-3, "clip_cov_lb": 0.5, "clip_cov_ub": 4.0,
    "kl_cov_ratio": 1e-2, "kl_cov_coef": 0.5, "local_rollouts": True, "aer_max_lag": 1, "local_rollout_lag": 1,
}  # fmt: skip
BASE = {"output_dir": "unused", "use_cpu": True, "bf16": False, "report_to": "none"}
ASYNC_BASE = {"token_budget": 0}  # what local_rollouts needs (no vLLM server to ask)


def settings(kind: str) -> list[str]:
    cls = _config_class(kind)
    return [f.name for f in fields(cls) if is_aer_field(cls, f.name) and f.name != "method"]


def build(kind: str, **values):
    base = {**BASE, **(ASYNC_BASE if kind == "async_grpo" else {})}
    return _config_class(kind)(**{**base, **values})


def test_every_setting_has_a_value_and_a_status():
    names = {name for kind in FAMILIES for name in settings(kind)}
    assert names - set(VALUES) == set(), "a new AER setting: give it a value here and a status in the table"
    assert set(HONOURED_BY) <= set(AERArguments.__dataclass_fields__)


@pytest.mark.parametrize(("kind", "name"), [(k, n) for k in FAMILIES for n in settings(k)], ids=str)
def test_each_setting_acts_or_is_refused_by_name_on_each_trainer(kind, name):
    """The status the table gives is what building the config does: "acts" builds with the value kept; a refusal is a
    ValueError naming the field and the trainer that honours it (or the method that reads it)."""
    status = setting_status(kind, name, _config_class(kind), methods())
    value = VALUES[name]
    if status.startswith("with method"):
        reader = next(n for n, m in methods().items() if name in m.reads)
        assert getattr(build(kind, method=reader, **{name: value}), name) == value  # acts with its method
        with pytest.raises(ValueError, match=rf"{name}={value!r} is a setting of method \['{reader}'\]"):
            build(kind, **{name: value})  # and is refused with any other
        return
    if status.startswith("refused"):
        honouring = [family(k).trainer_name for k in HONOURED_BY[name][0]]
        with pytest.raises(ValueError, match=rf"{name}=.*{family(kind).trainer_name} cannot honour it") as error:
            build(kind, **{name: value})
        assert all(t in str(error.value) for t in honouring)
        return
    assert status.startswith("acts")
    extra = {"aer_alpha_max": {"aer_alpha_init": 0.0}}.get(name, {})
    config = build(kind, **{name: value, **extra})
    stored = getattr(config, name)
    if name == "gradient_checkpointing" and stored is None:  # transformers' newer name holds it (AERArguments)
        stored = config.activation_checkpointing
    assert stored == value


def test_the_async_trainers_own_settings_are_refused_where_nothing_acts_on_them():
    with pytest.raises(ValueError, match=r"aer_max_lag=1: .*method='async_grpo' trains without"):
        build("async_grpo", method="async_grpo", aer_max_lag=1)
    for name, value in {"top_p": 0.9, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1}.items():
        assert name in LOCAL_WORKER_REFUSES
        with pytest.raises(ValueError, match=rf"{name}={value!r}: the local rollout worker .* cannot honour it"):
            build("async_grpo", local_rollouts=True, **{name: value})
        assert getattr(build("async_grpo", **{name: value}), name) == value  # TRL's vLLM worker samples with it
    with pytest.raises(ValueError, match=r"token_budget=None .* local_rollouts=True has no server"):
        _config_class("async_grpo")(**BASE, local_rollouts=True, token_budget=None)


def test_the_docs_table_is_the_generated_one():
    assert settings_table() in DOCS.read_text(), "docs/usage.md: paste aer_trl.config_docs.settings_table()"


@pytest.mark.parametrize("kind", list(FAMILIES))
def test_help_of_every_config_lists_aers_fields_and_trls_and_every_trainer_shows_trls_signature(kind):
    """`help(AERRLOOConfig)` describes AER's fields, the config's own and TRL's, in TRL's "Parameters:" layout; the
    trainer's signature is the TRL trainer's (inspect, IDEs that read it, `help()`)."""
    import importlib
    import inspect

    cls = _config_class(kind)
    doc = cls.__doc__
    assert doc.count("Parameters:") == 1 and f"> Parameters of TRL's `{cls.trl_config().__name__}`" in doc
    for name in [f.name for f in fields(cls) if is_aer_field(cls, f.name)] + ["num_generations", "temperature"]:
        assert f"\n        {name} (`" in doc, name
    module, name = family(kind).trainer.split(":")
    trainer = getattr(importlib.import_module(f"aer_trl.{module}"), name)
    trl = trainer.trl_trainer()
    assert inspect.signature(trainer.__init__) == inspect.signature(trl.__init__)
    assert {"train_dataset", "processing_class", "peft_config"} <= set(inspect.signature(trainer).parameters)
