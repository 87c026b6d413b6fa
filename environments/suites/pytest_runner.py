"""Build-time pytest runs of real repositories: outcomes, failure reports and per-test coverage.

Like `check_runner`, this is for BUILDING suites only (is the pristine suite green? which repo
functions does each test call? which tests does a mutant fail?), on code of pinned packages and
mutants we made of it. It favours speed over isolation: a few fresh worker processes, each with
its own copy of the repository on disk, fork one child per run under a CPU budget and rlimits;
the child writes the run's changed files, runs pytest in-process and reports. Agent work is never
run here; it is graded by the grader in the sandbox.

Coverage is which repository functions (file, first line) ran while each test was set up, called
and torn down (a profile hook, not line tracing), plus the functions that ran while the tests
were collected: a mutant there would change the import of every test, so the builder leaves them.
"""
from __future__ import annotations

import dataclasses
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence


RUN_MEMORY_BYTES = 3 << 30
REPORT_CHARS = 1500  # of each failing test's pytest report
PYTEST_ARGS = ("-q", "-p", "no:cacheprovider", "-c", os.devnull, "--tb=short", "--color=no", "--continue-on-collection-errors",
               "-W", "ignore::DeprecationWarning")


@dataclasses.dataclass(frozen=True)
class Run:
    key: str
    changed: Mapping[str, str]  # workspace path -> text replacing the repo's file for this run
    targets: tuple[str, ...]  # node ids or test files
    timeout_s: float = 30.0  # CPU seconds
    coverage: bool = False


@dataclasses.dataclass(frozen=True)
class RunResult:
    key: str
    status: str  # "ok" | "timeout" | "crash"
    outcomes: dict  # node id -> "passed" | "failed" | "error" | "skipped"
    reports: dict  # failing node id -> its pytest report (capped)
    coverage: dict  # node id -> [[path, first line], ...] (coverage runs only)
    collection: list  # [[path, first line], ...] functions that ran during collection
    seconds: float = 0.0


def run_all(repo_files: Mapping[str, str], runs: Sequence[Run], python: str, workers: int | None = None,
            progress=None) -> dict[str, RunResult]:
    """Every run against `repo_files` (written once per worker); results by key. `python` is the
    task's sandbox runtime, so the code sees the packages the grading will (an optional import
    that the host has and the sandbox lacks takes another code path)."""
    if not runs:
        return {}
    workers = max(1, min(workers or os.cpu_count() or 1, len(runs)))
    shards = [list(runs[i::workers]) for i in range(workers)]
    results: dict[str, RunResult] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def shard(runs_: list[Run]) -> None:
        try:
            for r in _run_shard(repo_files, runs_, python):
                with lock:
                    results[r.key] = r
                    if progress:
                        progress(1)
        except Exception as e:  # noqa: BLE001 - surfaced below, after the other shards
            errors.append(str(e))

    threads = [threading.Thread(target=shard, args=(s,)) for s in shards]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(errors[0])
    return results


