"""One policy on the same held-out tasks through our native harness and through mini-swe-agent.

    python benchmarks/harness_eval.py --config configs/qwen_coder_0p5b.py:bugfix --tasks 4 \
        --out benchmarks/results/harness_eval_qwen_cpu.json [--config.rl.init_from=DIR]

Both arms use one engine and the evaluation seed of rl.train (`seeds.eval`), on the first
`--tasks` validation tasks of rl.env_id: the native agent loop with our tool protocol, and
`rl.harness=mini_swe_agent` (the PyPI harness through the OpenAI endpoint, its commands in our
sandbox, graded by the env). Per arm: passes (Wilson interval), turns, one episode's transcript,
and for the harness its exit statuses and shell commands.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import time

import jax

from composer_jax.config_loading import load_config, split_overrides
from composer_jax.rl import train
from composer_jax.rl.envs import local_factory, task_ids
from composer_jax.rl.harness_loop import HarnessLoop
from composer_jax.rl.learner import evaluate
from composer_jax.seeds import seeds


def main(argv=None) -> None:
    given = list(argv or [])
    argv, overrides = split_overrides(given)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--arms", default="native,mini_swe_agent")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    config = load_config(args.config, overrides)
    run = train.build(config, None, init_from=config.rl.init_from)
    run.loop.close()
    ids = task_ids(config.rl, "validation")[:args.tasks]
    make_env = local_factory(config.rl, "validation")
    out = dict(config=args.config, init_from=config.rl.init_from, tasks=ids, arms={},
               command="python benchmarks/harness_eval.py " + " ".join(given))
    for arm in args.arms.split(","):
        loop = (HarnessLoop(run.engine, run.tokenizer, run.engine.rollout, make_env,
                            step_limit=int(config.rl.env_max_turns)) if arm == "mini_swe_agent"
                else train.make_loop(config, run.engine, run.tokenizer, make_env))
        t0 = time.perf_counter()
        try:
            with jax.set_mesh(run.mesh):
                ev = evaluate(loop, ids, seed=seeds(config).eval, outcomes=True, sampling=train.eval_sampling(config))
        finally:
            loop.close()
        row = {k: ev[k] for k in ("n", "pass_rate", "ci95_low", "ci95_high", "passed", "turns_per_episode",
                                  "generated_tokens", "transcript_tokens") if k in ev}
        row["wall_s"] = time.perf_counter() - t0
        if arm == "mini_swe_agent":
            row["serving"] = dict(loop.stats)
        print(arm, json.dumps(row), flush=True)
        row["transcript"] = ev["transcript"]  # one episode, segment by segment: how the arm fails or passes
        out["arms"][arm] = row
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
