"""`experiments.longhorizon --combine` joins arms run in separate processes only when their budgets and
evaluation match: a mismatch stops with the offending file named, before any evaluation."""
import pytest

from composer_jax.experiments.longhorizon import (check_combinable, known_final_evals, paired_comparisons, pool_seeds,
                                  read_records, record_seed)


def _record(lr=3e-4, negative_weight=0.0, episodes=96, eval_tasks=32, **seed_fields):
    return dict(episodes_per_step=episodes, eval_tasks=eval_tasks,
                config=dict(rl=dict(optim=dict(lr=lr), negative_weight=negative_weight)),
                argv=dict(set=["rl.negative_weight=0.0"]), **seed_fields)


def test_matching_records_combine():
    check_combinable({"a.json": _record(seed=1), "b.json": _record(seed=1)}, seed=1)


@pytest.mark.parametrize("field", ["lr", "negative_weight", "episodes", "eval_tasks"])
def test_a_different_budget_is_refused_naming_the_file(field):
    other = _record(**{field: 2})
    with pytest.raises(SystemExit, match="b.json ran with"):
        check_combinable({"a.json": _record(seed=0), "b.json": dict(other, seed=0)}, seed=0)


def test_a_different_seed_is_refused_with_the_flag_to_pass():
    with pytest.raises(SystemExit, match=r"b.json ran with seed 1.*--config.seed=1"):
        check_combinable({"a.json": _record(seed=0), "b.json": _record(seed=1)}, seed=0)


def test_seed_of_records_written_before_the_field():
    old = _record()
    assert record_seed(old) == 0  # the config's default
    old["argv"]["set"].append("seed=3")
    assert record_seed(old) == 3
    with pytest.raises(SystemExit, match="seed 3"):
        check_combinable({"old.json": old}, seed=0)


def test_final_evaluations_are_reused_only_for_final_checkpoints():
    first = dict(_record(), ablation={"trained_summary": {}},
                 final_eval={"tasks": 128, "sft": {"pass_rate": 0.1}, "trained_summary": {"pass_rate": 0.2}})
    resumed = dict(_record(), ablation={"trained_summary": {}})  # no final_eval: step-12 policy's is stale
    masked = dict(_record(), ablation={"masked_summary": {}},
                  final_eval={"tasks": 128, "sft": {"pass_rate": 0.1}, "masked_summary": {"pass_rate": 0.3}})
    known = known_final_evals({"t12.json": first, "t24.json": resumed, "m.json": masked})
    assert set(known) == {"sft", "masked_summary"}
    assert known["masked_summary"] == {"pass_rate": 0.3, "tasks": 128, "from_file": "m.json"}


def _evaluated(seed, sft, trained, masked):
    fe = {"tasks": len(sft), "sft": {"passed": sft}, "trained_summary": {"passed": trained},
          "masked_summary": {"passed": masked}}
    return dict(_record(seed=seed), final_eval=fe)


def test_paired_comparisons_pair_each_arm_with_its_own_baseline():
    fe = _evaluated(0, [0, 0, 1, 0], [1, 1, 1, 0], [0, 1, 0, 0])["final_eval"]
    fe["sft/no_summary"], fe["no_summary"] = {"passed": [0] * 4}, {"passed": [0] * 4}
    paired = paired_comparisons(fe)
    assert (paired["trained_summary_vs_sft"]["only_a"], paired["trained_summary_vs_sft"]["only_b"]) == (2, 0)
    assert (paired["trained_vs_masked"]["only_a"], paired["trained_vs_masked"]["only_b"]) == (2, 0)
    assert paired["no_summary_vs_sft"]["neither"] == 4


def test_pooling_seeds_concatenates_episodes_and_refuses_repeats():
    a = _evaluated(0, [0, 1], [1, 1], [0, 1])
    b = _evaluated(1, [0, 0], [1, 0], [0, 0])
    pooled = pool_seeds({"s0.json": a, "s1.json": b})
    assert pooled["seeds"] == [0, 1]
    assert (pooled["trained_summary"]["passes"], pooled["trained_summary"]["n"]) == (3, 4)
    assert pooled["paired"]["trained_vs_masked"]["only_a"] == 2
    with pytest.raises(SystemExit, match="repeat"):
        pool_seeds({"s0.json": a, "again.json": _evaluated(0, [0, 1], [1, 1], [0, 1])})
    with pytest.raises(SystemExit, match="per-episode outcomes"):
        pool_seeds({"s0.json": a, "old.json": dict(_record(seed=2), final_eval={"tasks": 2, "sft": {}})})


def test_pooling_refuses_a_different_budget():
    a = _evaluated(0, [0, 1], [1, 1], [0, 1])
    other = dict(_evaluated(1, [0, 0], [1, 0], [0, 0]), episodes_per_step=24)
    with pytest.raises(SystemExit, match="--pool: s1.json ran with"):
        pool_seeds({"s0.json": a, "s1.json": other})


def test_an_unreadable_result_file_is_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit, match="--pool: cannot read result file .*bad.json"):
        read_records([str(bad)], "--pool")
    with pytest.raises(SystemExit, match="--combine: cannot read result file .*missing.json"):
        read_records([str(tmp_path / "missing.json")], "--combine")
