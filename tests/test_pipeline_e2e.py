"""The one-command pipeline end to end at the smallest budgets: every stage runs, the report is
written, and a rerun reuses every finished stage."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SMALL = ["--config.train.steps=6", "--config.train.eval_every=3", "--config.train.eval_batches=2",
         "--config.sft.optim.steps=3", "--config.sft.demos=4", "--config.rl.steps=1",
         "--config.rl.optim.steps=1", "--config.rl.groups_per_step=1", "--config.rl.group_size=2",
         "--config.rl.max_sampling_rounds=0", "--config.rl.eval_tasks=2",
         "--config.pipeline.eval_tasks=1", "--config.sft.copy_warmup=2"]


def launch(workdir, *extra):
    env = dict(os.environ, XLA_FLAGS="")  # one CPU device, as `make run` has
    return subprocess.run([sys.executable, "launch/xm_launch.py", f"--workdir={workdir}", *SMALL, *extra],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=1800)


@pytest.mark.slow
def test_full_pipeline_writes_a_report_and_resumes(tmp_path):
    first = launch(tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    report = tmp_path / "report"
    summary = json.loads((report / "summary.json").read_text())
    assert list(summary["stages"]) == ["data", "midtrain", "sft", "rl", "eval"]
    assert set(summary["stages"]["eval"]["metrics"]) == {"BugFix", "Implement", "LongHorizon"}
    for suite in summary["stages"]["eval"]["metrics"].values():
        assert 0.0 <= suite["pass_rate"] <= 1.0 and suite["n"] == 1
    assert {"loss_curve.png", "reward_curve.png", "pass_rate_per_suite.png"} <= set(summary["plots"])
    assert "| midtrain |" in (report / "report.md").read_text()
    gain = summary["rl"]  # the SFT policy (step 0) against the RL policy on the same episodes
    assert gain["tasks"] == 2 and gain["after_step"] == 1 and 0.0 <= gain["mcnemar_p"] <= 1.0
    assert all(isinstance(s["seconds"], float) for s in summary["stages"].values())
    assert "McNemar p" in (report / "report.md").read_text()
    assert "===== segment 0" in (report / "transcript.md").read_text()  # a held-out episode, rendered

    second = launch(tmp_path)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.count("finished earlier, reusing") == 5
