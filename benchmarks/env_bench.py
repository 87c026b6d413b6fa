"""Task-suite build time, task counts, and expert / do-nothing rewards per suite; writes JSON.

    python benchmarks/env_bench.py --out benchmarks/results/env_bench.json [--episodes 0]

  build_s            wall seconds to build the suite from a cold cache (a fresh temp dir)
  tasks              task counts per split, plus the build's drop/keep statistics
  expert_reward      mean reward of the scripted expert over validation tasks
  null_reward        mean reward of submitting at once over the same tasks
  episode_s          median wall seconds of one expert episode (sandboxed tools + grading)

`--episodes N` evaluates N evenly spaced validation tasks per suite (0: the whole split).
"""
import argparse
import statistics
import tempfile
import time

import gymnasium as gym

import environments  # noqa: F401 - registers the environments
from benchmarks.common import write_result
from environments.experts import expert_plan, null_plan, run_plan
from environments.suites import bugfix, implement
from environments.suites.longhorizon import LongHorizonSuite


def cold_build_s(build) -> float:
    with tempfile.TemporaryDirectory() as cache_dir:
        start = time.perf_counter()
        build(cache_dir)
        return time.perf_counter() - start


def evaluate(env_id: str, ids: list[str]) -> dict:
    env = gym.make(env_id, split="validation")
    expert, null, seconds = [], [], []
    for task_id in ids:
        start = time.perf_counter()
        expert.append(run_plan(env, expert_plan, task_id=task_id).reward)
        seconds.append(time.perf_counter() - start)
        null.append(run_plan(env, null_plan, task_id=task_id).reward)
    env.close()
    return {"episodes": len(ids), "expert_reward": statistics.fmean(expert),
            "null_reward": statistics.fmean(null), "episode_s": statistics.median(seconds)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--episodes", type=int, default=20)
    args = ap.parse_args()
    result = {
        "BugFix": {"build_s": cold_build_s(lambda d: bugfix.BugFixSuite(cache_dir=d))},
        "Implement": {"build_s": cold_build_s(lambda d: implement.ImplementSuite(cache_dir=d))},
        "LongHorizon": {"build_s": 0.0},  # generated on demand
    }
    suites = {"BugFix": bugfix.BugFixSuite(), "Implement": implement.ImplementSuite(),
              "LongHorizon": LongHorizonSuite()}
    for name, suite in suites.items():
        ids = suite.task_ids("validation")
        if args.episodes:
            ids = ids[:: max(1, len(ids) // args.episodes)][: args.episodes]
        result[name]["tasks"] = {"train": len(suite.task_ids("train")), "validation": len(suite.task_ids("validation")),
                                 **getattr(suite, "stats", {})}
        result[name].update(evaluate(f"composer/{name}-v0", ids))
    write_result(args.out, {"env_bench": result})


if __name__ == "__main__":
    main()
