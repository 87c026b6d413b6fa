"""The RL loop end to end on a toy env: determinism, exact resume, and bad input handled."""

import gymnasium as gym
import jax
import numpy as np
import pytest

from composer_jax.rl import learner as learner_lib
from composer_jax.rl import segments
from composer_jax.rl.train import run_rl
from composer_jax.train.metrics import read_jsonl
from configs.tiny import get_config

TIMING = ("rollout_s", "grade_s", "learn_s", "step_s", "wait_s", "train_s", "rollout_tokens_per_s", "learn_tokens_per_s")


class _Suite:
    def task_ids(self, split):
        return [f"toy-{split}-{i}" for i in range(6)]


class ToyEnv(gym.Env):
    """One action per episode; reward 1 if the action contains the byte 'a'. Task ids ending
    in '-5' crash on step (an env failing mid-episode); `constant` makes every reward 0."""

    def __init__(self, split="train", max_turns=1, suite_options=None):
        self.suite, self.task = _Suite(), None
        self.constant = bool((suite_options or {}).get("constant", False))
        self.observation_space = self.action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        self.task = (options or {}).get("task_id", "toy-train-0")
        return "go", {"task_id": self.task, "system_prompt": "s"}

    def step(self, action):
        if self.task.endswith("-5"):
            raise RuntimeError("sandbox died")
        reward = 0.0 if self.constant else float("a" in action)
        return "done", reward, True, False, {"tool": "submit"}


gym.register("test/Toy-v0", entry_point=ToyEnv)


def toy_config(steps=2, **rl):
    c = get_config("test")
    c.mesh.data = -1
    c.rollout.update(window=448, summary_budget=16, turn_budget=12, max_segments=2, slots=8, max_turns=1,
                     prefill_buckets=(32, 128))
    c.rl.update(**{**dict(env_id="test/Toy-v0", suite_options={}, env_max_turns=1, steps=steps, groups_per_step=2,
                          group_size=4, max_sampling_rounds=2, row_len=64, minibatch_rows=8, eval_tasks=0,
                          checkpoint_every=1), **rl})
    c.rl.optim.update(lr=1e-3, steps=steps)
    return c


def metrics_of(workdir):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in read_jsonl(workdir / "metrics.jsonl")
            if r["kind"] == "train"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    out_a = run_rl(toy_config(2), a, log=lambda s: None)
    run_rl(toy_config(1), b, log=lambda s: None)
    out_b = run_rl(toy_config(2), b, log=lambda s: None)  # resumes from b's step-1 checkpoint
    return a, b, out_a, out_b


