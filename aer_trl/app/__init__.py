"""The application that runs recipes on the AER core: the command lines (`aer-train`, `aer-evaluate`) and the
runner (`run`, `training`, `trainers`), data and prompts, rewards and the answer checker, evaluation, GGUF models,
launching several nodes, and file helpers. It imports the core (`aer_trl`'s top-level modules); the core imports
nothing of it (import-linter's `core-without-app` contract, docs/design.md §0)."""
