"""A warm pool of env worker actors: leases, timeouts on every call, replacement of lost workers.

A worker is leased for one episode at a time (`acquire`/`release`). Any call that does not
come back (actor died, node lost, timed out) marks the worker lost: it is killed (a hung one
too), a fresh warm worker takes its place, and the caller gets `WorkerLostError` naming why.
An exception raised by the env itself is re-raised as itself: that is the episode's error,
not the worker's.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
import time
from typing import Any

from composer_jax.fleet.cluster import FleetUnavailableError, connect, fit_pool_size
from composer_jax.fleet.config import FleetConfig
from composer_jax.fleet.worker import EnvWorker

SHUTDOWN_WAIT_S = 10.0


class WorkerLostError(RuntimeError):
    """A worker stopped answering (died or timed out); the message says which and why."""


@dataclasses.dataclass
class WorkerHandle:
    wid: int
    actor: Any
    ready_ref: Any  # resolves when the actor's constructor (the warm-up) has finished
    ready: bool = False


class EnvPool:
    def __init__(self, cfg: FleetConfig, env_id: str, *, latency_s: float = 0.0, **env_kwargs):
        self.ray = connect(cfg.address, cfg.num_cpus)
        self.cfg, self.env_id, self.env_kwargs = cfg, env_id, dict(env_kwargs)
        free_cpus = self.ray.available_resources().get("CPU", 0.0)
        self.size = fit_pool_size(cfg.workers, cfg.cpus_per_worker, free_cpus)
        # Restarts are ours (a fresh actor, the episode replayed), so Ray's own are off.
        self._actor_cls = self.ray.remote(EnvWorker).options(
            num_cpus=cfg.cpus_per_worker, max_restarts=0, max_task_retries=0)
        self._latency_s = latency_s
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._live: dict[int, WorkerHandle] = {}
        self._free: collections.deque[WorkerHandle] = collections.deque()
        self.stats = collections.Counter()
        self._closed = False
        with self._cond:
            for _ in range(self.size):
                self._spawn()
        self._wait_all_ready()

    # Workers --------------------------------------------------------------------------------

    def _spawn(self) -> None:
        actor = self._actor_cls.remote(self.env_id, self.env_kwargs, self._latency_s)
        handle = WorkerHandle(next(self._ids), actor, actor.ready.remote())
        self._live[handle.wid] = handle
        self._free.append(handle)
        self.stats["workers_started"] += 1

    def _wait_all_ready(self) -> None:
        handles = list(self._live.values())
        try:
            self.ray.get([h.ready_ref for h in handles], timeout=self.cfg.start_timeout_s)
        except Exception as e:
            self.shutdown()
            raise FleetUnavailableError(f"env workers for {self.env_id} did not start within "
                                        f"fleet.start_timeout_s={self.cfg.start_timeout_s:g}: {e}") from e
        for h in handles:
            h.ready = True

    def acquire(self) -> WorkerHandle:
        """A free worker (a warm one first); waits up to fleet.acquire_timeout_s."""
        deadline = time.monotonic() + self.cfg.acquire_timeout_s
        with self._cond:
            while not self._free:
                if self._closed:
                    raise WorkerLostError("the env pool is shut down")
                if not self._cond.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise WorkerLostError(f"no free env worker within fleet.acquire_timeout_s="
                                          f"{self.cfg.acquire_timeout_s:g} ({self.size} workers, all leased)")
            handle = next((h for h in self._free if h.ready), self._free[0])
            self._free.remove(handle)
            return handle

    def release(self, handle: WorkerHandle) -> None:
        with self._cond:
            if handle.wid in self._live and handle not in self._free:
                self._free.append(handle)
                self._cond.notify()

    def lost(self, handle: WorkerHandle) -> None:
        """Kill the worker (it may be hung rather than dead) and start a warm replacement."""
        with self._cond:
            if self._live.pop(handle.wid, None) is None:
                return
            self.stats["workers_lost"] += 1
            if not self._closed:
                self._spawn()
                self._cond.notify()
        try:
            self.ray.kill(handle.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass

    def call(self, handle: WorkerHandle, method: str, *args, timeout_s: float | None = None):
        """`handle.<method>(*args)` on the actor, bounded by the start and step timeouts."""
        ray_exc = self.ray.exceptions
        ref = getattr(handle.actor, method).remote(*args)
        phase, limit = "start-up", self.cfg.start_timeout_s
        try:
            if not handle.ready:
                self.ray.get(handle.ready_ref, timeout=limit)
                handle.ready = True
            phase, limit = method, timeout_s or self.cfg.step_timeout_s
            return self.ray.get(ref, timeout=limit)
        except ray_exc.RayTaskError as e:
            raise e.as_instanceof_cause() from None  # the env's own error
        except ray_exc.GetTimeoutError as e:
            raise WorkerLostError(f"worker {handle.wid}: {phase} timed out after {limit:g}s") from e
        except ray_exc.RayError as e:
            raise WorkerLostError(f"worker {handle.wid}: {phase} failed: {type(e).__name__}: "
                                  f"{str(e).splitlines()[0] if str(e) else ''}") from e

    # Pool -----------------------------------------------------------------------------------

    def workers(self, *, leased: bool | None = None) -> list[WorkerHandle]:
        """Live workers; leased=True only those in an episode, False only free ones."""
        with self._cond:
            free = {h.wid for h in self._free}
            return [h for h in self._live.values() if leased is None or (h.wid not in free) == leased]

    def make_env(self):
        """A gymnasium-shaped env whose episodes run on this pool (the agent loop's make_env)."""
        from composer_jax.fleet.remote_env import RemoteEnv

        return RemoteEnv(self, max_retries=self.cfg.max_retries)

    def shutdown(self) -> None:
        with self._cond:
            self._closed = True
            handles = list(self._live.values())
            self._live.clear()
            self._free.clear()
            self._cond.notify_all()
        free_before = self.ray.available_resources().get("CPU", 0.0)
        started = [h for h in handles if h.ready or self.ray.wait([h.ready_ref], timeout=0)[0]]
        for h in handles:
            try:
                self.ray.kill(h.actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        # Ray frees the CPUs asynchronously; wait (briefly) so that a pool started next fits.
        # Only started workers hold CPUs: one still queued for resources frees none.
        expected = free_before + len(started) * self.cfg.cpus_per_worker - 1e-6
        deadline = time.monotonic() + SHUTDOWN_WAIT_S
        while self.ray.available_resources().get("CPU", 0.0) < expected and time.monotonic() < deadline:
            time.sleep(0.05)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
