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
Part 2, a slow environment (`--latency` s per reset/step, on the Ray pool) and a learner
update of `--update_s` s (the bandit stand-in learner plus a sleep): `--steps` RL steps of
`--batch` episodes, sync vs async with max_lag=1.
  async_speedup                    sync wall time / async wall time
  ideal_speedup                    (generate + update) / max(generate, update), from sync's steps
"""
import argparse
import os
import statistics
import time

from benchmarks.common import write_result
from composer_jax.fleet import FleetConfig, bandit
from composer_jax.fleet.async_rl import Sample, run_rl
from composer_jax.fleet.cluster import connect
from composer_jax.fleet.factory import env_factory
from composer_jax.fleet.pool import EnvPool
from composer_jax.fleet.scripted import play, run_scripted
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
        local_make, _ = env_factory(FleetConfig(), env_id, split="validation", **kwargs)
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


def async_vs_sync(args, cfg: FleetConfig) -> dict:
    env_id, kwargs = SUITES["LongHorizon"]
    tasks = spaced_tasks("LongHorizon", kwargs, 40)
    with EnvPool(cfg, env_id, latency_s=args.latency, split="validation", **kwargs) as pool:
        def rollout(params, version, indices):
            """Per sample: the bandit picks an arm; a slow graded episode decides if it pays."""
            out = []
            for (arm, logp), i in zip(bandit.sample_arms(params, indices), indices):
                env = pool.make_env()
                episode = play(env, i, tasks[i % len(tasks)], expert_plan)
                env.close()
                out.append((arm, logp) if episode.reward == 1.0 else (0, logp))
            return out

        def train(params, batch):
            time.sleep(args.update_s)  # the accelerator's update
            return bandit.train_step(params, batch, rewards=ARM_REWARDS)

        warm = bandit.init_params(len(ARM_REWARDS))  # compile outside the timed runs
        bandit.train_step(warm, [Sample(i, 0, a) for i, a in enumerate(bandit.sample_arms(warm, range(args.batch)))],
                          rewards=ARM_REWARDS)
        result = {}
        for mode in ("sync", "async"):
            run_cfg = FleetConfig(rl_mode=mode, max_lag=1, concurrency=args.workers)
            start = time.perf_counter()
            _, hist = run_rl(bandit.init_params(len(ARM_REWARDS)), rollout, train, steps=args.steps,
                             batch_size=args.batch, cfg=run_cfg)
            result[mode] = {"wall_s": time.perf_counter() - start,
                            "step_s_mean": statistics.fmean(h["step_s"] for h in hist),
                            "learner_wait_s_mean": statistics.fmean(h["wait_s"] for h in hist),
                            "train_s_mean": statistics.fmean(h["train_s"] for h in hist),
                            "lag_mean": statistics.fmean(h["lag_mean"] for h in hist),
                            "dropped_stale": sum(h["dropped_stale"] for h in hist),
                            "is_weight_mean": statistics.fmean(h["is_weight_mean"] for h in hist)}
    result["speedup"] = result["sync"]["wall_s"] / result["async"]["wall_s"]
    generate, update = result["sync"]["learner_wait_s_mean"], result["sync"]["train_s_mean"]
    result["ideal_speedup"] = (generate + update) / max(generate, update)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--episodes", type=int, default=16, help="per suite")
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--latency", type=float, default=0.2, help="simulated env latency per call (s)")
    ap.add_argument("--update_s", type=float, default=5.0, help="simulated learner update (s)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    connect("", num_cpus=os.cpu_count())
    cfg = FleetConfig(backend="ray", workers=args.workers, cpus_per_worker=1.0)
    backends = compare_backends(args, cfg)
    rl = async_vs_sync(args, cfg)
    total_local = sum(b["local"]["episodes"] for b in backends.values())
    write_result(args.out, {"fleet_bench": {
        "local_eps_per_s": total_local / sum(b["local"]["wall_s"] for b in backends.values()),
        "ray_eps_per_s": total_local / sum(b["ray"]["wall_s"] for b in backends.values()),
        "ray_overhead_s_per_episode": statistics.fmean(b["ray_overhead_s_per_episode"] for b in backends.values()),
        "ray_call_ms": statistics.fmean(b["ray_call_ms"] for b in backends.values()),
        "async_speedup": rl["speedup"], "ideal_speedup": rl["ideal_speedup"], "suites": backends, "rl_steps": rl,
        "settings": vars(args)}})


if __name__ == "__main__":
    main()
