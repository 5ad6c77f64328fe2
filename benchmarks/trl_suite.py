"""TRL's own GRPO and RLOO trainer tests, run offline on CPU against TRL's trainer and AER's: the drop-in check.

TRL's `tests/test_grpo_trainer.py` and `tests/test_rloo_trainer.py` (with their `testing_utils.py`) are not part of
TRL's wheel or sdist and are not copied into this repository: point `--trl_tests` at the `tests/` folder of a TRL
checkout (ideally the tag of the installed TRL). The script copies the suite's files unchanged (license header
included) into a scratch folder beside a conftest (`trl_suite_conftest.py`) that maps TRL's Hub ids to tiny models
built here and `trl-internal-testing/zen` to a local copy, and swaps the trainer under test. Then it runs the suite
once per trainer and prints the pass counts and every test whose outcome differs from TRL's own trainer, with the
known reason where there is one (docs/design.md, "Drop-in").

    git clone https://github.com/huggingface/trl /tmp/trl            # on a machine with network
    python benchmarks/trl_suite.py --trl_tests /tmp/trl/tests         # GRPO, four runs
    python benchmarks/trl_suite.py --trl_tests /tmp/trl/tests --suite rloo
    python benchmarks/trl_suite.py --trl_tests /tmp/trl/tests -k "entropy or evaluate" --trainers trl aer

Trainers (`--suite grpo` | `rloo`): `trl` (TRL's GRPOTrainer | RLOOTrainer), `aer` (AERGRPOTrainer | AERRLOOTrainer,
default method, the test's TRL config converted as a user's would be: α starts at 0, so λ = 0 until the entropy falls
below H*), `aer_grpo` | `aer_rloo` (AER's trainer with TRL's plain method: TRL's loss, AER's plumbing), `aer_bonus`
(AER with aer_alpha_init 0.1: the bonus on from the first step).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITES = ("grpo", "rloo")


def trainers(suite: str) -> tuple[str, ...]:
    return ("trl", "aer", f"aer_{suite}", "aer_bonus")


def test_files(suite: str) -> tuple[str, ...]:
    return (f"test_{suite}_trainer.py", "testing_utils.py")


# The tiny models TRL's GRPO tests load by Hub id, rebuilt locally (random weights, a character tokenizer). Ids not
# here (vision-language models, remote code, architectures this transformers lacks) fail to load for every trainer.
MODELS = {
    "tiny-Qwen2ForCausalLM-2.5": ("Qwen2Config", "Qwen2ForCausalLM"),
    "tiny-Qwen2ForSequenceClassification-2.5": ("Qwen2Config", "Qwen2ForSequenceClassification"),
    "tiny-Qwen3ForCausalLM": ("Qwen3Config", "Qwen3ForCausalLM"),
    "tiny-Qwen3ForSequenceClassification": ("Qwen3Config", "Qwen3ForSequenceClassification"),
    "tiny-LlamaForCausalLM-3.2": ("LlamaConfig", "LlamaForCausalLM"),
    "tiny-LlamaForSequenceClassification-3.2": ("LlamaConfig", "LlamaForSequenceClassification"),
    "tiny-MistralForCausalLM-0.2": ("MistralConfig", "MistralForCausalLM"),
    "tiny-Gemma2ForCausalLM": ("Gemma2Config", "Gemma2ForCausalLM"),
    "tiny-Qwen3MoeForCausalLM": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
}

# The Zen of Python (PEP 20, public domain) cut as `trl-internal-testing/zen` cuts it: the prompt is the start of an
# aphorism (TRL's tests check the first rows' prompts), the rest is its completion. 17 train rows, 2 test rows.
ZEN = [
    ("Beautiful is better than", " ugly."),
    ("Explicit is", " better than implicit."),
    ("Simple is better", " than complex."),
    ("Complex", " is better than complicated."),
    ("Flat is better than", " nested."),
    ("Sparse is better", " than dense."),
    ("Readability", " counts."),
    ("Special cases aren't special", " enough to break the rules."),
    ("Although practicality beats", " purity."),
    ("Errors should never", " pass silently."),
    ("Unless explicitly", " silenced."),
    ("In the face of ambiguity, refuse", " the temptation to guess."),
    ("There should be one-- and preferably", " only one --obvious way to do it."),
    ("Although that way may not be", " obvious at first unless you're Dutch."),
    ("Now is better", " than never."),
    ("Although never is often better than", " *right* now."),
    ("If the implementation is hard to explain,", " it's a bad idea."),
    ("If the implementation is easy to explain,", " it may be a good idea."),
    ("Namespaces are one honking great idea", " -- let's do more of those!"),
]

# Differences from TRL's own trainer that are intended, by test name prefix: printed beside the test. Everything else
# that differs is a drop-in bug (docs/design.md §5, "Drop-in", measured with TRL 1.16.0).
KNOWN = {
    "aer": {},
    "aer_grpo": {},
    "aer_rloo": {},
    "aer_bonus": {
        # AER with its bonus on refuses TRL's own entropy options, naming both (two entropy terms at once)
        test: "AER's bonus on: TRL's entropy_coef/use_adaptive_entropy refused by design (a ValueError naming both)"
        for test in ("test_entropy_bonus_scale", "test_train_with_adaptive_entropy", "test_train_with_static_entropy")
    },
}


def build_models(hub: Path) -> None:
    """A Hugging Face cache (`HF_HUB_CACHE` layout) holding every model of MODELS under its TRL id."""
    import torch
    import transformers

    from aer_trl.testing import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    ids = {"pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id}
    ids["eos_token_id"] = tokenizer.eos_token_id
    for name, (config_name, model_name) in MODELS.items():
        repo = hub / f"models--trl-internal-testing--{name}"
        sha = hashlib.sha1(name.encode()).hexdigest()
        snapshot = repo / "snapshots" / sha
        if (snapshot / "config.json").exists():
            continue
        torch.manual_seed(0)
        config = getattr(transformers, config_name)(
            vocab_size=len(tokenizer),
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=4,
            max_position_embeddings=512,
            num_labels=1,
            **({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16} if "Moe" in name else {}),
            **ids,
        )
        model = getattr(transformers, model_name)(config)
        model.save_pretrained(snapshot)
        tokenizer.save_pretrained(snapshot)
        (repo / "refs").mkdir(parents=True, exist_ok=True)
        (repo / "refs" / "main").write_text(sha)


def build_datasets(root: Path) -> Path:
    """`trl-internal-testing/zen` configs as JSON Lines: <root>/<config>/{train,test}.jsonl."""
    splits = {"train": ZEN[:17], "test": ZEN[17:]}
    for config in ("standard_prompt_only", "conversational_prompt_only", "standard_language_modeling"):
        (root / config).mkdir(parents=True, exist_ok=True)
        for split, lines in splits.items():
            with open(root / config / f"{split}.jsonl", "w") as f:
                for prompt, completion in lines:
                    row = {
                        "standard_prompt_only": {"prompt": prompt},
                        "conversational_prompt_only": {"prompt": [{"role": "user", "content": prompt}]},
                        "standard_language_modeling": {"text": prompt + completion},
                    }[config]
                    f.write(json.dumps(row) + "\n")
    return root


def prepare(trl_tests: Path, out: Path, suite_name: str = "grpo") -> Path:
    """The scratch suite folder: TRL's two files unchanged, our conftest, the local models and data."""
    missing = [f for f in test_files(suite_name) if not (trl_tests / f).is_file()]
    if missing:
        raise SystemExit(f"--trl_tests {trl_tests}: missing {missing} (the tests/ folder of a TRL checkout)")
    suite = out / "suite" / "tests"
    suite.mkdir(parents=True, exist_ok=True)
    for name in test_files(suite_name):
        text = (trl_tests / name).read_text()
        if "Licensed under the Apache License" not in text[:2000]:
            raise SystemExit(f"{trl_tests / name}: no Apache license header; copy TRL's files unchanged")
        (suite / name).write_text(text)
    (suite / "__init__.py").write_text("")
    shutil.copy(HERE / "trl_suite_conftest.py", suite / "conftest.py")
    build_models(out / "hub")
    data = build_datasets(out / "data" / "zen")
    settings = {"datasets": {"trl-internal-testing/zen": str(data)}}
    (suite / "suite_settings.json").write_text(json.dumps(settings, indent=1))
    return suite


