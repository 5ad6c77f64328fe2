"""The research bench on a CUDA machine (`pytest -m gpu`; skipped where no GPU is visible): the shared prompt
forward and method aer_topk in bf16 on cuda, and the lab recipe with --use_cpu false (its warm start built in the same
process)."""

import bench_helpers
import pytest
import torch

from tests import helpers

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_bf16_aer_training_with_the_shared_prompt_forward_on_cuda(tmp_path):
    tokenizer = helpers.make_tokenizer()
    args = bench_helpers.make_bench_config(
        tmp_path, use_cpu=False, bf16=True, max_steps=3, aer_alpha_init=0.05, share_prompt_forward=True
    )
    trainer = bench_helpers.make_trainer(tokenizer, args)
    trainer.train()
    logged = [r for r in trainer.state.log_history if "aer/entropy" in r]
    assert logged and all(torch.isfinite(torch.tensor(r["aer/entropy"])) for r in logged)


@pytest.mark.parametrize("share", [False, True])
def test_truncated_support_bonus_in_bf16_on_cuda(tmp_path, share):
    """Method aer_topk in bf16 on cuda: the bonus reads each token's top-k entropy from the logits (its own forward,
    or the shared-prompt one's logits head), bounded by ln k, while the controller still measures the full entropy."""
    import math

    tokenizer = helpers.make_tokenizer()
    args = bench_helpers.make_bench_config(
        tmp_path, use_cpu=False, bf16=True, max_steps=3, method="aer_topk", aer_bonus_top_k=3, aer_alpha_init=0.05,
        share_prompt_forward=share,
    )  # fmt: skip
    trainer = bench_helpers.make_trainer(tokenizer, args)
    calls, seen, support_logps = [], [], trainer._support_logps
    trainer._support_logps = lambda *a, **k: calls.append(1) or support_logps(*a, **k)
    head = trainer._support_head

    def recording_head(*a, **k):  # the truncated entropies each forward hands to the bonus
        result = head(*a, **k)
        seen.append(trainer._support_parts[-1].detach())
        return result

    trainer._support_head = recording_head
    trainer.train()
    assert bool(calls) is not share and seen
    assert all(e.device.type == "cuda" and torch.isfinite(e).all() and (e <= math.log(3) + 1e-2).all() for e in seen)
    logged = [r for r in trainer.state.log_history if "aer/entropy" in r]
    assert logged and all(math.isfinite(r["aer/entropy"]) for r in logged)


def test_lab_recipe_on_cuda_with_the_warm_start_built_in_process(tmp_path):
    from aer_bench.studies import demo
    from aer_bench.training import train_recipe

    overrides = [*demo.QUICK_OVERRIDES, "--max_steps", "4", "--lab_cache_dir", str(tmp_path / "lab")]
    _, _, trainer = train_recipe(
        demo.RECIPES / "aer.yaml", [*overrides, "--use_cpu", "false", "--output_dir", str(tmp_path / "run")]
    )
    assert trainer.accelerator.device.type == "cuda"
    assert next(trainer.model.parameters()).device.type == "cuda"
