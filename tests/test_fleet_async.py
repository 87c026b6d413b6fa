"""RL schedulers: async with max_lag=0 equals sync, the lag bound holds, generation overlaps training."""
import functools
import threading
import time

import fleet_bandit as bandit  # tests/fleet_bandit.py: a stand-in policy and learner
import numpy as np
import pytest

from composer_jax.errors import ConfigError
from composer_jax.fleet import FleetConfig
from composer_jax.fleet.async_rl import run_schedule

REWARDS = (0.0, 0.2, 1.0, 0.1)
train = functools.partial(bandit.train_step, rewards=REWARDS)


def rollout(params, version, indices, latency_s=0.0):
    time.sleep(latency_s)
    return bandit.sample_arms(params, indices)


def run(mode, max_lag=0, steps=5, batch=8, roll=rollout, trainer=train, **cfg):
    fleet = FleetConfig(rl_mode=mode, max_lag=max_lag, **{"concurrency": 4, **cfg})
    return run_schedule(bandit.init_params(len(REWARDS)), roll, trainer, steps=steps, batch_size=batch, cfg=fleet)


def test_async_with_zero_lag_equals_sync():
    sync_params, sync_hist = run("sync", chunk_size=2)
    async_params, async_hist = run("async", max_lag=0, chunk_size=2,
                                   roll=functools.partial(rollout, latency_s=0.01))
    np.testing.assert_array_equal(np.asarray(sync_params), np.asarray(async_params))
    for s, a in zip(sync_hist, async_hist, strict=True):
        assert a["pg_loss"] == s["pg_loss"] and a["lag_max"] == 0 and a["dropped_stale"] == 0
        assert a["is_weight_mean"] == 1.0  # on-policy: the truncated IS weight is exactly 1
    probs = np.exp(np.asarray(sync_params)) / np.exp(np.asarray(sync_params)).sum()
    assert probs.argmax() == 2  # it learns: the best arm gains


def test_lagged_samples_are_corrected_and_the_bound_holds():
    _, hist = run("async", max_lag=2, steps=6, roll=functools.partial(rollout, latency_s=0.02))
    assert all(h["lag_max"] <= 2 for h in hist)
    assert max(h["lag_max"] for h in hist) >= 1  # the producer ran ahead of the learner
    lagged = [h for h in hist if h["lag_mean"] > 0]
    assert any(h["is_weight_mean"] != 1.0 for h in lagged)  # the learner's TIS corrected them
    assert all(h["is_weight_max"] <= 2.0 for h in hist)  # ... truncated at C


def test_a_sample_past_the_lag_bound_is_dropped_and_regenerated():
    overtaken = threading.Event()  # set once the learner has trained steps 0..2
    trained = []

    def roll(params, version, indices):
        if indices[0] == 3:  # meant for step 0, but it only comes back after step 2
            overtaken.wait(10)
        return bandit.sample_arms(params, indices)

    def counting_train(params, batch):
        out = train(params, batch)
        trained.append([s.index for s in batch])
        if len(trained) == 3:
            overtaken.set()
        return out

    _, hist = run("async", max_lag=1, steps=4, batch=4, roll=roll, trainer=counting_train, concurrency=8)
    # Sample 3 is dropped at step 3 (lag 3); a v1 sample overtaken by v2 ones may join it.
    assert [h["dropped_stale"] for h in hist][:3] == [0, 0, 0] and hist[3]["dropped_stale"] >= 1
    assert all(h["lag_max"] <= 1 for h in hist)
    used = [i for batch in trained for i in batch]
    assert 3 not in used and len(set(used)) == 16  # never trained on; a fresh sample took its place


def test_async_overlaps_generation_with_training():
    roll = functools.partial(rollout, latency_s=0.15)

    def slow_train(params, batch):
        time.sleep(0.15)
        return train(params, batch)

    run("sync", steps=1, batch=4, roll=roll, trainer=slow_train)  # compile outside the timing
    timings = {}
    for mode, lag in (("sync", 0), ("async", 1)):
        start = time.perf_counter()
        run(mode, max_lag=lag, steps=6, batch=4, roll=roll, trainer=slow_train, chunk_size=4)
        timings[mode] = time.perf_counter() - start
    # Sync pays rollout + update each step; async pays about the max of the two.
    assert timings["async"] < 0.8 * timings["sync"], timings


def test_snapshots_keep_in_place_updates_away_from_running_rollouts():
    """A learner that updates its params in place (as a donating jit does) under rollouts of
    the previous version: with snapshot=copy each rollout sees its own version throughout."""
    seen = []

    def roll(policy, version, indices):
        before = int(policy[0])
        time.sleep(0.05)  # the learner's update of the next step runs meanwhile
        seen.append((version, before, int(policy[0])))
        return [None] * len(indices)

    def in_place_train(params, batch):
        time.sleep(0.03)
        params += 1  # version t -> t + 1, in the same buffer
        return params, {}

    fleet = FleetConfig(rl_mode="async", max_lag=1, concurrency=4)
    params, hist = run_schedule(np.zeros(1), roll, in_place_train, steps=5, batch_size=4, cfg=fleet, snapshot=np.copy)
    assert params[0] == 5 and len(hist) == 5
    assert all(v == before == after for v, before, after in seen), seen
    assert max(h["lag_max"] for h in hist) == 1  # rollouts did overlap updates


def test_a_failing_rollout_stops_the_run_with_its_error():
    def roll(params, version, indices):
        if indices[0] >= 8:
            raise RuntimeError("sandbox host gone")
        return bandit.sample_arms(params, indices)

    with pytest.raises(RuntimeError, match="sandbox host gone"):
        run("async", max_lag=1, steps=4, batch=4, roll=roll)


def test_a_stuck_producer_times_out_instead_of_hanging():
    release = threading.Event()

    def roll(params, version, indices):
        release.wait(5)
        return bandit.sample_arms(params, indices)

    fleet = FleetConfig(rl_mode="async", max_lag=0, concurrency=2)
    start = time.perf_counter()
    with pytest.raises(TimeoutError, match="no batch for RL step 0"):
        try:
            run_schedule(bandit.init_params(4), roll, train, steps=2, batch_size=2, cfg=fleet, timeout_s=0.3)
        finally:
            release.set()
    assert time.perf_counter() - start < 5


def test_chunk_size_must_divide_the_batch():
    with pytest.raises(ConfigError, match="chunk_size=3"):
        run("async", batch=8, chunk_size=3)
