"""Sandbox start latency and grading throughput vs bare subprocesses, same run; writes JSON.

    python benchmarks/sandbox_bench.py --out benchmarks/results/sandbox_bench.json

  start_ms          median wall ms of `true` inside a sandbox (backend.run, limits, cgroups)
  bare_start_ms     median wall ms of `true` in a plain subprocess
  sandboxed_per_s   full gradings per second: fresh workspace, sandboxed pytest through the
                    grader's plugin, report verification, teardown
  bare_per_s        the same files and the same pytest, in a temp dir, in a plain subprocess
  overhead_ratio    bare_per_s / sandboxed_per_s (target <= 1.3)

Bare and sandboxed runs alternate so background load hits both alike. Both disable plugin
autoload and the cache provider, which is how the grader runs pytest.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.common import write_result
from composer_jax.grading import Task, grade
from composer_jax.sandbox import Limits, get_backend
from composer_jax.sandbox.files import write_tree

FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
HIDDEN = ("import mathx\n\n\ndef test_add():\n    assert mathx.add(2, 3) == 5\n\n\n"
          "def test_mul():\n    assert mathx.mul(2, 3) == 6\n\n\n"
          "def test_not_always_equal():\n    assert mathx.add(2, 3) == object()\n")
TASK = Task(task_id="bench/mathx", suite="BugFix", prompt="fix mathx",
            files={"mathx.py": FIXED.replace("a + b", "a - b")},
            hidden_tests={"tests/test_hidden.py": HIDDEN},
            graded_tests=("tests/test_hidden.py::test_add", "tests/test_hidden.py::test_mul"),
            tripwire_tests=("tests/test_hidden.py::test_not_always_equal",))
SUBMISSION = {"mathx.py": FIXED}


def bare_start() -> float:
    start = time.perf_counter()
    subprocess.run(["true"], check=True)
    return time.perf_counter() - start


def bare_grading() -> float:
    start = time.perf_counter()
    root = tempfile.mkdtemp(prefix="cj-bench-")
    try:
        write_tree(root, {**SUBMISSION, **TASK.hidden_tests})
        env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONDONTWRITEBYTECODE="1")
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_hidden.py"],
                       cwd=root, env=env, stdout=subprocess.DEVNULL, check=False)
    finally:
        shutil.rmtree(root)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--starts", type=int, default=30)
    ap.add_argument("--episodes", type=int, default=12)
    args = ap.parse_args()
    backend = get_backend(args.backend)
    ws = backend.create({})
    sandboxed, bare = [], []
    for _ in range(args.starts):
        sandboxed.append(backend.run(ws, ["true"], Limits()).wall_s)
        bare.append(bare_start())
    backend.destroy(ws)
    grade(TASK, SUBMISSION, backend)  # warm the page cache for both sides
    bare_grading()
    graded, plain = [], []
    for _ in range(args.episodes):
        start = time.perf_counter()
        res = grade(TASK, SUBMISSION, backend)
        graded.append(time.perf_counter() - start)
        assert res.reward == 1.0, res.details
        plain.append(bare_grading())
    sandboxed_per_s, bare_per_s = 1 / statistics.median(graded), 1 / statistics.median(plain)
    write_result(args.out, {
        "backend": backend.name,
        "cgroups": backend.uses_cgroups,
        "start_ms": round(1e3 * statistics.median(sandboxed), 2),
        "bare_start_ms": round(1e3 * statistics.median(bare), 2),
        "sandboxed_per_s": round(sandboxed_per_s, 3),
        "bare_per_s": round(bare_per_s, 3),
        "overhead_ratio": round(bare_per_s / sandboxed_per_s, 3),
        "episodes": args.episodes,
    })


if __name__ == "__main__":
    main()
