"""RL through a third-party harness: mini-swe-agent (PyPI 2.4.6, its own venv) drives the tiny
policy through the OpenAI endpoint on a BugFix task; its commands run in our sandbox, our grader
scores the workspace, and the recorded sessions feed one learner update whose recomputed
log-probs equal the sampler's."""
from __future__ import annotations

import base64
import json
import pathlib

import jax
import numpy as np
import pytest

from composer_jax.config_loading import load_config
from composer_jax.harness.protocol import format_tool_call
from composer_jax.model.config import ModelConfig
from composer_jax.rl import sft, train
from composer_jax.rl.cursor import RunCursor
from composer_jax.rl.envs import local_factory, task_ids
from composer_jax.rl.harness_loop import HarnessLoop
from composer_jax.rl.learner import Learner, full_state
from environments.experts import shell_plan
from environments.suites import make_suite
from scripted_engine import ScriptedEngine  # tests/scripted_engine.py

pytestmark = pytest.mark.slow
OVERRIDES = ["rollout.window=8192", "rollout.turn_budget=2048", "rollout.summary_budget=128", "rollout.slots=8",
             "rollout.prefill_buckets=(64, 1024)", "rl.env_id=composer/BugFix-v0", "rl.suite_options={}",
             "rl.harness=mini_swe_agent", "rl.env_max_turns=4", "rl.row_len=4096", "rl.minibatch_rows=8"]
SHORT = pathlib.Path(__file__).with_name("mini_swe_agent_short.yaml")  # fits the byte-level window


def fix_command(task) -> str:
    """A shell command that writes the task's reference files (what a correct agent's edit does)."""
    files = json.loads(task.metadata["reference_files"])
    blob = base64.b64encode(json.dumps(files).encode()).decode()
    return ("python -c \"import base64,json,pathlib;[pathlib.Path(p).write_text(c) for p,c in "
            f"json.loads(base64.b64decode('{blob}')).items()]\"")


def test_mini_swe_agent_sessions_are_graded_and_trained():
    config = load_config("configs/tiny.py:test", OVERRIDES)
    run = train.build(config, config.rl.optim, make_env=local_factory(config.rl, "validation"))
    assert isinstance(run.loop, HarnessLoop)  # rl.harness reaches the loop rl.train builds
    run.loop.close()
    policy = HarnessLoop(run.engine, run.tokenizer, run.engine.rollout, local_factory(config.rl, "validation"),
                         step_limit=4, config=SHORT)
    task_id = task_ids(config.rl, "validation")[0]
    task = make_suite("BugFix").get(task_id)
    tok = run.tokenizer
    solve = [tok.encode_with_specials("fixing" + format_tool_call("bash", command=c)) for c in
             (fix_command(task), "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
    expert = HarnessLoop(ScriptedEngine(run.engine, solve), tok, run.engine.rollout,
                         local_factory(config.rl, "validation"), step_limit=4, config=SHORT)
    try:
        (solved,) = expert.run([{"options": {"task_id": task_id}}])
        (random_,) = policy.run([{"options": {"task_id": task_id}}])
    finally:
        expert.close()
        policy.close()
    assert solved.reward == 1.0 and solved.info["harness_exit"] == "Submitted"
    assert solved.info["harness_commands"] == 2 and solved.turns == 2
    assert len(solved.segments) == 1  # the second request continued the first's recorded ids
    assert random_.reward == 0.0 and random_.turns >= 1
    # One update on the group: the learner's log-probs of the sampled tokens are the sampler's.
    with jax.set_mesh(run.mesh):
        learner = Learner(config.rl, run.model_cfg, run.graphdef, run.tx, policy, RunCursor([task_id], 0),
                          mesh=run.mesh)
        before = jax.tree.map(np.array, full_state(run.state))  # copies: the update donates the state
        result = learner.train_on(run.state, ([([solved, random_], [1.0, 0.0])], [solved, random_], {}))
    m = result.metrics
    assert m["minibatches"] >= 1 and np.isfinite(m["loss"]) and m["skipped_nonfinite"] == 0
    assert m["max_abs_logp_diff"] < 1e-5
    after = jax.tree.map(np.asarray, full_state(result.state))
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)))


def test_expert_demonstrations_in_mini_swe_agent_format_train_its_replies():
    """SFT data in the harness's own format (sft.harnesses): the scripted expert's sessions
    through the endpoint pass, continue their recorded ids (one segment each), and SFT trains
    exactly the expert's replies, its `bash` calls, not the harness's prompts or the outputs."""
    # turn_budget 1024: an expert reply fits, and the window keeps room for every turn (no summary)
    config = load_config("configs/tiny.py:test", OVERRIDES + ["rollout.turn_budget=1024",
                                                              'sft.harnesses=("native", "mini_swe_agent")'])
    ids = task_ids(config.rl, "train")[:2]
    episodes = train.demonstrations(config, ids)
    assert len(episodes) == 4 and [ep.task_id for ep in episodes] == ids + ids
    tok = train.load_tokenizer(config.rl)
    for ep in episodes[2:]:
        plan = shell_plan(make_suite("BugFix").get(ep.task_id))
        assert ep.reward == 1.0 and ep.info["harness_exit"] == "Submitted", ep.info
        assert ep.info["harness_commands"] == len(plan) and len(ep.segments) == 1
        (seq,) = sft.demo_sequences([ep])
        trained = tok.decode(seq.tokens[seq.loss_mask > 0].tolist())
        for thought, command in plan:
            assert thought in trained and json.dumps(command)[1:-1] in trained
        assert "<returncode>" not in trained and "helpful assistant" not in trained
        assert "<returncode>" in tok.decode(seq.tokens.tolist())
    native = sft.demo_sequences(episodes[:2])
    assert all('"name": "bash"' not in tok.decode(s.tokens.tolist()) for s in native)
