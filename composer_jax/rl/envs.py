"""The envs of one run (SFT demonstrations, RL rollouts, evaluation) on `fleet.backend`.

    envs = RunEnvs(config)                      # fleet.backend="ray": connects to Ray here
    make_env = envs.factory(config.rl, "validation")
    ...
    envs.close()                                # shuts down the run's worker pools

local: `gymnasium.make` in this process. ray: one warm `EnvPool` per env (id, turns, suite
options, reward mode), shared by both splits: the split travels in each reset's options, so
evaluating on validation tasks needs no second pool. A Ray extra that is missing or a
`fleet.address` that does not answer fails here, before any model is built.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from composer_jax.errors import ConfigError
from composer_jax.fleet import FleetConfig

SPLITS = ("train", "validation")


def env_kwargs(rl_cfg) -> dict[str, Any]:
    """gymnasium.make keyword arguments the rl block names (split aside)."""
    extra = dict(reward_mode=rl_cfg.reward_mode) if rl_cfg.get("reward_mode") else {}
    return dict(max_turns=int(rl_cfg.env_max_turns), suite_options=dict(rl_cfg.suite_options), **extra)


class RunEnv:
    """An env (local or a fleet `RemoteEnv`) with the run's split in every reset and, when set,
    the run's system prompt in place of the env's (a tiny window cannot hold the tool manual)."""

    def __init__(self, env, split: str, system_prompt: str = ""):
        self.env, self.split, self.system_prompt = env, split, system_prompt

    @property
    def unwrapped(self):
        return self.env.unwrapped

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options={"split": self.split, **dict(options or {})})
        return obs, dict(info, system_prompt=self.system_prompt) if self.system_prompt else info

    def step(self, action: str):
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()


def local_factory(rl_cfg, split: str = "train") -> Callable[[], RunEnv]:
    import environments  # noqa: F401 - registers the envs

    return lambda: RunEnv(gym.make(rl_cfg.env_id, split=split, **env_kwargs(rl_cfg)), split, rl_cfg.system_prompt)


def task_ids(rl_cfg, split: str) -> list[str]:
    """The suite's task ids of `split` (read from a local env: the suite is cached on disk)."""
    env = local_factory(rl_cfg, split)()
    try:
        return env.unwrapped.suite.task_ids(split)
    finally:
        env.close()


def sample_ids(rl_cfg, split: str, n: int) -> list[str]:
    """`n` tasks of `split` that stand for the whole split, as the suite picks them
    (TaskSuite.sample_ids; 0: every task). A suite with only `task_ids` (the toy ones) gives its
    first n."""
    env = local_factory(rl_cfg, split)()
    try:
        suite = env.unwrapped.suite
        if hasattr(suite, "sample_ids"):
            return suite.sample_ids(split, int(n))
        ids = suite.task_ids(split)
        return ids[:int(n)] if n else ids
    finally:
        env.close()


def agent_texts(rl_cfg, tasks: int) -> list[str]:
    """What the policy will read, for a tokenizer's corpus: the harness's own text (summary
    instruction, system prompt) and the suite's `tokenizer_texts` of `tasks` train tasks."""
    from composer_jax.harness.protocol import SUMMARIZE_INSTRUCTION

    env = local_factory(rl_cfg)()
    try:
        texts = env.unwrapped.suite.tokenizer_texts(env, tasks)
    finally:
        env.close()
    return [SUMMARIZE_INSTRUCTION, str(rl_cfg.system_prompt), *texts]


class RunEnvs:
    def __init__(self, config):
        self.fleet = FleetConfig.from_config(config.fleet)
        self.slots = int(config.rollout.slots)
        self._pools: dict[str, Any] = {}
        if self.fleet.backend == "ray":
            from composer_jax.fleet.cluster import connect
            connect(self.fleet.address, self.fleet.num_cpus)

    def factory(self, rl_cfg, split: str = "train") -> Callable[[], RunEnv]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        if self.fleet.backend == "local":
            return local_factory(rl_cfg, split)
        kwargs = env_kwargs(rl_cfg)
        key = json.dumps([rl_cfg.env_id, kwargs], sort_keys=True, default=str)
        if key not in self._pools:
            from composer_jax.fleet.pool import EnvPool
            pool = EnvPool(self.fleet, rl_cfg.env_id, **kwargs)
            if pool.size < self.slots:  # an episode holds its worker: fewer would deadlock the loop
                pool.shutdown()
                raise ConfigError(
                    f"fleet: {pool.size} env workers for rollout.slots={self.slots}; every slot's episode "
                    f"leases a worker, so fleet.workers must be >= rollout.slots (fleet.workers="
                    f"{self.fleet.workers}, fleet.cpus_per_worker={self.fleet.cpus_per_worker:g}: the "
                    "pool is cut to the cluster's free CPUs)")
            self._pools[key] = pool
        pool = self._pools[key]
        return lambda: RunEnv(pool.make_env(), split, rl_cfg.system_prompt)

    def pools(self) -> list[Any]:
        return list(self._pools.values())

    def close(self) -> None:
        for pool in self._pools.values():
            pool.shutdown()
        self._pools.clear()

    def __enter__(self) -> RunEnvs:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
