"""`aer_trl_target_ratio` (ours): TRL's adaptive entropy control (`use_adaptive_entropy`, method `skywork`) with its
target anchored as AER anchors H*, `entropy_target` = ratio × H0, so that the Skywork rival aims where AER's
controller aims on each seed (the real-LLM rivals study). A research variant the bench trains through the library's
seams: `BenchConfig.aer_trl_target_ratio` and this mixin in `BenchGRPOTrainer`.

TRL reads its target from `self.args.entropy_target` at every loss; the mixin sets it on a copy of the config (the
caller's is left as given). Until H0 is measured, a target on the side of H0 that ratio × H0 is on: TRL's first update
then decides as the anchored target would (up when ratio >= 1, down otherwise). H0 is the first rollout batch's
entropy (the anchor AER's controller takes with its defaults), or the H0 given to the controller before step 1 (the
anchor probe); set once, and again from the controller's checkpointed state on resume.
"""

from __future__ import annotations

import copy
import logging
import math

logger = logging.getLogger(__name__)


def check_trl_target_ratio(config) -> None:
    """`aer_trl_target_ratio`: > 0 or None, on a run with TRL's adaptive entropy and AER's measurement of H0."""
    ratio = config.aer_trl_target_ratio
    if ratio is None:
        return
    if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"aer_trl_target_ratio must be a finite number > 0 or None, got {ratio!r}")
    if not (config.use_adaptive_entropy and config.aer_measurements):
        raise ValueError(
            "aer_trl_target_ratio anchors TRL's adaptive entropy target at H0: it needs use_adaptive_entropy "
            f"(got {config.use_adaptive_entropy}; method skywork sets it) and aer_measurements (got "
            f"{config.aer_measurements}) to measure H0"
        )


class TrlTargetMixin:
    _trl_target_anchored = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        ratio = self.args.aer_trl_target_ratio
        if ratio is not None:
            self.args = copy.copy(self.args)
            self.args.entropy_target = math.inf if ratio >= 1 else 0.0

    def training_step(self, model, inputs, num_items_in_batch):
        if self.args.aer_trl_target_ratio is not None and not self._trl_target_anchored:
            # H0 known before this step: given before step 1 (the probe), or restored with a resumed checkpoint
            controller = self.aer_callback.controller
            if controller.initial_entropy is not None and not controller.anchor_entropies:
                self._anchor_trl_target(controller.initial_entropy)
            elif controller.history:
                self._anchor_trl_target(controller.history[0]["entropy"])
        return super().training_step(model, inputs, num_items_in_batch)

    def _aer_finish_iteration(self) -> float:
        entropy = super()._aer_finish_iteration()
        if self.args.aer_trl_target_ratio is not None:
            self._anchor_trl_target(entropy)
        return entropy

    def _anchor_trl_target(self, entropy: float) -> None:
        if self._trl_target_anchored or not math.isfinite(entropy):
            return
        ratio = self.args.aer_trl_target_ratio
        self.args.entropy_target = ratio * entropy
        self._trl_target_anchored = True
        self._metrics["train"]["aer/trl_entropy_target"].append(self.args.entropy_target)
        logger.info("entropy_target anchored: %s x H0 %.4f = %.4f", ratio, entropy, self.args.entropy_target)
