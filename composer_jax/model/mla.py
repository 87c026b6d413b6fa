"""Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): keys and values come from one low-rank
latent per token, so the KV cache holds that latent plus one small shared rotary key.

Per token: c = RMSNorm(x @ wkv_a) [kv_lora_rank] and k_rope = rope(x @ wk_rope) [qk_rope_head_dim]
(shared by all heads). Head n's key is [c @ wk_b[:, n], k_rope], its value c @ wv_b[:, n]; the
query is [q_nope, rope(q_rope)] from a (optionally low-rank) projection.

Cache layout (the GQA `KVCache` unchanged): k_bksh[layer] = latent c as [batch, 1, max_len,
kv_lora_rank]; v_bksh[layer] = rotated shared key as [batch, 1, max_len, qk_rope_head_dim].
Decoding never expands the cache: wk_b is absorbed into the query and wv_b applied after the
weighted sum over latents ("weight absorption").
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from composer_jax.model.attention import cached_mask, packed_mask, write_rows
from composer_jax.model.config import ModelConfig
from composer_jax.model.layers import RMSNorm, param, rope
from composer_jax.sharding import constrain

LATENT_NORM_EPS = 1e-6  # DeepSeek's q_a/kv_a norms use their own fixed epsilon


def masked_softmax(scores_bnts: jax.Array, mask_bts: jax.Array) -> jax.Array:
    scores_bnts = jnp.where(mask_bts[:, None], scores_bnts, jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(scores_bnts, axis=-1)


class MLA(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        d, n = cfg.d_model, cfg.n_heads
        c, r, p, v = cfg.kv_lora_rank, cfg.qk_rope_head_dim, cfg.qk_nope_head_dim, cfg.v_head_dim
        self.cfg = cfg
        if cfg.q_lora_rank:
            q = cfg.q_lora_rank
            self.wq_a_dq = param(rngs, (d, q), ("embed", None), fan_in=d)
            self.q_norm = RMSNorm(q, LATENT_NORM_EPS)
            # Rank axes shard like `embed` (FSDP): replicated, the up-projections would cost
            # every chip ~1B parameters plus their Adam moments at Kimi scale.
            self.wq_b_qnh = param(rngs, (q, n, p + r), ("embed", "heads", "head_dim"), fan_in=q)
        else:
            self.wq_dnh = param(rngs, (d, n, p + r), ("embed", "heads", "head_dim"), fan_in=d)
        self.wkv_a_dc = param(rngs, (d, c), ("embed", None), fan_in=d)
        self.wk_rope_dr = param(rngs, (d, r), ("embed", None), fan_in=d)
        self.kv_norm = RMSNorm(c, LATENT_NORM_EPS)
        self.wk_b_cnp = param(rngs, (c, n, p), ("embed", "heads", "head_dim"), fan_in=c)
        self.wv_b_cnv = param(rngs, (c, n, v), ("embed", "heads", "head_dim"), fan_in=c)
        self.wo_nvd = param(rngs, (n, v, d), ("heads", "head_dim", "embed"), fan_in=n * v)

    @property
    def scale(self) -> float:
        return (self.cfg.qk_nope_head_dim + self.cfg.qk_rope_head_dim) ** -0.5

    def query(self, x_btd, positions_bt):
        """(q_nope [b,t,n,p], rotated q_rope [b,t,n,r])."""
        dt = x_btd.dtype
        if self.cfg.q_lora_rank:
            q_btq = self.q_norm(jnp.einsum("btd,dq->btq", x_btd, self.wq_a_dq[...].astype(dt)))
            q = jnp.einsum("btq,qnh->btnh", q_btq, self.wq_b_qnh[...].astype(dt))
        else:
            q = jnp.einsum("btd,dnh->btnh", x_btd, self.wq_dnh[...].astype(dt))
        q = checkpoint_name(constrain(q, ("batch", "length", "act_heads", None)), "query_proj")
        q_nope, q_rope = jnp.split(q, [self.cfg.qk_nope_head_dim], axis=-1)
        return q_nope, rope(q_rope, positions_bt, self.cfg.rope_base)

    def latent(self, x_btd, positions_bt):
        """What the cache stores: (normalised latent [b,t,c], rotated shared key [b,t,r])."""
        dt = x_btd.dtype
        c_btc = self.kv_norm(jnp.einsum("btd,dc->btc", x_btd, self.wkv_a_dc[...].astype(dt)))
        k_rope_btr = jnp.einsum("btd,dr->btr", x_btd, self.wk_rope_dr[...].astype(dt))
        k_rope_btr = rope(k_rope_btr[:, :, None], positions_bt, self.cfg.rope_base)[:, :, 0]
        return checkpoint_name(c_btc, "key_proj"), checkpoint_name(k_rope_btr, "value_proj")

    def output(self, out_btnv) -> jax.Array:
        out_btnv = checkpoint_name(out_btnv, "attn_out")
        y = jnp.einsum("btnv,nvd->btd", out_btnv, self.wo_nvd[...].astype(out_btnv.dtype))
        return checkpoint_name(y, "out_proj")

    def __call__(self, x_btd, positions_bt, segment_ids_bt) -> jax.Array:
        """Training path: expand the latent into per-head keys/values (cheaper than absorption
        when every position is a query)."""
        dt = x_btd.dtype
        q_nope, q_rope = self.query(x_btd, positions_bt)
        c_btc, k_rope_btr = self.latent(x_btd, positions_bt)
        k_nope = jnp.einsum("bsc,cnp->bsnp", c_btc, self.wk_b_cnp[...].astype(dt))
        v_bsnv = jnp.einsum("bsc,cnv->bsnv", c_btc, self.wv_b_cnv[...].astype(dt))
        scores = (jnp.einsum("btnp,bsnp->bnts", q_nope, k_nope, preferred_element_type=jnp.float32)
                  + jnp.einsum("btnr,bsr->bnts", q_rope, k_rope_btr, preferred_element_type=jnp.float32))
        probs = masked_softmax(scores * self.scale, packed_mask(segment_ids_bt)).astype(dt)
        return self.output(jnp.einsum("bnts,bsnv->btnv", probs, v_bsnv))

    def extend(self, x_btd, c_cache_b1sc, k_rope_cache_b1sr, lengths_b):
        """Append t tokens per row to the latent cache and attend over it (absorbed weights)."""
        t = x_btd.shape[1]
        positions_bt = lengths_b[:, None] + jnp.arange(t)[None]
        q_nope, q_rope = self.query(x_btd, positions_bt)
        c_btc, k_rope_btr = self.latent(x_btd, positions_bt)
        c_cache_b1sc = write_rows(c_cache_b1sc, c_btc[:, :, None], lengths_b)
        k_rope_cache_b1sr = write_rows(k_rope_cache_b1sr, k_rope_btr[:, :, None], lengths_b)
        dt = q_nope.dtype
        c_bsc, k_rope_bsr = c_cache_b1sc[:, 0].astype(dt), k_rope_cache_b1sr[:, 0].astype(dt)
        q_latent_btnc = jnp.einsum("btnp,cnp->btnc", q_nope, self.wk_b_cnp[...].astype(dt))
        scores = (jnp.einsum("btnc,bsc->bnts", q_latent_btnc, c_bsc, preferred_element_type=jnp.float32)
                  + jnp.einsum("btnr,bsr->bnts", q_rope, k_rope_bsr, preferred_element_type=jnp.float32))
        mask = cached_mask(lengths_b, t, c_bsc.shape[1])
        probs = masked_softmax(scores * self.scale, mask).astype(dt)
        out_btnc = jnp.einsum("bnts,bsc->btnc", probs, c_bsc)
        out_btnv = jnp.einsum("btnc,cnv->btnv", out_btnc, self.wv_b_cnv[...].astype(dt))
        return self.output(out_btnv), c_cache_b1sc, k_rope_cache_b1sr
