"""rl_bugfix_bench's task selection and per-kind tally (the experiment itself is a benchmark)."""
import pytest

from benchmarks.rl_bugfix_bench import bench_config, by_kind, spread


def test_spread_covers_every_source():
    ids = [f"bugfix/src{s}/op-{i}" for s in range(5) for i in range(20)]  # grouped by source, as the suite
    picked = spread(ids, 10)
    assert len(picked) == len(set(picked)) == 10 and picked[0] == ids[0]
    assert {i.split("/")[1] for i in picked} == {f"src{s}" for s in range(5)}
    assert spread(ids, 500) == ids


def test_by_kind_tallies_outcomes():
    ids = ["bugfix/humaneval-1/flip_comparison-3", "bugfix/humaneval-1/off_by_one_constant-4",
           "bugfix/repo-x/flip_comparison-12"]
    out = by_kind(ids, [1, 0, 0])
    assert out == {"flip_comparison": dict(passed=1, tasks=2, pass_rate=0.5),
                   "off_by_one_constant": dict(passed=0, tasks=1, pass_rate=0.0)}
    with pytest.raises(ValueError):
        by_kind(ids, [1, 0])


def test_config_is_the_hinted_single_bug_tier():
    c = bench_config(quick=True)
    assert dict(c.rl.suite_options) == {"max_bugs": 1, "hint_line": True}  # not merged with LongHorizon's
    assert c.rl.env_id == "composer/BugFix-v0" and c.rollout.max_segments == 1
    assert c.rl.row_len >= c.rollout.window <= c.model.max_seq_len


def test_eval_base_needs_a_base():
    from benchmarks.rl_bugfix_bench import main

    with pytest.raises(SystemExit, match="no rl.init_from to evaluate"):
        main(["--quick", "--eval_base", "2", "--out", ""])
