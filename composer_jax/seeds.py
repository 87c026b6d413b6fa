"""Every seed of a run, derived from the config's one root `seed` in one place.

    s = seeds(config)    # s.rl_tasks, s.rl_rollouts, s.eval, s.sft

rl_tasks: the RL task order (RunCursor); rl_rollouts: the sampling keys of RL rollouts (mixed
with the step and task position in Learner.rollout_groups); eval: the sampling keys of every
evaluation (rl.train's before/during/after evaluations and the pipeline's final one play the
same episodes, so their outcomes pair); sft: the SFT batch order and its copy drills. Mid-training's data order is
`data.shuffle_seed` (part of the token stream's identity, saved with its checkpoints) and its
init is the root seed. Root seed 0 keeps the values the recorded results used.
"""
from __future__ import annotations

import dataclasses

EVAL_OFFSET = 7_777_777  # far from any RL step's keys: an evaluation never replays a training episode


@dataclasses.dataclass(frozen=True)
class Seeds:
    root: int
    rl_tasks: int
    rl_rollouts: int
    eval: int
    sft: int


def seeds(config) -> Seeds:
    root = int(config.seed)
    return Seeds(root=root, rl_tasks=root, rl_rollouts=root, eval=root + EVAL_OFFSET, sft=root)
