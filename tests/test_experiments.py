"""The experiment runner (composer_jax/experiments): recipes validated as config, stages reused
only under the parts they ran with, one record schema, pooling of seeds, and the runner end to
end on the horizon recipe at toy size."""
import json
import os
import pathlib
import subprocess
import sys
import threading

import pytest

from composer_jax.config_loading import load_config
from composer_jax.errors import ConfigError
from composer_jax.experiments import pool, records
from composer_jax.experiments.config import ExperimentConfig
from composer_jax.experiments.run import check_engine_fields, first_difference, sft_config, stage

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECIPES = ["configs/rl_longhorizon.py", "configs/rl_longhorizon.py:masked,hops=2", "configs/rl_bugfix.py:drills,methods",
           "configs/rl_bugfix.py:quick,greedy", "configs/rl_horizon.py", "configs/rl_horizon.py:quick,harness",
           "configs/rl_horizon.py:greedy,no_harness,long_tasks=8", "configs/rl_horizon.py:mix",
           "configs/rl_horizon.py:mix,mix_filler,drop_key=0.05,greedy,no_harness,long_tasks=16",
           "configs/rl_horizon.py:mix,mix_filler,code,drop_key=0.05,greedy,no_harness,long_tasks=16",
           "configs/rl_horizon.py:qwen", "configs/qwen_coder_0p5b.py:bugfix", "configs/qwen_coder_0p5b.py:bugfix_h200",
           "configs/qwen_coder_0p5b.py:realrepos_cpu", "configs/qwen_coder_0p5b.py:realrepos_h200",
           "configs/rl_bugfix.py:realrepos", "configs/qwen_coder_0p5b.py:harness_cpu"]


@pytest.mark.parametrize("spec", RECIPES)
def test_every_recipe_is_a_valid_config(spec):
    from composer_jax.config_schema import validate

    c = load_config(spec)
    validate(c)
    exp = ExperimentConfig.from_config(c.experiment)
    check_engine_fields(exp)
    assert (exp.pairs or len(exp.policies) == 1) and all(exp.plays(s) for s in exp.evaluations)


