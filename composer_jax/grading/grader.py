"""Grade a submission: its code answers in a sandbox, the hidden tests judge it on the host.

1. The graded tree is the pristine repo plus the agent's allowed changes (submission.merge).
2. The hidden tests, and the submitted files a task reads as text (`Task.observed_files`), go to
   a fresh host directory. Hidden tests never enter any sandbox.
3. If the hidden tests import the repository, the graded tree goes to a fresh sandbox whose one
   process (remote/serve.py) holds the submission and answers requests over two pipes.
4. The judge (remote/judge.py), a host process that runs no submitted code, runs the hidden
   tests under pytest against that process and reports each test's outcome; the reward is
   computed here from that report.

No process that runs submitted code sees an expected value or holds a verdict, so there is
nothing in reach to forge: what the submission controls is what its code answers, and an answer
is data. docs/grading.md has the threat model and what crosses each boundary.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping

from composer_jax.grading.submission import merge, protected_reason
from composer_jax.grading.task import GradeResult, Task
from composer_jax.pyparse import parse_python
from composer_jax.sandbox import runtime as runtime_lib
from composer_jax.sandbox.base import Limits, SandboxBackend
from composer_jax.sandbox.files import write_tree

REMOTE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "remote")
REMOTE_MOUNT = "/grader"
REWARD_MODES = ("fraction", "all_pass")
GRADING_LIMITS = Limits(wall_s=60.0, cpu_s=60, memory_bytes=2 << 30, max_procs=64,
                        max_file_bytes=64 << 20, max_output_bytes=64 << 10)
JUDGE_CPU_S, JUDGE_MEMORY_BYTES = 120, 4 << 30
JUDGE_GRACE_S = 15.0  # the judge's own start-up and report, beyond the submission's wall clock
TAIL_CHARS = 2000
OBSERVED_MAX_BYTES = 1 << 20  # a file the judge parses (config.py, a drill) is small; a larger one is not read


@dataclasses.dataclass(frozen=True)
class GradeConfig:
    reward: str = "fraction"  # "fraction": passed/total; "all_pass": 1 only if every test passes
    limits: Limits = GRADING_LIMITS  # the submission's process: wall clock for the whole grading


class InvalidTaskError(ValueError):
    """The task cannot be graded meaningfully (reference fails, pristine repo passes, ...)."""


def graded_files(task: Task) -> list[str]:
    """The repo-relative test files the graded node ids live in, in order."""
    files: list[str] = []
    for node in task.graded_tests:
        f = node.split("::", 1)[0]
        if f not in files:
            files.append(f)
    return files


def repo_modules(files: Iterable[str]) -> set[str]:
    """Top-level module names the repository defines (its tests excluded): in the judge, these
    resolve to the submission's process. A standard-library name never does."""
    names = set()
    for path in files:
        top, _, rest = path.partition("/")
        if path.endswith(".py") and not protected_reason(path):
            names.add(top[:-3] if not rest else top)
    return {n for n in names if n.isidentifier() and n not in sys.stdlib_module_names}


def public_names(files: Mapping[str, str]) -> dict[str, list[str]]:
    """Per pristine module, the names `from module import *` may bind in the judge: the
    submission's `__all__` could otherwise name `pytest` or a helper of the test and replace it."""
    out = {}
    for path, source in files.items():
        if not path.endswith(".py") or protected_reason(path):
            continue
        module = path[:-3].replace("/", ".").removesuffix(".__init__")
        try:
            tree = parse_python(source)
        except (SyntaxError, ValueError):
            continue
        names = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names += [t.id for t in targets if isinstance(t, ast.Name)]
                if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                    try:
                        names = [n for n in ast.literal_eval(node.value) if isinstance(n, str)]
                        break
                    except ValueError:
                        pass
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names += [(a.asname or a.name).partition(".")[0] for a in node.names if a.name != "*"]
        out[module] = [n for n in dict.fromkeys(names) if not n.startswith("_")]
    return out


