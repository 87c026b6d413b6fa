"""Group-relative advantages over G rollouts of one task, and which groups are usable.

    grpo     (r - mean) / (std + eps)
    dr_grpo  r - mean                      (no std: no up-weighting of near-solved tasks)
    rloo     r - mean of the other G - 1   (leave-one-out baseline)

`negative_weight` scales the below-baseline advantages (asymmetric REINFORCE): pushing down a
sampled token whose probability is already high moves its mass to every other token, so with
few rollouts per step the negatives mostly raise entropy; a weight in (0, 1) damps that, 0 trains
only the runs above their group's baseline.

A group whose usable rewards are all equal carries no signal: it is dropped and the learner
samples more tasks (dynamic sampling, DAPO). Episodes that crashed their env are never trained;
with `mask_unfinished`, runs that never finished (turn/segment limits) are not trained either.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from composer_jax.rl.trajectory import Episode

ESTIMATORS = ("grpo", "dr_grpo", "rloo")
FINISHED = ("submit", "env_terminated")  # the env graded the work
NEVER_TRAINED = ("env_error", "prompt_too_long")  # no meaningful policy decisions / reward


def group_advantages(rewards_g: np.ndarray, estimator: str, eps: float = 1e-6) -> np.ndarray:
    r = np.asarray(rewards_g, np.float64)
    if r.size < 2:
        raise ValueError(f"a group needs at least 2 rollouts, got {r.size}")
    if estimator == "grpo":
        return ((r - r.mean()) / (r.std() + eps)).astype(np.float32)
    if estimator == "dr_grpo":
        return (r - r.mean()).astype(np.float32)
    if estimator == "rloo":
        g = r.size
        return (r - (r.sum() - r) / (g - 1)).astype(np.float32)
    raise ValueError(f"rl.advantage={estimator!r}: unknown estimator; use one of {ESTIMATORS}")


def weigh_negatives(adv_g: np.ndarray, negative_weight: float) -> np.ndarray:
    return np.where(adv_g < 0, adv_g * np.float32(negative_weight), adv_g).astype(np.float32)


@dataclasses.dataclass
class GroupResult:
    episodes: list[Episode]  # the members kept for training
    advantages: np.ndarray  # float32, one per kept member
    trainable: np.ndarray  # bool: False -> kept in the baseline but no gradient (unfinished)


@dataclasses.dataclass
class Selection:
    groups: list[GroupResult]
    counts: dict[str, int]  # dropped groups / episodes by reason


def select_groups(groups: Sequence[Sequence[Episode]], rewards: Sequence[Sequence[float]],
                  estimator: str, *, mask_unfinished: bool = False, negative_weight: float = 1.0) -> Selection:
    """Advantages for every group with signal; the rest are counted by why they were dropped."""
    counts = dict(zero_variance_groups=0, small_groups=0, env_error_episodes=0, unfinished_masked=0,
                  nonfinite_reward_episodes=0)
    kept = []
    for members, rs in zip(groups, rewards, strict=True):
        usable = []
        for ep, r in zip(members, rs, strict=True):
            if ep.end_reason in NEVER_TRAINED:
                counts["env_error_episodes"] += 1
            elif not np.isfinite(r):
                counts["nonfinite_reward_episodes"] += 1
            else:
                usable.append((ep, float(r)))
        if len(usable) < 2:
            counts["small_groups"] += 1
            continue
        r_g = np.array([r for _, r in usable])
        if np.all(r_g == r_g[0]):
            counts["zero_variance_groups"] += 1
            continue
        trainable = np.array([not mask_unfinished or ep.end_reason in FINISHED for ep, _ in usable])
        counts["unfinished_masked"] += int((~trainable).sum())
        adv_g = weigh_negatives(group_advantages(r_g, estimator), negative_weight)
        kept.append(GroupResult([ep for ep, _ in usable], adv_g, trainable))
    return Selection(kept, counts)