def test_recipe_variants_carry_the_settings_behind_the_results():
    lh = load_config("configs/rl_longhorizon.py")  # the recorded ablation: no flag beyond the config
    assert (lh.rl.steps, lh.rl.groups_per_step * lh.rl.group_size, lh.rl.optim.lr, lh.rl.negative_weight) == (
        24, 96, 3e-4, 0.0)
    assert lh.sft.copy_warmup == 300 and lh.experiment.evaluations.validation.tasks == 128
    assert load_config("configs/rl_longhorizon.py:none").experiment.only == "none"
    drills, methods = load_config("configs/rl_bugfix.py:drills"), load_config("configs/rl_bugfix.py:drills,methods")
    assert drills.rl.suite_options.drills == 3000 and (drills.sft.demos, drills.sft.optim.steps) == (4096, 1000)
    assert methods.experiment.arms.rl.rl.suite_options.drill_source == "methods"
    assert "drill_source" not in methods.rl.suite_options  # SFT's demonstrations stay on function drills
    assert load_config("configs/rl_bugfix.py:steps=48").rl.optim.steps == 48
    assert load_config("configs/rl_bugfix.py:greedy").eval_rollout.temperature == 0.0
    with pytest.raises(ValueError, match="drills,methods"):
        load_config("configs/rl_bugfix.py:methods")
    rr = load_config("configs/rl_bugfix.py:realrepos")  # the tiny policy on RealRepos: no line hint, no RL arm
    assert rr.rl.env_id == "composer/RealRepos-v0" and dict(rr.rl.suite_options) == dict(max_bugs=1)
    assert (rr.sft.demos, rr.rl.row_len, rr.rollout.window, dict(rr.experiment.arms)) == (768, 1024, 1024, {})
    with pytest.raises(ValueError, match="realrepos"):
        load_config("configs/rl_bugfix.py:drills,realrepos")
    with pytest.raises(ValueError, match="name one arm"):
        load_config("configs/rl_longhorizon.py:trained,masked")
    hz = load_config("configs/rl_horizon.py:greedy,no_harness,long_tasks=8")
    assert hz.eval_rollout.temperature == 0.0 and "harness" not in hz.experiment.policies
    assert [hz.experiment.evaluations[f"{m}x"].tasks for m in (3, 30, 100)] == [16, 8, 8]
    with pytest.raises(ValueError, match="harness and no_harness"):
        load_config("configs/rl_horizon.py:harness,no_harness")
    h200 = load_config("configs/qwen_coder_0p5b.py:bugfix_h200")  # the recorded H200 run
    assert (h200.sft.demos, h200.sft.optim.steps, h200.rl.steps, h200.rl.groups_per_step * h200.rl.group_size,
            h200.rl.optim.lr, h200.eval_rollout.temperature) == (256, 32, 4, 64, 3e-6, 0.0)
    assert h200.experiment.evaluations.validation.tasks == 64 and h200.experiment.pairs == ("rl:sft",)
    rr = load_config("configs/qwen_coder_0p5b.py:realrepos_h200")  # the same lease cut, on RealRepos
    assert [rr[k].to_dict() for k in ("sft", "experiment")] == [h200[k].to_dict() for k in ("sft", "experiment")]
    assert (rr.rl.steps, rr.rl.optim.lr, rr.rl.env_id, dict(rr.rl.suite_options)) == (
        4, 3e-6, "composer/RealRepos-v0", dict(max_bugs=1))
    hc = load_config("configs/qwen_coder_0p5b.py:harness_cpu")  # two SFT runs apart only in whose format
    native, mixed = (sft_config(hc, hc.experiment.sft[n]) for n in ("sft_native", "sft_mixed"))
    assert (native.sft.harnesses, mixed.sft.harnesses) == (("native",), ("native", "mini_swe_agent"))
    native.sft.harnesses = mixed.sft.harnesses
    assert native.to_dict() == mixed.to_dict()
    assert hc.experiment.evaluations.mini_swe_agent.rl.harness == "mini_swe_agent" and hc.rl.harness == "native"


def test_a_bad_sft_run_is_named_before_any_stage(tmp_path):
    from composer_jax.experiments.run import run_experiment

    c = load_config("configs/qwen_coder_0p5b.py:harness_cpu")
    c.experiment.sft.sft_mixed.sft.harnesses = ("native", "bash")
    with pytest.raises(ConfigError, match=r"sft.harnesses=\('native', 'bash'\)"):
        run_experiment(c, tmp_path / "work", str(tmp_path / "out.json"), [])
    assert not (tmp_path / "work").exists()


def _exp(**changes):
    base = dict(arms=dict(trained={}), policies=dict(sft=dict(checkpoint="sft"), trained=dict(checkpoint="trained")),
                evaluations=dict(validation=dict(tasks=4)), pairs=("trained:sft",))
    return {**base, **changes}


@pytest.mark.parametrize("changes, named", [
    (dict(arms=dict(trained=dict(sft="sft_other"))), "experiment.arms.trained.sft='sft_other'"),
    (dict(arms=dict(trained=dict(lr=1.0))), "experiment.arms.trained.lr: unknown field"),
    (dict(arms=dict(trained=dict(rl="masked"))), "experiment.arms.trained.rl='masked': expected dict"),
    (dict(policies=dict(sft=dict(checkpoint="sft"), trained=dict(checkpoint="trianed"))),
     "experiment.policies.trained.checkpoint='trianed'"),
    (dict(evaluations=dict(validation=dict(tasks=-1))), "experiment.evaluations.validation.tasks=-1"),
    (dict(evaluations=dict(validation=dict(tasks="all"))), "experiment.evaluations.validation.tasks='all'"),
    (dict(evaluations=dict(validation=dict(tasks=4, policies=("rl",)))), "experiment.evaluations.validation.policies"),
    (dict(pairs=("trained-sft",)), "experiment.pairs: 'trained-sft'"),
    (dict(only="masked"), "experiment.only='masked'"),
    (dict(arm=dict()), "experiment.arm: unknown field"),
])
def test_a_bad_recipe_is_named_before_any_work(changes, named):
    with pytest.raises(ConfigError, match=named.replace("[", r"\[").replace("(", r"\(")):
        ExperimentConfig.from_config(_exp(**changes))


