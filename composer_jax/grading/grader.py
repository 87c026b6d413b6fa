"""Grade a submission in a fresh sandbox: pristine repo + the agent's allowed changes + hidden
tests, pytest under a grader-owned entry point, outcomes from MACed per-test records.

Reward is zero when a tripwire test passes, when the report channel shows forgery, or when the
grader's sentinel test (a randomly named test that always fails) is recorded as passing — which
only happens if the solution forces outcomes. A graded test missing from the report has failed.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
import secrets
from collections.abc import Mapping

from composer_jax.grading import report as report_lib
from composer_jax.grading.submission import merge
from composer_jax.grading.task import GradeResult, Task
from composer_jax.sandbox.base import Limits, SandboxBackend

PLUGIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugin")
PLUGIN_MOUNT = "/grader"
ROOT = "/workspace"
REWARD_MODES = ("fraction", "all_pass")
# The report travels on stderr, so its cap bounds how many tests can be recorded (~100 B each).
GRADING_LIMITS = Limits(wall_s=60.0, cpu_s=60, memory_bytes=2 << 30, max_procs=64,
                        max_file_bytes=64 << 20, max_output_bytes=1 << 20)


@dataclasses.dataclass(frozen=True)
class GradeConfig:
    reward: str = "fraction"  # "fraction": passed/total; "all_pass": 1 only if every test passes
    limits: Limits = GRADING_LIMITS
    harden: bool = True  # the plugin's audit hook (refuses settrace, gc walks, ctypes, ...)


class InvalidTaskError(ValueError):
    """The task cannot be graded meaningfully (reference fails, tripwire passes, ...)."""


def graded_files(task: Task) -> list[str]:
    """The repo-relative test files the graded and tripwire node ids live in, in order."""
    files: list[str] = []
    for node in (*task.graded_tests, *task.tripwire_tests):
        f = node.split("::", 1)[0]
        if f not in files:
            files.append(f)
    return files


def _sentinel() -> tuple[str, str, str]:
    """(path, source, node id) of a test that always fails, named so nothing can target it."""
    tag = secrets.token_hex(8)
    path = f"_cj_sentinel_{tag}.py"
    return path, f"def test_sentinel_{tag}():\n    raise AssertionError('grader sentinel')\n", f"{path}::test_sentinel_{tag}"


def _pytest_argv(files: list[str]) -> list[str]:
    return ["python", "-I", "-B", f"{PLUGIN_MOUNT}/cj_grader.py", "-c", "/dev/null",
            f"--rootdir={ROOT}", "-p", "no:cacheprovider", "-q", "--tb=short", "--color=no",
            "--no-header", *files]


@functools.cache
def require_pytest() -> None:
    """The sandbox runs hidden tests with this interpreter's pytest; without it every test would
    look failed (a silent zero reward), so refuse instead."""
    if importlib.util.find_spec("pytest") is None:
        raise RuntimeError("grading needs pytest in this Python environment (the sandbox runs hidden "
                           "tests with it): pip install 'pytest>=8', or reinstall composer_jax")


def grade(task: Task, submitted_files: Mapping[str, str | bytes], backend: SandboxBackend,
          config: GradeConfig = GradeConfig()) -> GradeResult:
    require_pytest()
    if config.reward not in REWARD_MODES:
        raise ValueError(f"unknown reward mode {config.reward!r}; expected one of {REWARD_MODES}")
    files, notes = merge(task.files, submitted_files)
    files.update(task.hidden_tests)
    sentinel_path, sentinel_src, sentinel_node = _sentinel()
    files[sentinel_path] = sentinel_src
    run_files = [f for f in graded_files(task) if f in files] + [sentinel_path]
    notes += [f"test file {f} does not exist" for f in graded_files(task) if f not in files]
    key, nonce = secrets.token_bytes(32), secrets.token_hex(16)
    cfg = {"key": key.hex(), "nonce": nonce, "rootdir": ROOT, "harden": config.harden,
           "test_files": [f"{ROOT}/{f}" for f in run_files]}
    ws = backend.create(files)
    try:
        res = backend.run(ws, _pytest_argv(run_files), config.limits, stdin=json.dumps(cfg),
                          ro_binds={PLUGIN_DIR: PLUGIN_MOUNT})
    finally:
        backend.destroy(ws)
    rep = report_lib.parse(res.stderr, key, nonce)
    problems = list(rep.problems)
    if rep.outcomes.get(sentinel_node) == "pass":
        problems.append("the always-failing sentinel test was recorded as passing")
    if res.timed_out:
        notes.append(f"grading run hit the {config.limits.wall_s:.0f}s wall clock; unrun tests failed")
    elif not rep.finished:
        notes.append(f"pytest did not finish (exit code {res.returncode}); unrecorded tests failed")
    if res.output_truncated:
        notes.append("output was cut at the cap; records after it were lost")
    return _result(task, rep, problems, notes, config.reward, res.stdout)


def _result(task: Task, rep: report_lib.Report, problems: list[str], notes: list[str],
            mode: str, stdout: str) -> GradeResult:
    tests = {t: rep.outcomes.get(t) == "pass" for t in task.graded_tests}
    passed, total = sum(tests.values()), len(tests)
    tripped = [t for t in task.tripwire_tests if rep.outcomes.get(t) == "pass"]
    lines = [f"{passed}/{total} graded tests passed"]
    lines += [f"  {t}: {rep.outcomes.get(t, 'missing from report')}" for t, ok in tests.items() if not ok]
    if tripped:
        lines.append(f"tripwire tests passed (reward 0): {', '.join(tripped)}")
    if problems:
        lines.append("report tampering (reward 0): " + "; ".join(problems))
    lines += notes
    if total == 0 or tripped or problems:
        reward = 0.0
    elif mode == "all_pass":
        reward = float(passed == total)
    else:
        reward = passed / total
    lines.insert(0, f"reward {reward:.3f}")
    if stdout.strip():
        lines.append("pytest output (tail):\n" + stdout[-2000:])
    return GradeResult(reward=reward, passed=passed, total=total, tests=tests,
                       tripwire_tripped=bool(tripped), details="\n".join(lines))


def validate_task(task: Task, reference_files: Mapping[str, str | bytes], backend: SandboxBackend,
                  config: GradeConfig = GradeConfig()) -> None:
    """Raise InvalidTaskError unless the reference solution passes every graded test and trips
    no tripwire, and the pristine repo fails at least one graded test."""
    if not task.graded_tests:
        raise InvalidTaskError(f"{task.task_id}: no graded tests")
    unknown = [f for f in graded_files(task) if f not in task.hidden_tests and f not in task.files]
    if unknown:
        raise InvalidTaskError(f"{task.task_id}: node ids refer to missing test files {unknown}")
    ref = grade(task, reference_files, backend, dataclasses.replace(config, reward="fraction"))
    if ref.passed != ref.total:
        failing = [t for t, ok in ref.tests.items() if not ok]
        raise InvalidTaskError(f"{task.task_id}: the reference solution fails hidden tests {failing}\n{ref.details}")
    if ref.tripwire_tripped or ref.reward != 1.0:
        raise InvalidTaskError(f"{task.task_id}: the reference solution scores {ref.reward}\n{ref.details}")
    before = grade(task, task.files, backend, config)
    if before.passed == before.total:
        raise InvalidTaskError(f"{task.task_id}: the unmodified repo already passes every graded test")
