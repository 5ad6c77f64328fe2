"""aer_trl.app.files: an atomic replace leaves the old file or the new one, never a part; file hashes for caches."""

import os

import pytest

from aer_trl import atomic
from aer_trl.app import files


def test_atomic_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    atomic.atomic_write(path, "old")
    atomic.atomic_write(path, b"new bytes", fsync=True)
    assert path.read_bytes() == b"new bytes" and os.listdir(tmp_path) == ["results.json"]


def test_a_write_that_fails_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    atomic.atomic_write(path, "old")

    def disk_full(*args):
        raise OSError("No space left on device")

    monkeypatch.setattr(files.os, "replace", disk_full)
    with pytest.raises(OSError, match="No space"):
        atomic.atomic_write(path, "new")
    assert path.read_text() == "old"


def test_file_hash_sees_a_change_anywhere_in_a_large_file(tmp_path):
    big = tmp_path / "big.bin"
    size = 5 * (1 << 20)
    big.write_bytes(b"a" * size)
    seen = {files.file_sha256(big)}
    for offset in (0, size // 2, size - 1):  # the middle as much as the ends (a sample of the ends once missed it)
        with open(big, "r+b") as f:
            f.seek(offset)
            f.write(b"b")
        seen.add(files.file_sha256(big))
    assert len(seen) == 4


ORPHAN = """
import os, sys, time
from pathlib import Path
from aer_trl.app.files import try_lock

assert try_lock(sys.argv[1]) is not None
if os.fork() == 0:  # a child (a data loader's, an engine's worker) holds the lock with its parent
    Path(sys.argv[1] + ".child").write_text(str(os.getpid()))
    time.sleep(120)
    os._exit(0)
while not Path(sys.argv[1] + ".child").exists():
    time.sleep(0.05)
"""


def test_a_lock_held_on_by_a_child_that_outlived_its_holder_is_refused_and_explained(tmp_path):
    import subprocess
    import sys
    import time

    lock = tmp_path / "_aer_trl.lock"
    subprocess.run([sys.executable, "-c", ORPHAN, str(lock)], check=True, timeout=120)  # the holder has ended
    child = int((tmp_path / "_aer_trl.lock.child").read_text())
    try:
        with pytest.raises(RuntimeError, match=r"training into it \(process \d+\).*No process \d+ runs on this"):
            files.lock_folder(tmp_path, lock.name, "run is training into it")
    finally:
        os.kill(child, 9)
    deadline = time.monotonic() + 30
    while (fd := files.try_lock(lock)) is None:  # the killed child's lock goes with it
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.close(fd)
