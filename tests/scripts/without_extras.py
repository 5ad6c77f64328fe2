"""Trains and evaluates with none of the optional extras importable (matplotlib, gguf, vllm, deepspeed hidden from
the import system, as if not installed), and checks that each feature that needs one names its extra. Run by
tests/test_extras.py in a process of its own; prints "ok" at the end."""

import importlib.machinery
import json
import logging
import sys
import tempfile
from pathlib import Path

HIDDEN = ("matplotlib", "gguf", "vllm", "deepspeed")


class WithoutExtras(importlib.machinery.PathFinder):
    """The path finder, blind to the extras' packages: `import matplotlib` fails and find_spec says it is absent."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            return None
        return super().find_spec(name, path, target)


sys.meta_path = [WithoutExtras if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aer_trl import AERGRPOTrainer, EvalArguments, evaluate  # noqa: E402
from aer_trl.app.evaluation.reports import plot_pass_at_k  # noqa: E402
from aer_trl.app.gguf import convert_gguf  # noqa: E402
from tests import helpers  # noqa: E402

records = []
logging.getLogger().addHandler(
    type("H", (logging.Handler,), {"emit": lambda self, r: records.append(r.getMessage())})()
)

root = Path(tempfile.mkdtemp())
tokenizer = helpers.make_tokenizer()
trainer = AERGRPOTrainer(
    model=helpers.make_model(tokenizer),
    reward_funcs=[helpers.even_length_reward],
    args=helpers.make_config(root / "run", max_steps=1),
    train_dataset=helpers.make_dataset(),
    processing_class=tokenizer,
)
trainer.train()
trainer.save_model(str(root / "model"))
tokenizer.save_pretrained(str(root / "model"))
assert trainer.state.global_step == 1 and (root / "run" / "metrics.jsonl").is_file()

bench = root / "bench.jsonl"
bench.write_text("".join(json.dumps({"question": f"{i}?", "answer": str(i % 3)}) + "\n" for i in range(4)))
args = EvalArguments(
    models=[str(root / "model")], benchmarks=[str(bench)], output_dir=str(root / "eval"), num_samples=2,
    k_list=[1, 2], max_new_tokens=2, batch_size=4, seed=0,
)  # fmt: skip
evaluate(args)
assert (root / "eval" / "metrics.json").is_file() and (root / "eval" / "table.md").is_file()
assert not (root / "eval" / "passk.png").exists()
assert any("passk.png not drawn: drawing figures" in r and 'pip install "aer-trl[plots]"' in r for r in records)

for call, extra in ((lambda: plot_pass_at_k({}, root / "x.png"), "plots"), (lambda: convert_gguf(__file__), "gguf")):
    try:
        call()
    except ImportError as err:
        assert f'pip install "aer-trl[{extra}]"' in str(err), err
    else:
        raise AssertionError(f"no ImportError naming the {extra} extra")
assert not [name for name in sys.modules if name.split(".")[0] in HIDDEN], "an extra was imported"
print("ok")
