"""The model card of an AER trainer's run (`AERGRPOTrainer`, `AERRLOOTrainer`, `AERAsyncGRPOTrainer`): TRL's card for
the method actually trained (its title, its paper), the data and prompt format it was trained on, and, for AER, the
controller's settings and final state."""

from __future__ import annotations

import json
import os
import textwrap

from trl.trainer.utils import get_config_model_id

from .methods import get_method

AER_PAPER = {
    "title": "Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM Reinforcement "
    "Learning",
    "id": "2510.10959",
    "citation": textwrap.dedent("""\
        @article{zhang2025aer,
            title   = {{Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM
                        Reinforcement Learning}},
            author  = {Xiaoyun Zhang and Xiaojian Yuan and Di Huang and Wang You and Chen Hu and Jingqing Ruan and
                       Ai Jian and Kejiang Chen and Xing Hu},
            year    = 2025,
            eprint  = {arXiv:2510.10959},
        }"""),
}


HUB = "https://huggingface.co"
DATA_FILES = (".jsonl", ".json", ".parquet", ".csv", ".arrow")


# what `create_model_card` remembers (trainer.aer_card): the data set, its description with the prompt format, the
# base model's Hub id, where these weights came from when not from the Hub (`base_model_source`, e.g. a dequantized
# GGUF file), and one training prompt for the card's usage snippet (`example_prompt`: text or chat messages)
CARD_FIELDS = ("dataset_name", "data_description", "base_model", "base_model_source", "example_prompt")


def clean_front_matter(card: str) -> str:
    """TRL's card without the `licence: license` line its `generate_model_card` writes into the front matter (a
    misspelt key with a placeholder value, which the Hub does not read as a license; docs/upstream.md)."""
    head, sep, body = card.partition("\n---\n") if card.startswith("---\n") else ("", "", card)
    if not sep:
        return card
    head = "\n".join(line for line in head.split("\n") if line.strip() != "licence: license")
    return head + sep + body


def hub_dataset_id(name: str | None) -> str | None:
    """A data set name the card links to the Hub: an `owner/name` id that is not a local path or file; None else (the
    application resolves its short names, e.g. `deepscaler`, to their Hub ids before handing them over)."""
    if not name or name.count("/") != 1 or os.path.exists(name) or os.path.splitext(name)[1] in DATA_FILES:
        return None
    return name


def _local_base(base: str | None) -> str:
    """How the card names a base model that is not on the Hub: by its folder's name (never the path on the machine
    that trained it: the card is meant for the Hub)."""
    if not base:
        return "a fine-tuned model"
    name = os.path.basename(os.path.normpath(base)) or base
    return f"a fine-tuned version of `{name}` (a local model)"


QUESTION_LINE = 'question = "If you had a time machine'  # TRL's usage snippet's generic question


def usage_snippet(card: str, prompt, max_new_tokens: int) -> str:
    """TRL's usage snippet with one of the run's own training prompts (text, or chat messages) in place of TRL's
    generic question, and the run's completion budget: the model is shown in the format it was trained on."""
    lines = card.split("\n")
    at = next((i for i, line in enumerate(lines) if line.startswith(QUESTION_LINE)), None)
    if at is None or prompt is None:
        return card
    chat = isinstance(prompt, list)
    lines[at] = ("messages = " if chat else "prompt = ") + json.dumps(prompt, ensure_ascii=False)
    text = "\n".join(lines)
    text = text.replace(
        'generator([{"role": "user", "content": question}]', "generator(messages" if chat else "generator(prompt"
    )
    return text.replace("max_new_tokens=128", f"max_new_tokens={max_new_tokens}")


def training_procedure(trainer, aer: bool) -> str:
    """The card's "Training procedure": the trainer, the method, the steps trained and, for AER, α, H0 and H* at the
    end; for the asynchronous trainer, max_staleness and how many samples were trained at each lag."""
    args, state = trainer.args, trainer.state
    trl = trainer.trl_trainer()
    text = (
        f"Trained with `aer_trl.{type(args).trainer_name}` (TRL's `{trl.__name__}` with AER), method `{args.method}`, "
        f"for {state.global_step} optimizer steps of {args.num_generations} completions per prompt, at most "
        f"{args.max_completion_length} tokens each, learning rate {args.learning_rate:g}."
    )
    if aer:
        cb = trainer.aer_callback
        fmt = lambda v: "n/a" if v is None else f"{v:.4g}"  # noqa: E731
        text += (
            f" At the end: α = {fmt(cb.alpha)}, H0 = {fmt(cb.initial_entropy)} and H* = {fmt(cb.target)} nats "
            f"(ρ {args.aer_rho:g}, τ {args.aer_tau:g}, η {args.aer_eta:g})."
        )
    if type(args).trainer_kind == "async_grpo":
        lags: dict[int, float] = {}
        for entry in state.log_history:
            for key, value in entry.items():
                if key.startswith("aer/lag/") and key.endswith("/samples"):
                    lag = int(key.split("/")[2])
                    lags[lag] = lags.get(lag, 0.0) + value
        trained = ", ".join(f"{int(n)} at lag {k}" for k, n in sorted(lags.items()))
        text += f" Rollouts were up to max_staleness = {args.max_staleness} policy versions old" + (
            f"; samples trained: {trained}." if trained else "."
        )
    return text


def run_name(trainer) -> str:
    """What the card calls the model: the Hub repository's name where the run pushes, else the output folder's name
    (as TRL names it in the card of each checkpoint)."""
    if trainer.args.hub_model_id:
        return trainer.args.hub_model_id.split("/")[-1]
    return os.path.basename(os.path.normpath(trainer.args.output_dir))


