"""Environment fleet: gymnasium coding envs hosted by Ray actors, and asynchronous RL.
The trainer reaches it through composer_jax/rl/envs.py (`fleet.backend`, `fleet.rl_mode`).

    pool = EnvPool(FleetConfig(backend="ray", workers=4), "composer/BugFix-v0", split="train")
    loop = AgentLoop(engine, tokenizer, rollout, make_env=pool.make_env)   # RemoteEnv per slot

Modules: config (the `fleet` config block), cluster (connect to Ray, size pools), worker (the
actor body), pool (warm actors, leases, replacement), remote_env (a gymnasium-shaped env whose
episode survives worker death by replay),
scripted (drive scripted episodes, for benchmarks and fault tests), async_rl (sync and
bounded-staleness async RL schedulers), learner_bridge (rl/learner.py under those schedulers),
latency (a slow-env wrapper a pool can put around its envs: the fault tests).
Ray is imported only when a Ray pool is made: install it with `pip install -e '.[ray]'`.
"""
from composer_jax.fleet.cluster import FleetUnavailableError
from composer_jax.fleet.config import FleetConfig

__all__ = ["FleetConfig", "FleetUnavailableError"]
