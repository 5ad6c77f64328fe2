"""The generations store: `<output_dir>/generations*.jsonl`, one JSON record per (run fingerprint, problem).

Every record says what produced it:
- `fp`: the run fingerprint, a hash of the model's identity (a hash of a local folder's weights and config files, with
  a PEFT adapter's base model's identity; or the Hub id, revision and cached commit), the backend, device type and
  dtype, and every sampling argument (num_samples, temperature, top_p, max_new_tokens, seed). `fingerprint` (the dict
  hashed) is written to metrics.json.
- `problem`: a hash of the exact prompt text the model saw (chat template applied) and of the gold answer, and
  `chunk`: a hash of the problems generated with it in one call (plan.py's determinism contract), so a record is
  reused only for the same problem sampled in the same chunk.
- `judge`: the answer checker's version (`rewards.JUDGE_VERSION`) that gave `correct`; scoring judges the
  completions of a record from another version again.

Robustness: a torn last line (a kill, a full disk) or a malformed line anywhere is reported with its line number and
dropped, and the file is rewritten with its complete records only (temporary file + atomic rename) before anything is
appended. Appends are whole records, flushed and fsync'ed; a write that fails (ENOSPC) truncates the file back to its
last complete record and raises an error that says so.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
from pathlib import Path

from ...atomic import atomic_write
from ..files import file_sha256

logger = logging.getLogger(__name__)

STORE_VERSION = 1
REQUIRED = ("v", "fp", "problem", "index", "benchmark", "model", "answer", "completions", "correct")
_HASHED_FILES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
_HASHED_NAMES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "adapter_config.json",  # a PEFT adapter: its rank, scaling and target modules
)


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:20]


def weights_hash(folder: Path) -> str:
    """Hash of a model folder: each weights and config file's name and whole content (`io.file_sha256`)."""
    files = sorted(
        p for p in folder.iterdir() if p.is_file() and (p.suffix in _HASHED_FILES or p.name in _HASHED_NAMES)
    )
    if not files:
        raise FileNotFoundError(f"models: {folder} holds no weights or config.json")
    return digest([[p.name, file_sha256(p)] for p in files])


def model_identity(model: str, revision: str | None = None, _seen: frozenset = frozenset()) -> dict:
    """What identifies a model's weights: a local folder's weights hash, or the Hub id + revision (+ cached commit).
    A PEFT adapter folder (transformers loads its base model with it) adds its base model's identity: the adapter's
    weights and config alone left a changed base, or the same base at another revision, with the old samples."""
    path = Path(model).expanduser()
    if path.is_dir():
        identity = {"weights": weights_hash(path)}
        adapter = path / "adapter_config.json"
        if adapter.is_file() and path.resolve() not in _seen:
            try:
                config = json.loads(adapter.read_text())
            except (OSError, json.JSONDecodeError):
                config = {}  # hashed with the weights all the same; transformers names what is wrong with it
            base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
            if base:
                identity["base"] = model_identity(base, config.get("revision"), _seen | {path.resolve()})
        return identity
    identity = {"hub_id": model, "revision": revision or "main"}
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(model, "config.json", revision=revision)
        if isinstance(cached, str):
            identity["commit"] = Path(cached).parent.name  # .../snapshots/<commit>/config.json
    except Exception:
        pass
    return identity


def problem_hash(prompt_text: str, gold: str) -> str:
    return digest({"prompt": prompt_text, "answer": gold})


def problem_seed(seed: int, problem: str) -> int:
    """The sampling seed of one problem: fixed by the run's seed and the problem itself, not by its position."""
    return int(hashlib.sha256(f"{seed}:{problem}".encode()).hexdigest()[:8], 16)


def _valid(record) -> bool:
    return (
        isinstance(record, dict)
        and all(k in record for k in REQUIRED)
        and record["v"] == STORE_VERSION
        and isinstance(record["completions"], list)
        and isinstance(record["correct"], list)
        and len(record["completions"]) == len(record["correct"])
    )


def read_records(path: Path, repair: bool = True) -> list[dict]:
    """Complete records of one store file; torn or malformed lines are reported and (with `repair`) removed."""
    if not path.exists():
        return []
    records, good, bad = [], [], []
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    torn = lines[-1] != b""  # a last line without its newline was cut mid-write
    for lineno, raw in enumerate(lines if torn else lines[:-1], 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = None
        if record is None or not _valid(record) or (torn and lineno == len(lines)):
            bad.append(lineno)
            continue
        records.append(record)
        good.append(raw)
    if bad:
        logger.warning(
            "%s: dropped %d torn or malformed line(s) (line %s); %s",
            path,
            len(bad),
            ", ".join(map(str, bad[:20])) + (" ..." if len(bad) > 20 else ""),
            "the file is rewritten with its complete records" if repair else "left as it is",
        )
        if repair:
            atomic_write(path, b"".join(line + b"\n" for line in good), fsync=True)
    return records


def append_records(path: Path, records: list[dict]) -> None:
    """Append whole records, flushed and fsync'ed; on failure the file is cut back to where it was."""
    if not records:
        return
    blob = "".join(json.dumps({"v": STORE_VERSION, **r}, ensure_ascii=False) + "\n" for r in records).encode()
    with open(path, "ab") as f:
        start = f.tell()
        try:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        except OSError as e:
            try:
                f.truncate(start)
            except OSError:
                pass  # the next run repairs the torn line
            hint = " (the disk is full)" if e.errno == errno.ENOSPC else ""
            raise OSError(
                e.errno,
                f"could not write generations to {path}{hint}: {e.strerror}. The file keeps its complete records; "
                "free space and run the same command again to resume.",
            ) from e


def load_store(out: Path, repair: Path | None | bool = True) -> dict[tuple[str, str, str], dict]:
    """(fingerprint, problem hash, chunk key) -> record, over every generations*.jsonl in `out` (worker shards
    included).

    `repair`: True repairs every file; a path repairs only that one (a data-parallel worker repairs its own shard
    and never rewrites a file another worker may be appending to)."""
    done: dict[tuple[str, str, str], dict] = {}
    for path in sorted(out.glob("generations*.jsonl")):
        for record in read_records(path, repair=repair is True or path == repair):
            done.setdefault((record["fp"], record["problem"], record.get("chunk", "")), record)
    return done
