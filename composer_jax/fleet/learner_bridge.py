"""The RL learner (rl/learner.py) under the fleet's sync/async schedulers (async_rl.py).

One scheduler sample is one RL step's rollouts: the learner's `collect` (groups_per_step
usable groups after dynamic sampling, through the agent loop, whose envs may be a Ray pool).
So batch_size = chunk_size = 1, and one collect runs at a time (the loop drives one engine).
In async mode the collect for step t+1 runs, with policy t, while step t's update runs; the
learner's truncated IS (rl.recompute_old_logp=True) corrects the lag from the sampler
log-probs each token carries. The update donates its state, so the engine gets a copy.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from composer_jax.errors import ConfigError
from composer_jax.fleet.async_rl import Sample, run_rl
from composer_jax.fleet.config import FleetConfig
from composer_jax.rl.learner import Learner, episode_stats, full_state


def engine_snapshot(state) -> Any:
    """The policy weights as the engine takes them, in buffers the next update cannot donate."""
    return jax.tree.map(jnp.copy, full_state(state))


def run_learner(learner: Learner, state, *, steps: int, cfg: FleetConfig, first_step: int = 1):
    """(final TrainState, metrics per step) for RL steps first_step .. first_step + steps - 1."""
    if cfg.rl_mode == "async" and not learner.cfg.recompute_old_logp:
        raise ConfigError("fleet.rl_mode='async' needs rl.recompute_old_logp=True: the truncated IS "
                          "weight min(exp(old - sampler), C) is what corrects a lagged sample")

    def rollout(policy, version: int, indices):
        learner.loop.engine.set_params(policy)
        out = []
        for i in indices:
            groups, episodes, counts, _ = learner.collect(first_step + i)  # Learner.step's seeding
            out.append((groups, episodes, counts))
        return out

    def train(state, batch: list[Sample]):
        groups, episodes, counts = batch[0].data
        rows, packed = learner.batch_rows(groups)
        counts = dict(counts, **packed)
        metrics: dict[str, float] = {}
        if rows.rows == 0:
            counts["skipped_no_usable_groups"] = counts.get("skipped_no_usable_groups", 0) + 1
        else:
            state, metrics = learner.learn(state, rows)
        learner.counts.update(counts)
        return state, dict(episode_stats(episodes), **metrics, **{k: float(v) for k, v in counts.items()},
                           usable_groups=float(len(groups)), rows=float(rows.rows))

    one_at_a_time = dataclasses.replace(cfg, chunk_size=1, concurrency=1)
    return run_rl(state, rollout, train, steps=steps, batch_size=1, cfg=one_at_a_time, snapshot=engine_snapshot)
