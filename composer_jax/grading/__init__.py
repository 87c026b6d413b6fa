"""Grading submissions in a fresh sandbox against hidden tests: `grade`, `validate_task`."""
from composer_jax.grading.grader import (
    GradeConfig,
    InvalidTaskError,
    grade,
    validate_task,
)
from composer_jax.grading.task import GradeResult, Task

__all__ = ["GradeConfig", "GradeResult", "InvalidTaskError", "Task", "grade", "validate_task"]