def test_evaluations_may_not_reshape_the_shared_engine():
    exp = ExperimentConfig.from_config(_exp(evaluations=dict(validation=dict(tasks=4, rollout=dict(window=4096)))))
    with pytest.raises(ConfigError, match="experiment.evaluations.validation.rollout.window"):
        check_engine_fields(exp)
    check_engine_fields(ExperimentConfig.from_config(_exp(evaluations=dict(
        validation=dict(tasks=4, rollout=dict(max_turns=9, max_segments=1))))))  # host-side caps are the set's own


def test_a_stage_is_reused_only_under_its_parts_and_built_once(tmp_path):
    calls = []

    def produce():
        calls.append(1)
        return dict(loss=0.5)

    parts = dict(sft=dict(optim=dict(steps=10, lr=3e-3)), model=dict(d_model=128))
    results = []
    threads = [threading.Thread(target=lambda: results.append(stage(tmp_path, "sft", parts, produce, log=lambda _: None)))
               for _ in range(3)]  # arms started side by side all need the SFT run
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(calls) == 1 and [r["result"] for r in results] == [dict(loss=0.5)] * 3
    changed = dict(parts, sft=dict(optim=dict(steps=11, lr=3e-3)))
    with pytest.raises(ConfigError, match=r"stage 'sft' finished under another config \(sft.optim.steps: 10 there, "
                                          r"11 here\)"):
        stage(tmp_path, "sft", changed, produce, log=lambda _: None)
    assert len(calls) == 1 and json.loads((tmp_path / "stages" / "sft.json").read_text())["result"] == dict(loss=0.5)

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stage(tmp_path, "arm", parts, interrupted, log=lambda _: None)
    with pytest.raises(ConfigError, match=r"stage 'arm' began under another config \(sft.optim.steps"):
        stage(tmp_path, "arm", changed, produce, log=lambda _: None)  # would resume the other config's checkpoints
    assert stage(tmp_path, "arm", parts, produce, log=lambda _: None)["result"] == dict(loss=0.5)


def test_first_difference_names_the_dotted_key():
    assert first_difference(dict(a=dict(b=1, c=2)), dict(a=dict(b=1, c=3))) == "a.c: 2 there, 3 here"
    assert first_difference(dict(a=1), dict(a=1, z=0)) == "z: '<absent>' there, 0 here"
    assert first_difference(dict(a=1), dict(a=1)) == ""


def _record(seed, outcomes: dict, lr=3e-4):
    config = dict(seed=seed, rl=dict(optim=dict(lr=lr)),
                  experiment=dict(pairs=["trained:sft"], only="", policies=dict(sft={}, trained={})))
    policies = {name: dict(passed=p, passes=sum(p), n=len(p), pass_rate=sum(p) / len(p), reward=sum(p) / len(p))
                for name, p in outcomes.items()}
    evaluations = dict(validation=dict(x=0.0, tasks=len(outcomes["sft"]), expert_windows=None, policies=policies))
    return dict(experiment="rl_x", seeds=[seed], command="python -m composer_jax.experiments.run ...", config=config,
                evaluations=evaluations, paired=records.paired(evaluations, ["trained:sft"]))


