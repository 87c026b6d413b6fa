"""MoE layer forward+backward: dropless ragged_dot dispatch vs the dense one-hot reference.

  python benchmarks/moe_bench.py --out benchmarks/results/moe_tiny.json

Same tokens, same weights, 8 and 64 experts (top-2, tiny widths). Three dispatches: `ragged`
(sort + lax.ragged_dot), `blocked` (sort + block-padded batched matmul) and `dense` (every
expert on every token). The sparse paths' cost should follow top_k, the dense one n_experts;
XLA:CPU lowers ragged_dot densely, which is why `blocked` exists.
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from flax import nnx

from benchmarks.common import timed, write_result
from composer_jax.config_loading import load_config
from composer_jax.model import ModelConfig
from composer_jax.model.moe import MoE


def fwd_bwd_seconds(cfg: ModelConfig, x_btd) -> float:
    graphdef, params, rest = nnx.split(MoE(cfg, rngs=nnx.Rngs(0)), nnx.Param, ...)

    def loss(p, x):
        y, routing = nnx.merge(graphdef, p, rest)(x)
        return jnp.mean(y**2) + routing.load_balance_loss

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    return timed(step, params, x_btd, repeats=5)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/tiny.py")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    base = load_config(args.config).model
    x = jax.random.normal(jax.random.key(0), (args.tokens // 256, 256, base.d_model))
    result = dict(config=args.config, tokens=args.tokens, top_k=base.top_k,
                  d_model=base.d_model, d_ff_expert=base.d_ff_expert)
    for n_experts in (8, 64):
        for impl in ("ragged", "blocked", "dense"):
            model_cfg = ModelConfig.from_config(dict(base, n_experts=n_experts, moe_impl=impl))
            seconds = fwd_bwd_seconds(model_cfg, x)
            result[f"{impl}_ms_{n_experts}"] = 1000 * seconds
            result[f"{impl}_tokens_per_s_{n_experts}"] = args.tokens / seconds
        for impl in ("ragged", "blocked"):
            result[f"{impl}_speedup_{n_experts}"] = (
                result[f"dense_ms_{n_experts}"] / result[f"{impl}_ms_{n_experts}"])
    write_result(args.out, result)


if __name__ == "__main__":
    main()
