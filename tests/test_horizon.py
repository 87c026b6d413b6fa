"""The long-horizon experiment: its tiers, and its runner end to end at toy size."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from composer_jax.config_loading import load_config
from composer_jax.rl.config import validate

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_tier_caps_follow_the_longest_chain_trained_or_evaluated():
    from configs.rl_horizon import HORIZONS, tier

    c = load_config("configs/rl_horizon.py")
    validate(c)
    longest_curriculum = max(t["hops"] for t in c.rl.curriculum)
    assert c.rl.suite_options.carry == "registers" and c.rollout.max_segments == max(c.rl.suite_options.hops, longest_curriculum) + 4
    hops, filler = HORIZONS[100]
    long = tier(load_config("configs/rl_horizon.py"), hops, filler)
    assert (long.rl.suite_options.hops, long.rl.suite_options.filler_lines) == (hops, filler)
    assert long.rl.env_max_turns == long.rollout.max_turns == long.rollout.max_segments == hops + 4
    validate(long)
    assert [h for h, _ in HORIZONS.values()] == sorted(h for h, _ in HORIZONS.values())


@pytest.mark.slow
def test_the_horizon_runner_trains_its_arms_and_pairs_them_on_every_horizon(tmp_path):
    """quick: SFT, two 2-step RL arms (trained, harness), then every arm on the same held-out
    tasks of two tiers; the record has one value per arm and horizon and the paired tests."""
    out = tmp_path / "horizon.json"

    def run(*args):  # as a user runs it: its own process, one CPU device (no fake mesh)
        subprocess.run([sys.executable, "-m", "composer_jax.experiments.horizon", "--config",
                        "configs/rl_horizon.py:quick", "--workdir", str(tmp_path / "w"), "--out", str(out), *args],
                       check=True, env=dict(os.environ, XLA_FLAGS=""), cwd=ROOT, stdout=subprocess.DEVNULL)

    run("--horizons", "1", "--tasks", "2", "--arms", "trained,harness,none,sft")
    r = json.loads(out.read_text())
    assert r["horizons"] == [1] and r["tasks_per_point"] == [2] and r["seeds"] == [0]
    assert r["measured_windows"][0] > 1  # the expert's transcripts, in windows (resets at half the window)
    for key in ("pass_rate", "compaction_error", "summary_tokens", "transcript_tokens", "resets"):
        assert set(r[key]) == {"trained", "harness", "none", "sft"} and all(len(v) == 1 for v in r[key].values())
    assert r["resets"]["none"] == [0.0]  # one context: no summary, no reset
    assert all(t is None or t <= 64 for t in r["summary_tokens"]["harness"])  # the summary budget
    assert set(r["paired"]["1"]) == {"trained_vs_harness", "trained_vs_none", "trained_vs_sft"}
    assert {"sft", "sft_harness", "trained", "harness"} <= set(r["training"]) and "rollout" in r["config"]
    assert (tmp_path / "horizon.png").stat().st_size > 10_000
    # A rerun reuses the SFT runs, the finished arms and the finished evaluations.
    done = [tmp_path / "w" / "trained" / "summary.json", *(tmp_path / "w" / "evals").glob("*.json")]
    stamps = [f.stat().st_mtime_ns for f in done]
    run("--horizons", "1", "--tasks", "2", "--arms", "trained,none")
    assert [f.stat().st_mtime_ns for f in done] == stamps and json.loads(out.read_text())["passes"]["trained"] == r[
        "passes"]["trained"]
