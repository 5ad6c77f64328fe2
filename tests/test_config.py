"""Every invalid AER value raises a ValueError naming the field and the allowed values."""

import json
import math

import pytest

from aer_trl import AERGRPOConfig
from tests.helpers import make_config

BASE = dict(output_dir="/tmp/aer-config-test", use_cpu=True, bf16=False, report_to="none")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"aer_rho": -0.1}, r"aer_rho must be in \[0, 1\]"),
        ({"aer_rho": 1.5}, r"aer_rho must be in \[0, 1\]"),
        ({"aer_rho": math.nan}, "aer_rho must be a finite number"),
        ({"aer_tau": 0.0}, "aer_tau must be > 0"),
        ({"aer_tau": -1.0}, "aer_tau must be > 0"),
        ({"aer_tau": math.inf}, "aer_tau must be a finite number"),
        ({"aer_eta": -0.005}, "aer_eta must be >= 0"),
        ({"aer_alpha_init": -0.1}, "aer_alpha_init must be >= 0"),
        ({"aer_alpha_max": 0.05, "aer_alpha_init": 0.1}, "aer_alpha_max must be >= aer_alpha_init"),
        ({"aer_eps": 0.0}, "aer_eps must be > 0"),
        ({"aer_correctness_threshold": math.nan}, "aer_correctness_threshold must be a finite number"),
        ({"aer_correctness_threshold": math.inf}, "aer_correctness_threshold must be a finite number"),
        ({"aer_fixed_target": 0.0}, "aer_fixed_target must be > 0"),
        ({"aer_fixed_target": -math.inf}, "aer_fixed_target must be a finite number"),
        ({"aer_bonus_quantile": 0.0}, r"aer_bonus_quantile must be in \(0, 1\]"),
        ({"aer_bonus_quantile": 1.2}, r"aer_bonus_quantile must be in \(0, 1\]"),
        ({"aer_anchor_rollouts": 0}, "aer_anchor_rollouts must be an integer >= 1"),
        ({"aer_anchor_rollouts": 1.5}, "aer_anchor_rollouts must be an integer >= 1"),
        ({"num_generations": 1}, "at least 2 generations per prompt"),  # TRL's own check
        ({"entropy_coef": 0.01}, "entropy_coef=0.0 and use_adaptive_entropy=False"),
        ({"use_adaptive_entropy": True}, "entropy_coef=0.0 and use_adaptive_entropy=False"),
    ],
)
def test_invalid_values_raise_clear_errors(overrides, message):
    with pytest.raises(ValueError, match=message):
        AERGRPOConfig(**BASE, **overrides)


def test_defaults_are_the_papers():
    cfg = AERGRPOConfig(**BASE)
    assert (cfg.aer_rho, cfg.aer_tau, cfg.aer_eta, cfg.aer_alpha_init) == (0.2, 0.4, 0.005, 0.0)
    assert cfg.aer_difficulty_aware and cfg.aer_adaptive and cfg.aer_fixed_target is None
    assert cfg.aer_bonus_quantile == 1.0 and cfg.aer_anchor_rollouts == 1  # ours, off unless asked for


def test_every_field_we_declare_has_help():
    """TRL's convention: each field a config or argument class declares carries `metadata={"help": ...}` (what
    `--help` and the docs show); the fields inherited from TRL and transformers are theirs."""
    import dataclasses

    from trl import GRPOConfig

    from aer_trl.app.evaluation.args import EvalArguments
    from aer_trl.app.training import AERScriptArguments

    for cls, base in ((AERGRPOConfig, GRPOConfig), (AERScriptArguments, None), (EvalArguments, None)):
        inherited = {f.name for f in dataclasses.fields(base)} if base else set()
        ours = [f for f in dataclasses.fields(cls) if f.name not in inherited]
        assert ours
        missing = [f.name for f in ours if not f.metadata.get("help")]
        assert not missing, (cls.__name__, missing)