def _base_model(trainer) -> tuple[str | None, str | None]:
    """(Hub id, local path) of the base model: the trainer's `base_model` where given (a Hub id, e.g. the original of
    a converted GGUF file), else the model's own name, which is a Hub id unless it is a local folder."""
    own = get_config_model_id(trainer.model.config)
    hint = trainer.aer_card.get("base_model")
    if hint:
        return hint, own if own and os.path.isdir(own) else None
    if own and not os.path.isdir(own):
        return own, None
    return None, own


def write_model_card(trainer, model_name=None, tags=None, **kwargs) -> None:
    """TRL's model card for the method actually trained, titled with the run's name (`run_name`) and with a usage
    snippet that loads this model (its Hub id when pushed, else its folder). With AER's outputs off (a non-AER method,
    `aer_measurements` unset) that is all. Otherwise it cites the AER paper once, links only what exists (a Hub base
    model, a Hub data set), and adds a section with the method's settings (and AER's controller state)."""
    dataset_name = trainer.aer_card.get("dataset_name")
    model_name = model_name or run_name(trainer)
    method = trainer.args.method
    spec = get_method(method)
    aer = spec.aer
    base_trainer = trainer.trl_trainer()  # TRL's GRPOTrainer, RLOOTrainer
    kind, trainer_name = type(trainer.args).trainer_kind, type(trainer.args).trainer_name
    tags = [tags] if isinstance(tags, str) else list(tags or [])
    trainer._name = spec.title_for(kind)
    trainer._paper = AER_PAPER if aer else base_trainer._paper  # TRL's card cites it (once)
    telemetry = trainer.args.aer_measurements
    # TRL's own card names no method for its plain trainer
    extra = [] if method == kind and not telemetry else [method]
    base_trainer.create_model_card(
        trainer, model_name=model_name, dataset_name=hub_dataset_id(dataset_name), tags=[*tags, *extra], **kwargs
    )
    if not trainer.is_world_process_zero():
        return
    path = os.path.join(trainer.args.output_dir, "README.md")
    with open(path) as f:
        card = f.read()
    hub_base, local_base = _base_model(trainer)
    # TRL links a Hub base model; for a local folder (or none) its template writes [None](https://huggingface.co/None)
    if hub_base:
        source = trainer.aer_card.get("base_model_source")
        note = f" (here from {source})" if source else " (here from a local copy)" if local_base else ""
        card = card.replace(
            f"a fine-tuned version of [None]({HUB}/None)",
            f"a fine-tuned version of [{hub_base}]({HUB}/{hub_base}){note}",
        )
        if card.startswith("---\n") and "\nbase_model:" not in card.split("\n---", 1)[0]:
            card = f"---\nbase_model: {hub_base}\n" + card[4:]
    else:
        card = card.replace(f"a fine-tuned version of [None]({HUB}/None)", _local_base(local_base))
    # the usage snippet loads this model: TRL writes its Hub id, "None" for a run that does not push
    card = card.replace('model="None"', f'model="{trainer.hub_model_id or trainer.args.output_dir}"')
    card = usage_snippet(card, trainer.aer_card.get("example_prompt"), trainer.args.max_completion_length)
    if not telemetry:
        with open(path, "w") as f:
            f.write(card)
        return
    card = clean_front_matter(card)  # AER's card; with AER's outputs off the card stays TRL's, byte for byte
    card = card.replace("## Training procedure\n", f"## Training procedure\n\n{training_procedure(trainer, aer)}\n", 1)
    cb = trainer.aer_callback
    fmt = lambda v: "n/a" if v is None else f"{v:.6g}"  # noqa: E731
    rows = [
        ("method", f"`{method}`: {spec.help}"),
        (
            "base model",
            f"`{hub_base}`"
            if hub_base
            else f"`{os.path.basename(os.path.normpath(local_base))}`"
            if local_base
            else "n/a",
        ),  # fmt: skip
        (
            "training data",
            trainer.aer_card.get("data_description") or (f"`{dataset_name}`" if dataset_name else "n/a"),
        ),
    ]
    if aer:
        rows += [
            ("ρ (pivot accuracy)", fmt(trainer.args.aer_rho)),
            ("τ (target ratio)", fmt(trainer.args.aer_tau)),
            ("η (α step size)", fmt(trainer.args.aer_eta)),
            ("difficulty-aware (C1)", str(trainer.args.aer_difficulty_aware)),
            ("adaptive α (C2+C3)", str(trainer.args.aer_adaptive)),
            ("final α", fmt(cb.alpha)),
            ("H0 (initial entropy)", fmt(cb.initial_entropy)),
            ("H* (target entropy)", fmt(cb.target)),
            ("AER iterations", str(cb.controller.iteration)),
        ]
        intro = (
            f"Trained with `aer_trl.{trainer_name}`, which implements Adaptive Entropy Regularization: "
            "difficulty-aware entropy coefficients, an initial-anchored target entropy and a dynamically adjusted "
            "global coefficient."
        )
    else:
        intro = (
            f"Trained with `aer_trl.{trainer_name}` as the `{method}` baseline of the AER paper's comparisons "
            "(no AER entropy bonus)."
        )
    section = f"\n## Training method: {trainer._name}\n\n{intro}\n\n| | |\n|---|---|\n" + "".join(
        f"| {k} | {v} |\n" for k, v in rows
    )
    if not aer:  # TRL's citations cite the trainer's paper; the AER paper's comparison is cited here
        section += (
            "\nCite the AER paper ([arXiv 2510.10959](https://arxiv.org/abs/2510.10959)) as:\n\n```bibtex\n"
            + AER_PAPER["citation"]
            + "\n```\n"
        )
    with open(path, "w") as f:
        f.write(card + section)
