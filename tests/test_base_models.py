"""A base model without a chat template (Llama-3.1-8B's case): refused while the trainer is built unless
`chat_template_path` gives one; with it, one BOS per prompt and the template saved in every checkpoint."""

from __future__ import annotations

import copy

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from aer_trl import AERGRPOTrainer
from aer_trl.chat_template import PLAIN_CHAT_TEMPLATE, read_chat_template
from tests import helpers


def tiny_llama(tokenizer) -> LlamaForCausalLM:
    """A tiny Llama-3.1 (its llama3 rope scaling, untied head), random weights."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 128,
        },
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


@pytest.fixture
def base_tokenizer(tokenizer):
    """The test tokenizer without a chat template, adding its BOS as Llama-3's does."""
    base = copy.deepcopy(tokenizer)
    base.chat_template = None
    base.add_bos_token = True  # as Llama-3's: `tokenizer(text)` starts with the BOS
    assert base("1").input_ids[0] == base.bos_token_id
    return base


def conversations(n: int = 8) -> Dataset:
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": f"{i}+{i % 3}="}] for i in range(n)], "answer": ["0"] * n}
    )


def trainer_for(tmp_path, tokenizer, **overrides):
    return AERGRPOTrainer(
        model=tiny_llama(tokenizer),
        reward_funcs=[helpers.even_length_reward],
        args=helpers.make_config(tmp_path, max_steps=2, save_strategy="steps", save_steps=2, **overrides),
        train_dataset=conversations(),
        processing_class=tokenizer,
    )


def test_a_tokenizer_without_a_template_is_refused_while_the_trainer_is_built(tmp_path, base_tokenizer):
    with pytest.raises(ValueError, match="no chat template .* set chat_template_path"):
        trainer_for(tmp_path, base_tokenizer)


def test_plain_prompts_need_no_template(tmp_path, base_tokenizer):
    trainer = AERGRPOTrainer(
        model=tiny_llama(base_tokenizer),
        reward_funcs=[helpers.even_length_reward],
        args=helpers.make_config(tmp_path, max_steps=1),
        train_dataset=helpers.make_dataset(),  # text prompts: TRL encodes them with the tokenizer's special tokens
        processing_class=base_tokenizer,
    )
    assert trainer.processing_class.chat_template is None


def test_the_plain_template_trains_a_base_model_with_one_bos_and_is_saved_with_its_checkpoints(
    tmp_path, base_tokenizer
):
    trainer = trainer_for(tmp_path, base_tokenizer, chat_template_path="plain")
    batches, generate = [], trainer._generate_and_score_completions
    trainer._generate_and_score_completions = lambda inputs: batches.append(generate(inputs)) or batches[-1]
    trainer.train()
    bos, pad = base_tokenizer.bos_token_id, base_tokenizer.pad_token_id
    for ids, mask in zip(batches[0]["prompt_ids"].tolist(), batches[0]["prompt_mask"].tolist(), strict=True):
        real = [t for t, m in zip(ids, mask, strict=True) if m]
        assert real[0] == bos and real.count(bos) == 1 and pad not in real
        assert base_tokenizer.decode(real[1:]).endswith("\nAnswer:")
    saved = AutoTokenizer.from_pretrained(tmp_path / "checkpoint-2")
    assert saved.chat_template == PLAIN_CHAT_TEMPLATE  # evaluation of the checkpoint formats prompts alike


def test_a_template_file_replaces_the_tokenizers_own_and_a_wrong_one_names_the_setting(tmp_path, tokenizer):
    path = tmp_path / "t.jinja"
    path.write_text("{% for m in messages %}Q {{ m['content'] }}{% endfor %}A:")
    trainer = trainer_for(tmp_path / "run", copy.deepcopy(tokenizer), chat_template_path=str(path))
    assert trainer.processing_class.chat_template == path.read_text()
    with pytest.raises(ValueError, match="chat_template_path='nope': neither a built-in template"):
        read_chat_template("nope")
    (tmp_path / "plain.txt").write_text("no template here")
    with pytest.raises(ValueError, match="holds no Jinja template"):
        read_chat_template(str(tmp_path / "plain.txt"))


def test_evaluation_formats_a_base_model_with_the_template_it_trained_with(tmp_path, base_tokenizer):
    """`chat_template_path` in the evaluation's arguments: the untrained base model (the appendix's Base row) sees
    its prompts as the run did, and the prompt ids hold one BOS (the template's, none added on top)."""
    from aer_trl.app.evaluation.backends import load_tokenizer
    from aer_trl.app.evaluation.plan import prompt_text
    from aer_trl.app.evaluation.sampling import adds_special_tokens

    base_tokenizer.save_pretrained(tmp_path)
    plain = load_tokenizer(str(tmp_path))
    assert plain.chat_template is None and adds_special_tokens(plain)
    templated = load_tokenizer(str(tmp_path), "plain")
    text = prompt_text([{"role": "user", "content": "1+1="}], templated)
    assert text == f"{base_tokenizer.bos_token}Question: 1+1=\nAnswer:"
    assert not adds_special_tokens(templated)  # the text already holds the template's BOS
    assert templated.encode(text, add_special_tokens=False).count(base_tokenizer.bos_token_id) == 1


def test_validation_during_training_formats_and_stops_as_the_run_does(tmp_path, tokenizer):
    """PassAtKCallback takes the run's chat template and stop strings (a base model's recipe sets both)."""
    import json

    from transformers import TrainerControl, TrainerState

    from aer_trl.app.evaluation import PassAtKCallback

    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"question": "1+1?", "answer": "2"}) + "\n")
    callback = PassAtKCallback(str(bench), eval_steps=2, num_samples=2, k_list=[1, 2], max_new_tokens=4)
    args = helpers.make_config(
        tmp_path / "run",
        save_strategy="steps",
        save_steps=2,
        chat_template_path="plain",
        generation_kwargs={"stop": "\nQuestion:"},
    )
    callback.on_train_begin(args, TrainerState(), TrainerControl())
    assert callback.eval_args.chat_template_path == "plain" and callback.eval_args.stop == ["\nQuestion:"]
