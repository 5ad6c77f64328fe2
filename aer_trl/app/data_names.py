"""The data sets the package knows by name (`dataset_name: gsm8k`, `--benchmarks aime24`) and the local file formats
it reads: plain data, no `datasets` import, so `aer-train --help` names them at once. Loading is `aer_trl.app.data`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MathTable:
    hub_id: str
    config: str | None = None
    split: str = "train"
    filter_year: int | None = None  # AI-MO/aimo-validation-amc holds several years: keep one
    packaged: str | None = None  # a file shipped in aer_trl/app/data_files/ (read instead of the Hub)


MATH_TABLES: dict[str, MathTable] = {
    # training sets
    "deepscaler": MathTable("agentica-org/DeepScaleR-Preview-Dataset"),
    "dapo-math-17k": MathTable("open-r1/DAPO-Math-17k-Processed", config="en"),
    # evaluation sets
    "aime24": MathTable("HuggingFaceH4/aime_2024"),
    "aime25": MathTable("HuggingFaceH4/aime_2025"),
    "amc23": MathTable("math-ai/amc23", split="test"),
    "amc23-aimo": MathTable("AI-MO/aimo-validation-amc", filter_year=2023),
    "math500": MathTable("HuggingFaceH4/MATH-500", split="test"),
    "gsm8k": MathTable("openai/gsm8k", config="main", split="test"),
    # 12 rows of GSM8K's test split (from rows 1200-1318, MIT license), shipped with the package: the CPU recipe's
    # data, found without the repository or the Hub
    "gsm8k-sample": MathTable("openai/gsm8k", config="main", split="test", packaged="gsm8k_sample.jsonl"),
}

LOCAL_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
KNOWN_DATA = (
    f"Known names: {', '.join(sorted(MATH_TABLES))}; a Hub data set is owner/name (e.g. openai/gsm8k); a local file "
    f"ends in {'/'.join(LOCAL_FORMATS)}"
)
