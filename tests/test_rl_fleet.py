"""The fleet inside the trainer: `rl.train.run_rl` with fleet.rl_mode async (lag 0 = sync,
lag 1 overlaps and trains) and fleet.backend ray (the same steps as local envs, through a
worker killed mid-step); bad fleet input fails before any model is built."""
import time

import jax
import numpy as np
import pytest

from composer_jax.errors import ConfigError
from composer_jax.fleet import FleetUnavailableError
from composer_jax.rl.train import main, run_rl
from composer_jax.train.metrics import read_jsonl
from configs.tiny import get_config

TIMING = ("rollout_s", "grade_s", "learn_s", "step_s", "wait_s", "train_s", "rollout_tokens_per_s",
          "learn_tokens_per_s", "lag_mean", "lag_max", "dropped_stale")


def toy_config(steps=2, **fleet):
    c = get_config("test")
    c.rollout.update(window=448, summary_budget=16, turn_budget=12, max_segments=2, slots=8, max_turns=1,
                     prefill_buckets=(32, 128))
    c.rl.suite_options = {"tasks": 6}  # assigned: update() would merge LongHorizon's options in
    c.rl.update(env_id="composer/Toy-v0", env_max_turns=1, steps=steps,
                groups_per_step=2, group_size=4, max_sampling_rounds=2, row_len=64, minibatch_rows=8,
                eval_tasks=0, checkpoint_every=steps)
    c.rl.optim.update(lr=1e-3, steps=steps)
    c.fleet.update(**fleet)
    return c


def train_rows(workdir):
    return [r for r in read_jsonl(workdir / "metrics.jsonl") if r["kind"] == "train"]


def learned(workdir):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in train_rows(workdir)]


def leaves(out):
    return [np.asarray(x) for x in jax.tree.leaves(out["state"].params)]


@pytest.fixture(scope="module")
def sync_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("sync")
    return work, run_rl(toy_config(3), work, log=lambda s: None)


def test_async_at_lag_0_is_sync_and_at_lag_1_overlaps_and_trains(sync_run, tmp_path):
    sync_dir, sync_out = sync_run
    assert all(r["rows"] > 0 for r in train_rows(sync_dir))  # every step updated
    lag0 = run_rl(toy_config(3, rl_mode="async", max_lag=0), tmp_path / "lag0", log=lambda s: None)
    assert learned(tmp_path / "lag0") == learned(sync_dir)
    for x, y in zip(leaves(lag0), leaves(sync_out), strict=True):
        np.testing.assert_array_equal(x, y)

    lines = []
    lag1 = run_rl(toy_config(3, rl_mode="async", max_lag=1), tmp_path / "lag1", log=lines.append)
    rows = train_rows(tmp_path / "lag1")
    assert [r["lag_max"] for r in rows] == [0.0, 1.0, 1.0]  # step t+1's rollouts ran on policy t-1
    assert all(r["rows"] > 0 and np.isfinite(r["pg_loss"]) for r in rows)
    assert rows[0]["reward"] == train_rows(sync_dir)[0]["reward"]  # step 1 has no lag to differ by
    assert any(np.any(x != y) for x, y in zip(leaves(lag1), leaves(sync_out), strict=True))
    assert any(" lag 1 " in line for line in lines)  # the console says the step was lagged


def test_ray_backend_trains_the_same_steps_through_a_worker_kill(sync_run, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray", reason="the Ray fleet needs the ray extra: pip install -e '.[ray]'")
    from composer_jax.fleet.remote_env import RemoteEnv

    sync_dir, sync_out = sync_run
    killed, step = [], RemoteEnv.step

    def step_killing_once(self, action):  # the first step's worker dies before it answers
        if not killed:
            killed.append(self._worker.wid)
            ray.kill(self._worker.actor)
            time.sleep(1.0)
        return step(self, action)

    monkeypatch.setattr(RemoteEnv, "step", step_killing_once)
    try:
        with pytest.raises(ConfigError, match=r"fleet: 4 env workers for rollout.slots=8"):
            run_rl(toy_config(3, backend="ray", workers=4, cpus_per_worker=0.25, num_cpus=2), tmp_path / "few")
        out = run_rl(toy_config(3, backend="ray", workers=8, cpus_per_worker=0.25, num_cpus=2, step_timeout_s=30.0),
                     tmp_path, log=lambda s: None)
    finally:
        ray.shutdown()
    assert killed
    assert learned(tmp_path) == learned(sync_dir)  # every episode completed, as with local envs
    assert not any(k.startswith("end_env_error") for r in train_rows(tmp_path) for k in r)
    for x, y in zip(leaves(out), leaves(sync_out), strict=True):
        np.testing.assert_array_equal(x, y)


def test_bad_fleet_input_fails_before_any_model_is_built(tmp_path, monkeypatch, capsys):
    import composer_jax.rl.train as train_lib

    def no_model(*a, **k):
        raise AssertionError("a model was built before the fleet error")

    monkeypatch.setattr(train_lib, "build", no_model)
    with pytest.raises(FleetUnavailableError, match=r"fleet.address='127.0.0.1:9'"):
        run_rl(toy_config(1, backend="ray", address="127.0.0.1:9"), tmp_path)

    import builtins
    real_import = builtins.__import__

    def without_ray(name, *a, **k):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", without_ray)
    with pytest.raises(FleetUnavailableError, match=r"pip install -e '.\[ray\]'"):
        run_rl(toy_config(1, backend="ray"), tmp_path)
    monkeypatch.setattr(builtins, "__import__", real_import)

    with pytest.raises(ConfigError, match="fleet.rl_mode='lockstep'"):
        run_rl(toy_config(1, rl_mode="lockstep"), tmp_path)
    with pytest.raises(SystemExit):
        main(["--config", "configs/tiny.py:test", "--workdir", str(tmp_path), "--config.fleet.colour=1"])
    assert "fleet.colour" in capsys.readouterr().err
