"""Tiny models and a tokenizer built in code, for tests and laptop experiments with AER's trainers (nothing is
downloaded; as `transformers.testing_utils` serves transformers' tests): a character-level tokenizer with a chat
template, a randomly initialised Qwen3 and a Qwen3-MoE (the architecture of Qwen3-30B-A3B) sized for a CPU. The
library's tests build their trainers on them, and the research bench's laptop lab warm-starts its model from them."""

from __future__ import annotations

import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

__all__ = ["build_char_tokenizer", "build_tiny_qwen3", "build_tiny_qwen3_moe"]


PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
CHARS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # 95 printable ASCII + "\n"

# Plain-string prompts are used as they are; a conversation is rendered as "role: content" lines.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per character; `decode(encode(s)) == s` for any printable-ASCII string."""
    vocab = {tok: i for i, tok in enumerate([PAD, BOS, EOS, UNK, *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        chat_template=CHAT_TEMPLATE,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )


def _shapes(tokenizer, hidden_size: int, num_layers: int, num_heads: int) -> dict:
    """What the tiny Qwen3 and Qwen3-MoE share: `tokenizer`'s vocabulary and special tokens, the attention's shape."""
    return dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        head_dim=hidden_size // num_heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def _generating_with(model, tokenizer):
    """`model` with `tokenizer`'s special tokens in its generation config."""
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def build_tiny_qwen3(
    tokenizer, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, seed: int = 0, **overrides
) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3 sized for CPU (hidden 32–256, 2–4 layers) over `tokenizer`'s vocabulary."""
    config = Qwen3Config(**{**_shapes(tokenizer, hidden_size, num_layers, num_heads), **overrides})
    torch.manual_seed(seed)
    return _generating_with(Qwen3ForCausalLM(config), tokenizer)


def build_tiny_qwen3_moe(
    tokenizer,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    num_experts: int = 4,
    experts_per_token: int = 2,
    expert_size: int = 32,
    seed: int = 0,
    **overrides,
):
    """A randomly initialised Qwen3-MoE (the architecture of Qwen3-30B-A3B: every layer sparse, top-k routing,
    normalised top-k weights) sized for CPU, over `tokenizer`'s vocabulary. `output_router_logits` is on, as in
    Qwen3-30B-A3B's config, so TRL adds the router's load-balancing loss (`router_aux_loss_coef` × aux loss)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    settings = dict(
        _shapes(tokenizer, hidden_size, num_layers, num_heads),
        moe_intermediate_size=expert_size,
        num_experts=num_experts,
        num_experts_per_tok=experts_per_token,
        decoder_sparse_step=1,
        norm_topk_prob=True,
        output_router_logits=True,
        router_aux_loss_coef=0.001,
    )
    torch.manual_seed(seed)
    return _generating_with(Qwen3MoeForCausalLM(Qwen3MoeConfig(**{**settings, **overrides})), tokenizer)
