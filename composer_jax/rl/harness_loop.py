"""RL through a third-party harness: episodes are sessions that the harness ran against our
OpenAI endpoint, recorded token-exact, graded by the env, and handed to the learner.

`HarnessLoop` has the AgentLoop interface the learner and `evaluate` use (`run(tasks)`,
`rollout`, `engine`, `tokenizer`, `close`), so `rl.harness = "mini_swe_agent"` swaps the
episode source and nothing else: the same engine (the learner's new weights reach it by
`set_params`), the same Episode records, the same update.
"""
from __future__ import annotations

import collections
import concurrent.futures
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tqdm

from composer_jax.errors import ConfigError
from composer_jax.harness import mini_swe_agent
from composer_jax.rl.engine_host import RolloutEngine
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.rl.trajectory import Episode, Segment
from composer_jax.serve import sessions
from composer_jax.serve.app import Background
from composer_jax.serve.server import Server

HARNESS = "mini_swe_agent"
MODEL_NAME = "policy"


class HarnessLoop:
    def __init__(self, engine: RolloutEngine, tokenizer, rollout: RolloutConfig, make_env: Callable[[], Any],
                 *, step_limit: int, config: str = "mini", chunk: int = 16, log=print):
        """`config`: the harness's agent config (its prompts): a name it ships or a yaml path."""
        self.engine, self.tokenizer, self.rollout, self.make_env = engine, tokenizer, rollout, make_env
        self.step_limit, self.config = step_limit, config
        self.python = mini_swe_agent.ensure_venv(log=log)
        self.server = Server(engine, tokenizer, model_name=MODEL_NAME, chunk=chunk)
        self.http = Background(self.server)
        self.stats: dict[str, float] = {}
        self._runs = 0

    def close(self) -> None:
        self.http.close()
        self.server.close()

    def run(self, tasks: Sequence[Mapping[str, Any]], episode_ids: Sequence[int] | None = None,
            progress: str = "") -> list[Episode]:
        """One harness session per task (env.reset kwargs), `engine.slots` at a time."""
        self._runs += 1
        temperature, top_p = self.engine.sampling
        ids = list(range(len(tasks))) if episode_ids is None else list(episode_ids)
        started = time.perf_counter()
        bar = tqdm.tqdm(total=len(tasks), desc=progress, unit="episode", disable=not progress)

        def one(i: int) -> Episode:
            env = self.make_env()
            try:
                return self._episode(env, i, dict(tasks[i]), ids[i], temperature, top_p)
            finally:
                env.close()
                bar.update()

        with concurrent.futures.ThreadPoolExecutor(self.engine.slots) as pool:
            episodes = list(pool.map(one, range(len(tasks))))
        bar.close()
        if episodes and all(ep.end_reason == "env_error" for ep in episodes):
            statuses = sorted({ep.info.get("error", "") for ep in episodes})
            raise ConfigError(f"rl.harness={HARNESS!r}: no episode reached the model ({'; '.join(statuses)[:800]}); "
                              f"a prompt longer than rollout.window={self.rollout.window} is the usual cause")
        exits = collections.Counter(str(ep.info.get("harness_exit", "no_session")).split(":")[0] for ep in episodes)
        self.stats = dict(wall_s=time.perf_counter() - started, **self.server.scheduler.stats,
                          **{f"harness_exit_{k}": v for k, v in exits.items()},
                          harness_commands=sum(ep.info.get("harness_commands", 0) for ep in episodes))
        return episodes

    def _episode(self, env, i: int, task: dict, episode_id: int, temperature: float, top_p: float) -> Episode:
        session_id = f"rl-{self.rollout.seed}-{self._runs}-{episode_id}"
        result = mini_swe_agent.run_session(
            env, dict(task.get("options", {})), python=self.python, base_url=self.http.url, model=MODEL_NAME,
            session_id=session_id, temperature=temperature, top_p=top_p, max_tokens=self.rollout.turn_budget,
            step_limit=self.step_limit, seed=int(self.rollout.seed) * 1_000_003 + episode_id, config=self.config)
        session = self.server.recorder.pop(session_id)
        end = "submit" if result.exit_status == "Submitted" else "env_truncated"
        if session is None or not session.completions:  # the harness never reached the model
            ep = Episode(i, task, task_id=result.task_id, reward=result.reward, info=result.info)
            ep.segments.append(Segment(prompt=[]))
            ep.info["error"] = f"no completions recorded ({result.exit_status})"
            return ep.finish("env_error")
        ep = sessions.episode(session, reward=result.reward, index=i, task=task, task_id=result.task_id,
                              end_reason=end)
        ep.info = dict(result.info, harness_exit=result.exit_status, harness_commands=result.commands)
        return ep
