"""Which tokens carry the entropy, and the entropy bonus's push, on the real model (docs/real_llm.md).

    python -m aer_bench.studies.tokens --study results/real_llm/dose/study.yaml --seed 0
    python -m aer_bench.studies.tokens --study results/real_llm/controller/study.yaml --seed 0 \
        --output_dir runs/real_llm runs/real_llm_b                   # cells trained by two queues

For the untrained model and each arm's model of one seed, the held-out completions the study already sampled (the
evaluation store under `<output_dir>/eval`, the same prompts) are read back through the model: each completion
token's entropy H and the norm of H's gradient with respect to the logits (`analysis.entropy_and_gradient`: how hard
an entropy bonus pushes on that position), summed by token class (`analysis.token_classes`: the answer inside
`\\boxed{}`, the box markup, the working before it, the words). Writes `<records>/tokens_seed<k>.json` (compact: the
sums per class) and `tokens_seed<k>.md`, which `real_study --aggregate_only` makes again from the JSON alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tqdm.auto import tqdm

from aer_trl.app.evaluation.sampling import adds_special_tokens
from aer_trl.atomic import atomic_write

from ..analysis import REPORTED, entropy_and_gradient, token_classes, tokens_table
from .real_study import cell_dir, eval_arguments, load_study


@torch.no_grad()
def breakdown(model_path: str, eval_args, samples: int = 4) -> dict:
    """Token counts, Σ entropy and Σ gradient norm per token class over the first `samples` stored held-out
    completions of every problem the evaluation sampled for `model_path`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from aer_trl.app.evaluation.plan import make_plans
    from aer_trl.app.evaluation.store import load_store

    plan = make_plans(eval_args, "transformers")[0]
    store = load_store(Path(eval_args.output_dir), repair=False)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
    sums = {c: {"tokens": 0, "entropy": 0.0, "gradient": 0.0} for c in REPORTED}
    items = [(chunk, p) for chunk in plan.chunks for p in chunk.problems]
    for chunk, problem in tqdm(items, desc=Path(model_path).name, unit="problem"):
        record = store.get((plan.fp, problem.hash, chunk.key))
        if record is None:
            raise RuntimeError(f"{model_path}: no stored held-out samples for a problem; run the study's evaluation")
        prompt = tokenizer(problem.text, add_special_tokens=adds_special_tokens(tokenizer)).input_ids
        for completion in record["completions"][:samples]:
            ids = tokenizer(completion, add_special_tokens=False).input_ids
            if not ids:
                continue
            logits = model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
            entropy, gradient = entropy_and_gradient(logits / eval_args.temperature)
            classes = token_classes([tokenizer.decode([i]) for i in ids])
            for c, h, g in zip(classes, entropy.tolist(), gradient.tolist()):
                if c in sums:
                    sums[c]["tokens"] += 1
                    sums[c]["entropy"] += h
                    sums[c]["gradient"] += g
    return sums


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study", required=True, help="a study file whose cells of --seed are trained and evaluated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--output_dir",
        nargs="+",
        default=["runs/real_llm"],
        help="where the study's cells trained (several: queues that shared the study, each with its own folder)",
    )
    parser.add_argument("--samples", type=int, default=4, help="stored completions per problem to read back")
    parser.add_argument("--arms", nargs="+", default=None, help="only these arms (default: every arm of the study)")
    args = parser.parse_args(argv)
    study = load_study(args.study)
    from aer_trl.app.gguf import convert_gguf

    models = {"untrained": (study.arms[0], str(convert_gguf()), args.output_dir[0])}
    for arm in study.arms:
        if args.arms and arm.name not in args.arms:
            continue
        found = [d for d in args.output_dir if (cell_dir(study, arm, args.seed, d) / "run.json").is_file()]
        if not found:
            raise SystemExit(f"{arm.name} seed {args.seed} is not trained under any of {args.output_dir}")
        models[arm.name] = (arm, str(cell_dir(study, arm, args.seed, found[0])), found[0])
    data = {"seed": args.seed, "samples": args.samples, "models": {}}
    for name, (arm, path, output_dir) in models.items():  # each read back from the store that evaluated it
        stores = args.output_dir if name == "untrained" else [output_dir]  # any queue may have evaluated the base
        for i, store in enumerate(stores):
            try:
                data["models"][name] = breakdown(path, eval_arguments(study, arm, [path], store), args.samples)
                break
            except RuntimeError:
                if i == len(stores) - 1:
                    raise
    out = study.records / f"tokens_seed{args.seed}.json"
    atomic_write(out, json.dumps(data, indent=1, sort_keys=True) + "\n")
    table = tokens_table(data, ["untrained", *(arm.name for arm in study.arms)])  # as real_study remakes it
    atomic_write(study.records / f"tokens_seed{args.seed}.md", table)
    print(table)
    return data


if __name__ == "__main__":
    main()
