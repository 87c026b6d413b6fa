"""Count XLA compilations: "zero compiles after warm-up" as a checkable number.

    with count_compiles() as compiled:
        step(...)
    assert compiled == []   # names of the functions XLA compiled meanwhile

Counts jax's backend-compile monitoring event, which fires once per program handed to XLA
(jit cache misses, resharding programs, AOT `.compile()`; a persistent-cache load counts too),
never for a call served from a jit's in-memory cache. The listener is process-wide: compiles in
other threads during the block are counted as well.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


@contextlib.contextmanager
def count_compiles() -> Iterator[list[str]]:
    """A list that collects the name of every function XLA compiles inside the block."""
    names: list[str] = []

    def listener(event: str, duration: float, **kwargs) -> None:
        if event == BACKEND_COMPILE_EVENT:
            names.append(str(kwargs.get("fun_name", "?")))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
