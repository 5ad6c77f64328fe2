"""Tiny Qwen3 causal LMs built in code, for the lab and the tests (nothing is downloaded)."""

from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


def build_tiny_qwen3(
    tokenizer, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4, seed: int = 0, **overrides
) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3 sized for CPU (hidden 32–256, 2–4 layers) over `tokenizer`'s vocabulary."""
    config = Qwen3Config(
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
        **overrides,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model
