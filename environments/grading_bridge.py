"""Resolve the sandbox backend and grader an environment uses, with errors that say what to do."""
from __future__ import annotations

from collections.abc import Callable

from composer_jax.grading.task import GradeResult, Task
from composer_jax.sandbox.base import SandboxBackend, SandboxUnavailableError

Grader = Callable[..., GradeResult]  # grade(task, submitted_files, backend, config)


def resolve_backend(backend: str | SandboxBackend | None) -> SandboxBackend:
    """A backend instance from an instance or a name ("auto", "bwrap", "unshare")."""
    if isinstance(backend, SandboxBackend):
        return backend
    from composer_jax.sandbox import get_backend

    try:
        return get_backend(backend or "auto")
    except SandboxUnavailableError as e:
        raise SandboxUnavailableError(
            f"the coding environments need a sandbox to run tests and grade: {e}. Install the "
            "missing tool, run as root, or pass backend=<a SandboxBackend instance>."
        ) from e


def resolve_grader(grader: Grader | None) -> Grader:
    if grader is not None:
        return grader
    from composer_jax.grading.grader import grade

    return grade


def task_runtime(task: Task):
    """The sandbox runtime for the task's workspace: the one its grading runs in."""
    from composer_jax.grading.grader import task_runtime as runtime

    return runtime(task)


def grade_config(reward_mode: str):
    from composer_jax.grading.grader import GradeConfig

    return GradeConfig(reward=reward_mode)


def failed_grade(task: Task, why: str) -> GradeResult:
    """A zero-reward result for a submission that could not be graded at all."""
    return GradeResult(0.0, 0, len(task.graded_tests), {t: False for t in task.graded_tests}, why)
