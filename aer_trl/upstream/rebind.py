"""`with_names`: how an AER trainer runs a method of TRL's with some of its module's global names bound to its own
(TRL's asynchronous constructor and data loader, GRPO's and RLOO's constructors, TRL's vLLM engine builder), TRL's
code neither copied nor changed and TRL's module left as it is. tests/test_trl_seams.py pins every name rebound, with
the reason no hook of TRL's serves; docs/upstream.md gives the hooks TRL could add instead."""

from __future__ import annotations

import types


def with_names(function, **names):
    """`function` (a method of TRL's) run with some of its module's global names bound to other values: TRL's code,
    neither copied nor changed, and TRL's module left as it is (no attribute of it is replaced, for this trainer or
    any other). Each name must be one the code reads (tests/test_trl_seams.py pins them): a TRL that stops reading it
    fails here, at import, instead of training without the override."""
    moved = sorted(set(names) - set(function.__code__.co_names))
    if moved:
        raise RuntimeError(f"TRL's {function.__qualname__} no longer reads {moved}: aer_trl's override of it is stale")
    rebound = types.FunctionType(
        function.__code__, {**function.__globals__, **names}, function.__name__, function.__defaults__,
        function.__closure__,
    )  # fmt: skip
    rebound.__kwdefaults__, rebound.__qualname__ = function.__kwdefaults__, function.__qualname__
    return rebound
