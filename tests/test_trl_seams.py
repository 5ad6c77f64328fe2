"""The seam between aer_trl and TRL/transformers: every private method we override or call and every private member
we read, by presence and signature, and each contract nobody wrote down, pinned by a test that fails when TRL
changes it. TRL changes private methods in minor releases: when one of these fails, the seam moved (run
`make test-trl-latest` to see which against the newest TRL)."""

import inspect

import pytest
import torch
import transformers
import trl
from trl import GRPOTrainer, RLOOTrainer
from trl.trainer import grpo_trainer
from trl.trainer.utils import shuffle_sequence_dict, split_tensor_dict

from aer_trl import AERGRPOTrainer, AERRLOOTrainer
from tests import helpers


def params(fn) -> list[str]:
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "args", "kwargs")]


# each AER trainer (its adapter) and the TRL trainer it extends
ADAPTERS = [(AERGRPOTrainer, GRPOTrainer), (AERRLOOTrainer, RLOOTrainer)]
IDS = ["grpo", "rloo"]


def ours_of(trainer_class) -> list[type]:
    """The trainer's classes from aer_trl: the adapter, the shared mixin, the resume mixin."""
    return [c for c in trainer_class.__mro__ if c.__module__.startswith("aer_trl")]


def bases_of(trainer_class) -> list[type]:
    """TRL's, transformers', ..."""
    return [c for c in trainer_class.__mro__ if not c.__module__.startswith("aer_trl")]


def overrides(trainer_class) -> list[str]:
    """The private methods an AER trainer or its mixins define that a base class (TRL's, transformers') also does."""
    mine = {
        n
        for c in ours_of(trainer_class)
        for n, v in vars(c).items()
        if callable(v) and n.startswith("_") and not n.startswith("__")
    }
    return sorted(n for n in mine if any(n in vars(base) for base in bases_of(trainer_class)))


# Every private method the AER trainers override (the shared adapter `AERTrainerMixin` and `ResumeMixin`, so both
# trainers alike), and why no public hook of TRL or transformers serves.
OVERRIDES = {
    "_calculate_rewards": "the reward functions see `completion_truncated` (an answer at the end of a cut "
    "completion may be cut too), and the rewards gathered over processes are what g(q) is computed from; TRL keeps "
    "them local to `_generate_and_score_completions`",
    "_generate_and_score_completions": "λ_i for each completion joins the batch TRL shuffles and splits (as "
    "`advantages` does), so the loss reads it as data",
    "_get_per_token_logps_and_entropies": "the per-token entropies TRL's fused head computes inside its loss, with "
    "their gradient, for AER's bonus (no second forward); TRL does not return them from the loss",
    "_load_callback_state": "AER's controller state is restored on every resume, also when "
    "restore_callback_states_from_checkpoint is off, and the run's own callbacks (with this run's settings) are "
    "kept where transformers would rebuild them from the checkpoint's arguments",
    "_run_epoch": "a run resumed at max_steps (a finished job requeued) trains nothing; transformers trains one "
    "step more before it checks max_steps",
}


@pytest.mark.parametrize("trainer_class", [a for a, _ in ADAPTERS], ids=IDS)
def test_the_private_methods_we_override_are_the_ones_we_know(trainer_class):
    """A new override is a new seam: it belongs in OVERRIDES first, with why no public hook serves."""
    assert overrides(trainer_class) == sorted(OVERRIDES)


@pytest.mark.parametrize(
    ("trainer_class", "name"), [(a, n) for a, _ in ADAPTERS for n in sorted(OVERRIDES)], ids=lambda v: str(v)
)
def test_each_override_accepts_what_the_base_passes(trainer_class, name):
    """Our override takes the base method's parameters by the same names, in the same order (TRL calls some of them
    positionally); a parameter TRL adds or renames fails here, not silently at run time. An override that forwards
    `(*args, **kwargs)` unchanged relies on what the base returns instead: pinned below for the log-prob forward."""
    base = next(vars(b)[name] for b in bases_of(trainer_class) if name in vars(b))
    mine = next(vars(c)[name] for c in ours_of(trainer_class) if name in vars(c))
    base_params, our_params = params(base), params(mine)
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(mine).parameters.values())
    if takes_kwargs and not our_params:  # (*args, **kwargs): forwards everything to TRL
        pinned = ("_get_per_token_logps_and_entropies", "_run_epoch")
        assert name in pinned, f"{name} forwards blindly: pin what it relies on, as for {pinned}"
        return
    assert our_params[: len(base_params)] == base_params or (
        takes_kwargs and base_params[: len(our_params)] == our_params
    ), (base_params, our_params)


