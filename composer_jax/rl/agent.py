"""The agent loop: N Gymnasium envs driven through one rollout engine, continuously batched.

Each slot runs one episode (rl/episode.py) at a time. Every iteration serves all outstanding
requests by kind: env resets/steps in a thread pool (sandboxed tools run in subprocesses, so
they overlap), then engine starts/resets/appends as batched prefills, then one decode for every
slot that wants to generate. A slot whose episode ends takes the next task at once, without
waiting for the others. Episode keys are fold_in(seed key, episode id), so which slot or
batch an episode lands in does not change its samples.

    loop = AgentLoop(engine, tokenizer, rollout, make_env=lambda: gym.make(...))
    episodes = loop.run([{"seed": 0}, {"options": {"task_id": ...}}])   # one Episode per task
"""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import tqdm

from composer_jax.errors import ConfigError
from composer_jax.rl import summarize
from composer_jax.rl.engine_host import RolloutEngine
from composer_jax.rl.episode import (
    Append,
    EnvReset,
    EnvStep,
    EpisodeContext,
    Generate,
    PolicyFactory,
    Reset,
    Start,
    run_episode,
)
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.rl.trajectory import Episode


class AgentLoop:
    def __init__(self, engine: RolloutEngine, tokenizer, rollout: RolloutConfig,
                 make_env: Callable[[], Any], *, make_policy: PolicyFactory | None = None):
        self.engine, self.tokenizer, self.rollout = engine, tokenizer, rollout
        self.make_env, self.make_policy = make_env, make_policy
        self.ids = summarize.SpecialIds.from_tokenizer(tokenizer)
        self.envs: list[Any] = [None] * engine.slots
        self.stats: dict[str, float] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=engine.slots)

    def close(self) -> None:
        for env in self.envs:
            if env is not None:
                env.close()
        self._pool.shutdown()

    def run(self, tasks: Sequence[Mapping[str, Any]], episode_ids: Sequence[int] | None = None,
            progress: str = "") -> list[Episode]:
        """Run one episode per task (env.reset kwargs); returns them in task order. Episode i
        samples with key fold_in(rollout.seed key, episode_ids[i]) (default: i), e.g. a global
        episode counter, so results do not depend on the batch an episode runs in. `progress`:
        the label of a progress bar over finished episodes (none when empty)."""
        slots = self.engine.slots
        episode_ids = list(range(len(tasks))) if episode_ids is None else list(episode_ids)
        if len(episode_ids) != len(tasks):
            raise ValueError(f"{len(episode_ids)} episode_ids for {len(tasks)} tasks")
        queue = collections.deque(enumerate(tasks))
        episodes: list[Episode | None] = [None] * len(tasks)
        runs: list[Any] = [None] * slots  # the episode generator in each slot
        index: list[int] = [-1] * slots
        request: list[Any] = [None] * slots
        base_key = jax.random.key(self.rollout.seed)
        timing = self._counts = collections.Counter()
        started = time.perf_counter()
        bar = tqdm.tqdm(total=len(tasks), desc=progress, unit="episode", disable=not progress)

        def advance(slot: int, value: Any) -> None:
            try:
                request[slot] = runs[slot].send(value)
            except StopIteration as stop:
                episodes[index[slot]] = stop.value
                runs[slot] = request[slot] = None
                bar.update()
                if stop.value.end_reason == "env_error":
                    self._replace_env(slot)  # its state is unknown now

        def waiting(kinds) -> list[int]:
            return [s for s in range(slots) if isinstance(request[s], kinds)]

        while queue or any(r is not None for r in runs):
            for slot in range(slots):
                if runs[slot] is None and queue:
                    i, task = queue.popleft()
                    if self.envs[slot] is None:
                        self.envs[slot] = self.make_env()
                    ctx = EpisodeContext(i, dict(task), jax.random.fold_in(base_key, episode_ids[i]), self.envs[slot],
                                         self.tokenizer, self.rollout, self.ids, self.make_policy)
                    runs[slot], index[slot] = run_episode(ctx), i
                    advance(slot, None)
            t0 = time.perf_counter()
            self._serve_envs(waiting((EnvReset, EnvStep)), request, advance)
            t1 = time.perf_counter()
            while waiting((Start, Reset, Append)):
                self._serve_prefills(waiting((Start, Reset, Append)), request, advance)
            t2 = time.perf_counter()
            generating = waiting(Generate)
            if generating:
                outs = self.engine.generate(generating, [request[s].budget for s in generating],
                                            [request[s].stops for s in generating])
                for slot, out in zip(generating, outs):
                    advance(slot, out)
            timing["env_s"] += t1 - t0
            timing["prefill_s"] += t2 - t1
            timing["decode_s"] += time.perf_counter() - t2
        bar.close()
        wall = time.perf_counter() - started
        self.stats = dict(timing, wall_s=wall, env_fraction=timing["env_s"] / wall if wall else 0.0,
                          prefill_per_reset=timing["reset_prefill_tokens"] / max(timing["resets"], 1))
        self._check_prompts_fit(episodes)
        return episodes

    def _check_prompts_fit(self, episodes: list[Episode]) -> None:
        """One prompt too long for the window is that task's problem (counted, never trained);
        every prompt too long is the config's, and would make a run of no-op steps."""
        lengths = sorted(len(ep.segments[0].prompt) for ep in episodes if ep.end_reason == "prompt_too_long")
        if lengths and len(lengths) == len(episodes):
            r = self.rollout
            raise ConfigError(
                f"rollout.window: all {len(episodes)} prompts ({lengths[0]}-{lengths[-1]} tokens) exceed the "
                f"{summarize.max_prompt_len(r, self.ids)} that a {r.window}-token window leaves beside "
                f"turn_budget={r.turn_budget} and summary_budget={r.summary_budget}; raise rollout.window "
                "(and rl.row_len), lower those budgets or shorten rl.system_prompt")

    def _serve_envs(self, slots: list[int], request, advance) -> None:
        def call(slot: int):
            req = request[slot]
            try:
                if isinstance(req, EnvReset):
                    return self.envs[slot].reset(**req.kwargs)
                return self.envs[slot].step(req.action)
            except Exception as e:  # noqa: BLE001 - a broken env ends its episode, not the batch
                return e

        results = list(self._pool.map(call, slots))
        for slot, result in zip(slots, results):
            advance(slot, result)  # a raised call ends its episode as env_error: the env is replaced

    def _replace_env(self, slot: int) -> None:
        if self.envs[slot] is not None:
            with contextlib.suppress(Exception):  # it is being thrown away
                self.envs[slot].close()
        self.envs[slot] = None

    def _serve_prefills(self, slots: list[int], request, advance) -> None:
        starts = [s for s in slots if isinstance(request[s], Start)]
        if starts:
            self.engine.start(starts, [request[s].key for s in starts])
        resets = [s for s in slots if isinstance(request[s], Reset)]
        if rewinds := [s for s in resets if request[s].keep]:
            self.engine.rewind(rewinds)
        if clears := [s for s in resets if not request[s].keep]:
            self.engine.clear(clears)
        tokens = [request[s].new_tokens if isinstance(request[s], Reset) else request[s].tokens for s in slots]
        self._counts["resets"] += len(resets)
        self._counts["reset_prefill_tokens"] += sum(len(t) for s, t in zip(slots, tokens) if s in resets)
        self._counts["prefill_tokens"] += sum(map(len, tokens))
        # Only teacher-forced policy tokens need their log-probs; prompts and harness text do not.
        score = any(isinstance(request[s], Append) and request[s].score for s in slots)
        scored = self.engine.append(slots, tokens, score=score)
        if starts:
            self.engine.mark(starts)  # the prompt's end: resets rewind here
        for slot, result in zip(slots, scored):
            advance(slot, result)