def imported_modules(sources: Iterable[str]) -> set[str]:
    """Top-level names of every absolute import in `sources` (unparsable sources add none)."""
    names = set()
    for source in sources:
        try:
            tree = parse_python(source)
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.partition(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.partition(".")[0])
    return names


@functools.cache
def require_pytest() -> None:
    """The judge runs hidden tests with this interpreter's pytest; without it every grading
    would end in an error, so refuse at once with what to do."""
    if importlib.util.find_spec("pytest") is None:
        raise RuntimeError("grading needs pytest in this Python environment (the judge runs hidden "
                           "tests with it): pip install 'pytest>=8', or reinstall composer_jax")


def task_runtime(task: Task):
    return runtime_lib.build(task.requirements)


def _judge(root: str, files: list[str], remote: set[str], exports: dict, proc, seconds: float) -> tuple[dict | None, str]:
    """(the judge's report or None, the tail of its output)."""
    cfg = {"root": root, "files": files, "remote": sorted(remote), "exports": exports, "seconds": seconds,
           "rpc": [proc.stdout_fd, proc.stdin_fd] if proc else None}
    argv = ["prlimit", f"--cpu={JUDGE_CPU_S}", f"--as={JUDGE_MEMORY_BYTES}", "--",
            sys.executable, "-I", "-B", os.path.join(REMOTE_DIR, "judge.py")]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "HOME": root,
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    judge = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd=root, env=env, pass_fds=cfg["rpc"] or ())
    try:
        out, err = judge.communicate(json.dumps(cfg).encode(), timeout=seconds + JUDGE_GRACE_S)
    except subprocess.TimeoutExpired:
        judge.kill()
        out, err = judge.communicate()
        return None, f"the judge did not finish within {seconds + JUDGE_GRACE_S:.0f}s\n" + err.decode(errors="replace")[-TAIL_CHARS:]
    tail = err.decode(errors="replace")[-TAIL_CHARS:]
    try:
        return json.loads(out), tail
    except ValueError:
        return None, f"the judge exited with code {judge.returncode} without a report\n{tail}"


def grade(task: Task, submitted_files: Mapping[str, str | bytes], backend: SandboxBackend,
          config: GradeConfig = GradeConfig()) -> GradeResult:
    require_pytest()
    if config.reward not in REWARD_MODES:
        raise ValueError(f"unknown reward mode {config.reward!r}; expected one of {REWARD_MODES}")
    files, notes = merge(task.files, submitted_files)
    remote = repo_modules(task.files)
    test_files = graded_files(task)
    tests = {f: task.hidden_tests.get(f, task.files.get(f)) for f in test_files}
    missing = [f for f, source in tests.items() if source is None]
    observed = {p: files[p] for p in task.observed_files if p in files and len(files[p]) <= OBSERVED_MAX_BYTES}
    notes += [f"{p} is larger than {OBSERVED_MAX_BYTES} bytes: not read" for p in task.observed_files
              if p in files and p not in observed]
    with tempfile.TemporaryDirectory(prefix="cj-judge-") as root:
        write_tree(root, {**observed, **task.hidden_tests,
                          **{f: s for f, s in tests.items() if s is not None}})
        present = [f for f in test_files if f not in missing]
        sandbox_tail = ""
        if remote & imported_modules(task.hidden_tests.values()):
            ws = backend.create(files, task_runtime(task))
            try:
                runtime = ws.runtime or runtime_lib.build()
                with backend.spawn(ws, [runtime.python, "-I", "-B", f"{REMOTE_MOUNT}/serve.py"], config.limits,
                                   ro_binds={REMOTE_DIR: REMOTE_MOUNT}) as proc:
                    report, tail = _judge(root, present, remote, public_names(task.files), proc,
                                          config.limits.wall_s)
                    sandbox_tail = proc.close()
            finally:
                backend.destroy(ws)
        else:
            report, tail = _judge(root, present, set(), {}, None, config.limits.wall_s)
    errors = [f"hidden test file {f} is missing from the task" for f in missing]
    errors += _task_errors(task, report, tail)
    return _result(task, report or {}, notes, errors, config.reward, tail, sandbox_tail)