def test_pooling_pairs_episodes_across_seeds_and_refuses_what_is_not_one_recipe(tmp_path):
    a = _record(0, dict(sft=[1, 0, 0, 0], trained=[1, 1, 1, 0]))
    b = _record(1, dict(sft=[0, 1, 0, 0], trained=[0, 1, 0, 1]))
    out = pool.pool({"a.json": a, "b.json": b})
    trained = out["evaluations"]["validation"]["policies"]["trained"]
    assert out["seeds"] == [0, 1] and (trained["passes"], trained["n"]) == (5, 8)
    assert [s["seed"] for s in trained["per_seed"]] == [0, 1] and trained["reward"] == pytest.approx(5 / 8)
    assert out["paired"]["validation"]["trained_vs_sft"] == dict(both=2, only_a=3, only_b=0, neither=3, p_value=0.25)
    assert out["series"]["pass_rate"]["trained"] == [5 / 8]
    # issue #26's schema at the top level: one value per horizon and arm
    assert out["horizons"] == [0.0] and out["tasks_per_point"] == [4] and out["pass_rate"] == dict(sft=[1 / 4], trained=[5 / 8])
    for rec in (a, b):  # three sets whose names sort otherwise than their x, as on disk
        rec["evaluations"] = {name: dict(rec["evaluations"]["validation"], x=x)
                              for name, x in (("100x", 100.0), ("10x", 10.0), ("3x", 3.0))}
    assert pool.pool({"a.json": a, "b.json": b})["series"]["sets"] == ["3x", "10x", "100x"]
    for name, rec in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(rec))
    pool.main([str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(tmp_path / "ab.json")])
    assert json.loads((tmp_path / "ab.json").read_text())["seeds"] == [0, 1]
    assert (tmp_path / "ab.png").stat().st_size > 10_000  # the pooled curve, plotted beside the record
    with pytest.raises(pool.PoolError, match="seeds .* repeat"):
        pool.pool({"a.json": a, "c.json": _record(0, dict(sft=[0] * 4, trained=[0] * 4))})
    with pytest.raises(pool.PoolError, match=r"b.json ran another recipe than a.json: rl.optim.lr: 0.0003 there, 0.001 here"):
        pool.pool({"a.json": a, "b.json": _record(1, dict(sft=[0] * 4, trained=[0] * 4), lr=1e-3)})
    other = tmp_path / "old.json"
    other.write_text('{"ablation": {}}')
    with pytest.raises(pool.PoolError, match="old.json is not an experiment record"):
        pool.read([str(other)])
    with pytest.raises(SystemExit, match="cannot read result file .*missing.json"):
        pool.main([str(tmp_path / "missing.json"), str(other), "--out", str(tmp_path / "p.json")])
    assert not (tmp_path / "p.json").exists()


def test_suites_pick_representative_tasks(monkeypatch):
    from environments import experts
    from environments.suites.base import TaskSuite
    from environments.suites.longhorizon import LongHorizonOptions, LongHorizonSuite

    class Grouped(TaskSuite):
        name = "Grouped"

        def task_ids(self, split):
            return [f"g/src{s}/op-{i}" for s in range(5) for i in range(20)]

        def get(self, task_id):
            raise NotImplementedError

    picked = Grouped().sample_ids("validation", 10)
    assert len(set(picked)) == 10 and {t.split("/")[1] for t in picked} == {f"src{s}" for s in range(5)}
    assert Grouped().sample_ids("validation", 0) == Grouped().sample_ids("validation", 500) == Grouped().task_ids("x")
    # The tokenizer's corpus too (RealRepos' train ids come by package: its first 64 are all boltons)
    played = []
    monkeypatch.setattr(experts, "run_plan", lambda env, task_id: played.append(task_id)
                        or experts.Transcript(task_id, "fix it", "tools", [("", "submit")], "done", 0.0, {}))
    assert len(Grouped().tokenizer_texts(None, 10)) == 10 and played == Grouped().sample_ids("train", 10)
    lh = LongHorizonSuite(LongHorizonOptions(hops=2, filler_lines=1))
    assert lh.sample_ids("validation", 3) == lh.task_ids("validation")[:3]  # independent draws: the first n


@pytest.mark.slow
def test_bugfix_tokenizer_texts_leave_drills_out():
    """Runs with and without drills share the tokenizer (and so the copy warm-up trained on it)."""
    from environments.suites import make_suite

    plain, drills = make_suite("BugFix", max_bugs=1, hint_line=True), make_suite("BugFix", max_bugs=1, hint_line=True,
                                                                                 drills=200)
    texts = plain.tokenizer_texts(None, 40)
    assert texts == drills.tokenizer_texts(None, 40) and len(texts) == 40
    assert all("edit_file" in t and "submit" in t for t in texts)  # the expert's actions


