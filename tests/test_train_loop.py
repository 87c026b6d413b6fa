"""The mid-training loop end to end: exact resume after SIGKILL and SIGTERM (real subprocesses),
non-finite loss, config checks at the command line."""
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import sysconfig
import time

import jax
import numpy as np
import pytest

from configs.tiny import get_config
from composer_jax.data.build import build
from composer_jax.model import ModelConfig
from composer_jax.sharding import make_mesh
from composer_jax.train import loop
from composer_jax.train.checkpoint import Checkpointer, abstract_train_state
from composer_jax.train.loop import NonFiniteError, train
from composer_jax.train.metrics import read_jsonl
from composer_jax.train.optim import make_optimizer

ROOT = pathlib.Path(__file__).resolve().parents[1]
# A short run on the test model: every flag here is a real config override.
RUN_FLAGS = ["--config", "configs/tiny.py:test", "--config.data.seq_len=64",
             "--config.data.batch_size=8", "--config.train.eval_batches=1",
             "--config.train.eval_every=1000", "--config.train.log_every=1",
             "--config.train.peak_flops=1e10", "--config.checkpoint.every=4", "--noprogress"]


def small_config(steps: int):
    config = get_config("test")
    config.data.update(seq_len=64, batch_size=8)
    config.train.update(steps=steps, eval_batches=1, eval_every=1000, log_every=1, peak_flops=1e10)
    config.checkpoint.update(every=1, keep=3)
    return config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Token stores built by the data package from 40 small stdlib files (train and val)."""
    corpus = tmp_path_factory.mktemp("corpus")
    stdlib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = [p for p in sorted(stdlib.glob("*.py")) if 2_000 < p.stat().st_size < 20_000][:40]
    for f in files:
        shutil.copy(f, corpus / f.name)
    config = get_config("test")
    config.data.update(corpus_paths=[str(corpus)], include_stdlib=False, val_fraction=0.25,
                       num_shards=2)
    out = tmp_path_factory.mktemp("data")
    build(config, out, progress=False)
    return out


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Subprocess environment: 8 fake devices and a compilation cache shared by the runs."""
    return dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu",
                JAX_COMPILATION_CACHE_DIR=str(tmp_path_factory.mktemp("jax_cache")),
                JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", PYTHONPATH=str(ROOT))


def midtrain(workdir, data_dir, steps, *extra) -> list[str]:
    return [sys.executable, "-m", "composer_jax.train.midtrain", *RUN_FLAGS,
            f"--config.train.steps={steps}", f"--workdir={workdir}", f"--data_dir={data_dir}", *extra]


def train_records(workdir) -> list[dict]:
    return [r for r in read_jsonl(pathlib.Path(workdir) / "metrics.jsonl") if r["kind"] == "train"]


def runs_started(workdir) -> int:
    return sum(r["kind"] == "run" for r in read_jsonl(pathlib.Path(workdir) / "metrics.jsonl"))


def checkpoint_steps(workdir) -> list[int]:
    d = pathlib.Path(workdir) / "checkpoints"
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.exists() else []


def wait_until(proc, condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the run exited (rc {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def restore_final(workdir):
    config = get_config("test")
    config.data.update(seq_len=64, batch_size=8)
    model_cfg = ModelConfig.from_config(config.model)
    tx = make_optimizer(config.train)
    ckpt = Checkpointer(pathlib.Path(workdir) / "checkpoints", config, keep=3)
    target = abstract_train_state(model_cfg, make_mesh(dict(data=8)), tx)
    restored = ckpt.restore_latest(target)
    ckpt.close()
    return restored


@pytest.mark.slow
def test_resume_after_sigkill_and_sigterm_is_exact(tmp_path, data_dir, env):
    steps = 30
    straight, broken = tmp_path / "straight", tmp_path / "broken"
    subprocess.run(midtrain(straight, data_dir, steps), cwd=ROOT, env=env, check=True,
                   capture_output=True)

    # SIGKILL once a checkpoint exists: the run resumes from it, losing only later steps.
    proc = subprocess.Popen(midtrain(broken, data_dir, steps), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait_until(proc, lambda: checkpoint_steps(broken) and len(train_records(broken)) >= 6,
               "a checkpoint and step 6")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(train_records(broken))
    assert killed_at < steps

    # SIGTERM: the run saves a checkpoint at the step it is on, then exits 128 + 15.
    proc = subprocess.Popen(midtrain(broken, data_dir, steps), cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    resumed_from = max(checkpoint_steps(broken))
    wait_until(proc, lambda: runs_started(broken) == 2 and train_records(broken)
               and train_records(broken)[-1]["step"] >= resumed_from + 3, "progress after resuming")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    stopped_at = train_records(broken)[-1]["step"]
    assert stopped_at < steps and max(checkpoint_steps(broken)) == stopped_at

    subprocess.run(midtrain(broken, data_dir, steps), cwd=ROOT, env=env, check=True,
                   capture_output=True)

    a, b = train_records(straight), train_records(broken)
    assert [r["step"] for r in b] == list(range(1, steps + 1))  # one record per step, no repeats
    assert [r["batch_hash"] for r in b] == [r["batch_hash"] for r in a]
    assert [r["loss"] for r in b] == [r["loss"] for r in a]
    runs = [r for r in read_jsonl(broken / "metrics.jsonl") if r["kind"] == "run"]
    assert [r["resumed"] for r in runs] == [False, True, True]
    final_a, final_b = restore_final(straight), restore_final(broken)
    assert final_a.step == final_b.step == steps
    for x, y in zip(jax.tree.leaves(final_a.train_state), jax.tree.leaves(final_b.train_state),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))  # bit-identical


def test_non_finite_loss_names_the_step_and_keeps_the_last_checkpoint(tmp_path, data_dir,
                                                                      monkeypatch):
    config = small_config(steps=6)
    calls = {"n": 0}
    to_device = loop.to_device

    def poisoned(batch, sharding):  # step 3 reads a token id past the vocabulary: NaN embedding
        calls["n"] += 1  # the validation batches go to the devices first
        if calls["n"] == config.train.eval_batches + 3:
            batch = dict(batch, tokens=np.full_like(batch["tokens"], config.model.vocab_size))
        return to_device(batch, sharding)

    monkeypatch.setattr(loop, "to_device", poisoned)
    with pytest.raises(NonFiniteError, match=r"step 3: non-finite loss=nan.*checkpoint \(step 2\) is intact"):
        train(config, tmp_path, data_dir, progress=False)
    assert checkpoint_steps(tmp_path) == [1, 2]
    restored = restore_final(tmp_path)
    assert restored.step == 2
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(restored.train_state))


def test_command_line_rejects_unknown_keys_and_a_different_config(tmp_path, data_dir, env):
    out = subprocess.run(midtrain(tmp_path, data_dir, 2, "--config.train.no_such_key=1"), cwd=ROOT,
                         env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "no_such_key" in out.stderr
    train(small_config(steps=1), tmp_path, data_dir, progress=False)  # a checkpoint exists ...
    # ... so a run with other model shapes refuses to resume, naming the field.
    out = subprocess.run(midtrain(tmp_path, data_dir, 2, "--config.model.d_ff_expert=48"),
                         cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 1
    assert "model.d_ff_expert: checkpoint has 32, config has 48" in out.stderr
