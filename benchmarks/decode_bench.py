"""Batched decoding with the KV cache vs recomputing the whole prefix every step (tiny config).

  python benchmarks/decode_bench.py --out benchmarks/results/decode_tiny.json

Both paths decode the same greedy continuation inside one jitted `lax.scan`; the recompute path
runs a full forward over a fixed-size buffer holding the prefix (one compile, causal masking
makes the padding irrelevant) and reads the logits at the current position. Decoding at small
batch is bound by reading the weights once per step, so the cached path's tokens/s grows
with --batch while the recompute path's cost grows with the prefix length.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.common import write_result
from composer_jax.config_loading import load_config
from composer_jax.model import ModelConfig, Transformer, init_cache


def decode_cached(model, prompt_bt, n_new):
    b, p = prompt_bt.shape
    cache = init_cache(model.cfg, b, p + n_new)
    logits, cache, _ = model.extend(prompt_bt, cache)
    first = jnp.argmax(logits[:, -1], axis=-1)

    def body(carry, _):
        tok_b, cache = carry
        logits, cache, _ = model.extend(tok_b[:, None], cache)
        return (jnp.argmax(logits[:, 0], -1), cache), (tok_b, logits[:, 0])

    _, (tokens_nb, logits_nbv) = jax.lax.scan(body, (first, cache), None, length=n_new)
    return tokens_nb.T, logits_nbv


def decode_recompute(model, prompt_bt, forced_tokens_bn):
    """Teacher-forced on the cached path's tokens so the logits are comparable step by step."""
    b, p = prompt_bt.shape
    n_new = forced_tokens_bn.shape[1]
    buffer_bt = jnp.concatenate([prompt_bt, forced_tokens_bn], axis=1)

    def body(_, i):
        # The full prefix again, every step. Hiding the not-yet-generated tokens makes each
        # step's input differ, so XLA cannot hoist the forward pass out of the loop.
        visible_bt = jnp.where(jnp.arange(buffer_bt.shape[1]) <= p + i, buffer_bt, 0)
        logits, _ = model(visible_bt)
        return None, jax.lax.dynamic_index_in_dim(logits, p + i, axis=1, keepdims=False)

    _, logits_nbv = jax.lax.scan(body, None, jnp.arange(n_new))
    return logits_nbv


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/tiny.py")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt_len", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=512)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    cfg = ModelConfig.from_config(load_config(args.config).model)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    prompt = jax.random.randint(jax.random.key(0), (args.batch, args.prompt_len), 0, cfg.vocab_size)

    cached = jax.jit(lambda m, x: decode_cached(m, x, args.new_tokens))
    recompute = jax.jit(decode_recompute)
    tokens, logits_kv = jax.block_until_ready(cached(model, prompt))  # compile + warm-up
    jax.block_until_ready(recompute(model, prompt, tokens))

    start = time.perf_counter()
    tokens, logits_kv = jax.block_until_ready(cached(model, prompt))
    kv_s = time.perf_counter() - start
    start = time.perf_counter()
    logits_re = jax.block_until_ready(recompute(model, prompt, tokens))
    re_s = time.perf_counter() - start

    generated = args.batch * args.new_tokens
    write_result(args.out, dict(
        config=args.config, batch=args.batch, prompt_len=args.prompt_len, new_tokens=args.new_tokens,
        kv_tokens_per_s=generated / kv_s, recompute_tokens_per_s=generated / re_s,
        speedup=re_s / kv_s, max_abs_logit_diff=float(np.max(np.abs(logits_kv - logits_re)))))


if __name__ == "__main__":
    main()
