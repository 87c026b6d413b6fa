"""Task suites by name: `make_suite("BugFix" | "Implement" | "LongHorizon" | "RealRepos", **options)`."""
from __future__ import annotations

import functools
import inspect

from environments.suites.base import SPLITS, TaskSuite, UnknownTaskError, split_of

SUITE_NAMES = ("BugFix", "Implement", "LongHorizon", "RealRepos")


def _constructors() -> dict:
    from environments.suites.bugfix import BugFixSuite
    from environments.suites.implement import ImplementSuite
    from environments.suites.longhorizon import LongHorizonOptions, LongHorizonSuite
    from environments.suites.realrepos import RealReposSuite

    return {
        "BugFix": BugFixSuite,
        "Implement": ImplementSuite,
        "LongHorizon": lambda **kw: LongHorizonSuite(LongHorizonOptions(**kw)),
        "RealRepos": RealReposSuite,
        "_options": {"LongHorizon": LongHorizonOptions},
    }


def suite_options(name: str) -> tuple[str, ...]:
    ctors = _constructors()
    target = ctors["_options"].get(name, ctors[name])
    return tuple(p for p in inspect.signature(target).parameters if p != "self")


@functools.lru_cache(maxsize=16)
def _cached(name: str, frozen_options: tuple) -> TaskSuite:
    return _constructors()[name](**dict(frozen_options))


def make_suite(name: str, **options) -> TaskSuite:
    """One shared suite per (name, options) in a process: building or loading one is not free."""
    if name not in SUITE_NAMES:
        raise ValueError(f"unknown suite {name!r}; expected one of {SUITE_NAMES}")
    unknown = sorted(set(options) - set(suite_options(name)))
    if unknown:
        raise TypeError(f"unknown option(s) {unknown} for suite {name}; allowed: {suite_options(name)}")
    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()))
    return _cached(name, frozen)


__all__ = ["SPLITS", "SUITE_NAMES", "TaskSuite", "UnknownTaskError", "make_suite", "split_of", "suite_options"]
