"""Shared benchmark plumbing: timing, and the JSON result (composer_jax/experiments/records.py)."""
from __future__ import annotations

import time

import jax

from composer_jax.experiments.records import write_result  # noqa: F401 - re-exported for the benchmarks


def timed(fn, *args, repeats: int = 3):
    """Median wall seconds of fn(*args) (outputs blocked on), after one warm-up (compile) call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]
