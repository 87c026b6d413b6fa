"""The Ray env pool: same episodes and rewards as local envs, replay after a worker is killed,
timeouts instead of hangs, pools cut to the cluster. Ray runs with 2 CPUs, once per module."""
import math
import time

import gymnasium as gym
import pytest

ray = pytest.importorskip("ray", reason="the Ray fleet tests need the ray extra: pip install -e '.[ray]'")

from composer_jax.fleet import FleetConfig  # noqa: E402
import environments  # noqa: E402, F401 - registers the envs
from composer_jax.fleet.pool import EnvPool  # noqa: E402
from composer_jax.fleet.remote_env import EpisodeFailedError, RemoteEnv  # noqa: E402
from composer_jax.fleet.scripted import run_scripted  # noqa: E402
from environments.experts import expert_plan  # noqa: E402

ENV_ID = "composer/LongHorizon-v0"
ENV_KWARGS = {"split": "validation", "suite_options": {"hops": 3, "filler_lines": 5, "validation_size": 20}}
FLEET = FleetConfig(backend="ray", workers=3, cpus_per_worker=0.5, step_timeout_s=60.0)


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def pool(ray_session):
    p = EnvPool(FLEET, ENV_ID, **ENV_KWARGS)
    yield p
    p.shutdown()


def kill(handle):
    """Kill a worker's actor and wait until Ray reports it dead (ray.kill is asynchronous)."""
    ray.kill(handle.actor)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get(handle.actor.ready.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def first_steps(env, task_index, n):
    env.reset(options={"task_index": task_index})
    plan = expert_plan(env.unwrapped.task)
    for action in plan[:n]:
        env.step(action)
    return plan[n:]


def test_ray_pool_runs_the_same_episodes_as_local_envs(pool):
    tasks = [{"options": {"task_index": i}} for i in range(6)]
    local_make = lambda: gym.make(ENV_ID, **ENV_KWARGS)  # noqa: E731
    local = run_scripted(local_make, tasks, expert_plan, concurrency=2)
    remote = run_scripted(pool.make_env, tasks, expert_plan, concurrency=3)
    assert [(o.task_id, o.reward, o.status) for o in remote] == [(o.task_id, o.reward, o.status) for o in local]
    assert all(o.reward == 1.0 and o.status == "finished" for o in remote)
    assert len({o.task_id for o in remote}) == 6
    assert len(pool.workers(leased=False)) == 3  # every lease was returned


def test_worker_killed_mid_episode_is_replayed_on_another(pool):
    env = pool.make_env()
    rest = first_steps(env, task_index=2, n=2)  # two notes read: the state lives in the worker
    victim = env._worker
    kill(victim)
    for action in rest:
        _, reward, terminated, _, info = env.step(action)
    assert terminated and reward == 1.0 and info["passed"] == info["total"]
    assert env.retries == 1 and "ActorDiedError" in env.failures[0]
    assert victim.wid not in {h.wid for h in pool.workers()}
    assert len(pool.workers()) == 3  # a warm replacement took its place
    assert pool.stats["workers_lost"] >= 1


def test_without_retries_the_episode_fails_with_the_reason_and_the_env_goes_on(pool):
    env = RemoteEnv(pool, max_retries=0)
    rest = first_steps(env, task_index=3, n=1)
    kill(env._worker)
    with pytest.raises(EpisodeFailedError, match="lost its env worker 1 times.*ActorDiedError"):
        env.step(rest[0])
    env.close()
    rest = first_steps(env, task_index=3, n=0)  # the next episode runs on a live worker
    for action in rest:
        *_, reward = env.step(action)[:2]
    assert reward == 1.0


def test_a_hung_worker_times_out_and_is_replaced(ray_session):
    cfg = FleetConfig(backend="ray", workers=1, cpus_per_worker=0.25, step_timeout_s=1.0, max_retries=1)
    with EnvPool(cfg, ENV_ID, latency_s=3.0, **ENV_KWARGS) as slow:  # every call outlasts the timeout
        env = slow.make_env()
        start = time.perf_counter()
        with pytest.raises(EpisodeFailedError, match="reset timed out after 1s.*reset timed out after 1s"):
            env.reset(options={"task_index": 0})
        assert time.perf_counter() - start < 30
        assert slow.stats["workers_lost"] == 2 and len(slow.workers()) == 1


def settled_free_cpus(expected: float, timeout_s: float = 30.0) -> float:
    """Ray's free-CPU view once it reaches `expected`: actors killed by earlier tests (timeouts,
    replacements) return their CPUs asynchronously, so a read right after them can be stale."""
    deadline = time.monotonic() + timeout_s
    while (free := ray.available_resources().get("CPU", 0.0)) < expected - 1e-6 and time.monotonic() < deadline:
        time.sleep(0.05)
    return free


def test_a_pool_larger_than_the_cluster_is_cut_with_a_warning(pool):
    free = settled_free_cpus(2 - FLEET.workers * FLEET.cpus_per_worker)  # what the module's pool leaves
    assert free == pytest.approx(0.5)
    cfg = FleetConfig(backend="ray", workers=40, cpus_per_worker=0.25)
    with pytest.warns(UserWarning, match="does not fit the cluster"):
        small = EnvPool(cfg, ENV_ID, **ENV_KWARGS)
    try:
        assert small.size == math.floor(free / 0.25) < 40
        assert len(small.workers()) == small.size
    finally:
        small.shutdown()


@pytest.mark.slow
def test_agent_loop_on_the_fleet_matches_local_envs_through_a_worker_kill(pool):
    """The agent loop takes RemoteEnvs as its make_env: same token streams and rewards as with
    local envs, even when a worker is killed mid-episode (the replay is invisible upstream)."""
    from flax import nnx

    from composer_jax.config_loading import load_config
    from composer_jax.data.tokenizer import Tokenizer
    from composer_jax.model import ModelConfig, Transformer
    from composer_jax.rl.agent import AgentLoop
    from composer_jax.rl.engine_host import RolloutEngine
    from composer_jax.rl.rollout_config import RolloutConfig
    from environments.scripted import ExpertPolicy

    rollout = RolloutConfig(window=3072, summary_budget=192, turn_budget=512, slots=2, max_segments=8,
                            max_turns=20, prefill_buckets=(64, 256))
    tok = Tokenizer.byte_level()
    cfg = ModelConfig.from_config(load_config("configs/tiny.py:test").model)
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    engine = RolloutEngine(graphdef, params, cfg, rollout, valid_vocab=tok.vocab_size)
    tasks = [{"options": {"task_index": i}} for i in (4, 5)]
    local_make = lambda: gym.make(ENV_ID, **ENV_KWARGS)  # noqa: E731
    local = AgentLoop(engine, tok, rollout, local_make, make_policy=ExpertPolicy).run(tasks)

    killed = []

    class KillOnce(RemoteEnv):
        def step(self, action):
            if not killed and len(self._actions) == 2:
                killed.append(self._worker.wid)
                kill(self._worker)
            return super().step(action)

    loop = AgentLoop(engine, tok, rollout, lambda: KillOnce(pool, max_retries=2), make_policy=ExpertPolicy)
    remote = loop.run(tasks)
    loop.close()
    assert killed
    for a, b in zip(local, remote, strict=True):
        assert a.reward == b.reward == 1.0 and b.end_reason == "submit", (b.end_reason, b.info)
        assert [s.tokens for s in b.segments] == [s.tokens for s in a.segments]
