"""The RL learner (rl/learner.py) under the fleet's sync/async schedulers (async_rl.py).

One scheduler sample is one RL step's rollouts: the learner's `collect` (groups_per_step
usable groups after dynamic sampling, through the agent loop, whose envs may be a Ray pool).
So batch_size = chunk_size = 1, and one collect runs at a time (the loop drives one engine).
In async mode the collect for step t+1 runs, with policy t, while step t's update runs; the
learner's truncated IS (rl.recompute_old_logp=True) corrects the lag from the sampler
log-probs each token carries. The update donates its state, so in async mode the engine gets a
copy (sync mode shares the buffers: nothing updates while rollouts read them).
composer_jax.rl.train runs every RL step through `run_learner`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from composer_jax.errors import ConfigError
from composer_jax.fleet.async_rl import Sample, run_schedule
from composer_jax.fleet.config import FleetConfig
from composer_jax.rl.learner import Learner, full_state


def engine_snapshot(state) -> Any:
    """The policy weights as the engine takes them, in buffers the next update cannot donate."""
    return jax.tree.map(jnp.copy, full_state(state))


def run_learner(learner: Learner, state, *, steps: int, cfg: FleetConfig, first_step: int = 1,
                on_step: Callable[[int, Any, dict], None] | None = None):
    """(final TrainState, metrics per step) for RL steps first_step .. first_step + steps - 1;
    `on_step(step, state, metrics)` after each. When it returns, no collect is in flight."""
    if cfg.rl_mode == "async" and not learner.cfg.recompute_old_logp:
        raise ConfigError("fleet.rl_mode='async' needs rl.recompute_old_logp=True: the truncated IS "
                          "weight min(exp(old - sampler), C) is what corrects a lagged sample")

    def rollout(policy, version: int, indices):
        learner.loop.engine.set_params(policy)
        out = []
        for i in indices:
            groups, episodes, counts, timing = learner.collect(first_step + i)  # Learner.step's seeding
            out.append(((groups, episodes, counts), timing))
        return out

    def train(state, batch: list[Sample]):
        collected, (t_roll, t_grade) = batch[0].data
        result = learner.train_on(state, collected, t_roll, t_grade)
        return result.state, result.metrics

    def after(t: int, state, metrics: dict) -> None:
        if on_step is not None:
            on_step(first_step + t, state, metrics)

    one_at_a_time = dataclasses.replace(cfg, chunk_size=1, concurrency=1)
    # Sync: nothing updates while rollouts read the weights, so the engine may share the
    # state's buffers; async: step t+1's rollouts read version t while step t's update donates it.
    snapshot = engine_snapshot if cfg.rl_mode == "async" else full_state
    return run_schedule(state, rollout, train, steps=steps, batch_size=1, cfg=one_at_a_time, snapshot=snapshot,
                        on_step=after)
