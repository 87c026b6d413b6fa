"""Env fleet throughput (local vs Ray) and async-vs-sync RL step time; writes JSON.

    python benchmarks/fleet_bench.py --out benchmarks/results/fleet_bench.json

Part 1, same episodes both ways: the scripted expert solves `--episodes` BugFix and as many
LongHorizon validation tasks, `--workers` at a time, on local envs (threads in this process,
as the agent loop runs them) and on a warm Ray pool of `--workers` actors.
  local_eps_per_s, ray_eps_per_s   graded episodes per second
  ray_overhead_s_per_episode       mean episode wall time on Ray minus local (negative: Ray's
                                   separate processes beat threads sharing this one's GIL)
  ray_call_ms, calls_per_episode   an actor call's round trip, and calls an episode makes
  pool_start_s                     starting the warm pool (actors, env, task suites)
Part 2, through the real trainer (`composer_jax.rl.train.run_rl`): `--steps` RL steps of the
tiny policy (`--model`, a configs/tiny.py variant) on composer/Toy-v0 slowed to `--latency` s
per reset/step, `--groups` groups of 4 a step, `--epochs` passes of the update; sync vs async
(fleet.rl_mode, max_lag=1) on local envs and on the Ray fleet. Steps 1-2 are left out (compiles).
  async_speedup (local, ray)       sync step time / async step time (wall time between steps)
  ideal_speedup                    (rollout + update) / max(rollout, update), from sync's steps
"""
import argparse
import os
import pathlib
import shutil
import statistics
import time

import gymnasium as gym

import environments  # noqa: F401 - registers the envs
from benchmarks.common import write_result
from composer_jax.fleet import FleetConfig
from composer_jax.fleet.cluster import connect
from composer_jax.fleet.pool import EnvPool
from composer_jax.fleet.scripted import run_scripted
from environments.experts import expert_plan
from environments.suites import make_suite

LONG = {"hops": 3, "filler_lines": 5, "validation_size": 40}
SUITES = {"BugFix": ("composer/BugFix-v0", {}), "LongHorizon": ("composer/LongHorizon-v0", {"suite_options": LONG})}
ARM_REWARDS = (0.0, 0.2, 1.0, 0.1)