@pytest.mark.parametrize("trl_class", [t for _, t in ADAPTERS], ids=IDS)
def test_the_log_prob_forward_returns_logps_entropies_and_aux_loss_and_the_loss_asks_for_entropies(trl_class):
    """`_get_per_token_logps_and_entropies` is overridden as `(*args, **kwargs)`: what AER relies on is that it
    returns (logps, entropies, aux_loss), that it takes `compute_entropy`, and that TRL's loss calls it with
    `compute_entropy=True` (the entropies AER's bonus and controller read)."""
    forward = trl_class._get_per_token_logps_and_entropies
    assert params(forward)[:4] == ["model", "input_ids", "attention_mask", "logits_to_keep"]
    assert "compute_entropy" in params(forward)
    assert str(inspect.signature(forward).return_annotation).startswith("tuple[torch.Tensor, torch.Tensor | None")
    loss_source = inspect.getsource(trl_class._compute_loss)
    assert "self._get_per_token_logps_and_entropies(" in loss_source and "compute_entropy=True" in loss_source


def test_the_epoch_loop_stops_when_an_epoch_sets_should_training_stop():
    """`_run_epoch` is overridden as `(*args, **kwargs)`: a run resumed at max_steps returns from it without training
    and sets `control.should_training_stop`; transformers' loop must call it once per epoch and stop on that flag."""
    loop = inspect.getsource(transformers.Trainer._inner_training_loop)
    call = loop.index("self._run_epoch(")
    assert "if self.control.should_training_stop:" in loop[call : call + 800]


@pytest.mark.parametrize("trl_class", [t for _, t in ADAPTERS], ids=IDS)
def test_the_loss_scaling_declaration_the_bonus_follows(trl_class):
    """The bonus is scaled as TRL's loss is: by the accumulation steps where TRL scales its loss itself
    (`loss_is_scaled_for_ga`, GRPO), not where transformers does (RLOO)."""
    assert trl_class.loss_is_scaled_for_ga is (trl_class is GRPOTrainer)


@pytest.mark.parametrize("trl_class", [t for _, t in ADAPTERS], ids=IDS)
def test_both_trainers_have_the_seams_the_adapter_reads(trl_class):
    assert params(trl_class._calculate_rewards) == ["inputs", "prompts", "completions", "completion_ids_list"]
    assert params(trl_class.compute_loss)[:4] == ["model", "inputs", "return_outputs", "num_items_in_batch"]
    assert params(trl_class.log) == ["logs", "start_time"]
    assert isinstance(trl_class._tag_names, list) and isinstance(trl_class._name, str)
    source = inspect.getsource(trl_class._prepare_inputs)
    assert "shuffle_sequence_dict(generation_batch)" in source and "split_tensor_dict(generation_batch" in source
    assert "self._step += 1" in inspect.getsource(trl_class.training_step)  # the rollout batch's end, counted


def test_methods_and_helpers_we_call_exist_with_the_shapes_we_use():
    assert params(GRPOTrainer._generate) == ["prompts"]
    # we take [:3] of _generate's tuple as (prompt_ids, completion_ids, tool_mask)
    assert "return prompt_ids, completion_ids, tool_mask," in inspect.getsource(GRPOTrainer._generate)
    assert params(transformers.Trainer._load_callback_state) == []
    # TRL's generation path we mirror in the shared rollout: the same helpers by the same names
    assert callable(grpo_trainer.unwrap_model_for_generation)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    tokenizer = helpers.make_tokenizer()
    args = helpers.make_config(tmp_path_factory.mktemp("seams"), max_steps=1)
    return helpers.make_trainer(tokenizer, args)


