"""Small helpers shared by the package: one way to replace a file atomically, one way to hash a file, one way to hold
a lock on one, and one way to read a count from the environment."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
from pathlib import Path

logger = logging.getLogger(__name__)


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's whole content (first 20 hex digits). The identity of model weights and data files: a hash
    of a sample of a file (its ends, say) gives two models the same identity when training changed only tensors in
    the middle (frozen embeddings, a merged adapter), and the evaluation store would hand one model's samples to the
    other. Hashing runs at ~2 GB/s: a second for a 1B model in float32, ~10 s for an 8B one."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()[:20]


def try_lock(path: str | Path) -> int | None:
    """An exclusive lock (`flock`) on `path`, created if missing: its descriptor, or None when another process holds
    it. The lock belongs to the descriptor, so a process started with it (`pass_fds`) holds it too; the kernel
    releases it when the last holder closes it or ends, however it ends (a killed holder leaves nothing stale behind).
    Release it with `unlock`, which also removes the file; a lock taken on a file `unlock` removed meanwhile is
    given up and taken again on the new file, so two holders never hold two files of one name."""
    for _ in range(100):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except OSError:
            os.close(fd)
            raise
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break  # the file the name still names
        except FileNotFoundError:
            pass
        os.close(fd)  # its holder removed it between our open and our lock: take the new one
    else:
        raise OSError(f"{path}: could not take the lock on a file that keeps being replaced")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)  # who holds it, for a person to read
    return fd


def unlock(fd: int | None, path: str | Path) -> None:
    """Release a lock `try_lock` (or `lock_folder`) took, and remove its file: a finished run or evaluation leaves no
    lock file behind. None (no lock was taken) does nothing."""
    if fd is None:
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    finally:
        os.close(fd)


def lock_folder(folder: str | Path, name: str, doing: str, hint: str = "") -> int | None:
    """One writer at a time in `folder`: holds the lock on `<folder>/<name>` (`try_lock`) and returns its descriptor
    (`unlock(fd, folder / name)` releases it), or raises RuntimeError naming the process that holds it (`doing`:
    what it does there, e.g. "run is training into it"; `hint`: what to do). On a file system without locks: a
    warning, and None."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = try_lock(folder / name)
    except OSError as e:
        logger.warning("%s: cannot lock it (%s); a second %s would not be detected", folder, e, doing)
        return None
    if fd is None:
        try:
            holder = (folder / name).read_text().strip() or "?"
        except OSError:
            holder = "?"
        gone = ""
        if holder.isdigit() and not _running(int(holder)):
            gone = (
                f" No process {holder} runs on this machine: it runs on another node, or a process it started (which "
                f"holds the lock with it) outlived it; `fuser -v {folder / name}` names the holder."
            )
        raise RuntimeError(
            f"{folder}: another {doing} (process {holder}); two at once overwrite each other's files.{gone} {hint}"
        )
    return fd


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
