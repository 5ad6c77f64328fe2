"""The laptop-scale AER lab: synthetic arithmetic RLVR with a tiny character-level Qwen3, on CPU."""
