"""Fault injection: 20% of the env workers killed at random, three times, during a run of scripted
episodes. Every episode ends (finished, retried on another worker, or failed with a reason)
and the run completes."""
import random
import threading
import time

import pytest

ray = pytest.importorskip("ray", reason="the Ray fleet tests need the ray extra: pip install -e '.[ray]'")

from composer_jax.fleet import FleetConfig  # noqa: E402
from composer_jax.fleet.pool import EnvPool  # noqa: E402
from composer_jax.fleet.scripted import STATUSES, run_scripted  # noqa: E402
from environments.experts import expert_plan  # noqa: E402

WORKERS, EPISODES, WAVES = 5, 15, 3


@pytest.fixture(scope="module")
def ray_session():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def kill_waves(pool, rng, done: threading.Event, killed: list):
    """Each wave kills 20% of the live workers, chosen among those mid-episode."""
    for _ in range(WAVES):
        if done.wait(rng.uniform(0.2, 0.8)):
            return
        leased = pool.workers(leased=True)
        for handle in rng.sample(leased, min(len(leased), max(1, len(pool.workers()) // 5))):
            ray.kill(handle.actor)
            killed.append(handle.wid)


@pytest.mark.parametrize("max_retries", [2, 0])
def test_random_worker_kills_never_lose_or_hang_an_episode(ray_session, max_retries):
    cfg = FleetConfig(backend="ray", workers=WORKERS, cpus_per_worker=0.4, max_retries=max_retries,
                      step_timeout_s=60.0)
    kwargs = {"split": "validation", "suite_options": {"hops": 3, "filler_lines": 5, "validation_size": 20}}
    tasks = [{"options": {"task_index": i}} for i in range(EPISODES)]
    # A little latency per call keeps episodes long enough for the kills to land mid-episode.
    with EnvPool(cfg, "composer/LongHorizon-v0", latency_s=0.05, **kwargs) as pool:
        done, killed = threading.Event(), []
        killer = threading.Thread(target=kill_waves, args=(pool, random.Random(max_retries), done, killed))
        start = time.perf_counter()
        killer.start()
        outcomes = run_scripted(pool.make_env, tasks, expert_plan, concurrency=WORKERS)
        done.set()
        killer.join()
        wall = time.perf_counter() - start
        live = len(pool.workers())

    assert killed, "the killer found no episode in flight"
    assert [o.index for o in outcomes] == list(range(EPISODES)) and wall < 240
    assert all(o.status in STATUSES for o in outcomes)
    failed = [o for o in outcomes if o.status == "failed"]
    assert all("ActorDiedError" in o.reason for o in failed)  # a reason, and the right one
    assert all(o.reward == 1.0 for o in outcomes if o.status != "failed")  # replays rebuilt the state
    if max_retries:
        assert not failed and any(o.status == "retried" for o in outcomes)
    else:
        assert failed and len(failed) <= len(killed)
    assert live == WORKERS  # every killed worker was replaced
