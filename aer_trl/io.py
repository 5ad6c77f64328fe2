"""Small file helpers shared by the package: one way to replace a file atomically, and file hashes."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_SAMPLE = 1 << 20  # bytes read from each end of a large file


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
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:20]


def sampled_file_hash(path: Path, whole: bool = False) -> str:
    """Hash of a (large) file's name, size, first and last MiB; of all of it when `whole` or small."""
    size = path.stat().st_size
    h = hashlib.sha256(f"{path.name}\0{size}\0".encode())
    with open(path, "rb") as f:
        if whole or size <= 2 * _SAMPLE:
            h.update(f.read())
        else:
            h.update(f.read(_SAMPLE))
            f.seek(size - _SAMPLE)
            h.update(f.read(_SAMPLE))
    return h.hexdigest()[:20]
