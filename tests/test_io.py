"""aer_trl.io: an atomic replace leaves the old file or the new one, never a part; file hashes for caches."""

import os

import pytest

from aer_trl import io


def test_atomic_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "results.json"
    io.atomic_write(path, "old")
    io.atomic_write(path, b"new bytes", fsync=True)
    assert path.read_bytes() == b"new bytes" and os.listdir(tmp_path) == ["results.json"]


def test_a_write_that_fails_leaves_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "results.json"
    io.atomic_write(path, "old")

    def disk_full(*args):
        raise OSError("No space left on device")

    monkeypatch.setattr(io.os, "replace", disk_full)
    with pytest.raises(OSError, match="No space"):
        io.atomic_write(path, "new")
    assert path.read_text() == "old"


def test_sampled_hash_reads_the_ends_of_a_large_file_and_all_of_a_small_one(tmp_path):
    big = tmp_path / "big.bin"
    size = 3 * (1 << 20)
    big.write_bytes(b"a" * size)
    before, whole_before, sha_before = (
        io.sampled_file_hash(big),
        io.sampled_file_hash(big, whole=True),
        io.file_sha256(big),
    )
    with open(big, "r+b") as f:
        f.seek(size // 2)  # the middle MiB: outside the sample
        f.write(b"b")
    assert io.sampled_file_hash(big) == before  # by design: a cheap identity for large model files
    assert io.sampled_file_hash(big, whole=True) != whole_before and io.file_sha256(big) != sha_before
    with open(big, "r+b") as f:
        f.write(b"c")  # the first MiB
    assert io.sampled_file_hash(big) != before
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 100)
    first = io.sampled_file_hash(small)
    small.write_bytes(b"x" * 50 + b"y" + b"x" * 49)
    assert io.sampled_file_hash(small) != first