def run_suite(
    suite: Path, trainer: str, out: Path, keyword: str | None, timeout: int, suite_name: str = "grpo"
) -> dict[str, str]:
    """pytest on the suite with one trainer: {test id: passed | failed | skipped | error}."""
    report = out / f"junit-{trainer}.xml"
    env = {**os.environ, "AER_SUITE_TRAINER": trainer, "HF_HUB_CACHE": str(out / "hub"), "HF_HUB_OFFLINE": "1"}
    env["AER_SUITE"], env["TOKENIZERS_PARALLELISM"] = suite_name, "false"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite / test_files(suite_name)[0])]
    cmd += ["--junitxml", str(report), "-o", "junit_family=xunit2", "--rootdir", str(suite.parent)]
    if keyword:
        cmd += ["-k", keyword]
    log = out / f"pytest-{trainer}.log"
    start = time.time()
    with open(log, "w") as f:
        try:
            subprocess.run(cmd, env=env, cwd=suite.parent, stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"{trainer}: timed out after {timeout} s; partial results", file=sys.stderr)
    print(f"{trainer}: {time.time() - start:.0f} s (log: {log})")
    return parse_junit(report) if report.exists() else {}


def parse_junit(path: Path) -> dict[str, str]:
    outcomes = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        kinds = {child.tag for child in case}
        outcome = "failed" if "failure" in kinds else "error" if "error" in kinds else "passed"
        outcomes[name] = "skipped" if "skipped" in kinds else outcome
    return outcomes


