"""What stands in for a feature TRL, vLLM or transformers lacks today, apart from AER itself: each module names, in
its docstring, the upstream change that would retire it, and docs/upstream.md gives each with a reproduction against
the stock library (tests/test_upstream.py).

- `trl_vllm`: `AERVLLMGeneration`, the subclass of TRL's `VLLMGeneration` that GRPO's and RLOO's AER trainers build
  their colocated engine with: in the trainer's dtype, with expert parallelism, eager on a CPU, and a weight sync that
  reaches vLLM's CPU kernels (dense and MoE), what `vllm_engine` does to vLLM;
- `vllm_engine`: vLLM's side of that (a model loader registered under this package's load format, the reload path,
  the MoE kernels rebuilt), the drift guard and the CPU defaults;
- `trl_async`: TRL's asynchronous GRPO off CUDA (the tree attention in torch, chosen by the tensors' device; peak
  FLOPs off CUDA);
- `rebind`: `with_names`, how an AER trainer runs TRL's methods with one module-level name bound to its own;
- `local_rollout`: a rollout worker for TRL's asynchronous GRPO that needs no vLLM server (the CPU and test path).
"""
