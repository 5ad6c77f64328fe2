"""What stands in for a feature TRL, vLLM or transformers lacks today, apart from AER itself: each module names, in
its docstring, the upstream change that would retire it, and docs/upstream.md gives each with a reproduction against
the stock library (tests/test_upstream.py).

- `vllm_engine`: TRL's colocated vLLM engine in the trainer's dtype, with expert parallelism, eager on a CPU, and a
  weight sync that reaches vLLM's CPU kernels (dense and MoE);
- `trl_async`: TRL's asynchronous GRPO off CUDA (the tree attention in torch, chosen by the tensors' device; peak
  FLOPs off CUDA) and `with_names`, how the AER trainer runs TRL's methods with one name bound to its own;
- `local_rollout`: a rollout worker for TRL's asynchronous GRPO that needs no vLLM server (the CPU and test path).
"""
