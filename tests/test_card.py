"""aer_trl.card: TRL's model card for the method trained; with AER's outputs on, a section with the method's settings
and AER's controller state, links only to what exists on the Hub, the AER paper cited."""

import pytest

from aer_trl.app.data import MATH_TABLES
from tests import helpers


def _card(tmp_path, dataset_name, **config):
    tokenizer = helpers.make_tokenizer()
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path, **config), dataset_name=dataset_name)
    trainer.create_model_card()
    return (tmp_path / "README.md").read_text()


def test_an_aer_card_has_the_settings_and_controller_state_and_links_only_what_exists(tmp_path):
    card = _card(tmp_path, MATH_TABLES["deepscaler"].hub_id, aer_rho=0.3)  # `aer-train` passes a known name's Hub id
    assert "## Training method: AER-GRPO" in card and "arxiv.org/abs/2510.10959" in card
    for row in ("| ρ (pivot accuracy) | 0.3 |", "| final α | 0 |", "| H0 (initial entropy) | n/a |"):
        assert row in card, row
    assert MATH_TABLES["deepscaler"].hub_id in card  # a Hub data set is linked
    assert "https://huggingface.co/None" not in card and "a fine-tuned model" in card  # no link to a base model


@pytest.mark.parametrize("dataset_name", ["lab", "rows.jsonl"])
def test_local_data_is_named_not_linked(tmp_path, dataset_name):
    card = _card(tmp_path, dataset_name)
    assert f"`{dataset_name}`" in card and f"huggingface.co/datasets/{dataset_name}" not in card


def test_a_baseline_with_telemetry_has_its_section_without_aer_settings(tmp_path):
    card = _card(tmp_path, "lab", method="clip_higher", aer_measurements=True)
    assert "## Training method: GRPO with Clip-Higher (DAPO)" in card and "`clip_higher` baseline" in card
    assert "final α" not in card and "ρ (pivot accuracy)" not in card


@pytest.mark.parametrize("config", [dict(method="grpo"), dict(method="aer")], ids=["grpo-telemetry-off", "aer"])
@pytest.mark.parametrize("where", ["local", "hub"])
def test_no_card_links_huggingface_co_none(tmp_path, config, where):
    """A local base model is named by its folder (with its path); a Hub base model keeps TRL's link."""
    tokenizer = helpers.make_tokenizer()
    trainer = helpers.make_trainer(tokenizer, helpers.make_config(tmp_path / "run", **config), dataset_name="lab")
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
        assert f"a fine-tuned version of `my-base-model` (a local model: `{folder}`)" in card
    else:
        assert (
            "[HuggingFaceTB/SmolLM2-135M-Instruct](https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct)" in card
        )
    assert ("## Training method" in card) == (config["method"] == "aer")  # telemetry off: TRL's card alone
