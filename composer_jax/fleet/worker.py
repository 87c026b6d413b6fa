"""The env worker: the body of one Ray actor, hosting one gymnasium env and its local sandbox.

Everything slow happens in the constructor (imports, the task suite, the sandbox probe), so a
pool is warm before its first episode. Only text crosses: reset kwargs and actions in,
observations, rewards and info dicts out.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from composer_jax.fleet.latency import LatencyWrapper


class ReplayDivergedError(RuntimeError):
    """Replaying an episode's actions ended it early: the env is not deterministic in them."""


class EnvWorker:
    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], latency_s: float = 0.0):
        import environments  # noqa: F401 - registers the envs in this process

        env = gym.make(env_id, **dict(env_kwargs))
        self.env = LatencyWrapper(env, latency_s) if latency_s > 0 else env
        suite = self.env.unwrapped.suite
        for split in ("train", "validation"):  # build/load every task list now, not mid-episode
            suite.task_ids(split)

    def ready(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "host": socket.gethostname()}

    def reset(self, kwargs: Mapping[str, Any]):
        return self.env.reset(**dict(kwargs))

    def step(self, action: str):
        return self.env.step(action)

    def replay(self, reset_kwargs: Mapping[str, Any], actions: Sequence[str]) -> None:
        """Rebuild an episode's state on this worker: reset to its task, redo its actions."""
        self.env.reset(**dict(reset_kwargs))
        for i, action in enumerate(actions):
            _, _, terminated, truncated, _ = self.env.step(action)
            if terminated or truncated:
                raise ReplayDivergedError(f"replayed action {i + 1} of {len(actions)} ended the episode")

    def task(self):
        return self.env.unwrapped.task