def known_reason(trainer: str, test: str) -> str | None:
    return next((why for prefix, why in KNOWN.get(trainer, {}).items() if test.startswith(prefix)), None)


def compare(results: dict[str, dict[str, str]]) -> dict:
    """Counts per trainer and, for each other trainer, the tests whose outcome differs from TRL's trainer."""
    summary = {"counts": {}, "differences": {}}
    for trainer, outcomes in results.items():
        counts = {k: sum(v == k for v in outcomes.values()) for k in ("passed", "failed", "error", "skipped")}
        summary["counts"][trainer] = counts
    reference = results.get("trl", {})
    for trainer, outcomes in results.items():
        if trainer == "trl":
            continue
        diffs = []
        for test in sorted(set(reference) | set(outcomes)):
            ours, theirs = outcomes.get(test, "missing"), reference.get(test, "missing")
            if ours != theirs:
                diffs.append({"test": test, "trl": theirs, trainer: ours, "reason": known_reason(trainer, test)})
        summary["differences"][trainer] = diffs
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trl_tests", type=Path, required=True, help="the tests/ folder of a TRL checkout")
    parser.add_argument("--suite", default="grpo", choices=SUITES, help="TRL's GRPO or RLOO trainer tests")
    parser.add_argument("--trainers", nargs="+", default=None, help="default: all four of the suite's")
    parser.add_argument("--output_dir", type=Path, default=Path("runs/trl_suite"))
    parser.add_argument("-k", dest="keyword", default=None, help="pytest -k expression (a subset of the suite)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per trainer")
    args = parser.parse_args(argv)
    names = args.trainers or list(trainers(args.suite))
    unknown = sorted(set(names) - set(trainers(args.suite)))
    if unknown:
        parser.error(f"--trainers {unknown}: the {args.suite} suite's trainers are {list(trainers(args.suite))}")
    out = args.output_dir.resolve()
    suite = prepare(args.trl_tests.resolve(), out, args.suite)
    results = {t: run_suite(suite, t, out, args.keyword, args.timeout, args.suite) for t in names}
    summary = compare(results)
    (out / "summary.json").write_text(json.dumps({"results": results, **summary}, indent=1))
    print("\n| trainer | passed | failed | error | skipped |\n|---|---|---|---|---|")
    for trainer, c in summary["counts"].items():
        print(f"| {trainer} | {c['passed']} | {c['failed']} | {c['error']} | {c['skipped']} |")
    unexplained = 0
    for trainer, diffs in summary["differences"].items():
        print(f"\n{trainer}: {len(diffs)} tests differ from trl.{args.suite.upper()}Trainer")
        for d in diffs:
            unexplained += d["reason"] is None
            print(
                f"  {d['test']}: trl {d['trl']}, {trainer} {d[trainer]}" + (f" ({d['reason']})" if d["reason"] else "")
            )
    print(f"\nunexplained differences: {unexplained} (summary: {out / 'summary.json'})")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
