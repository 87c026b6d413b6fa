"""The env factory an agent loop or benchmark uses: local envs by default, a Ray pool when asked."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

from composer_jax.fleet.config import FleetConfig


def env_factory(cfg: FleetConfig, env_id: str, **env_kwargs) -> tuple[Callable[[], Any], Callable[[], None]]:
    """(make_env, shutdown). backend "local": gymnasium.make in this process; "ray": RemoteEnvs
    on a warm EnvPool of `cfg.workers` actors (started here, before the first episode)."""
    if cfg.backend == "local":
        import environments  # noqa: F401 - registers the envs

        return (lambda: gym.make(env_id, **env_kwargs)), (lambda: None)
    from composer_jax.fleet.pool import EnvPool

    pool = EnvPool(cfg, env_id, **env_kwargs)
    return pool.make_env, pool.shutdown