def test_the_private_members_we_read_exist_on_a_trainer(trainer):
    assert set(trainer._metrics) >= {"train", "eval"}
    trainer._metrics["train"]["seam/probe"].append(1.0)  # a defaultdict(list): a new key appends
    assert trainer._metrics["train"].pop("seam/probe") == [1.0]
    assert isinstance(trainer._step, int)
    assert trainer._tokenizer.pad_token_id is not None
    assert isinstance(trainer.eos_token_ids, list) and isinstance(trainer.mask_truncated_completions, bool)
    assert trainer.max_completion_length == trainer.args.max_completion_length


def batch(trainer, rows=4, prompt=3, completion=5):
    g = torch.Generator().manual_seed(0)
    vocab = trainer.model.config.vocab_size
    return {
        "prompt_ids": torch.randint(3, vocab, (rows, prompt), generator=g),
        "prompt_mask": torch.ones(rows, prompt, dtype=torch.long),
        "completion_ids": torch.randint(3, vocab, (rows, completion), generator=g),
        "completion_mask": torch.ones(rows, completion, dtype=torch.long),
        "advantages": torch.linspace(-1, 1, rows),
        "num_items_in_batch": torch.tensor(float(rows * completion)),
    }


def test_trl_computes_the_logps_before_it_reads_the_advantages(trainer, monkeypatch):
    """AER's token methods rewrite the advantages inside the log-prob hook (they need the entropies): TRL must call
    `_get_per_token_logps_and_entropies` before it reads `inputs["advantages"]` from the same dict."""
    events = []

    class Recording(dict):
        def __getitem__(self, key):
            if key == "advantages":
                events.append("advantages")
            return super().__getitem__(key)

    original = type(trainer)._get_per_token_logps_and_entropies

    def hook(self, *args, **kwargs):
        events.append("logps")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(trainer), "_get_per_token_logps_and_entropies", hook)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # what Trainer.train() sets before the first step
    GRPOTrainer._compute_loss(trainer, trainer.model, Recording(batch(trainer)))
    assert "advantages" in events and events.index("logps") < events.index("advantages")


def test_trl_shuffles_and_splits_keys_it_does_not_know_row_aligned():
    """`aer_lambda` (one float per completion, on the host) travels through TRL's shuffle and split: every key,
    known or not, is permuted with the same rows and split the same way; and TRL's trainer uses these two helpers."""
    rows = 8
    data = {"completion_ids": torch.arange(rows).unsqueeze(1) * 10, "aer_lambda": torch.arange(rows).float()}
    torch.manual_seed(0)
    shuffled = shuffle_sequence_dict(data)
    assert torch.equal(shuffled["completion_ids"][:, 0], shuffled["aer_lambda"].long() * 10)
    assert not torch.equal(shuffled["aer_lambda"], data["aer_lambda"])
    parts = split_tensor_dict(shuffled, 4)
    assert len(parts) == 4 and all(torch.equal(p["completion_ids"][:, 0], p["aer_lambda"].long() * 10) for p in parts)


def test_the_trl_range_we_declare_contains_the_trl_we_test():
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    spec = next(Requirement(r) for r in requires("aer-trl") if Requirement(r).name == "trl")
    assert trl.__version__ in spec.specifier, (trl.__version__, str(spec.specifier))


def test_the_vllm_engine_members_validation_reads_exist():
    """engine_samplers validates through the run's vLLM engine: TRL's `vllm_generation` (mode, engine, server
    client, sleep state, weight sync, tensor-parallel size) and the trainer's `_last_loaded_step`, which TRL sets after
    each sync so that a rollout at the same step does not sync again."""
    from trl.generation import vllm_generation

    source = inspect.getsource(vllm_generation.VLLMGeneration)
    for member in ("self.mode", "self.enable_sleep_mode", "self._llm_weights_sleeping", "self.llm =",
                   "self.vllm_client =", "self.tensor_parallel_size"):  # fmt: skip
        assert member in source, member
    assert params(vllm_generation.VLLMGeneration.sync_weights) == []
    # in sleep mode, the sync wakes the weights the last rollout's level-2 sleep discarded; the validation sampler
    # then wakes only the KV cache, and sleeps the engine once after its last chunk, as TRL's generate does
    sync = inspect.getsource(vllm_generation.VLLMGeneration.sync_weights)
    assert 'self.llm.wake_up(tags=["weights"])' in sync and "self._llm_weights_sleeping = False" in sync
    generate = inspect.getsource(vllm_generation.VLLMGeneration.generate)
    assert 'self.llm.wake_up(tags=["kv_cache"])' in generate and "self.llm.sleep(level=2)" in generate
    trainer_source = inspect.getsource(GRPOTrainer)
    assert "self.vllm_generation = VLLMGeneration(" in trainer_source
    assert "self._last_loaded_step = self.state.global_step" in trainer_source
    assert "if self.state.global_step != self._last_loaded_step:" in trainer_source