def spaced_tasks(suite: str, kwargs: dict, n: int) -> list[dict]:
    ids = make_suite(suite, **kwargs.get("suite_options", {})).task_ids("validation")
    return [{"options": {"task_id": i}} for i in ids[:: max(1, len(ids) // n)][:n]]


def throughput(make_env, tasks, workers: int) -> dict:
    start = time.perf_counter()
    outcomes = run_scripted(make_env, tasks, expert_plan, concurrency=workers)
    wall = time.perf_counter() - start
    return {"episodes": len(outcomes), "wall_s": wall, "eps_per_s": len(outcomes) / wall,
            "episode_s_mean": statistics.fmean(o.wall_s for o in outcomes),
            "rewards": [o.reward for o in outcomes], "failed": sum(o.status == "failed" for o in outcomes)}


def round_trip_s(pool: EnvPool, calls: int = 100) -> float:
    """Seconds per no-op actor call (the fixed cost of every reset/step on the fleet)."""
    worker = pool.acquire()
    start = time.perf_counter()
    for _ in range(calls):
        pool.call(worker, "ready")
    pool.release(worker)
    return (time.perf_counter() - start) / calls


def compare_backends(args, cfg: FleetConfig) -> dict:
    out = {}
    for suite, (env_id, kwargs) in SUITES.items():
        tasks = spaced_tasks(suite, kwargs, args.episodes)
        local_make = lambda: gym.make(env_id, split="validation", **kwargs)  # noqa: E731
        local = throughput(local_make, tasks, args.workers)
        start = time.perf_counter()
        with EnvPool(cfg, env_id, split="validation", **kwargs) as pool:
            pool_start = time.perf_counter() - start
            ray_ = throughput(pool.make_env, tasks, args.workers)
            call_s = round_trip_s(pool)
        assert ray_["rewards"] == local["rewards"], "local and Ray runs disagree"
        suite_obj = make_suite(suite, **kwargs.get("suite_options", {}))
        calls = statistics.fmean(len(expert_plan(suite_obj.get(t["options"]["task_id"]))) + 2 for t in tasks)
        out[suite] = {"local": local, "ray": ray_, "pool_start_s": pool_start, "ray_call_ms": 1e3 * call_s,
                      "calls_per_episode": calls,
                      "expert_reward": statistics.fmean(local["rewards"]),
                      "ray_overhead_s_per_episode": ray_["episode_s_mean"] - local["episode_s_mean"]}
        for side in ("local", "ray"):
            del out[suite][side]["rewards"]
    return out


def trainer_config(args, mode: str, backend: str):
    """The tiny test policy on composer/Toy-v0 (a one-turn env whose every group has reward
    variance, so every step updates) slowed by `--latency` s per reset and step."""
    from configs.tiny import get_config

    c = get_config(args.model or None)
    c.model.max_seq_len = 512
    c.rollout.update(window=448, summary_budget=16, turn_budget=12, max_segments=2, slots=8, max_turns=1,
                     prefill_buckets=(32, 128))
    c.rl.suite_options = {"tasks": 64, "latency_s": args.latency}
    c.rl.update(env_id="composer/Toy-v0", env_max_turns=1, steps=args.steps, groups_per_step=args.groups,
                group_size=4, max_sampling_rounds=1, row_len=64, minibatch_rows=8, epochs=args.epochs,
                eval_tasks=0, checkpoint_every=args.steps)
    c.rl.optim.update(lr=1e-3, steps=args.steps)
    c.fleet.update(backend=backend, rl_mode=mode, max_lag=1, workers=8, cpus_per_worker=0.25)
    return c


def async_vs_sync(args, work) -> dict:
    """`--steps` RL steps of `python -m composer_jax.rl.train` (run_rl) per mode and backend."""
    from composer_jax.rl.train import run_rl
    from composer_jax.train.metrics import read_jsonl

    result = {}
    for backend in ("local", "ray"):
        for mode in ("sync", "async"):
            out = work / f"{backend}_{mode}"
            start, stamps = time.perf_counter(), []
            run_rl(trainer_config(args, mode, backend), out,
                   log=lambda line: stamps.append(time.perf_counter()) if line.startswith("rl ") else None)
            wall = time.perf_counter() - start
            rows = [r for r in read_jsonl(out / "metrics.jsonl") if r["kind"] == "train"][2:]  # steps 1-2: compiles
            # step_s: wall time between consecutive steps' log lines from step 2 on (async's step 2
            # rollouts overlap step 1's compile, which would flatter it)
            result[f"{backend}_{mode}"] = {
                "run_wall_s": wall, "step_s_mean": (stamps[-1] - stamps[1]) / (len(stamps) - 2),
                "rollout_s_mean": statistics.fmean(r["rollout_s"] for r in rows),
                "learn_s_mean": statistics.fmean(r["learn_s"] for r in rows),
                "learner_wait_s_mean": statistics.fmean(r["wait_s"] for r in rows),
                "lag_mean": statistics.fmean(r["lag_mean"] for r in rows),
                "reward": [r["reward"] for r in rows]}
        sync, asyn = result[f"{backend}_sync"], result[f"{backend}_async"]
        result[f"{backend}_speedup"] = sync["step_s_mean"] / asyn["step_s_mean"]
        result[f"{backend}_ideal_speedup"] = ((sync["rollout_s_mean"] + sync["learn_s_mean"])
                                              / max(sync["rollout_s_mean"], sync["learn_s_mean"]))
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--episodes", type=int, default=16, help="per suite")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--latency", type=float, default=0.5, help="simulated env latency per call (s)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--model", default="", help="configs/tiny.py variant of the policy ('' = the 8.8M MoE)")
    ap.add_argument("--workdir", default="runs/fleet_bench")
    args = ap.parse_args()
    connect("", num_cpus=os.cpu_count())
    cfg = FleetConfig(backend="ray", workers=args.workers, cpus_per_worker=1.0)
    backends = compare_backends(args, cfg)
    work = pathlib.Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    rl = async_vs_sync(args, work)
    total_local = sum(b["local"]["episodes"] for b in backends.values())
    write_result(args.out, {"fleet_bench": {
        "local_eps_per_s": total_local / sum(b["local"]["wall_s"] for b in backends.values()),
        "ray_eps_per_s": total_local / sum(b["ray"]["wall_s"] for b in backends.values()),
        "ray_overhead_s_per_episode": statistics.fmean(b["ray_overhead_s_per_episode"] for b in backends.values()),
        "ray_call_ms": statistics.fmean(b["ray_call_ms"] for b in backends.values()),
        "async_speedup": {"local": rl["local_speedup"], "ray": rl["ray_speedup"]},
        "ideal_speedup": {"local": rl["local_ideal_speedup"], "ray": rl["ray_ideal_speedup"]},
        "suites": backends, "rl_steps": rl,
        "settings": vars(args)}})


if __name__ == "__main__":
    main()
