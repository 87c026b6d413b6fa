"""Launcher: cloud job specs without a cloud, stage ordering, resumable stage markers."""
import json
import pathlib
import subprocess
import sys

import pytest

from composer_jax.errors import ConfigError
from composer_jax.launch import stages
from composer_jax.tools.hardware import parse_slice

REPO = pathlib.Path(__file__).resolve().parents[1]


def launch(*args):
    return subprocess.run([sys.executable, "launch/xm_launch.py", *args], capture_output=True,
                          text=True, cwd=REPO)


def test_vertex_dry_run_prints_the_tpu_job_spec():
    out = launch("--launch_mode=vertex", "--dry_run", "--config=configs/kimi_k2_5.py",
                 "--config.train.steps=10")
    assert out.returncode == 0, out.stderr
    specs = json.loads(out.stdout)
    assert [s["stages"] for s in specs] == [[name] for name in stages.STAGES]
    spec = specs[0]
    assert spec["accelerator"]["topology"] == "8x8x8" and spec["accelerator"]["chips"] == 512
    assert "--config=configs/kimi_k2_5.py" in spec["command"]
    assert "--config.train.steps=10" in spec["command"]
    assert spec["env"]["COMPOSER_JAX_DISTRIBUTED"] == "1"
    assert "xmanager" not in sys.modules  # nothing cloud-side was imported here either


@pytest.mark.parametrize("args, message", [
    (["--launch_mode=aws", "--dry_run"], "unknown; use one of local, vertex, gke"),
    (["--stages=nope"], "unknown stage 'nope'"),
    (["--launch_mode=gke", "--dry_run", "--config.launch.slice=v5p-3"], "unknown slice" ),
])
def test_bad_launch_arguments_fail_before_any_work(args, message, tmp_path):
    out = launch(*args, f"--workdir={tmp_path}")
    assert out.returncode != 0
    assert message in out.stderr or "powers of two" in out.stderr or "cores per chip" in out.stderr
    assert not any(tmp_path.iterdir())


def test_missing_stage_dependency_is_refused(tmp_path):
    out = launch("--stages=midtrain", f"--workdir={tmp_path}")
    assert out.returncode != 0 and "needs the output of stage 'data'" in out.stderr


def test_slice_topologies():
    assert parse_slice("v5p-1024").topology == "8x8x8"
    assert parse_slice("v6e-256").topology == "16x16"
    assert parse_slice("v5e-8").topology == "2x4"
    with pytest.raises(ConfigError):
        parse_slice("v5p-96")


def test_finished_stages_are_reused_and_markers_are_atomic(tmp_path, monkeypatch):
    calls = []

    def make(name):
        def run(config, workdir):
            calls.append(name)
            if name == "b" and len(calls) == 2:
                raise RuntimeError("preempted")
            return {"value": len(calls)}
        return run

    monkeypatch.setattr(stages, "STAGES", {
        "a": stages.Stage("a", (), make("a"), "first"),
        "b": stages.Stage("b", ("a",), make("b"), "second"),
    })
    with pytest.raises(RuntimeError):
        stages.run_stages(None, tmp_path, log=lambda _: None)
    assert stages.marker(tmp_path, "a").exists() and not stages.marker(tmp_path, "b").exists()
    records = stages.run_stages(None, tmp_path, log=lambda _: None)
    assert calls == ["a", "b", "b"]  # `a` was not redone
    assert records["a"]["metrics"] == {"value": 1} and records["b"]["metrics"] == {"value": 3}
    stages.run_stages(None, tmp_path, ["b"], log=lambda _: None)  # `a` finished: allowed
    assert calls == ["a", "b", "b"]


def test_a_stage_finished_under_another_config_is_refused_and_kept(tmp_path, monkeypatch):
    """Reusing it would pass one config's outputs off as another's (e.g. an old `make run`)."""
    from configs.tiny import get_config

    monkeypatch.setattr(stages, "STAGES", {"a": stages.Stage("a", (), lambda c, w: {"lr": c.train.lr}, "first")})
    config = get_config("test")
    stages.run_stages(config, tmp_path, log=lambda _: None)
    before = stages.marker(tmp_path, "a").read_text()
    assert stages.run_stages(config, tmp_path, log=lambda _: None)["a"]["metrics"] == {"lr": config.train.lr}
    config.train.lr = 1e-4
    with pytest.raises(ConfigError, match="stage 'a' finished under a different config"):
        stages.run_stages(config, tmp_path, log=lambda _: None)
    assert stages.marker(tmp_path, "a").read_text() == before
