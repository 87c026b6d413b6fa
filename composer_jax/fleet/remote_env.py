"""A gymnasium-shaped env (reset/step/close, `unwrapped.task`) whose episodes run on a Ray pool.

Drop-in for a local env in the agent loop (`make_env=pool.make_env`). It leases a worker at
`reset` and returns it when the episode ends. When the worker is lost mid-episode, the episode
moves to another worker by replay: reset to the same task (the first reset's task id is pinned,
with the same seed) and redo every action taken so far, then issue the call that was lost. The
env's state is a function of (task, actions), so the replayed workspace is the one the policy
saw; the policy's tokens are untouched, so nothing upstream notices. After `max_retries` losses
in one episode the call raises `EpisodeFailedError` with every reason; the agent loop records
that as the episode's env_error and goes on with the rest.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from composer_jax.fleet.pool import EnvPool, WorkerHandle, WorkerLostError
from composer_jax.fleet.worker import ReplayDivergedError


class EpisodeFailedError(RuntimeError):
    """An episode could not go on: its workers were lost too often, or its replay diverged."""


class RemoteEnv:
    def __init__(self, pool: EnvPool, max_retries: int = 2):
        self.pool, self.max_retries = pool, max_retries
        self._worker: WorkerHandle | None = None
        self._reset_kwargs: dict[str, Any] | None = None  # pinned to the task, for replay
        self._actions: list[str] = []
        self._task = None
        self.retries = 0  # replays in the current episode
        self.failures: list[str] = []  # why each worker of the current episode was lost

    @property
    def unwrapped(self) -> RemoteEnv:
        return self  # the scripted policies read `env.unwrapped.task`

    @property
    def task(self):
        """The episode's Task (fetched once per episode, for scripted policies and tests)."""
        if self._task is None:
            self._task = self._call(lambda w: self.pool.call(w, "task"))
        return self._task

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        self._end_lease()
        self._reset_kwargs, self._actions, self._task = None, [], None
        self.retries, self.failures = 0, []
        kwargs = {"seed": seed, "options": dict(options or {})}
        observation, info = self._call(lambda w: self.pool.call(w, "reset", kwargs))
        self._reset_kwargs = {"seed": seed, "options": {**kwargs["options"], "task_id": info["task_id"]}}
        return observation, info

    def step(self, action: str):
        if self._reset_kwargs is None:
            raise RuntimeError("the episode is over (or never started); call reset() first")
        result = self._call(lambda w: self.pool.call(w, "step", action))
        self._actions.append(action)
        if result[2] or result[3]:  # terminated or truncated: the worker is free again
            self._end_lease()
            self._reset_kwargs = None
        return result

    def close(self) -> None:
        self._end_lease()
        self._reset_kwargs = None

    def _end_lease(self) -> None:
        if self._worker is not None:
            self.pool.release(self._worker)
            self._worker = None

    def _call(self, fn: Callable[[WorkerHandle], Any]):
        """fn(worker) on the episode's worker; on loss, replay on another, up to max_retries."""
        while True:
            fresh = self._worker is None
            if fresh:
                self._worker = self.pool.acquire()
            try:
                if fresh and self._reset_kwargs is not None:  # mid-episode on a new worker
                    self.pool.call(self._worker, "replay", self._reset_kwargs, self._actions,
                                   timeout_s=self.pool.cfg.step_timeout_s * (len(self._actions) + 1))
                return fn(self._worker)
            except WorkerLostError as e:
                self.pool.lost(self._worker)
                self._worker = None
                self.failures.append(str(e))
                if self.retries >= self.max_retries:
                    raise EpisodeFailedError(f"episode lost its env worker {len(self.failures)} times "
                                             f"(fleet.max_retries={self.max_retries}): "
                                             + "; ".join(self.failures)) from e
                self.retries += 1
            except ReplayDivergedError as e:
                self._end_lease()
                raise EpisodeFailedError(f"episode could not be rebuilt on another worker: {e}") from e
