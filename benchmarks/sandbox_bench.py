"""Sandbox start latency, grading cost per task kind (judge outside vs the old in-sandbox pytest
path, same tasks, same run), and the time to submit a 10,000-file workspace; writes JSON.

    python benchmarks/sandbox_bench.py --out benchmarks/results/sandbox_bench.json

  start_ms              median wall ms of `true` inside a sandbox (backend.run, limits, cgroups)
  bare_start_ms         median wall ms of `true` in a plain subprocess
  grading[kind]         per task kind, median wall seconds of one grading of the reference:
    judge_s             the grader: sandboxed submission + host judge (grading/grader.py)
    old_path_s          what the previous grader ran: the graded tree plus the hidden tests, pytest
                        inside the sandbox (without its plugin's bookkeeping, so a lower bound)
    ratio               judge_s / old_path_s (target <= 1.5)
  submit_10k_files_s    wall seconds of `submit` on a workspace of 10,000 small files (target < 5)
  submit_over_quota_s   the same with 20,000 files: refused by the quota before any read

The two grading paths alternate, so background load hits both alike.
"""
import argparse
import json
import os
import statistics
import time

import gymnasium as gym

import environments  # noqa: F401 - registers the environments
from benchmarks.common import write_result
from composer_jax.grading import grade
from composer_jax.grading.grader import graded_files, task_runtime
from composer_jax.grading.submission import merge
from composer_jax.harness.protocol import format_tool_call
from composer_jax.sandbox import Limits, get_backend
from environments.suites import make_suite

KINDS = {  # one real task of each kind; the reference solution is graded
    "humaneval": ("Implement", "implement/humaneval-32"),
    "repo": ("BugFix", None),  # the first hand-written repo task of the validation split
    "longhorizon": ("LongHorizon", "longhorizon/h6-f30/validation-0"),
}


def _task(suite: str, task_id: str | None):
    s = make_suite(suite)
    if task_id is None:
        task_id = next(t for split in ("validation", "train") for t in s.task_ids(split) if "/repo-" in t)
    return s.get(task_id)


def old_path(task, files, backend) -> float:
    """The previous design's run: hidden tests copied into the sandbox, pytest there."""
    start = time.perf_counter()
    merged, _ = merge(task.files, files)
    ws = backend.create({**merged, **task.hidden_tests}, task_runtime(task))
    try:
        argv = ["python", "-I", "-B", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
                "--rootdir=/workspace", *graded_files(task)]
        res = backend.run(ws, argv, Limits(wall_s=60.0, cpu_s=60, memory_bytes=2 << 30))
    finally:
        backend.destroy(ws)
    assert res.returncode == 0, res.stdout[-2000:]
    return time.perf_counter() - start


def judged(task, files, backend) -> float:
    start = time.perf_counter()
    res = grade(task, files, backend)
    assert res.reward == 1.0, res.details
    return time.perf_counter() - start


def submit_seconds(n_files: int) -> tuple[float, float]:
    """(wall seconds of submit on a solved LongHorizon workspace holding n_files extra files, reward)."""
    env = gym.make("composer/LongHorizon-v0", split="validation")
    env.reset(options={"task_index": 0})
    for path, content in json.loads(env.unwrapped.task.metadata["reference_files"]).items():
        env.step(format_tool_call("write_file", path=path, content=content))
    root = env.unwrapped._workspace.path
    os.makedirs(os.path.join(root, "junk"))
    for i in range(n_files):
        with open(os.path.join(root, "junk", f"f{i}.txt"), "w") as f:
            f.write("x")
    start = time.perf_counter()
    _, reward, *_ = env.step(format_tool_call("submit"))
    seconds = time.perf_counter() - start
    env.close()
    return seconds, reward


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
        start = time.perf_counter()
        os.spawnv(os.P_WAIT, "/bin/true", ["true"])
        bare.append(time.perf_counter() - start)
    backend.destroy(ws)
    grading = {}
    for kind, (suite, task_id) in KINDS.items():
        task = _task(suite, task_id)
        files = {**task.files, **json.loads(task.metadata["reference_files"])}
        judged(task, files, backend), old_path(task, files, backend)  # warm caches for both
        new, old = [], []
        for _ in range(args.episodes):
            new.append(judged(task, files, backend))
            old.append(old_path(task, files, backend))
        grading[kind] = {"task_id": task.task_id, "judge_s": round(statistics.median(new), 4),
                         "old_path_s": round(statistics.median(old), 4),
                         "ratio": round(statistics.median(new) / statistics.median(old), 3)}
    fits, fits_reward = submit_seconds(9_980)  # with the task's own files and dirs: just under 10,000
    over, over_reward = submit_seconds(20_000)
    write_result(args.out, {
        "backend": backend.name, "cgroups": backend.uses_cgroups, "episodes": args.episodes,
        "start_ms": round(1e3 * statistics.median(sandboxed), 2),
        "bare_start_ms": round(1e3 * statistics.median(bare), 2),
        "grading": grading,
        "submit_10k_files_s": round(fits, 3), "submit_10k_files_reward": fits_reward,
        "submit_over_quota_s": round(over, 3), "submit_over_quota_reward": over_reward,
    })


if __name__ == "__main__":
    main()
