"""Rollout engine: pure functions over a fixed set of slots, each with its own KV-cache row.

A slot holds one episode's current context. Its length in the cache is its position; its
`next_logits` predict the token after it; its key and step counter seed sampling, so a slot's
samples depend only on (episode key, tokens sampled so far), never on which other slots run.

    clear(state, slots_p)                 -> state    empty contexts
    mark(state, slots_p)                  -> state    remember where each context ends now
    rewind(state, slots_p)                -> state    back to the mark: a summary reset keeps the
                                                      prompt's KV and prefills only what follows it
    seed(state, slots_p, keys_pk)         -> state    new episode key, step counter 0
    prefill(model, state, slots_p, tokens_pt, n_p, temperature, score)
                                          -> state, logp_pt, experts_ptlk
    decode(model, state, active_s, budget_s, stops_sk, temperature, top_p, valid_vocab, max_new)
                                          -> state, Decoded
    decode_rows(model, state, slots_p, budget_p, stops_pk, ...)
                                          -> state, Decoded (P rows)   decode only the slots
                                                      listed: a step costs P rows, not all slots

`slots_p` lists the slots an op touches; an index equal to the slot count is padding (its
writes are dropped), so callers pad P up to a few bucket sizes and shapes stay fixed. Prefill
and decode never write past a slot's region: the caller keeps length + padded chunk <= max_len,
and decode stops a slot that reaches max_len.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from composer_jax.model.attention import KVCache, init_cache
from composer_jax.model.config import ModelConfig
from composer_jax.rl.sampling import sample, tempered_logp


class EngineState(struct.PyTreeNode):
    cache: KVCache  # [slots, kv_heads, max_len, head_dim] per layer; lengths_b = slot lengths
    next_logits_sv: jax.Array  # float32: logits for each slot's next token
    keys_sk: jax.Array  # uint32 PRNG key data of each slot's episode
    steps_s: jax.Array  # int32: tokens sampled so far in the slot's episode (fold_in counter)
    # The mark (see `mark`): the context length, newest tokens and next-token logits at the end
    # of the episode's prompt. The KV below the mark is never overwritten (writes go at or past
    # a slot's length), so rewinding to it is exact.
    mark_lengths_s: jax.Array  # int32
    mark_recent_sk: jax.Array  # int32, as cache.recent_tokens_bk
    mark_logits_sv: jax.Array  # float32

    @property
    def slots(self) -> int:
        return self.steps_s.shape[0]

    @property
    def max_len(self) -> int:
        return self.cache.max_len


class Decoded(struct.PyTreeNode):
    tokens_sn: jax.Array  # int32 generated ids (0 past n_s)
    logp_sn: jax.Array  # float32 log softmax(logits / T), full vocab (see sampling.py)
    logp_sampler_sn: jax.Array  # float32 under the truncated distribution actually sampled
    experts_snlk: jax.Array  # int32 MoE choices per generated token (routing replay)
    n_s: jax.Array  # int32 tokens generated per slot
    stopped_s: jax.Array  # bool: ended on a stop token (else its budget or the cache end)


def init_state(cfg: ModelConfig, slots: int, max_len: int) -> EngineState:
    key_data = jax.random.key_data(jax.random.key(0))
    cache = init_cache(cfg, slots, max_len, jnp.dtype(cfg.dtype))
    return EngineState(
        # init_cache shares one zeros buffer between layers and k/v; donation needs distinct ones.
        cache=jax.tree.map(jnp.copy, cache),
        next_logits_sv=jnp.zeros((slots, cfg.vocab_size), jnp.float32),
        keys_sk=jnp.zeros((slots, *key_data.shape), key_data.dtype),
        steps_s=jnp.zeros((slots,), jnp.int32),
        mark_lengths_s=jnp.zeros((slots,), jnp.int32),
        mark_recent_sk=jnp.copy(cache.recent_tokens_bk),
        mark_logits_sv=jnp.zeros((slots, cfg.vocab_size), jnp.float32),
    )


def expert_shape(cfg: ModelConfig) -> tuple[int, int]:
    """(MoE layers, k) of recorded expert choices; (0, 1) for a dense model."""
    return cfg.n_moe_layers, max(cfg.top_k, 1)


def _experts(aux, cfg: ModelConfig, b: int, t: int) -> jax.Array:
    """aux['expert_choice_ltk'] ([L, b*t, k]) as [b, t, L, k]."""
    layers, k = expert_shape(cfg)
    if "expert_choice_ltk" not in aux:
        return jnp.zeros((b, t, layers, k), jnp.int32)
    return aux["expert_choice_ltk"].reshape(layers, b, t, k).transpose(1, 2, 0, 3)


def clear(state: EngineState, slots_p: jax.Array) -> EngineState:
    lengths = state.cache.lengths_b.at[slots_p].set(0, mode="drop")
    return state.replace(cache=state.cache.replace(lengths_b=lengths))


def mark(state: EngineState, slots_p: jax.Array) -> EngineState:
    rows_p = jnp.minimum(slots_p, state.slots - 1)  # padding rows read a copy, writes dropped
    c = state.cache
    return state.replace(
        mark_lengths_s=state.mark_lengths_s.at[slots_p].set(c.lengths_b[rows_p], mode="drop"),
        mark_recent_sk=state.mark_recent_sk.at[slots_p].set(c.recent_tokens_bk[rows_p], mode="drop"),
        mark_logits_sv=state.mark_logits_sv.at[slots_p].set(state.next_logits_sv[rows_p], mode="drop"))


def rewind(state: EngineState, slots_p: jax.Array) -> EngineState:
    rows_p = jnp.minimum(slots_p, state.slots - 1)
    c = state.cache
    cache = c.replace(lengths_b=c.lengths_b.at[slots_p].set(state.mark_lengths_s[rows_p], mode="drop"),
                      recent_tokens_bk=c.recent_tokens_bk.at[slots_p].set(state.mark_recent_sk[rows_p], mode="drop"))
    return state.replace(cache=cache, next_logits_sv=state.next_logits_sv.at[slots_p].set(
        state.mark_logits_sv[rows_p], mode="drop"))


def seed(state: EngineState, slots_p: jax.Array, keys_pk: jax.Array) -> EngineState:
    return state.replace(keys_sk=state.keys_sk.at[slots_p].set(keys_pk, mode="drop"),
                         steps_s=state.steps_s.at[slots_p].set(0, mode="drop"))


def prefill(model, state: EngineState, slots_p, tokens_pt, n_p, temperature, score: bool = True):
    """Append row p's first n_p[p] tokens to slot slots_p[p]. Returns the new state, the
    tempered log-prob of every appended token given what precedes it (the score of teacher-forced
    policy tokens; zeros unless `score`: prompts and harness text need none, and scoring projects
    every position onto the vocabulary, a quarter of Qwen-0.5B's prefill FLOPs) and every token's
    expert choices."""
    p, t = tokens_pt.shape
    rows_p = jnp.minimum(slots_p, state.slots - 1)  # padding rows compute on a copy, then drop
    cache = state.cache
    sub = KVCache(tuple(k[rows_p] for k in cache.k_bksh), tuple(v[rows_p] for v in cache.v_bksh),
                  cache.lengths_b[rows_p], cache.recent_tokens_bk[rows_p])
    xn_ptd, sub, aux = model.extend_hidden(tokens_pt, sub, n_new_b=n_p)
    prev_next_pv = state.next_logits_sv[rows_p]
    # The first token is predicted by the slot's stored logits, the rest by the new positions
    # (scored `logits_chunk` positions at a time: no [slots, t, vocab] buffer when set).
    if score:
        first_p = jnp.take_along_axis(tempered_logp(prev_next_pv, temperature), tokens_pt[:, :1], -1)[:, 0]
        rest_pt = model.score(xn_ptd[:, :-1], tokens_pt[:, 1:], temperature).logp_bt
        logp_pt = jnp.concatenate([first_p[:, None], rest_pt], axis=1)
    else:
        logp_pt = jnp.zeros((p, t), jnp.float32)
    last_pv = model.logits(xn_ptd[jnp.arange(p), jnp.maximum(n_p - 1, 0)][:, None])[:, 0]
    next_pv = jnp.where((n_p > 0)[:, None], last_pv, prev_next_pv)

    def put(full, part):
        return full.at[slots_p].set(part, mode="drop")

    cache = KVCache(tuple(put(f, s) for f, s in zip(cache.k_bksh, sub.k_bksh)),
                    tuple(put(f, s) for f, s in zip(cache.v_bksh, sub.v_bksh)),
                    put(cache.lengths_b, sub.lengths_b), put(cache.recent_tokens_bk, sub.recent_tokens_bk))
    state = state.replace(cache=cache, next_logits_sv=put(state.next_logits_sv, next_pv))
    return state, logp_pt, _experts(aux, model.cfg, p, t)


def decode(model, state: EngineState, active_s, budget_s, stops_sk, temperature, top_p,
           valid_vocab, max_new: int):
    """Sample until every active slot has emitted one of its stop ids (`stops_sk`, -1 = unused)
    or spent its budget (<= max_new, a static bound). One `lax.while_loop`; each iteration
    decodes one token for all slots and commits it only for the slots still running."""
    s = state.slots
    layers, k = expert_shape(model.cfg)
    budget_s = jnp.where(active_s, jnp.minimum(budget_s, state.max_len - state.cache.lengths_b), 0)
    out = Decoded(
        tokens_sn=jnp.zeros((s, max_new), jnp.int32),
        logp_sn=jnp.zeros((s, max_new), jnp.float32),
        logp_sampler_sn=jnp.zeros((s, max_new), jnp.float32),
        experts_snlk=jnp.zeros((s, max_new, layers, k), jnp.int32),
        n_s=jnp.zeros((s,), jnp.int32),
        stopped_s=jnp.zeros((s,), bool),
    )

    def running(carry):
        _, _, out = carry
        return (out.n_s < budget_s) & ~out.stopped_s

    def cond(carry):
        i, _, _ = carry
        return (i < max_new) & jnp.any(running(carry))

    def body(carry):
        i, state, out = carry
        run_s = running(carry)
        keys_s = jax.vmap(lambda kd, step: jax.random.fold_in(jax.random.wrap_key_data(kd), step))(
            state.keys_sk, state.steps_s)
        tok_s, logp_s, logp_sampler_s = sample(state.next_logits_sv, keys_s, temperature, top_p, valid_vocab)
        logits_s1v, cache, aux = model.extend(tok_s[:, None], state.cache, n_new_b=run_s.astype(jnp.int32))
        state = state.replace(
            cache=cache,
            next_logits_sv=jnp.where(run_s[:, None], logits_s1v[:, 0], state.next_logits_sv),
            steps_s=state.steps_s + run_s)
        # Every running slot has produced exactly i tokens, so column i is its next entry.
        col = lambda buf, x: buf.at[:, i].set(jnp.where(run_s.reshape(-1, *([1] * (x.ndim - 1))), x, 0))
        hit_s = jnp.any(tok_s[:, None] == stops_sk, axis=-1) & run_s
        out = out.replace(
            tokens_sn=col(out.tokens_sn, tok_s), logp_sn=col(out.logp_sn, logp_s),
            logp_sampler_sn=col(out.logp_sampler_sn, logp_sampler_s),
            experts_snlk=col(out.experts_snlk, _experts(aux, model.cfg, s, 1)[:, 0]),
            n_s=out.n_s + run_s, stopped_s=out.stopped_s | hit_s)
        return i + 1, state, out

    _, state, out = jax.lax.while_loop(cond, body, (jnp.int32(0), state, out))
    return state, out


def decode_rows(model, state: EngineState, slots_p, budget_p, stops_pk, temperature, top_p,
                valid_vocab, max_new: int):
    """`decode` on the P slots listed (padding rows = the slot count: they decode nothing and
    their writes are dropped): gather those rows, decode them, scatter them back. With few slots
    running (serving at low load, an RL batch's stragglers) a step then costs P rows, not all."""
    rows_p = jnp.minimum(slots_p, state.slots - 1)
    sub = jax.tree.map(lambda a: a[rows_p], state)
    sub, out = decode(model, sub, slots_p < state.slots, budget_p, stops_pk, temperature, top_p,
                      valid_vocab, max_new)
    state = jax.tree.map(lambda full, part: full.at[slots_p].set(part, mode="drop"), state, sub)
    return state, out
