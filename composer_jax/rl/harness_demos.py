"""SFT demonstrations in a third-party harness's own format: the scripted expert plays
mini-swe-agent against our OpenAI endpoint, which records each session token-exact as it records
a policy's (the harness's prompts, its `bash` tool, its turn structure). A policy tuned only on
our native protocol calls our tool names inside mini-swe-agent and never runs a command
(benchmarks/results/harness_eval_qwen_sft_cpu.json); these sessions are what teaches it the
harness. No model runs: `WritingEngine` emits the expert's replies as the sampled ids.
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence

import numpy as np

from composer_jax.harness.protocol import format_tool_call
from composer_jax.rl.engine_host import Generated, TeacherForcedOnly
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.rl.trajectory import Episode
from environments.experts import shell_plan


class WritingEngine(TeacherForcedOnly):
    """The engine interface the endpoint's scheduler drives, one slot, no model: each reply is
    `write()`'s ids (the expert's turn), handed out in the chunks the scheduler asks for, with
    zero log-probs (SFT reads only the tokens)."""

    def __init__(self, cfg, rollout: RolloutConfig, write: Callable[[], Sequence[int]]):
        self.rollout = dataclasses.replace(rollout, slots=1)
        super().__init__(cfg, self.rollout)
        self.write, self._left = write, []

    sampling = property(lambda self: (1.0, 1.0))

    def set_sampling(self, temperature: float, top_p: float) -> tuple[float, float]:
        return self.sampling

    def seed(self, slots, keys) -> None:
        pass

    def lengths(self) -> np.ndarray:
        return self._lengths.copy()

    def generate(self, slots, budgets, stops):
        (slot,), (budget,), (stop,) = slots, budgets, stops
        if not self._left:
            self._left = list(self.write())
        take, self._left = self._left[:budget], self._left[budget:]
        scored = self.append([slot], [take])[0]
        return [Generated(np.asarray(take, np.int32), scored.logp, scored.logp, scored.experts,
                          bool(take) and take[-1] in stop and not self._left)]


def demonstrations(model_cfg, rollout: RolloutConfig, tokenizer, make_env, ids: Sequence[str], *,
                   step_limit: int, config: str = "mini") -> list[Episode]:
    """The expert's mini-swe-agent session on each task, one at a time (the writer follows the
    env of the session in flight), as recorded Episodes graded by the env. `config`: the
    harness's agent config (HarnessLoop)."""
    from composer_jax.rl.harness_loop import HarnessLoop

    now = dict(env=None, turn=0)
    lock = threading.Lock()

    def env():
        with lock:
            now.update(env=make_env(), turn=0)
            return now["env"]

    def write() -> list[int]:
        plan = shell_plan(now["env"].unwrapped.task)
        thought, command = plan[min(now["turn"], len(plan) - 1)]
        now["turn"] += 1
        return tokenizer.encode_with_specials(thought + "\n" + format_tool_call("bash", command=command))

    writer = WritingEngine(model_cfg, rollout, write)
    loop = HarnessLoop(writer, tokenizer, writer.rollout, env, step_limit=step_limit, config=config)
    try:
        return loop.run([{"options": {"task_id": t}} for t in ids], progress="mini-swe-agent demonstrations")
    finally:
        loop.close()
