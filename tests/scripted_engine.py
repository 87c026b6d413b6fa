"""A stand-in policy for the serving tests: the real engine, with scripted samples."""
from __future__ import annotations

import collections
import threading

import numpy as np

from composer_jax.rl.engine_host import Generated, RolloutEngine


class ScriptedEngine:
    """The real engine, but `generate` emits scripted ids (scored by the model: real log-probs
    and expert choices) so a random model can "call a tool". With a `gate`, every call after the
    first waits until the gate is set (a job that cannot finish before the test lets it)."""

    def __init__(self, engine: RolloutEngine, scripts, gate: threading.Event | None = None):
        self._engine, self._scripts, self._left, self._gate = engine, collections.deque(scripts), {}, gate
        self._calls = 0

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def generate(self, slots, budgets, stops):
        self._calls += 1
        if self._gate is not None and self._calls > 1 and not self._gate.wait(120):
            raise TimeoutError("the test never opened the gate")
        out = []
        for slot, budget, stop in zip(slots, budgets, stops):
            if slot not in self._left:
                self._left[slot] = list(self._scripts.popleft())
            left = self._left[slot]
            take = []
            while left and len(take) < budget and not (take and take[-1] in stop):
                take.append(left.pop(0))
            scored = self._engine.append([slot], [take])[0]
            stopped = bool(take) and take[-1] in stop
            if stopped or not left:
                del self._left[slot]
            out.append(Generated(np.array(take, np.int32), scored.logp, scored.logp, scored.experts, stopped))
        return out