# The module-level names TRL's code reads that GRPO's and RLOO's adapters rebind while that code runs
# (`aer_trl.upstream.rebind.with_names`: TRL's code, neither copied nor changed; TRL's module is left as it is).
VLLM_REBOUND = {
    ("GRPOTrainer.__init__", "VLLMGeneration"): "the trainer's colocated engine is `AERVLLMGeneration` (its dtype, "
    "expert parallelism, eager mode and load format from the config; on the CPU, syncs through vLLM's reload path); "
    "no hook: TRL builds it inside the constructor",
    ("RLOOTrainer.__init__", "VLLMGeneration"): "the same, for RLOO",
    ("VLLMGeneration._init_vllm", "LLM"): "vLLM's engine built with the trainer's keywords beside TRL's; no hook: TRL "
    "passes a fixed set of keywords",
}


def test_the_names_the_vllm_engine_rebinds_are_read_by_trls_code():
    """Each rebound name is one TRL's method reads (a TRL that stops reading it fails here and when the trainer is
    built), and TRL builds its engine without a dtype, eager mode or a load format (if it ever passes one, ours steps
    aside, and this test says to check it)."""
    from trl.generation import vllm_generation

    owners = {"GRPOTrainer": GRPOTrainer, "RLOOTrainer": RLOOTrainer, "VLLMGeneration": vllm_generation.VLLMGeneration}
    for (method, name), reason in VLLM_REBOUND.items():
        owner, attribute = method.split(".")
        assert name in getattr(owners[owner], attribute).__code__.co_names, (method, name, reason)
    source = inspect.getsource(vllm_generation.VLLMGeneration)
    call = source[source.index("self.llm = LLM(") :]
    call = call[: call.index("\n            )")]
    for keyword in ("dtype", "enforce_eager", "load_format", "enable_expert_parallel"):
        assert keyword not in call, (keyword, call)


# vLLM's own code that the colocated CPU engine relies on (`aer_trl.upstream.vllm_engine`), pinned where vLLM is
# installed (`make test-vllm`): the instance state it sets on vLLM's objects, and why.
VLLM_STATE = {
    "_cpu_skip_gemm_dispatch": "set on each linear layer by this package's loader before its weights are processed: "
    "vLLM's own opt-out from the CPU repack (F.linear on the weight, kept with its loader, so a sync reaches it)",
    "cpu_linear": "the embeddings' kernel choice, F.linear on the kept weight, after processing: vLLM's embedding "
    "method has no opt-out and computes with a packed copy that a sync leaves stale",
    "moe_kernel": "dropped (None) before a CPU sync, so vLLM's reload runs an MoE layer's first-load setup, the CPU "
    "experts' prepack included, which its weight-update branch skips",
}


