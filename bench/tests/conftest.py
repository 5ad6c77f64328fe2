"""The bench's tests share the library tests' settings and fixtures (tests/conftest.py: offline, one thread per
xdist worker, the tiny tokenizer and model, the converted SmolLM2)."""

from tests.conftest import smollm2, tiny_model, tokenizer  # noqa: F401
