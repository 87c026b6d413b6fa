"""Scratch memory XLA plans for the SFT step, the RL update and the engine's prefill (every
prefill bucket), scoring the vocabulary over whole rows (`model.logits_chunk=0`) or a chunk of
positions at a time; `saved_gib` is the difference, the memory chunking frees.

Compiles only (abstract weights, nothing allocated), so a config sized for a GPU is measured on
this CPU. Read the savings, not the totals: XLA's CPU plans keep what per-layer recomputation
(`model.remat`) frees on an accelerator (a toy stack plans the same with and without it), so
their training-step totals are far above a GPU's; the logits' share is explicit in the program
(jax.checkpoint inside a loop over chunks) and is freed on either.

  python -m benchmarks.logits_memory_bench --config configs/qwen_coder_0p5b.py:bugfix \
      --out benchmarks/results/logits_memory_qwen.json
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import time

import jax
import jax.numpy as jnp
from flax import nnx

from benchmarks.common import write_result
from composer_jax.config_loading import load_config
from composer_jax.model import ModelConfig, abstract_model
from composer_jax.rl import engine
from composer_jax.rl.learner import make_update
from composer_jax.rl.losses import LossConfig
from composer_jax.rl.sft import make_sft_step
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import init_train_state

GIB = 2 ** 30


def rows(n: int, t: int, **floats) -> dict:
    ints = {k: jax.ShapeDtypeStruct((n, t), jnp.int32) for k in ("tokens", "positions", "segment_ids")}
    return dict(ints, **{k: jax.ShapeDtypeStruct((n, t), jnp.float32) for k in floats})


def plan(lowered) -> dict:
    start = time.perf_counter()
    memory = lowered.compile().memory_analysis()
    return dict(temp_gib=memory.temp_size_in_bytes / GIB, argument_gib=memory.argument_size_in_bytes / GIB,
                compile_s=time.perf_counter() - start)


def measure(config, cfg: ModelConfig, args) -> list[dict]:
    graphdef, state = abstract_model(cfg)
    out = []
    sft_tx = make_optimizer(config.sft.optim)
    sft_state = jax.eval_shape(lambda s: init_train_state(s, sft_tx), state)
    step = make_sft_step(graphdef, sft_tx, float(config.sft.optim.get("embed_lr_scale", 1.0)))
    for n in args.sft_rows:
        out.append(dict(what="sft_step", rows=n, row_len=args.row_len,
                        **plan(step.lower(sft_state, rows(n, args.row_len, loss_mask=1)))))
    rl_tx = make_optimizer(config.rl.optim)
    rl_state = jax.eval_shape(lambda s: init_train_state(s, rl_tx), state)
    update = make_update(graphdef, rl_tx, LossConfig.from_config(config.rl.loss), (0.0, 0.0), 1.0, False)
    for n in args.learner_rows:
        batch = rows(n, args.row_len, loss_mask=1, old_logp=1, sampler_logp=1, advantages=1)
        out.append(dict(what="rl_update", rows=n, row_len=args.row_len, **plan(update.lower(rl_state, batch))))
    max_len = int(config.rollout.window) + max(config.rollout.prefill_buckets)
    prefill = jax.jit(lambda p, s, *a: engine.prefill(nnx.merge(graphdef, p), s, *a), donate_argnums=1)
    for slots, t in itertools.product(args.slots, config.rollout.prefill_buckets):
        engine_state = jax.eval_shape(functools.partial(engine.init_state, cfg, slots, max_len))
        lowered = prefill.lower(state, engine_state, jax.ShapeDtypeStruct((slots,), jnp.int32),
                                jax.ShapeDtypeStruct((slots, t), jnp.int32), jax.ShapeDtypeStruct((slots,), jnp.int32),
                                jax.ShapeDtypeStruct((), jnp.float32))
        out.append(dict(what="engine_prefill", slots=slots, tokens=t, **plan(lowered)))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/qwen_coder_0p5b.py:bugfix")
    parser.add_argument("--chunks", type=int, nargs="+", default=[0, 512])
    parser.add_argument("--sft_rows", type=int, nargs="*", default=[4, 8])
    parser.add_argument("--learner_rows", type=int, nargs="*", default=[1, 4])
    parser.add_argument("--slots", type=int, nargs="*", default=[64, 96])
    parser.add_argument("--row_len", type=int, default=0, help="training row length (default: rl.row_len)")
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    args.row_len = args.row_len or int(config.rl.row_len)
    base = ModelConfig.from_config(config.model)
    results = []
    whole = {}
    for chunk in args.chunks:
        for r in measure(config, dataclasses.replace(base, logits_chunk=chunk), args):
            r["logits_chunk"] = chunk
            key = (r["what"], r.get("rows", r.get("slots")), r.get("row_len", r.get("tokens")))
            whole.setdefault(key, r["temp_gib"])  # the first chunk size listed is the baseline
            r["saved_gib"] = whole[key] - r["temp_gib"]
            print(f"logits_chunk={chunk:5d} {r['what']:15s} "
                  f"{r.get('rows', r.get('slots')):3d} x {r.get('row_len', r.get('tokens'))}: "
                  f"scratch {r['temp_gib']:7.2f} GiB, {r['saved_gib']:6.2f} GiB less than logits_chunk={args.chunks[0]} "
                  f"(compiled in {r['compile_s']:.0f} s)", flush=True)
            results.append(r)
    write_result(args.out, dict(config=args.config, model=dataclasses.asdict(base), results=results))


if __name__ == "__main__":
    main()