def _task_errors(task: Task, report: dict | None, tail: str) -> list[str]:
    """What makes this grading say nothing about the submission: the judge failed, a hidden
    test could not be collected on its own account, or the runtime lacks a dependency of the
    task's own code. A submission that breaks its own import is the submission's failure."""
    if report is None:
        return [tail.splitlines()[0] if tail else "the judge failed"]
    imports = report.get("import_errors", [])
    missing_deps = {e.get("name") for e in imports if e.get("type") == "ModuleNotFoundError"}
    missing_deps &= imported_modules(s for p, s in task.files.items() if p.endswith(".py")) - repo_modules(task.files)
    errors = [f"the sandbox runtime lacks {m!r}, which the task's code imports (declare it in "
              "Task.requirements)" for m in sorted(n for n in missing_deps if n)]
    if not imports:
        errors += [f"hidden tests could not be collected: {e['nodeid']}: {e['text'][-500:]}"
                   for e in report.get("collect_errors", [])]
    return errors


def _result(task: Task, report: dict, notes: list[str], errors: list[str], mode: str,
            tail: str, sandbox_tail: str) -> GradeResult:
    outcomes = report.get("outcomes", {})
    tests = {t: outcomes.get(t) == "passed" for t in task.graded_tests}
    passed, total = sum(tests.values()), len(tests)
    if total == 0 or errors:
        reward = 0.0
    elif mode == "all_pass":
        reward = float(passed == total)
    else:
        reward = passed / total
    lines = [f"reward {reward:.3f}", f"{passed}/{total} graded tests passed"]
    lines += [f"  {t}: {outcomes.get(t, 'not run')}" for t, ok in tests.items() if not ok]
    for node, texts in report.get("notes", {}).items():
        lines += [f"  note on {node or 'collection'}: {t}" for t in texts]
    lines += [f"  the submission failed to import {e.get('module')}: {e.get('type')}: {e.get('str', '')[:300]}"
              for e in report.get("import_errors", [])]
    if report.get("broken"):
        lines.append(f"the submission's process stopped answering: {report['broken']}")
    lines += notes + [f"ERROR: {e}" for e in errors]
    if tail.strip():
        lines.append("judge output (tail):\n" + tail)
    if sandbox_tail.strip():
        lines.append("submission's stderr (tail):\n" + sandbox_tail[-TAIL_CHARS:])
    return GradeResult(reward=reward, passed=passed, total=total, tests=tests, details="\n".join(lines),
                       error="; ".join(errors))


def validate_task(task: Task, reference_files: Mapping[str, str | bytes], backend: SandboxBackend,
                  config: GradeConfig = GradeConfig()) -> None:
    """Raise InvalidTaskError unless the reference solution passes every graded test and the
    pristine repo fails at least one."""
    if not task.graded_tests:
        raise InvalidTaskError(f"{task.task_id}: no graded tests")
    unknown = [f for f in graded_files(task) if f not in task.hidden_tests and f not in task.files]
    if unknown:
        raise InvalidTaskError(f"{task.task_id}: node ids refer to missing test files {unknown}")
    ref = grade(task, reference_files, backend, dataclasses.replace(config, reward="fraction"))
    if ref.error or ref.passed != ref.total:
        failing = [t for t, ok in ref.tests.items() if not ok]
        raise InvalidTaskError(f"{task.task_id}: the reference solution fails hidden tests {failing}\n{ref.details}")
    before = grade(task, task.files, backend, config)
    if before.passed == before.total:
        raise InvalidTaskError(f"{task.task_id}: the unmodified repo already passes every graded test")
