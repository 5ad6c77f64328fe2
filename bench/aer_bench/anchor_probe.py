"""`aer_anchor_probe` (ours): H0 measured on the untrained policy before step 1, a research variant the bench trains
through the library's seams: `BenchConfig.aer_anchor_probe` and this mixin in `BenchGRPOTrainer`, which anchors the
library's controller (`AERController.anchor`) before the first rollout batch is generated."""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)


def check_anchor_probe(config) -> None:
    """`aer_anchor_probe`: an integer >= 0 of prompts, one anchor for H0, on an AER-measured run."""
    probe = config.aer_anchor_probe
    if isinstance(probe, bool) or int(probe) != probe or probe < 0:
        raise ValueError(f"aer_anchor_probe must be an integer >= 0 (prompts), got {probe}")
    if probe and config.aer_anchor_rollouts != 1:
        raise ValueError(
            f"aer_anchor_probe ({probe}) and aer_anchor_rollouts ({config.aer_anchor_rollouts}) are two anchors for "
            "H0: set one"
        )
    if probe and not config.aer_measurements:
        raise ValueError("aer_anchor_probe measures AER's H0: it needs aer_measurements (an AER method)")


class AnchorProbeMixin:
    def training_step(self, model, inputs, num_items_in_batch):
        """Before the first rollout batch is generated (TRL generates inside `training_step`), H0 from the probe;
        never again, nor on a resumed run whose controller state holds H0."""
        if self.args.aer_anchor_probe:
            controller = self.aer_callback.controller
            if controller.initial_entropy is None and not controller.anchor_entropies:
                probe = self._probe_entropy()
                controller.anchor(probe)  # aer_trl_target_ratio (trl_target.py) anchors at the same H0
        return super().training_step(model, inputs, num_items_in_batch)

    def _probe_entropy(self) -> float:
        """H0 as the token-weighted entropy of the untrained policy's completions to aer_anchor_probe training
        prompts (num_generations each, drawn with the run's seed, split over processes), sampled and scored as TRL
        samples and scores a rollout batch. Trains nothing; TRL's rollout metrics and token count are left as they
        were, so step 1 logs what it would without the probe."""
        from trl.trainer.utils import pad

        n_prompts, dataset = self.args.aer_anchor_probe, self.train_dataset
        if len(dataset) < n_prompts:
            raise ValueError(f"aer_anchor_probe={n_prompts} prompts, but the training set has {len(dataset)}")
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(self.args.seed)).tolist()
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        if n_prompts < world:  # every process must sample: TRL's generation gathers across them
            raise ValueError(f"aer_anchor_probe={n_prompts} prompts is fewer than the {world} processes")
        mine = order[rank * n_prompts // world : (rank + 1) * n_prompts // world]
        prompts = [dataset[i]["prompt"] for i in mine for _ in range(self.num_generations)]
        metrics = {k: list(v) for k, v in self._metrics["train"].items()}
        tokens_seen = self.state.num_input_tokens_seen
        try:
            with torch.no_grad():
                prompt_ids, completion_ids, tool_mask = self._generate(prompts)[:3]
                device, pad_id = self.accelerator.device, self._tokenizer.pad_token_id

                def padded(rows, value, side):  # TRL's padding of a rollout batch
                    return pad([torch.tensor(r) for r in rows], value, side).to(device)

                prompt_mask = padded([[1] * len(p) for p in prompt_ids], 0, "left")
                mask = padded([[1] * len(c) for c in completion_ids], 0, "right")
                if self.mask_truncated_completions:  # as TRL masks a rollout batch's (entropy measured as trained)
                    kept = [[int(not cut)] for cut in self._cut_off(completion_ids)]
                    mask = mask * torch.tensor(kept, device=device)
                completion_ids = padded(completion_ids, pad_id, "right")
                input_ids = torch.cat([padded(prompt_ids, pad_id, "left"), completion_ids], dim=1)
                attention = torch.cat([prompt_mask, mask], dim=1)
                if tool_mask is not None:
                    mask = mask * padded(tool_mask, 1, "right")
                _, entropies, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    input_ids,
                    attention,
                    completion_ids.size(1),
                    self.args.per_device_train_batch_size,
                    compute_entropy=True,
                )
                mask = mask.to(entropies.dtype)
                local = torch.stack([(entropies * mask).sum(), mask.sum()]).float()
                total = self.accelerator.reduce(local, reduction="sum").tolist()
        finally:
            self._metrics["train"].clear()
            self._metrics["train"].update(metrics)
            self.state.num_input_tokens_seen = tokens_seen
        if total[1] == 0:
            raise RuntimeError(f"the aer_anchor_probe of {n_prompts} prompts produced no completion token")
        entropy = total[0] / total[1]
        self._metrics["train"]["aer/anchor_probe_entropy"].append(entropy)
        logger.info("H0 from a probe of %d prompts x %d: %.4f", n_prompts, self.num_generations, entropy)
        return entropy
