"""Shared benchmark plumbing: timing and writing the JSON result."""
from __future__ import annotations

import json
import os
import platform
import time

import jax


def timed(fn, *args, repeats: int = 3):
    """Median wall seconds of fn(*args) (outputs blocked on), after one warm-up (compile) call."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def write_result(path: str, result: dict) -> None:
    result = dict(result, machine=dict(platform=platform.platform(), cpus=os.cpu_count(),
                                       backend=jax.default_backend(), devices=jax.device_count()))
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
