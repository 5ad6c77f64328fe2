"""The smallest reproduction of the MoE weight-sync bug on vLLM's CPU backend, and its fix (docs/design.md §7).

Builds a tiny Qwen3-MoE (or a dense Qwen3), loads it into vLLM (float32, eager), adds noise to the transformers copy's
weights, loads them into vLLM twice and prints, after each load, the largest difference between vLLM's next-token
log-probs (top 5) and the transformers model's. Loads as TRL's colocate sync does (`--sync trl`: one
`model.load_weights` call per parameter, the trainer's fused expert names) or through vLLM's reload path (`--sync
reload`), with or without the two fixes of `aer_trl.upstream.vllm_engine`. Needs `.venv-vllm` (make
install-vllm), ~30 s a run:

    .venv-vllm/bin/python benchmarks/vllm_moe_sync.py --sync trl                 # the bug: ~0.44
    .venv-vllm/bin/python benchmarks/vllm_moe_sync.py --sync reload              # reload alone: ~0.44
    .venv-vllm/bin/python benchmarks/vllm_moe_sync.py --sync reload --fix_experts  # both fixes: ~2e-7
    .venv-vllm/bin/python benchmarks/vllm_moe_sync.py --arch dense --loader stock   # vLLM's repack: the load fails
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process, as TRL's colocate mode has it

import torch  # noqa: E402

from aer_trl.testing import build_char_tokenizer, build_tiny_qwen3, build_tiny_qwen3_moe  # noqa: E402
from aer_trl.upstream import vllm_engine as vllm_support  # noqa: E402


def per_expert(named):
    """The trainer's fused expert tensors under the checkpoint's per-expert names (what vLLM loads at start)."""
    for name, tensor in named:
        base = name.rsplit(".", 1)[0]
        if name.endswith("experts.gate_up_proj"):
            for e, weight in enumerate(tensor):
                gate, up = weight.chunk(2, 0)
                yield f"{base}.{e}.gate_proj.weight", gate.contiguous()
                yield f"{base}.{e}.up_proj.weight", up.contiguous()
        elif name.endswith("experts.down_proj"):
            for e, weight in enumerate(tensor):
                yield f"{base}.{e}.down_proj.weight", weight.contiguous()
        else:
            yield name, tensor


@contextlib.contextmanager
def plain_reload(llm):
    """vLLM's reload path alone (`reload_weights(weights_iterator=...)`), without the MoE fix."""
    from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    initialize_layerwise_reload(runner.get_model())
    try:
        yield
    finally:
        finalize_layerwise_reload(runner.get_model(), runner.model_config)
        vllm_support.cpu_kernels_read_weights(runner.get_model())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arch", choices=["moe", "dense"], default="moe")
    parser.add_argument("--expert_size", type=int, default=32, help="a size not a multiple of 32 is padded by vLLM")
    parser.add_argument("--sync", choices=["trl", "reload"], default="trl")
    parser.add_argument(
        "--fix_experts", action="store_true", help="with --sync reload: MoE kernels rebuilt by the reload (aer_trl's)"
    )
    parser.add_argument("--loader", choices=["aer", "stock"], default="aer", help="stock: vLLM's CPU repack")
    parser.add_argument("--names", choices=["fused", "per_expert"], default="fused")
    parser.add_argument("--perturb", default="", help="only parameters whose name contains this (default: all)")
    args = parser.parse_args()
    from vllm import LLM, SamplingParams

    tokenizer = build_char_tokenizer()
    if args.arch == "moe":
        model = build_tiny_qwen3_moe(tokenizer, hidden_size=128, expert_size=args.expert_size)
    else:
        model = build_tiny_qwen3(tokenizer, hidden_size=128, num_heads=2)
    folder = tempfile.mkdtemp()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    # the dense-layer fix: linear layers keep their weights (`--loader stock`: vLLM's own loader, which drops them)
    load_format = vllm_support.updatable_cpu_loader() if args.loader == "aer" else "auto"
    llm = LLM(model=folder, dtype="float32", enforce_eager=True, max_model_len=128, seed=0, load_format=load_format)
    ids = tokenizer("3+4=", add_special_tokens=False).input_ids

    @torch.no_grad()
    def gap() -> float:
        params = SamplingParams(max_tokens=1, logprobs=5, temperature=1.0)
        out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0].logprobs[0]
        reference = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)
        return max(abs(lp.logprob - reference[t].item()) for t, lp in out.items())

    print(f"at load: {gap():.3g}")
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if args.perturb in name:
                p.add_(0.05 * torch.randn_like(p))
    runner = llm.llm_engine.model_executor.driver_worker.model_runner
    for load in (1, 2):
        named = ((n, p.data) for n, p in model.named_parameters())
        weights = per_expert(named) if args.names == "per_expert" else named
        with contextlib.ExitStack() as stack:
            if args.sync == "reload" and args.fix_experts:
                stack.enter_context(vllm_support.reloaded_on_cpu(llm))  # the reload path, MoE kernels rebuilt
            elif args.sync == "reload":
                stack.enter_context(plain_reload(llm))
            for name, tensor in weights:
                runner.model.load_weights([(name, tensor)])  # TRL's colocate loop
        llm.reset_prefix_cache()
        print(
            f"after load {load} ({args.arch}, sync {args.sync}, fix_experts {args.fix_experts}, {args.names} names, "
            f"perturbed {args.perturb or 'all'}): {gap():.3g}"
        )


if __name__ == "__main__":
    main()
