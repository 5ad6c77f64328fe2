"""Small file helpers shared by the package: one way to replace a file atomically, and one way to hash a file."""

from __future__ import annotations

import hashlib
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


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's whole content (first 20 hex digits). The identity of model weights and data files: a hash
    of a sample of a file (its ends, say) gives two models the same identity when training changed only tensors in
    the middle (frozen embeddings, a merged adapter), and the evaluation store would hand one model's samples to the
    other. Hashing runs at ~2 GB/s: a second for a 1B model in float32, ~10 s for an 8B one."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:20]
