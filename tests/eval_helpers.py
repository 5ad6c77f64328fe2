"""What the evaluation package's tests share: arguments, counted generators (fake and real), the store's lines."""

import os

from aer_trl.app.evaluation import EvalArguments, PassAtKCallback
from aer_trl.app.evaluation.harness import TransformersGenerator
from tests import helpers


def make_args(out, model, bench, **kw):
    settings = dict(num_samples=8, k_list=[1, 2, 4, 8], max_new_tokens=2, batch_size=3, seed=7)
    settings.update(kw)
    return EvalArguments(
        models=[model] if isinstance(model, str) else model, benchmarks=[bench], output_dir=str(out), **settings
    )


class Fake:
    """A generator factory whose samples are a pure function of (chunk seed, position in the chunk, sample index,
    settings), with boxed answers that are sometimes right; counts what it generates and can fail after some calls."""

    def __init__(self, fail_after=None):
        self.problems, self.calls, self.fail_after = 0, 0, fail_after

    def __call__(self, model_name, args):
        def run(texts, seed):
            if self.fail_after is not None and self.calls >= self.fail_after:
                raise KeyboardInterrupt("simulated interruption")
            self.calls += 1
            self.problems += len(texts)
            salt = round(args.temperature * 100) + args.max_new_tokens + round(args.top_p * 10) + args.top_k
            return [
                [f"so \\boxed{{{(seed + 7 * i + j + salt) % 3}}}" for j in range(args.num_samples)]
                for i in range(len(texts))
            ]

        return run


class Real:
    """The transformers generator (the tiny model), counted, failing after some calls when asked."""

    def __init__(self, fail_after=None):
        self.problems, self.calls, self.fail_after = 0, 0, fail_after

    def __call__(self, model_name, args):
        gen = TransformersGenerator.from_pretrained(model_name, args)

        def run(texts, seed):
            if self.fail_after is not None and self.calls >= self.fail_after:
                raise KeyboardInterrupt("simulated interruption")
            self.calls += 1
            self.problems += len(texts)
            return gen(texts, seed)

        return run


def lines(out):
    return (out / "generations.jsonl").read_text().splitlines()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ------------------------------------------------------------------------------------------- during training
def train_with_callback(tmp_path, tokenizer, bench, **config):

    cb = PassAtKCallback(bench, eval_steps=1, num_samples=4, k_list=[1, 4], max_new_tokens=2, max_problems=4)
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, **config), callbacks=[cb])
    return trainer, cb


THINKING_TEMPLATE = (  # a chat template with a switch, as Qwen3's `enable_thinking`
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}{% if think is defined and not think %}quick: {% else %}assistant: {% endif %}"
    "{% endif %}"
)
