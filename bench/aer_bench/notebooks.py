"""Execute notebooks headless and fail on any cell error: `python -m aer_bench.notebooks notebooks/*.ipynb`.

Run from the repository root; each notebook executes with `notebooks/` as its working directory, outputs are not
written back (the committed notebooks stay without outputs).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def execute(path: str | Path, timeout: int = 600) -> float:
    import nbformat
    from nbclient import NotebookClient

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return time.perf_counter() - start


def main(argv=None) -> int:
    paths = argv if argv is not None else sys.argv[1:]
    if not paths:
        print("usage: python -m aer_bench.notebooks NOTEBOOK.ipynb [...]")
        return 2
    for p in paths:
        print(f"{p}: ok in {execute(p):.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