@pytest.mark.vllm
def test_the_vllm_code_the_cpu_engine_relies_on_is_there():
    pytest.importorskip("vllm", reason="vLLM is not installed here: `make test-vllm`")
    from vllm.model_executor.layers import linear, vocab_parallel_embedding
    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as moe
    from vllm.model_executor.model_loader import DefaultModelLoader, register_model_loader  # noqa: F401

    processing = inspect.getsource(linear.UnquantizedLinearMethod.process_weights_after_loading)
    assert 'getattr(layer, "_cpu_skip_gemm_dispatch", False)' in processing, VLLM_STATE["_cpu_skip_gemm_dispatch"]
    assert "layer.cpu_linear = torch.nn.functional.linear" in processing
    embedding = inspect.getsource(vocab_parallel_embedding.UnquantizedEmbeddingMethod.process_weights_after_loading)
    assert "dispatch_cpu_unquantized_gemm(layer, remove_weight=False)" in embedding, VLLM_STATE["cpu_linear"]
    setup = inspect.getsource(moe.UnquantizedFusedMoEMethod._setup_kernel)
    assert "is_weight_update = self.moe_kernel is not None" in setup, VLLM_STATE["moe_kernel"]
    assert "if not is_weight_update:" in setup and "process_weights_after_loading(layer)" in setup


# ---------------------------------------------------------------------------------------------- asynchronous GRPO
# The private methods `AERAsyncGRPOTrainer` (with `ResumeMixin`) overrides, and why no hook of TRL serves.
ASYNC_OVERRIDES = {
    "_save_checkpoint": "the local rollout worker's position, version count and in-flight groups go into the "
    "checkpoint (`rollout_state.json`, TRL's layout, which TRL writes only for its own vLLM worker: an isinstance "
    "check, and `rollout_inflight.json` for the lockstep schedule)",
    "_inner_training_loop": "a resumed run hands the checkpoint's rollout position and version count to the local "
    "worker before TRL's loop starts it (TRL restores them for its own worker only)",
    "_load_callback_state": OVERRIDES["_load_callback_state"],
    "_run_epoch": OVERRIDES["_run_epoch"],
}
# TRL's methods the asynchronous adapter runs with one of their module's global names bound to its own
# (`aer_trl.upstream.rebind.with_names`: TRL's code, neither copied nor changed; TRL's module is left as it is),
# and why
ASYNC_REBOUND = {
    ("__init__", "get_peak_flops_per_device"): "TRL's asks torch.cuda for the device's name, which raises off CUDA "
    "(a CPU run); no hook: it is a module function called inside the constructor",
    ("get_train_dataloader", "DataCollatorForRollout"): "AER's collator adds each trained token's group accuracy and "
    "policy version, which only the collator can lay out (it alone sees a packed row's samples); no hook: TRL builds "
    "the collator inside get_train_dataloader",
}


def test_the_async_adapters_private_overrides_are_the_ones_we_know():
    from aer_trl import AERAsyncGRPOTrainer

    assert overrides(AERAsyncGRPOTrainer) == sorted(ASYNC_OVERRIDES)


def test_the_names_the_async_adapter_rebinds_are_read_by_trls_code_and_trls_module_is_left_alone(tmp_path):
    """Each rebound name is one TRL's method reads (a TRL that stops reading it fails here and at import); TRL's module
    keeps its own attributes after an AER trainer is built, and a plain TRL trainer built after it gets TRL's."""
    from trl.experimental.async_grpo import AsyncGRPOTrainer
    from trl.experimental.async_grpo import async_grpo_trainer as trl_async
    from trl.trainer.utils import get_peak_flops_per_device

    for (method, name), reason in ASYNC_REBOUND.items():
        assert name in getattr(AsyncGRPOTrainer, method).__code__.co_names, (method, name, reason)
    trl_collator = trl_async.DataCollatorForRollout
    from aer_trl import AERAsyncGRPOConfig, AERAsyncGRPOTrainer

    tokenizer = helpers.make_tokenizer()
    model = helpers.save_model(tokenizer, tmp_path / "model")
    args = AERAsyncGRPOConfig(
        output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=4, max_steps=1, token_budget=0, report_to="none", local_rollouts=True,
    )  # fmt: skip
    trainer = AERAsyncGRPOTrainer(
        model=model, reward_funcs=[helpers.always_wrong], args=args, train_dataset=helpers.make_dataset()
    )
    loader = trainer.get_train_dataloader()
    assert type(loader.collate_fn).__name__ == "AERCollator"  # the rebound name reached the trainer's loader
    assert trl_async.get_peak_flops_per_device is get_peak_flops_per_device
    assert trl_async.DataCollatorForRollout is trl_collator and trl_collator.__module__ == trl_async.__name__