def _run_shard(repo_files: Mapping[str, str], runs: list[Run], python: str):
    with tempfile.TemporaryDirectory(prefix="cj-pytest-") as root:
        for path, text in repo_files.items():
            dest = os.path.join(root, "repo", path)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
        # By path, in the runtime: this file and check_runner need the standard library alone.
        proc = subprocess.Popen([python, os.path.abspath(__file__), os.path.join(root, "repo")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env, cwd=root)
        stderr_tail = []
        drain = threading.Thread(target=lambda: stderr_tail.extend(proc.stderr.readlines()[-20:]), daemon=True)
        drain.start()
        try:
            for run in runs:
                proc.stdin.write(json.dumps(dataclasses.asdict(run)) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                if not line:
                    raise RuntimeError("pytest worker died:\n" + "".join(stderr_tail)[-2000:])
                yield RunResult(**json.loads(line))
        finally:
            proc.stdin.close()
            proc.wait()


# ---------------------------------------------------------------------------------------------
# Worker side (`python -m environments.suites.pytest_runner REPO_DIR`)
# ---------------------------------------------------------------------------------------------


class _Plugin:
    def __init__(self, root: str, coverage: bool):
        self.root, self.coverage = root + os.sep, coverage
        self.outcomes, self.reports, self.covered, self.collection = {}, {}, {}, set()
        self._seen = None

    def _profile(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(self.root):
                self._seen.add((code.co_filename[len(self.root):], code.co_firstlineno))

    def _start(self):
        self._seen = set()
        sys.setprofile(self._profile)
        threading.setprofile(self._profile)

    def _stop(self) -> set:
        sys.setprofile(None)
        threading.setprofile(None)
        seen, self._seen = self._seen, None
        return seen

    def pytest_collection(self, session):
        if self.coverage:
            self._start()

    def pytest_collection_finish(self, session):
        if self.coverage:
            self.collection = self._stop()

    def pytest_runtest_protocol(self, item, nextitem):
        if self.coverage:
            self._start()

    def pytest_runtest_logfinish(self, nodeid, location):
        if self.coverage and self._seen is not None:
            self.covered[nodeid] = sorted(self._stop())

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.outcomes[report.nodeid] = report.outcome
        elif report.failed:
            self.outcomes[report.nodeid] = "error"
        elif report.skipped:
            self.outcomes.setdefault(report.nodeid, "skipped")
        if report.failed and report.nodeid not in self.reports:
            self.reports[report.nodeid] = report.longreprtext.replace(self.root, "")[-REPORT_CHARS:]

    def pytest_collectreport(self, report):
        if report.failed:
            self.outcomes[report.nodeid or "<collection>"] = "error"
            self.reports[report.nodeid or "<collection>"] = str(report.longrepr).replace(self.root, "")[-REPORT_CHARS:]


def wall_backstop(cpu_s: float, load: float | None = None, cpus: int | None = None) -> float:
    """Wall seconds before a run is stopped: a test that sleeps uses no CPU. Scaled by the
    machine's load per core, so that a busy machine does not stop a run that a quiet one
    finishes (CPU time is the limit that decides; this only catches sleepers)."""
    load = os.getloadavg()[0] if load is None else load
    cpus = cpus or os.cpu_count() or 1
    return (2 * cpu_s + 5) * max(1.0, load / cpus)


def _child(payload: tuple[str, dict], write_fd: int) -> None:
    root, run = payload
    resource.setrlimit(resource.RLIMIT_AS, (RUN_MEMORY_BYTES, RUN_MEMORY_BYTES))
    signal.setitimer(signal.ITIMER_PROF, run["timeout_s"])
    signal.setitimer(signal.ITIMER_REAL, wall_backstop(run["timeout_s"]))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.chdir(root)
    sys.path.insert(0, root)
    import pytest
    import time

    plugin = _Plugin(root, run["coverage"])
    start = time.process_time()
    pytest.main([*PYTEST_ARGS, f"--rootdir={root}", *run["targets"]], plugins=[plugin])
    out = {"outcomes": plugin.outcomes, "reports": plugin.reports, "coverage": plugin.covered,
           "collection": sorted(plugin.collection), "seconds": time.process_time() - start}
    data = json.dumps(out).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(write_fd, view):]
    os._exit(0)


def _worker_main(root: str) -> None:
    here = sys.path[0]  # this file's directory (run by path), for check_runner alone: its other
    from check_runner import in_fork  # modules must not shadow the repository's

    sys.path.remove(here)
    import pytest  # noqa: F401 - imported once, before the forks

    for line in sys.stdin:
        if not line.strip():
            continue
        run = json.loads(line)
        saved = {}
        for path, text in run["changed"].items():
            dest = os.path.join(root, path)
            saved[dest] = open(dest, encoding="utf-8", newline="").read() if os.path.exists(dest) else None
            with open(dest, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        try:
            out, wait_status = in_fork(_child, (root, run))
        finally:
            for dest, text in saved.items():
                if text is None:
                    os.remove(dest)
                else:
                    with open(dest, "w", encoding="utf-8", newline="") as f:
                        f.write(text)
            shutil.rmtree(os.path.join(root, "__pycache__"), ignore_errors=True)
        base = {"key": run["key"], "outcomes": {}, "reports": {}, "coverage": {}, "collection": []}
        if os.WIFSIGNALED(wait_status):
            result = {**base, "status": "timeout"}
        elif not out:
            result = {**base, "status": "crash"}
        else:
            result = {**base, **json.loads(out), "status": "ok"}
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _worker_main(sys.argv[1])
