"""The LM head and per-position scores of target tokens, `chunk` positions at a time.

A row's float32 logits over a 152k vocabulary are 2.5 GB per 4,096 tokens and a loss keeps
several such buffers (log-softmax, probabilities, their cotangents). Chunked, only one chunk's
logits exist at a time and the backward pass recomputes them (jax.checkpoint), so peak memory
follows the chunk, not the row. `chunk=0` scores the whole row at once: the reference path.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from composer_jax.sharding import constrain


def vocab_logits(xn_btd: jax.Array, w: jax.Array, tied: bool) -> jax.Array:
    """float32 logits of final-normed hidden states; `w` is the embedding [v, d] when tied, else
    the head [d, v]."""
    eq = "btd,vd->btv" if tied else "btd,dv->btv"
    out = jnp.einsum(eq, xn_btd, w.astype(xn_btd.dtype), preferred_element_type=jnp.float32)
    return constrain(out, ("batch", "length", "act_vocab"))


class TargetScores(NamedTuple):
    logp_bt: jax.Array  # log softmax(logits / temperature) at the target token
    entropy_bt: jax.Array  # entropy of softmax(logits / temperature)
    logz_bt: jax.Array  # logsumexp(logits / temperature): the z-loss's term at temperature 1


def _score(logits_btv, targets_bt, temperature) -> TargetScores:
    # Temperature 0 (greedy) scores at temperature 1, as the sampler does.
    z_btv = logits_btv / jnp.where(temperature > 0, temperature, 1.0)
    logz_bt = jax.nn.logsumexp(z_btv, axis=-1)
    target_bt = jnp.take_along_axis(z_btv, targets_bt[..., None], axis=-1)[..., 0]
    entropy_bt = logz_bt - jnp.sum(jnp.exp(z_btv - logz_bt[..., None]) * z_btv, axis=-1)
    return TargetScores(target_bt - logz_bt, entropy_bt, logz_bt)


def score_targets(xn_btd: jax.Array, w: jax.Array, tied: bool, targets_bt: jax.Array,
                  temperature=1.0, chunk: int = 0) -> TargetScores:
    """Scores of `targets_bt[b, i]` under the logits at position i, each [b, t] float32."""
    b, t, d = xn_btd.shape
    temperature = jnp.asarray(temperature, jnp.float32)
    if chunk <= 0 or chunk >= t:
        return _score(vocab_logits(xn_btd, w, tied), targets_bt, temperature)
    n = -(-t // chunk)
    pad = n * chunk - t  # padded positions score target 0 and are cut off below
    xn_nbcd = jnp.pad(xn_btd, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk, d).swapaxes(0, 1)
    targets_nbc = jnp.pad(targets_bt, ((0, 0), (0, pad))).reshape(b, n, chunk).swapaxes(0, 1)

    @jax.checkpoint
    def one_chunk(w, xn_bcd, targets_bc):
        return _score(vocab_logits(xn_bcd, w, tied), targets_bc, temperature)

    scores = jax.lax.map(lambda args: one_chunk(w, *args), (xn_nbcd, targets_nbc))
    return TargetScores(*(s.swapaxes(0, 1).reshape(b, n * chunk)[:, :t] for s in scores))
