"""Do the sampler's and the learner's log-probs of the same tokens agree on a real model?

    python -m benchmarks.logp_agreement --config configs/qwen_coder_0p5b.py:bugfix \
        --init_from runs/qwen_cpu_sft/sft/checkpoints --episodes 4 --config.rollout.slots=4 \
        --config.rl.row_len=1024 --config.rollout.window=1024 --config.rollout.summary_budget=128 \
        --config.rollout.turn_budget=192 --config.rollout.temperature=0.7 \
        "--config.rollout.prefill_buckets=(128, 512)" --out benchmarks/results/logp_agreement_qwen_cpu.json

RL's importance ratios assume that the engine (KV-cache decode, bucketed prefills) and the
learner (one packed forward pass) give a token the same log-probability under the same params.
This runs `--episodes` train-split episodes through the engine, packs them as the learner does
and scores every generated token with the learner's forward pass. Reported by where the token
sits (a turn's first token, comes after a prefill; the others, after a decode step) and by
position, with the largest differences and their tokens.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

import numpy as np

from benchmarks.common import write_result


def stats(d: np.ndarray) -> dict:
    a = np.abs(d)
    return dict(tokens=int(a.size), mean_abs=float(a.mean()) if a.size else None,
                max_abs=float(a.max()) if a.size else None,
                k3=float(np.mean(np.exp(-d) + d - 1)) if a.size else None)


def main(argv=None):
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from composer_jax.config_loading import apply_override, load_config, split_overrides
    from composer_jax.rl import segments
    from composer_jax.rl.agent import AgentLoop
    from composer_jax.rl.envs import local_factory, task_ids
    from composer_jax.rl.learner import make_logp
    from composer_jax.rl.train import build

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--init_from", default="", help="checkpoints directory or imported model (default: fresh init)")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--out", default="")
    argv, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    if args.episodes < 1:
        p.error(f"--episodes must be >= 1, got {args.episodes}")
    c = load_config(args.config)
    for item in overrides:
        apply_override(c, item)
    run = build(c, None, init_from=args.init_from)  # no optimiser state: only evaluated
    run.loop.close()
    loop = AgentLoop(run.engine, run.tokenizer, dataclasses.replace(run.engine.rollout, seed=int(c.seed)),
                     local_factory(c.rl, "train"))
    try:
        ids = task_ids(c.rl, "train")[:args.episodes]
        episodes = loop.run([{"options": {"task_id": t}} for t in ids], progress="episodes")
    finally:
        loop.close()
    seqs = [s for ep in episodes for s in segments.episode_sequences(ep, 1.0)]
    rows = segments.pack(seqs, int(c.rl.row_len))
    temperature = float(c.rollout.temperature)
    logp_fn = make_logp(run.graphdef, temperature, replay=False)
    params, buffers = nnx.split_state(run.engine.params, nnx.Param, ...)
    learner = np.zeros_like(rows.sampler_logp)
    with jax.set_mesh(run.mesh):
        for r in range(rows.rows):
            batch = {k: jnp.asarray(v) for k, v in rows.take(np.array([r])).items()}
            learner[r] = np.asarray(logp_fn(params, buffers, batch))[0]
    mask = rows.loss_mask > 0
    # A target t is a turn's first token when target t - 1 was not generated (a prefill came before)
    prev = np.concatenate([np.zeros_like(mask[:, :1]), mask[:, :-1]], axis=1)
    first = mask & ~prev
    d = rows.sampler_logp - learner
    by_position = {}
    for lo, hi in ((0, 256), (256, 512), (512, 1024), (1024, 4096), (4096, 1 << 30)):
        sel = mask & (rows.positions >= lo) & (rows.positions < hi)
        if sel.any():
            by_position[f"{lo}-{hi}"] = stats(d[sel])
    worst = []
    for r, t in sorted(zip(*np.nonzero(mask)), key=lambda rt: -abs(d[rt]))[:8]:
        target = int(rows.tokens[r, t + 1])
        worst.append(dict(position=int(rows.positions[r, t]), first_of_turn=bool(first[r, t]),
                          token=run.tokenizer.decode([target]), sampler=float(rows.sampler_logp[r, t]),
                          learner=float(learner[r, t])))
    write_result(args.out, dict(
        bench="logp_agreement", config=str(c.name), argv=sys.argv[1:] if argv is None else list(argv),
        init_from=args.init_from, episodes=len(episodes), temperature=temperature, dtype=str(c.model.dtype),
        all=stats(d[mask]), first_of_turn=stats(d[first]), decoded=stats(d[mask & ~first]),
        by_position=by_position, worst=worst,
        end_reasons={k: sum(ep.end_reason == k for ep in episodes) for k in {ep.end_reason for ep in episodes}}))


if __name__ == "__main__":
    main()