def test_same_seed_same_metrics_and_exact_resume(runs):
    a, b, out_a, out_b = runs
    ma, mb = metrics_of(a), metrics_of(b)
    assert len(ma) == len(mb) == 2
    assert ma == mb  # step 1 from a fresh run, step 2 after a resume: identical
    assert ma[0]["usable_groups"] >= 1 and ma[0]["minibatches"] >= 1
    for x, y in zip(jax.tree.leaves(out_a["state"].params), jax.tree.leaves(out_b["state"].params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_crashing_env_is_counted_not_trained(runs):
    _, _, out_a, _ = runs
    # task 5's group crashes in every member: excluded from training, counted
    counts = out_a["counts"]
    assert counts.get("env_error_episodes", 0) % 4 == 0
    ends = [r for r in read_jsonl(runs[0] / "metrics.jsonl") if r["kind"] == "train"]
    assert all(np.isfinite(r["reward"]) for r in ends)


def test_no_usable_groups_skips_the_update(tmp_path):
    lines = []
    out = run_rl(toy_config(1, suite_options={"constant": True}), tmp_path, log=lines.append)
    m = out["metrics"]
    assert m["skipped_no_usable_groups"] == 1 and m["rows"] == 0
    step_line = next(line for line in lines if line.startswith("rl 1:"))
    assert "nothing trained" in step_line and "ends [" in step_line  # said on the console, not only counted
    assert m["zero_variance_groups"] >= 2 and m["sampling_rounds"] == 2


def test_nonfinite_update_is_skipped_then_stops(runs, tmp_path):
    c = toy_config(1, recompute_old_logp=False, max_nonfinite=1)
    from composer_jax.rl.cursor import RunCursor
    from composer_jax.rl.train import build
    run = build(c, c.rl.optim)
    lrn = learner_lib.Learner(c.rl, run.model_cfg, run.graphdef, run.tx, run.loop, RunCursor(["x"], 0), mesh=run.mesh)
    seq = segments.TrainSeq(np.arange(11, 31, dtype=np.int32), np.ones(20, np.float32),
                            np.full(20, np.nan, np.float32), 1.0)
    rows = segments.pack([seq], 64, row_multiple=8)
    before = [np.asarray(x).copy() for x in jax.tree.leaves(run.state.params)]
    with jax.set_mesh(run.mesh):
        state, m = lrn.learn(run.state, rows)
        assert m["skipped_nonfinite"] == 1
        for x, y in zip(before, jax.tree.leaves(state.params)):
            np.testing.assert_array_equal(x, np.asarray(y))
        with pytest.raises(learner_lib.NonFiniteUpdateError, match="non-finite"):
            lrn.learn(state, rows)
    run.loop.close()


def test_negative_weight_outside_0_1_is_a_config_error(tmp_path):
    from composer_jax.errors import ConfigError

    with pytest.raises(ConfigError, match=r"rl.negative_weight=1.5: must be in \[0, 1\]"):
        run_rl(toy_config(1, negative_weight=1.5), tmp_path, log=lambda s: None)
    assert not (tmp_path / "metrics.jsonl").exists()


def test_at_negative_weight_0_only_runs_above_the_baseline_are_packed():
    from composer_jax.rl.cursor import RunCursor
    from composer_jax.rl.train import build

    c = toy_config(1, negative_weight=0.0)
    run = build(c, c.rl.optim)
    lrn = learner_lib.Learner(c.rl, run.model_cfg, run.graphdef, run.tx, run.loop,
                              RunCursor([f"toy-train-{i}" for i in range(5)], 0), mesh=run.mesh)
    with jax.set_mesh(run.mesh):
        groups, *_ = lrn.collect(1)
    assert groups, "the toy policy should give some group reward variance"
    above = sum(int(r > np.mean(rs)) for _, rs in groups for r in rs)
    rows, counts = lrn.batch_rows(groups)
    assert counts["sequences"] == above  # one segment per toy episode
    assert np.all(rows.advantages[rows.loss_mask > 0] > 0)


def test_evaluations_sample_as_eval_rollout_says_and_give_training_its_sampling_back(runs):
    """`eval_rollout` (here greedy) is how evaluations sample, apart from the training rollouts'
    `rollout.temperature`; the engine's own sampling comes back after each evaluation."""
    from composer_jax.errors import ConfigError
    from composer_jax.config_schema import validate
    from composer_jax.rl.learner import evaluate
    from composer_jax.rl.train import build, eval_sampling

    c = toy_config(2)
    c.eval_rollout.temperature = 0.0
    run = build(c, None, init_from=str(runs[0] / "checkpoints"))
    ids = [f"toy-validation-{i}" for i in range(5)]
    with jax.set_mesh(run.mesh):
        greedy = [evaluate(run.loop, ids, seed=s, outcomes=True, sampling=eval_sampling(c)) for s in (1, 2)]
        sampled = [evaluate(run.loop, ids, seed=s, outcomes=True) for s in (1, 2)]
        again = evaluate(run.loop, ids, seed=1, outcomes=True, sampling=(1.0, 1.0))
    run.loop.close()
    assert greedy[0]["transcript"] == greedy[1]["transcript"]  # greedy: the seed does not matter
    assert sampled[0]["transcript"] != sampled[1]["transcript"]  # training sampling (T=1) is back
    assert again["transcript"] == sampled[0]["transcript"]
    c.eval_rollout.temperature = -1.0
    with pytest.raises(ConfigError, match=r"eval_rollout.temperature=-1.0"):
        validate(c)


def test_a_length_curriculum_moves_up_a_tier_on_the_pass_rate_and_resumes_there():
    """rl.curriculum: tasks come from the current tier; a step at the threshold promotes (the
    old tier's buffered groups dropped), the last tier stays, and the level is checkpointed."""
    from composer_jax.rl.cursor import RunCursor

    tiers = [[f"short-{i}" for i in range(3)], [f"long-{i}" for i in range(4)]]
    cursor = RunCursor(tiers[-1], 7, tiers)
    first = cursor.next_tasks(6)
    assert set(first) == set(tiers[0]) == set(first[:3])  # each epoch a permutation of the tier
    cursor.buffer = [([], [1.0])]
    assert not cursor.promote(0.79, 0.8) and cursor.level == 0
    assert cursor.promote(0.8, 0.8) and cursor.level == 1 and cursor.buffer == []
    assert set(cursor.next_tasks(4)) == set(tiers[1])
    assert not cursor.promote(1.0, 0.8)  # no tier beyond the last
    again = RunCursor(tiers[-1], 7, tiers)
    again.set_state(cursor.get_state())
    assert again.level == 1 and again.next_tasks(3) == cursor.next_tasks(3)
    plain = RunCursor(tiers[0], 7)  # no curriculum: the order of a run without one is unchanged
    assert plain.tiers == [tiers[0]] and not plain.promote(1.0, 0.5)
