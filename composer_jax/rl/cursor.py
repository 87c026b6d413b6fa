"""What an RL run carries between steps besides weights: the task cursor and buffered groups.

`RunCursor` walks a seeded permutation of the training tasks (a new one each epoch) and holds
usable groups that dynamic sampling collected beyond a step's need. It has grain's iterator
checkpoint interface (`get_state` -> bytes, `set_state`, `start_prefetch`), so the mid-training
`Checkpointer` saves it next to the train state and resume continues with the same tasks and
the same buffered rollouts.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from composer_jax.rl.trajectory import Episode, Segment, Turn


def episode_to_json(ep: Episode) -> dict[str, Any]:
    def seg(s: Segment) -> dict[str, Any]:
        return dict(prompt=s.prompt, tokens=s.tokens, logp=s.logp, logp_sampler=s.logp_sampler,
                    loss_mask=s.loss_mask, end_reason=s.end_reason,
                    turns=[dataclasses.asdict(t) for t in s.turns],
                    experts=None if s.prompt_experts is None else s.all_experts().tolist())

    return dict(index=ep.index, task=ep.task, task_id=ep.task_id, reward=ep.reward, end_reason=ep.end_reason,
                flags=ep.flags, turns=ep.turns, compactions=ep.compactions,
                info={k: v for k, v in ep.info.items() if _jsonable(v)},
                segments=[seg(s) for s in ep.segments])


def episode_from_json(d: dict[str, Any]) -> Episode:
    segments = []
    for s in d["segments"]:
        n_prompt = len(s["prompt"])
        experts = None if s["experts"] is None else np.asarray(s["experts"], np.int32)
        segments.append(Segment(
            prompt=s["prompt"], prompt_experts=None if experts is None else experts[:n_prompt],
            tokens=s["tokens"], logp=s["logp"], logp_sampler=s["logp_sampler"], loss_mask=s["loss_mask"],
            experts=[] if experts is None else [experts[n_prompt:]],
            turns=[Turn(**t) for t in s["turns"]], end_reason=s["end_reason"]))
    return Episode(d["index"], d["task"], d["task_id"], segments, d["reward"], d["info"], d["end_reason"],
                   d["flags"], d["turns"], d.get("compactions", []))


def _jsonable(v) -> bool:
    try:
        json.dumps(v)
        return True
    except (TypeError, ValueError):
        return False


class RunCursor:
    """Seeded task order + buffered groups ([(episodes, rewards)]), checkpointable.

    With `tiers` (a length curriculum: one task list per tier, shortest first) tasks come from
    tier `level`, which `promote` raises once a step's train pass rate reaches the threshold."""

    def __init__(self, task_ids: Sequence[str], seed: int, tiers: Sequence[Sequence[str]] = ()):
        self.tiers = [list(t) for t in tiers] or [list(task_ids)]
        if not all(self.tiers):
            raise ValueError("the task sampler has no tasks")
        self.task_ids, self.seed = list(task_ids), seed
        self.position, self.level = 0, 0
        self.buffer: list[tuple[list[Episode], list[float]]] = []

    def next_tasks(self, n: int) -> list[str]:
        out, ids = [], self.tiers[self.level]
        for _ in range(n):
            epoch, i = divmod(self.position, len(ids))
            seed = [self.seed, epoch] if len(self.tiers) == 1 else [self.seed, self.level, epoch]
            out.append(ids[np.random.default_rng(seed).permutation(len(ids))[i]])
            self.position += 1
        return out

    def promote(self, pass_rate: float, threshold: float) -> bool:
        """Next tier when `pass_rate` reaches `threshold` (buffered groups of the old tier are
        dropped: the policy has outgrown them). True when the level rose."""
        if self.level + 1 >= len(self.tiers) or pass_rate < threshold:
            return False
        self.level, self.position, self.buffer = self.level + 1, 0, []
        return True

    # grain's checkpoint-handler interface -------------------------------------------------------
    def get_state(self) -> bytes:
        return json.dumps(dict(position=self.position, level=self.level, buffer=[
            dict(episodes=[episode_to_json(e) for e in eps], rewards=list(rs)) for eps, rs in self.buffer
        ])).encode()

    def set_state(self, state: bytes) -> None:
        d = json.loads(state)
        self.position, self.level = d["position"], d.get("level", 0)
        self.buffer = [([episode_from_json(e) for e in g["episodes"]], g["rewards"]) for g in d["buffer"]]

    def start_prefetch(self) -> None:
        """Nothing to prefetch (grain's restore calls it)."""
