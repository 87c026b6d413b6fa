"""experiments.bugfix's task selection and per-kind tally (the experiment itself is a benchmark)."""
import pytest

from composer_jax.experiments.bugfix import bench_config, by_kind, spread


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
    from composer_jax.experiments.bugfix import main

    with pytest.raises(SystemExit, match="no rl.init_from to evaluate"):
        main(["--quick", "--eval_base", "2", "--out", ""])


def test_drills_leave_the_tokenizer_unchanged(tmp_path):
    """Runs with and without drills share the tokenizer (and so the copy warm-up trained on it)."""
    from composer_jax.experiments.bugfix import train_tokenizer

    c = bench_config(quick=True)
    train_tokenizer(c, tmp_path / "plain.json")
    c.rl.suite_options = dict(c.rl.suite_options, drills=200)
    train_tokenizer(c, tmp_path / "drills.json")
    assert (tmp_path / "plain.json").read_bytes() == (tmp_path / "drills.json").read_bytes()


def _record(seed, sft, rl, steps=24, **rl_fields):
    from composer_jax.rl.learner import mcnemar

    return dict(seed=seed, suite_options={"max_bugs": 1}, validation_tasks=len(sft),
                rl=dict(steps=steps, episodes_per_step=96, lr=3e-4, negative_weight=0.0, **rl_fields),
                before_rl_pass_rate=sum(sft) / len(sft), after_rl_pass_rate=sum(rl) / len(rl),
                paired_rl_vs_sft=mcnemar(rl, sft), final_eval=dict(sft=dict(passed=sft), rl=dict(passed=rl)))


def test_pool_seeds_pairs_episodes_across_runs():
    from composer_jax.experiments.bugfix import pool_seeds

    a, b = _record(0, [1, 0, 0, 0], [1, 1, 1, 0]), _record(1, [0, 1, 0, 0], [0, 1, 0, 1])
    out = pool_seeds({"a.json": a, "b.json": b})
    assert out["sft"]["passes"] == 2 and out["rl"]["passes"] == 5 and out["rl"]["n"] == 8
    assert out["paired_rl_vs_sft"] == dict(both=2, only_a=3, only_b=0, neither=3, p_value=0.25)
    assert [s["seed"] for s in out["per_seed"]] == [0, 1]
    with pytest.raises(SystemExit, match="seeds .* repeat"):
        pool_seeds({"a.json": a, "c.json": _record(0, [0] * 4, [0] * 4)})
    with pytest.raises(SystemExit, match="b.json ran with"):
        pool_seeds({"a.json": a, "b.json": _record(1, [0] * 4, [0] * 4, steps=12)})
    # RL on method drills is another experiment than RL on SFT's own suite
    methods = _record(1, [0] * 4, [0] * 4, suite_options={"max_bugs": 1, "drill_source": "methods"})
    with pytest.raises(SystemExit, match="b.json ran with"):
        pool_seeds({"a.json": a, "b.json": methods})


def test_bad_pool_and_drills_input_are_clear_errors(tmp_path, capsys):
    from composer_jax.experiments.bugfix import main

    other = tmp_path / "rl_tiny.json"
    other.write_text('{"ablation": {}}')
    with pytest.raises(SystemExit, match="rl_tiny.json is not an experiments.bugfix result"):
        main(["--pool", str(other), "--out", str(tmp_path / "p.json")])
    with pytest.raises(SystemExit):
        main(["--drills", "-3", "--quick", "--out", ""])
    with pytest.raises(SystemExit):
        main(["--rl_drill_source", "methods", "--quick", "--out", ""])
    assert "--rl_drill_source needs --drills N" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists()


def test_eval_checkpoints_pairs_every_policy_with_the_first(tmp_path, monkeypatch):
    """--eval: policies on the same validation episodes, each compared with the first (the
    engine's evaluation itself is tested with the RL loop)."""
    import json

    from composer_jax.experiments import bugfix as bench
    from composer_jax.rl import train

    outcomes = {"sft": [1, 0, 0, 0], "rl": [1, 1, 1, 0]}
    monkeypatch.setattr(train, "task_ids", lambda rl_cfg, split: [f"bugfix/s/op-{i}" for i in range(4)])
    monkeypatch.setattr(bench, "final_eval", lambda c, policies, ids: {
        name: dict(passed=outcomes[name], pass_rate=sum(outcomes[name]) / len(ids)) for name in policies})
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    with pytest.raises(SystemExit, match="rl.tokenizer='' is not a file"):  # byte-level would run, garbled
        bench.main(["--quick", "--eval", f"sft={tmp_path / 'a'}", "--out", str(tmp_path / "bad.json")])
    (tmp_path / "tokenizer.json").write_text("{}")
    tok = [f"--config.rl.tokenizer={tmp_path / 'tokenizer.json'}"]
    out = tmp_path / "eval.json"
    bench.main(["--quick", "--eval", f"sft={tmp_path / 'a'}", f"rl={tmp_path / 'b'}", "--config.eval_rollout.temperature=0.0",
                *tok, "--out", str(out)])
    rec = json.loads(out.read_text())
    assert rec["temperature"] == 0.0 and rec["validation_tasks"] == 4 and rec["pass_rates"] == {"sft": 0.25, "rl": 0.75}
    assert rec["paired_vs_first"]["rl"] == dict(both=1, only_a=2, only_b=0, neither=1, p_value=0.5)
    for bad in ([f"sft={tmp_path / 'missing'}"], [f"sft={tmp_path / 'a'}", f"sft={tmp_path / 'b'}"], ["sft"]):
        with pytest.raises(SystemExit, match="expected a new NAME=CHECKPOINTS_DIR"):
            bench.main(["--quick", "--eval", *bad, *tok, "--out", str(tmp_path / "bad.json")])
    assert not (tmp_path / "bad.json").exists()
