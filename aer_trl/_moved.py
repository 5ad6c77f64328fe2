"""The modules that moved keep their old import paths for users, with a FutureWarning: those under `aer_trl.app`
(the application beside the AER core, docs/design.md §0: `import aer_trl.rewards` gives the module
`aer_trl.app.rewards` itself, one module object, one registry, and `python -m aer_trl.run` runs `aer_trl.app.run`),
and the stand-ins for what other libraries lack, under `aer_trl.upstream` (`aer_trl.vllm_support` is
`aer_trl.upstream.vllm_engine`). Nothing is imported until such a path is used. The old paths go in a later
release."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings

APP = ("run", "training", "trainers", "data", "prompts", "rewards", "verifier", "gguf", "files", "resources", "logs",
       "extras", "kvcache", "evaluation")  # fmt: skip
UPSTREAM = {"vllm_support": "upstream.vllm_engine", "async_support": "upstream.trl_async",
            "local_rollout": "upstream.local_rollout"}  # fmt: skip
MOVED = {**{name: f"app.{name}" for name in APP}, **UPSTREAM}  # old name under aer_trl -> where it lives now


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)  # the module itself: sys.modules holds it under both names

    def exec_module(self, module):
        pass  # already executed under its new name

    def get_code(self, fullname):  # `python -m <old path>` (runpy executes the new module's code as __main__)
        spec = importlib.util.find_spec(self.target)
        return spec.loader.get_code(self.target)

    def is_package(self, fullname):
        return importlib.util.find_spec(self.target).submodule_search_locations is not None


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds `aer_trl.<moved>[.<sub>]` where it lives now (`MOVED`: `aer_trl.app.<moved>[.<sub>]`, ...)."""

    def find_spec(self, fullname, path=None, target=None):
        parts = fullname.split(".")
        if len(parts) < 2 or parts[0] != "aer_trl" or parts[1] not in MOVED:
            return None
        new = ".".join(["aer_trl", MOVED[parts[1]], *parts[2:]])
        real = importlib.util.find_spec(new)
        if real is None:
            return None
        if len(parts) == 2:
            warnings.warn(
                f"{fullname} moved to {new}: import it from there ({fullname} goes in a later release)",
                FutureWarning,
                stacklevel=2,
            )
        spec = importlib.machinery.ModuleSpec(fullname, _Alias(new), origin=real.origin)
        spec.submodule_search_locations = real.submodule_search_locations
        spec.has_location = False
        return spec


def install() -> None:
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
