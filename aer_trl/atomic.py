"""Atomic file writes: a reader sees the old file or the new one, never a part (the metrics log, the evaluation's
records)."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: str | os.PathLike, data: str | bytes, fsync: bool = False) -> Path:
    """Write `data` to a temporary file beside `path`, then rename it over `path`: a reader sees the old file or the
    new one, never a part. `fsync=True` also flushes it to disk before the rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    return path
