"""One registry for every kind of plug-in: training methods (`aer_trl.methods`), data sources (`aer_trl.app.data`)
and reward functions (`aer_trl.app.rewards`). Each kind is one `Registry` and the same three calls:

    register_<kind>(obj, *, name=None, replace=False)  # name: the object's `.name` (else `__name__`) by default
    get_<kind>(name)  # an unknown name is an error that names the field and lists the known names
    <kind>s()  # the registered ones by name, read-only, in registration order

An installed package can declare a plug-in as an entry point in the kind's group (`aer_trl.methods`,
`aer_trl.data`, `aer_trl.rewards`: the groups kept their names when the modules moved under `aer_trl.app`):
`get_<kind>(name)` loads it on first use, so `accelerate launch recipes/train.py --method my_method` finds it without
the user's code being imported first; no plug-in runs at import time (docs/design.md §6, "Add a method").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Plug-ins of one kind by name. `kind`: what one is ("method"); `field`: the config field or recipe key that
    names them, for errors ("method"); `group`: the entry-point group; `check(obj)`: whether an object is of this kind
    (an entry point's value is checked with it)."""

    def __init__(self, kind: str, field: str, group: str, check: Callable[[object], bool] | None = None):
        self.kind, self.field, self.group, self.check = kind, field, group, check
        self._entries: dict[str, T] = {}

    def register(self, obj: T, *, name: str | None = None, replace: bool = False) -> T:
        """Adds `obj` under `name` (default: its `.name`, else its `__name__`); `replace=True` redefines a name."""
        name = name or getattr(obj, "name", None) or getattr(obj, "__name__", None)
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.kind} needs a name: pass name=... to register {obj!r}")
        if self.check is not None and not self.check(obj):
            raise TypeError(f"{name!r} is not a {self.kind}: got {obj!r}")
        if name in self._entries and not replace and self._entries[name] is not obj:
            raise ValueError(f"a {self.kind} named {name!r} is registered already (pass replace=True to redefine it)")
        self._entries[name] = obj
        return obj

    def __contains__(self, name: object) -> bool:
        return name in self._entries or (isinstance(name, str) and self._load_entry_point(name))

    def get(self, name: str) -> T:
        """The plug-in `name` (an installed package's entry point of that name is loaded on demand)."""
        if name in self:
            return self._entries[name]
        raise ValueError(f"{self.field}: unknown {self.kind} {name!r}; known {self.kind}s are {list(self._entries)}")

    def view(self) -> Mapping[str, T]:
        """The registered plug-ins by name, in registration order (a read-only view)."""
        return MappingProxyType(self._entries)

    def _load_entry_point(self, name: str) -> bool:
        """Registers the entry point `name` of this kind's group, if an installed package declares one
        (`[project.entry-points."aer_trl.methods"] my_method = "my_pkg.methods:MY_METHOD"`); whether it now is."""
        from importlib.metadata import entry_points

        for entry in entry_points(group=self.group, name=name):
            obj = entry.load()
            if name in self._entries:  # the module registered it itself when imported
                return True
            if (self.check is not None and not self.check(obj)) or getattr(obj, "name", name) != name:
                raise TypeError(
                    f"entry point {entry.value!r} (group {self.group!r}, name {name!r}) must be a {self.kind} named "
                    f"{name!r}, got {obj!r}"
                )
            self.register(obj, name=name)
            return True
        return False
