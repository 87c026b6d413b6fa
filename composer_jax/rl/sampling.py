"""Token sampling for a batch of slots: temperature, top-p, a vocabulary limit, per-slot keys.

Two log-probs are returned for every sampled token:
  * `logp`: log softmax(logits / temperature) over the FULL model vocabulary, no top-p and no
    vocabulary limit. This is what the learner recomputes from its own forward pass, so it is
    the "sampler log-prob" for importance ratios (temperature 0 -> temperature 1 here).
  * `logp_sampler`: the log-prob under the distribution actually sampled from (temperature,
    vocabulary limit, top-p truncation, renormalised); 0 for greedy. The true behaviour policy.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

NEG_INF = -jnp.inf


def tempered_logp(logits_sv: jax.Array, temperature: jax.Array) -> jax.Array:
    """log softmax(logits / temperature); temperature 0 (greedy) scores at temperature 1."""
    scale = jnp.where(temperature > 0, temperature, 1.0)
    return jax.nn.log_softmax(logits_sv.astype(jnp.float32) / scale, axis=-1)


def top_p_mask(logp_sv: jax.Array, top_p: jax.Array) -> jax.Array:
    """Keep the smallest set of most likely tokens whose mass reaches top_p (ties kept)."""
    sorted_sv = jnp.sort(logp_sv, axis=-1)[:, ::-1]
    probs_sv = jnp.exp(sorted_sv)
    mass_before_sv = jnp.cumsum(probs_sv, axis=-1) - probs_sv
    kept_sv = mass_before_sv < top_p  # the first token is always kept
    threshold_s = jnp.min(jnp.where(kept_sv, sorted_sv, jnp.inf), axis=-1)
    return logp_sv >= threshold_s[:, None]


def sample(logits_sv: jax.Array, keys_s: jax.Array, temperature: jax.Array, top_p: jax.Array,
           valid_vocab: jax.Array):
    """One token per slot -> (tokens_s, logp_s, logp_sampler_s). `keys_s` are typed PRNG keys."""
    logp_sv = tempered_logp(logits_sv, temperature)
    valid_v = jnp.arange(logits_sv.shape[-1]) < valid_vocab
    allowed_sv = jax.nn.log_softmax(jnp.where(valid_v, logp_sv, NEG_INF), axis=-1)
    # The sort is the expensive part; skip it (a real branch: top_p is one scalar) when off.
    allowed_sv = jax.lax.cond(
        top_p < 1.0,
        lambda a: jax.nn.log_softmax(jnp.where(top_p_mask(a, top_p), a, NEG_INF), axis=-1),
        lambda a: a,
        allowed_sv)
    sampled_s = jax.vmap(jax.random.categorical)(keys_s, allowed_sv)
    tokens_s = jnp.where(temperature > 0, sampled_s, jnp.argmax(allowed_sv, axis=-1)).astype(jnp.int32)
    pick = lambda a: jnp.take_along_axis(a, tokens_s[:, None], axis=-1)[:, 0]
    logp_sampler_s = jnp.where(temperature > 0, pick(allowed_sv), 0.0)
    return tokens_s, pick(logp_sv), logp_sampler_s
