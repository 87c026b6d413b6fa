"""The real RL learner under the fleet schedulers: sync and async with max_lag=0 reproduce
Learner.step exactly; async with max_lag=1 overlaps a collect with an update and trains."""
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from composer_jax.errors import ConfigError
from composer_jax.fleet import FleetConfig
from composer_jax.fleet.learner_bridge import run_learner
from composer_jax.rl.learner import Learner, full_state
from composer_jax.rl.cursor import RunCursor
from composer_jax.rl.train import build
from configs.tiny import get_config

TASKS = [f"toy-{i}" for i in range(6)]


class _Suite:
    def task_ids(self, split):
        return TASKS


class PickA(gym.Env):
    """One action per episode; reward 1 if it contains the byte 'a'."""

    def __init__(self, split="train", max_turns=1, suite_options=None):
        self.suite = _Suite()
        self.observation_space = self.action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        return "go", {"task_id": (options or {}).get("task_id", TASKS[0]), "system_prompt": "s"}

    def step(self, action):
        return "done", float("a" in action), True, False, {"tool": "submit"}


gym.register("test/FleetPickA-v0", entry_point=PickA)


@pytest.fixture(scope="module")
def setup():
    c = get_config("test")
    c.rollout.update(window=448, summary_budget=16, turn_budget=12, max_segments=2, slots=8, max_turns=1,
                     prefill_buckets=(32, 128))
    c.rl.update(env_id="test/FleetPickA-v0", suite_options={}, env_max_turns=1, groups_per_step=2,
                group_size=4, max_sampling_rounds=2, row_len=64, minibatch_rows=8, eval_tasks=0)
    run = build(c, c.rl.optim)
    learner = Learner(c.rl, run.model_cfg, run.graphdef, run.tx, run.loop, RunCursor(TASKS, 0), mesh=run.mesh)
    yield run, learner
    run.loop.close()


def fresh(run, learner):
    learner.cursor = RunCursor(TASKS, 0)
    state = jax.tree.map(jnp.copy, run.state)
    learner.loop.engine.set_params(full_state(state))
    return state


def leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves(state.params)]


def test_schedulers_reproduce_the_learner_and_async_overlaps(setup):
    run, learner = setup
    with jax.set_mesh(run.mesh):
        state = fresh(run, learner)
        native = []
        for step in (1, 2):
            result = learner.step(step, state)
            state, native = result.state, native + [result.metrics]
        expected = leaves(state)
        for mode in ("sync", "async"):
            state, hist = run_learner(learner, fresh(run, learner), steps=2,
                                      cfg=FleetConfig(rl_mode=mode, max_lag=0))
            for x, y in zip(leaves(state), expected, strict=True):
                np.testing.assert_array_equal(x, y)
            assert [h["reward"] for h in hist] == [m["reward"] for m in native]
            assert [h["pg_loss"] for h in hist] == [m["pg_loss"] for m in native]
        state, hist = run_learner(learner, fresh(run, learner), steps=3, cfg=FleetConfig(rl_mode="async", max_lag=1))
    assert [h["lag_max"] for h in hist][1:] == [1.0, 1.0]  # step t+1's rollouts came from policy t
    assert all(np.isfinite(h["pg_loss"]) for h in hist if "pg_loss" in h)
    assert any(np.any(x != y) for x, y in zip(leaves(state), expected, strict=True))


def test_async_without_recomputed_old_logp_is_refused(setup):
    run, _ = setup
    c_bad = get_config("test")
    c_bad.rl.recompute_old_logp = False
    stale = Learner(c_bad.rl, run.model_cfg, run.graphdef, run.tx, run.loop, RunCursor(TASKS, 0), mesh=run.mesh)
    with pytest.raises(ConfigError, match="recompute_old_logp"):
        run_learner(stale, run.state, steps=1, cfg=FleetConfig(rl_mode="async"))
