"""Drive scripted episodes (e.g. the experts) through any env factory, `concurrency` at a time.

The benchmark and the fault tests use this to run the same episodes on local envs and on the
Ray fleet. Like the agent loop, one env per concurrent episode, replaced when it raises.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import queue
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

STATUSES = ("finished", "retried", "failed")  # retried: finished after moving to another worker


@dataclasses.dataclass
class Outcome:
    index: int
    status: str
    reward: float = 0.0
    task_id: str | None = None
    retries: int = 0
    reason: str = ""  # why it failed, or the worker losses it survived
    wall_s: float = 0.0


def play(env, index: int, task: Mapping[str, Any], plan_fn: Callable) -> Outcome:
    """One episode: reset(**task), then plan_fn(env.unwrapped.task)'s actions until it ends."""
    start = time.perf_counter()
    try:
        _, info = env.reset(**dict(task))
        reward, ended = 0.0, False
        for action in plan_fn(env.unwrapped.task):
            _, reward, terminated, truncated, _ = env.step(action)
            if ended := terminated or truncated:
                break
        if not ended:
            raise RuntimeError("the plan ran out of actions before the episode ended")
    except Exception as e:  # noqa: BLE001 - one episode's failure is recorded, the run goes on
        return Outcome(index, "failed", retries=getattr(env, "retries", 0),
                       reason=f"{type(e).__name__}: {e}", wall_s=time.perf_counter() - start)
    retries = getattr(env, "retries", 0)
    return Outcome(index, "retried" if retries else "finished", float(reward), info.get("task_id"), retries,
                   "; ".join(getattr(env, "failures", [])), time.perf_counter() - start)


def run_scripted(make_env: Callable[[], Any], tasks: Sequence[Mapping[str, Any]], plan_fn: Callable,
                 concurrency: int) -> list[Outcome]:
    """Every task's Outcome, in task order."""
    todo: queue.SimpleQueue = queue.SimpleQueue()
    for item in enumerate(tasks):
        todo.put(item)

    def lane() -> list[Outcome]:
        env, done = make_env(), []
        try:
            while True:
                try:
                    index, task = todo.get_nowait()
                except queue.Empty:
                    return done
                done.append(play(env, index, task, plan_fn))
                if done[-1].status == "failed":  # its state is unknown now
                    env.close()
                    env = make_env()
        finally:
            env.close()

    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        lanes = [pool.submit(lane) for _ in range(concurrency)]
        outcomes = [o for lane_ in lanes for o in lane_.result()]
    return sorted(outcomes, key=lambda o: o.index)