TOY = ["--config.sft.demos=8", "--config.sft.optim.steps=4", "--config.sft.copy_warmup=4", "--config.rl.steps=1",
       "--config.rl.optim.steps=1", "--config.rl.groups_per_step=1", "--config.experiment.evaluations.1x.tasks=2",
       "--config.experiment.evaluations.3x.tasks=1"]


@pytest.mark.slow
def test_the_runner_trains_arms_side_by_side_then_pairs_every_policy_on_every_set(tmp_path):
    """The horizon recipe at toy size, as a user runs it (its own process, one CPU device). One
    arm alone (`:trained`): SFT and that arm, no record. Then the whole recipe reuses them,
    trains the rest (a second SFT run under harness compaction for the harness arm) and
    evaluates every policy on the same held-out episodes of two horizons. A rerun trains and
    evaluates nothing again."""
    work, out = tmp_path / "w", tmp_path / "horizon.json"

    def run(variant):
        subprocess.run([sys.executable, "-m", "composer_jax.experiments.run", "--config", f"configs/rl_horizon.py:{variant}",
                        "--workdir", str(work), "--out", str(out), *TOY], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL, env=dict(os.environ, XLA_FLAGS=""))

    run("quick,trained")
    assert {p.stem for p in (work / "stages").glob("*.json")} == {"tokenizer", "sft", "trained"} and not out.exists()
    built = [work / "stages" / "sft.json", work / "stages" / "trained.json"]
    stamps = [p.stat().st_mtime_ns for p in built]
    run("quick")
    rec = json.loads(out.read_text())
    assert [p.stat().st_mtime_ns for p in built] == stamps  # reused, not retrained
    assert set(rec["training"]) == {"sft", "sft_harness", "trained", "masked", "harness"} and rec["seeds"] == [0]
    # the recipe as written (so two seeds' workdirs pool), and the tokenizer it built
    assert rec["config"]["rl"]["tokenizer"] == "" and rec["tokenizer"] == str(work / "tokenizer.json")
    s = rec["series"]
    assert s["sets"] == ["1x", "3x"] and s["tasks_per_point"] == [2, 1] and s["x"] == [1, 3]
    assert all(w > 1 for w in s["expert_windows"])  # the expert's transcripts, in windows (resets at half the window)
    assert set(s["pass_rate"]) == {"trained", "masked", "harness", "none", "sft"}
    assert s["resets_per_episode"]["none"] == [0.0, 0.0]  # one context: no summary, no reset
    assert all(t is None or t <= 64 for t in s["compaction_tokens"]["harness"])  # the summary budget
    # issue #26's `horizon.json` keys: per arm one value per window multiple, from the evaluations
    assert rec["horizons"] == [1, 3] and rec["tasks_per_point"] == [2, 1]
    for key, per_policy in (("pass_rate", "pass_rate"), ("compaction_error", "compaction_error"),
                            ("summary_tokens", "compaction_tokens")):
        assert rec[key] == {p: [rec["evaluations"][x]["policies"][p].get(per_policy) for x in ("1x", "3x")]
                            for p in ("trained", "masked", "harness", "none", "sft")}
    for set_name in ("1x", "3x"):
        assert set(rec["paired"][set_name]) == {f"trained_vs_{p}" for p in ("masked", "harness", "none", "sft")}
        policies = rec["evaluations"][set_name]["policies"]
        assert {len(p["passed"]) for p in policies.values()} == {rec["evaluations"][set_name]["tasks"]}
    assert out.with_suffix(".png").stat().st_size > 10_000

    evals = sorted((work / "evals").rglob("*.json"))
    stamps = [p.stat().st_mtime_ns for p in evals]
    run("quick")
    assert [p.stat().st_mtime_ns for p in evals] == stamps
    assert json.loads(out.read_text())["evaluations"] == rec["evaluations"]
