"""What a coding task is: the contract between task suites, environments and the grader."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Task:
    task_id: str  # unique across suites, e.g. "bugfix/humaneval-12/flip_cmp-3"
    suite: str  # "BugFix" | "Implement" | "LongHorizon"
    prompt: str  # what the agent is told
    files: Mapping[str, str]  # the repo the agent sees: relative path -> content
    hidden_tests: Mapping[str, str]  # test files copied in only at grading time
    # pytest node ids (relative to the repo root) that make up the reward; a node id absent
    # from the grading report counts as failed.
    graded_tests: tuple[str, ...]
    # node ids that a correct solution must FAIL (they assert the bug is still there, or that
    # cheating happened); any of them passing zeroes the reward.
    tripwire_tests: tuple[str, ...] = ()
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class GradeResult:
    reward: float  # in [0, 1]
    passed: int
    total: int
    tests: Mapping[str, bool]  # node id -> passed
    tripwire_tripped: bool
    details: str  # human-readable: why this reward (removed files, missing tests, timeouts)
