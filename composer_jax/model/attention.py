"""Grouped-query attention with rotary positions, segment masks and a per-row KV cache."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx, struct
from jax.ad_checkpoint import checkpoint_name

from composer_jax.model.config import ModelConfig
from composer_jax.model.layers import param, rope, zeros_param
from composer_jax.sharding import constrain


class KVCache(struct.PyTreeNode):
    """Keys/values of every layer for a batch of independent rows, each at its own length."""

    # One [batch, kv_heads, max_len, head_dim] array per layer: a tuple (not one stacked array)
    # so each step updates every layer in place, and heads-major so attention reads it without
    # a transpose.
    k_bksh: tuple[jax.Array, ...]
    v_bksh: tuple[jax.Array, ...]
    lengths_b: jax.Array  # int32 [batch]: tokens already in the cache per row
    recent_tokens_bk: jax.Array  # int32 [batch, max(token_shift, 1)]: newest tokens, last = newest

    @property
    def max_len(self) -> int:
        return self.k_bksh[0].shape[2]


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype=jnp.float32) -> KVCache:
    """GQA: keys/values per KV head. MLA: k holds the latent [batch, 1, max_len, kv_lora_rank],
    v the shared rotary key [batch, 1, max_len, qk_rope_head_dim] (see model/mla.py)."""
    if cfg.attention == "mla":
        k_shape = (batch, 1, max_len, cfg.kv_lora_rank)
        v_shape = (batch, 1, max_len, cfg.qk_rope_head_dim)
    else:
        k_shape = v_shape = (batch, cfg.n_kv_heads, max_len, cfg.head_dim)
    k = tuple(jnp.zeros(k_shape, dtype) for _ in range(cfg.n_layers))
    v = tuple(jnp.zeros(v_shape, dtype) for _ in range(cfg.n_layers))
    return KVCache(k, v, jnp.zeros((batch,), jnp.int32), jnp.zeros((batch, max(cfg.token_shift, 1)), jnp.int32))


def attend(q_btnh, k_bksh, v_bksh, mask_bts) -> jax.Array:
    """Softmax attention in float32; query heads grouped onto their shared KV head."""
    b, t, n, h = q_btnh.shape
    k = k_bksh.shape[1]
    q_bkgth = q_btnh.reshape(b, t, k, n // k, h).transpose(0, 2, 3, 1, 4)
    scores_bkgts = jnp.einsum("bkgth,bksh->bkgts", q_bkgth, k_bksh,
                              preferred_element_type=jnp.float32) * (h ** -0.5)
    scores_bkgts = jnp.where(mask_bts[:, None, None], scores_bkgts, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores_bkgts, axis=-1).astype(v_bksh.dtype)
    out_bkgth = jnp.einsum("bkgts,bksh->bkgth", probs, v_bksh)
    return out_bkgth.transpose(0, 3, 1, 2, 4).reshape(b, t, n, h)


def packed_mask(segment_ids_bt: jax.Array) -> jax.Array:
    """Causal within a row and never across segments (packed documents)."""
    t = segment_ids_bt.shape[1]
    causal_ts = jnp.tril(jnp.ones((t, t), bool))
    same_segment_bts = segment_ids_bt[:, :, None] == segment_ids_bt[:, None, :]
    return causal_ts[None] & same_segment_bts


def cached_mask(lengths_b: jax.Array, t: int, max_len: int) -> jax.Array:
    """Query i of row b sits at absolute index lengths_b + i and sees keys up to it."""
    query_bt = lengths_b[:, None] + jnp.arange(t)[None]
    return jnp.arange(max_len)[None, None, :] <= query_bt[:, :, None]


def write_rows(cache_bksh: jax.Array, new_btkh: jax.Array, offsets_b: jax.Array) -> jax.Array:
    """Write each row's new keys/values at its own offset (in place inside a jitted loop)."""
    new_bkth = new_btkh.transpose(0, 2, 1, 3).astype(cache_bksh.dtype)
    return jax.vmap(lambda c, u, i: jax.lax.dynamic_update_slice(c, u, (0, i, 0)))(
        cache_bksh, new_bkth, offsets_b)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        d, n, k, h = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.cfg = cfg
        self.wq_dnh = param(rngs, (d, n, h), ("embed", "heads", "head_dim"), fan_in=d)
        self.wk_dkh = param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), fan_in=d)
        self.wv_dkh = param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), fan_in=d)
        self.wo_nhd = param(rngs, (n, h, d), ("heads", "head_dim", "embed"), fan_in=n * h)
        if cfg.qkv_bias:
            self.bq_nh = zeros_param((n, h), ("heads", "head_dim"))
            self.bk_kh = zeros_param((k, h), ("kv_heads", "head_dim"))
            self.bv_kh = zeros_param((k, h), ("kv_heads", "head_dim"))

    def project_qkv(self, x_btd, positions_bt):
        dt = x_btd.dtype
        q = jnp.einsum("btd,dnh->btnh", x_btd, self.wq_dnh[...].astype(dt))
        k = jnp.einsum("btd,dkh->btkh", x_btd, self.wk_dkh[...].astype(dt))
        v = jnp.einsum("btd,dkh->btkh", x_btd, self.wv_dkh[...].astype(dt))
        if self.cfg.qkv_bias:
            q, k, v = q + self.bq_nh[...].astype(dt), k + self.bk_kh[...].astype(dt), v + self.bv_kh[...].astype(dt)
        q = checkpoint_name(rope(q, positions_bt, self.cfg.rope_base), "query_proj")
        k = checkpoint_name(rope(k, positions_bt, self.cfg.rope_base), "key_proj")
        v = checkpoint_name(v, "value_proj")
        return (constrain(q, ("batch", "length", "act_heads", None)),
                constrain(k, ("batch", "length", "act_heads", None)),
                constrain(v, ("batch", "length", "act_heads", None)))

    def output(self, out_btnh) -> jax.Array:
        out_btnh = checkpoint_name(out_btnh, "attn_out")
        y = jnp.einsum("btnh,nhd->btd", out_btnh, self.wo_nhd[...].astype(out_btnh.dtype))
        return checkpoint_name(y, "out_proj")

    def __call__(self, x_btd, positions_bt, segment_ids_bt) -> jax.Array:
        q, k, v = self.project_qkv(x_btd, positions_bt)
        k, v = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
        return self.output(attend(q, k, v, packed_mask(segment_ids_bt)))

    def extend(self, x_btd, k_cache_bksh, v_cache_bksh, lengths_b):
        """Append t tokens per row to the cache and attend over it; returns (y, k_cache, v_cache)."""
        t = x_btd.shape[1]
        positions_bt = lengths_b[:, None] + jnp.arange(t)[None]
        q, k, v = self.project_qkv(x_btd, positions_bt)
        k_cache_bksh = write_rows(k_cache_bksh, k, lengths_b)
        v_cache_bksh = write_rows(v_cache_bksh, v, lengths_b)
        mask = cached_mask(lengths_b, t, k_cache_bksh.shape[2])
        out = attend(q, k_cache_bksh.astype(q.dtype), v_cache_bksh.astype(q.dtype), mask)
        return self.output(out), k_cache_bksh, v_cache_bksh
