"""Environment fleet: gymnasium coding envs hosted by Ray actors, and asynchronous RL.

    pool = EnvPool(FleetConfig(backend="ray", workers=4), "composer/BugFix-v0", split="train")
    loop = AgentLoop(engine, tokenizer, rollout, make_env=pool.make_env)   # RemoteEnv per slot

Modules: config (the `fleet` config block), cluster (connect to Ray, size pools), worker (the
actor body), pool (warm actors, leases, replacement), remote_env (a gymnasium-shaped env whose
episode survives worker death by replay), factory (local or Ray env factory from the config),
scripted (drive scripted episodes, for benchmarks and fault tests), async_rl (sync and
bounded-staleness async RL schedulers), learner_bridge (rl/learner.py under those schedulers),
bandit (a tiny stand-in learner), latency (a slow-env wrapper). Ray is imported only when a Ray pool is made: install it with `pip install -e '.[ray]'`.
"""
from composer_jax.fleet.cluster import FleetUnavailableError
from composer_jax.fleet.config import FleetConfig

__all__ = ["FleetConfig", "FleetUnavailableError"]