def test_correctness_reward_index_from_cli_string():
    assert AERGRPOConfig(**BASE, aer_correctness_reward="1").aer_correctness_reward == 1


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"method": "grpo"}, (0.2, None)),
        ({"method": "clip_cov"}, (1.0, 1.0)),  # the paper's c_l = c_h = 1.0
        ({"method": "clip_cov", "epsilon": 1.0}, (1.0, 1.0)),  # one key for both sides (crashed before)
        ({"method": "clip_cov", "epsilon": 0.2}, (0.2, 0.2)),  # an explicit TRL-default value is kept
        ({"method": "clip_cov", "epsilon": 0.5, "epsilon_high": 0.7}, (0.5, 0.7)),
        ({"method": "clip_higher"}, (0.2, 0.28)),
        ({"method": "clip_higher", "epsilon": 0.1, "epsilon_high": 0.3}, (0.1, 0.3)),
        ({"method": "aer", "epsilon": 0.3}, (0.3, None)),
    ],
)
def test_clipping_keys_are_resolved_without_silent_overrides(tmp_path, overrides, expected):
    config = AERGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **overrides)
    assert (config.epsilon, config.epsilon_high) == expected


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"method": "kl_cov", "epsilon": 0.3, "epsilon_high": 0.4}, "method='kl_cov'.*leave epsilon and epsilon_high"),
        ({"method": "kl_cov", "epsilon": 0.2}, "method='kl_cov'"),
        ({"method": "clip_higher", "epsilon_high": 0.1}, "epsilon_high > epsilon"),
        ({"method": "grpo", "epsilon": -1.0}, "epsilon must be a finite number > 0"),
    ],
)
def test_conflicting_clipping_keys_are_refused(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        AERGRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **overrides)


def test_from_grpo_config_keeps_every_field(tmp_path):
    from trl import GRPOConfig

    grpo = GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        learning_rate=3e-6,
        num_generations=4,
        steps_per_generation=2,
    )
    aer = AERGRPOConfig.from_grpo_config(grpo, aer_tau=0.5)
    assert (aer.learning_rate, aer.num_generations, aer.steps_per_generation, aer.aer_tau) == (3e-6, 4, 2, 0.5)


def test_a_budget_ending_inside_a_rollout_batch_is_warned_about(tmp_path, caplog):
    common = dict(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, per_device_train_batch_size=8, steps_per_generation=4
    )
    with caplog.at_level("WARNING", logger="aer_trl.config"):
        AERGRPOConfig(max_steps=300, **common)  # 75 whole rollout batches of 4 steps
        assert "ends inside a rollout batch" not in caplog.text
        AERGRPOConfig(max_steps=302, **common)
    assert "max_steps=302 ends inside a rollout batch (4 optimizer steps each)" in caplog.text


def test_run_settings_are_what_shapes_the_model_not_bookkeeping(tmp_path):
    from aer_trl.settings import settings_changes

    a = make_config(tmp_path / "a", aer_tau=0.4, logging_steps=1).run_settings()
    b = make_config(tmp_path / "b", aer_tau=0.3, logging_steps=5, save_steps=7, report_to="none").run_settings()
    assert json.loads(json.dumps(a)) == a and a["world_size"] == 1 and a["method"] == "aer"
    assert not {"output_dir", "logging_steps", "save_steps", "report_to", "hub_model_id"} & a.keys()
    assert {"learning_rate", "num_generations", "seed", "aer_rho", "temperature"} <= a.keys()
    assert settings_changes(a, b) == {"aer_tau": (0.4, 0.3)}
    assert settings_changes({"gone": 1, "aer_tau": 0.4}, b) == {"aer_tau": (0.4, 0.3)}  # fields of another version


