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
    # Test files that only the grader's judge sees (never a sandbox); they import the repo's
    # modules, which then answer from the submission's sandbox (grading/remote/).
    hidden_tests: Mapping[str, str]
    # pytest node ids (relative to the repo root) that make up the reward; a node id absent
    # from the grading report counts as failed.
    graded_tests: tuple[str, ...]
    # Submitted files the hidden tests read as text (parsed, never imported or run): they are
    # copied next to the hidden tests.
    observed_files: tuple[str, ...] = ()
    # Installed distributions the repo's code imports, beyond the standard library: the
    # sandbox runtime holds them (sandbox/runtime.py), and nothing else of the host's.
    requirements: tuple[str, ...] = ()
    metadata: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class GradeResult:
    reward: float  # in [0, 1]
    passed: int
    total: int
    tests: Mapping[str, bool]  # node id -> passed
    details: str  # human-readable: why this reward (removed files, missing tests, timeouts)
    # A problem of the task or the grader, not of the submission (a hidden test that cannot be
    # collected, a dependency missing from the sandbox runtime); empty when there is none.
    error: str = ""
