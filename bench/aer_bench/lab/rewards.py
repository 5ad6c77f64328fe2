"""The lab reward: `math_accuracy_reward` plus per-tier accuracy logged as `lab/accuracy_tier{t}`."""

from __future__ import annotations

from collections import defaultdict

from aer_trl.app.rewards import math_accuracy_reward


def lab_accuracy_reward(completions, answer=None, difficulty=None, log_metric=None, **kwargs):
    rewards = math_accuracy_reward(completions, answer=answer, log_metric=log_metric, **kwargs)
    if log_metric is not None and difficulty is not None:
        per_tier = defaultdict(list)
        for tier, reward in zip(difficulty, rewards):
            if reward is not None:
                per_tier[tier].append(reward)
        for tier, values in sorted(per_tier.items()):
            log_metric(f"lab/accuracy_tier{tier}", sum(values) / len(values))
    return rewards