def test_an_unknown_key_is_refused_by_name(tmp_path):
    """A key no dataclass of the recipe knows (a typo, a name of another tool) is refused with its name, in the
    constructor, a recipe file and a command-line flag; never silently dropped."""
    from aer_trl.app.training import parse_recipe

    with pytest.raises(TypeError, match="aer_target_entropy"):
        make_config(tmp_path, aer_target_entropy=1.0)
    recipe = tmp_path / "old.yaml"
    recipe.write_text("method: aer\nuse_cpu: true\nbf16: false\naer_telemetry: true\n")
    with pytest.raises(ValueError, match="aer_telemetry"):
        parse_recipe(["--config", str(recipe), "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="entropy_target_ratio"):
        parse_recipe(["--output_dir", str(tmp_path), "--use_cpu", "--bf16=false", "--entropy_target_ratio=0.4"])


def test_use_cache_is_dropped_from_generation_kwargs_only_for_vllm_with_a_warning(tmp_path, caplog):
    # the CPU recipes pass `use_cache` to transformers' generate; vLLM's SamplingParams refuses it (seen on an H100)
    kwargs = {"use_cache": True, "top_k": 5}
    with caplog.at_level("WARNING", logger="aer_trl.config"):
        assert make_config(tmp_path, use_vllm=True, generation_kwargs=dict(kwargs)).generation_kwargs == {"top_k": 5}
    assert "generation_kwargs: use_cache dropped because use_vllm=True" in caplog.text  # what and why
    assert make_config(tmp_path, generation_kwargs=dict(kwargs)).generation_kwargs == kwargs


# ------------------------------------------------------------------------------------------ TRL's config contract
def test_trl_fields_keep_trls_meaning_and_the_two_unset_ones_say_so(tmp_path):
    """AER re-declares exactly two of TRL's fields, each only to tell "unset" from a value (a method's own ε; moving
    checkpointing to transformers' newer name); their help says so, and the built config holds TRL's value, as a
    GRPOConfig of the same arguments does. Every other TRL field keeps TRL's default."""
    from dataclasses import MISSING, fields

    from trl import GRPOConfig

    trl_fields = {f.name: f for f in fields(GRPOConfig)}

    def default(f):
        return (
            f.default if f.default is not MISSING else f.default_factory() if f.default_factory is not MISSING else f
        )

    redeclared = {
        f.name for f in fields(AERGRPOConfig) if f.name in trl_fields and default(f) != default(trl_fields[f.name])
    }
    assert redeclared == {"epsilon", "gradient_checkpointing"}
    help_of = {f.name: f.metadata["help"] for f in fields(AERGRPOConfig)}
    assert all("Unset (None, AER's default, so that" in help_of[name] for name in redeclared)
    aer = AERGRPOConfig(**{**BASE, "output_dir": str(tmp_path / "aer")}, method="grpo")
    trl = GRPOConfig(**{**BASE, "output_dir": str(tmp_path / "trl")})
    assert (aer.epsilon, aer.epsilon_high) == (trl.epsilon, trl.epsilon_high) == (0.2, None)  # None: "= epsilon"
    on = lambda c: getattr(c, "activation_checkpointing", None) or c.gradient_checkpointing  # noqa: E731
    assert on(aer) == on(trl) is True
    assert make_config(tmp_path / "user", method="grpo", epsilon=0.2).epsilon == 0.2  # a user's value is kept
    assert make_config(tmp_path / "off", gradient_checkpointing=False).gradient_checkpointing in (False, None)
    assert not on(make_config(tmp_path / "off2", gradient_checkpointing=False))


def test_aer_checks_run_on_the_finished_config(tmp_path, monkeypatch):
    """`check_aer_fields` sees the config after TRL's __post_init__ (TRL's derived values are set), not before it."""
    import aer_trl.config as config_module

    seen = {}
    monkeypatch.setattr(config_module, "check_aer_fields", lambda c: seen.update(batch=c.generation_batch_size))
    make_config(tmp_path)
    assert isinstance(seen["batch"], int) and seen["batch"] > 0  # TRL derives it in its __post_init__


def test_save_steps_inside_a_rollout_batch_is_kept_with_a_warning_that_says_where_saves_go(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="aer_trl.config"):
        args = make_config(tmp_path, steps_per_generation=4, save_strategy="steps", save_steps=3)
    assert args.save_steps == 3  # the user's value; AERCallback moves each save to the end of its rollout batch
    assert "save_steps=3 falls inside a rollout batch" in caplog.text
    assert "each save moves to the end of its rollout batch (a multiple of 4)" in caplog.text


def test_each_config_documents_its_own_fields_in_trls_parameters_layout():
    """TRL's "Parameters:" section, written from the fields' help texts: every field a config declares is there with
    its help, and a field left out of every group stops the import, naming it."""
    from dataclasses import dataclass, field, fields

    from aer_trl import AERAsyncGRPOConfig
    from aer_trl.config import AERArguments
    from aer_trl.config_docs import documented

    for cls in (AERArguments, AERGRPOConfig, AERAsyncGRPOConfig):
        doc = " ".join(cls.__doc__.split())
        assert "Parameters: > Parameters " in doc
        own = set(vars(cls)["__annotations__"]) & {f.name for f in fields(cls)}
        assert own
        for f in fields(cls):
            if f.name in own:
                assert f"{f.name} (`" in doc and " ".join(f.metadata["help"].split()) in doc, (cls, f.name)
    with pytest.raises(ValueError, match=r"fields without a group in its docstring: \['new_knob'\]"):

        @documented({"Parameters": []})
        @dataclass
        class Config:
            new_knob: int = field(default=1, metadata={"help": "A knob."})
