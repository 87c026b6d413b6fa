"""Decoder-only transformer: embeddings, blocks (GQA attention + dense or MoE FFN), LM head."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from composer_jax.model.attention import Attention, KVCache
from composer_jax.model.config import ModelConfig
from composer_jax.model.layers import MLP, RMSNorm, param
from composer_jax.model.mla import MLA
from composer_jax.model.moe import MoE
from composer_jax.model.vocab_scores import TargetScores, score_targets, vocab_logits
from composer_jax.sharding import constrain

REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    # Keep attention projections, recompute the (wide) MLP activations in the backward pass.
    "save_dots_except_mlp": jax.checkpoint_policies.save_only_these_names(
        "query_proj", "key_proj", "value_proj", "attn_out", "out_proj"),
}


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, layer: int, rngs: nnx.Rngs):
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = MLA(cfg, rngs) if cfg.attention == "mla" else Attention(cfg, rngs)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.ffn = MoE(cfg, rngs) if cfg.is_moe_layer(layer) else MLP(cfg.d_model, cfg.d_ff, rngs)

    def feed_forward(self, x_btd, forced_expert_btk=None):
        h = self.ffn_norm(x_btd)
        if isinstance(self.ffn, MoE):
            y, routing = self.ffn(h, forced_expert_btk)
            return x_btd + y, routing
        return x_btd + self.ffn(h), None

    def __call__(self, x_btd, positions_bt, segment_ids_bt, forced_expert_btk=None):
        x_btd = x_btd + self.attn(self.attn_norm(x_btd), positions_bt, segment_ids_bt)
        x_btd = constrain(x_btd, ("batch", "length", "act_embed"))
        return self.feed_forward(x_btd, forced_expert_btk)

    def extend(self, x_btd, k_cache, v_cache, lengths_b, forced_expert_btk=None):
        y, k_cache, v_cache = self.attn.extend(self.attn_norm(x_btd), k_cache, v_cache, lengths_b)
        x_btd, routing = self.feed_forward(x_btd + y, forced_expert_btk)
        return x_btd, k_cache, v_cache, routing


def remat_block(block: Block, policy, *args):
    """`block(*args)` with its activations recomputed in the backward pass per `policy`. A pure
    jax.checkpoint over the block's state: the forward mutates nothing, and nnx.remat's write-back
    would touch variables (the router bias) that belong to an outer trace in the train step."""
    graphdef, state = nnx.split(block)
    return jax.checkpoint(lambda s, *a: nnx.merge(graphdef, s)(*a), policy=policy)(state, *args)


def collect_aux(routings: list) -> dict[str, jax.Array]:
    """Stack per-MoE-layer routing statistics; zeros for a dense model."""
    if not routings:
        zero = jnp.zeros((), jnp.float32)
        return dict(load_balance_loss=zero, router_z_loss=zero, dropped_fraction=zero)
    return dict(
        load_balance_loss=jnp.mean(jnp.stack([r.load_balance_loss for r in routings])),
        router_z_loss=jnp.mean(jnp.stack([r.router_z_loss for r in routings])),
        dropped_fraction=jnp.mean(jnp.stack([r.dropped_fraction for r in routings])),
        expert_counts_le=jnp.stack([r.counts_e for r in routings]),
        expert_choice_ltk=jnp.stack([r.expert_tk for r in routings]),
    )


class Transformer(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed_vd = param(rngs, (cfg.vocab_size, cfg.d_model), ("vocab", "embed"), std=0.02)
        if cfg.token_shift:
            self.shift_embed_kvd = param(rngs, (cfg.token_shift, cfg.vocab_size, cfg.d_model),
                                         (None, "vocab", "embed"), std=0.02)
        self.layers = nnx.List([Block(cfg, i, rngs) for i in range(cfg.n_layers)])
        self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        if not cfg.tie_embeddings:
            self.lm_head_dv = param(rngs, (cfg.d_model, cfg.vocab_size), ("embed", "vocab"),
                                    fan_in=cfg.d_model)

    @property
    def dtype(self):
        return jnp.dtype(self.cfg.dtype)

    def embed(self, tokens_bt, prev_tokens_kbt=None, has_prev_kbt=None):
        """Token embeddings; with token shift, plus a learned embedding of each of the
        `token_shift` previous tokens (k + 1 back in row k) where the sequence has one."""
        # The table is gathered over FSDP like any weight, so each device looks up its own rows
        # (left to propagation, XLA gathers the global batch's activations instead).
        x = jnp.take(constrain(self.embed_vd[...], ("vocab", None)), tokens_bt, axis=0)
        for k in range(self.cfg.token_shift):
            prev = jnp.take(self.shift_embed_kvd[k], prev_tokens_kbt[k], axis=0)
            x = x + jnp.where(has_prev_kbt[k][..., None], prev, 0.0)
        return constrain(x.astype(self.dtype), ("batch", "length", "act_embed"))

    def head_weight(self) -> jax.Array:
        """The output projection: the embedding [v, d] when tied, else the head [d, v]."""
        return self.embed_vd[...] if self.cfg.tie_embeddings else self.lm_head_dv[...]

    def logits(self, xn_btd) -> jax.Array:
        """float32 logits of final-normed hidden states (what `hidden` returns)."""
        return vocab_logits(xn_btd, self.head_weight(), self.cfg.tie_embeddings)

    def score(self, xn_btd, targets_bt, temperature=1.0) -> TargetScores:
        """Log-prob, entropy and log-partition of each position's target, `cfg.logits_chunk`
        positions at a time (never a whole row's logits when set)."""
        return score_targets(xn_btd, self.head_weight(), self.cfg.tie_embeddings, targets_bt,
                             temperature, self.cfg.logits_chunk)

    def _moe_slice(self, forced_expert_lbtk, moe_index):
        return None if forced_expert_lbtk is None else forced_expert_lbtk[moe_index]

    def __call__(self, tokens_bt, positions_bt=None, segment_ids_bt=None, forced_expert_lbtk=None):
        """Training/scoring forward over packed rows -> (float32 logits [b, t, vocab], aux)."""
        xn_btd, aux = self.hidden(tokens_bt, positions_bt, segment_ids_bt, forced_expert_lbtk)
        return self.logits(xn_btd), aux

    def hidden(self, tokens_bt, positions_bt=None, segment_ids_bt=None, forced_expert_lbtk=None):
        """The forward pass up to the head -> (final-normed hidden states [b, t, d], aux)."""
        b, t = tokens_bt.shape
        if positions_bt is None:
            positions_bt = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        if segment_ids_bt is None:
            segment_ids_bt = jnp.ones((b, t), jnp.int32)
        back = lambda a, k, fill: jnp.pad(a, ((0, 0), (k, 0)), constant_values=fill)[:, :t]
        shifts = range(1, self.cfg.token_shift + 1)
        x = self.embed(tokens_bt, [back(tokens_bt, k, 0) for k in shifts],
                       [back(segment_ids_bt, k, -1) == segment_ids_bt for k in shifts])
        policy = REMAT_POLICIES[self.cfg.remat]
        routings, moe_index = [], 0
        for block in self.layers:
            forced = self._moe_slice(forced_expert_lbtk, moe_index) if isinstance(block.ffn, MoE) else None
            if self.cfg.remat == "none":
                x, routing = block(x, positions_bt, segment_ids_bt, forced)
            else:
                x, routing = remat_block(block, policy, x, positions_bt, segment_ids_bt, forced)
            if routing is not None:
                routings.append(routing)
                moe_index += 1
        return self.final_norm(x), collect_aux(routings)

    def extend(self, tokens_bt, cache: KVCache, n_new_b=None, forced_expert_lbtk=None):
        """Append tokens to each row's cache (row b takes its first n_new_b[b]); -> (logits, cache, aux).

        Logits at position i of row b predict the token after absolute index lengths_b + i. The
        caller guarantees lengths_b + t <= cache.max_len.
        """
        xn_btd, cache, aux = self.extend_hidden(tokens_bt, cache, n_new_b, forced_expert_lbtk)
        return self.logits(xn_btd), cache, aux

    def extend_hidden(self, tokens_bt, cache: KVCache, n_new_b=None, forced_expert_lbtk=None):
        """`extend` up to the head -> (final-normed hidden states, cache, aux)."""
        b, t = tokens_bt.shape
        n_new_b = jnp.full((b,), t, jnp.int32) if n_new_b is None else n_new_b
        prev_kbt, has_prev_kbt, recent_bk = [], [], cache.recent_tokens_bk
        if self.cfg.token_shift:  # a model without it never touches recent_tokens_bk
            # The row's stream: its cached newest tokens, then the new ones.
            stream_bn = jnp.concatenate([cache.recent_tokens_bk, tokens_bt], axis=1)
            r = cache.recent_tokens_bk.shape[1]
            index_bt = cache.lengths_b[:, None] + jnp.arange(t)[None]
            prev_kbt = [stream_bn[:, r - k:r - k + t] for k in range(1, r + 1)]
            has_prev_kbt = [index_bt >= k for k in range(1, r + 1)]
            recent_bk = jax.vmap(lambda row, n: jax.lax.dynamic_slice(row, (n,), (r,)))(stream_bn, n_new_b)
        x = self.embed(tokens_bt, prev_kbt, has_prev_kbt)
        new_k, new_v, routings, moe_index = [], [], [], 0
        for i, block in enumerate(self.layers):
            forced = self._moe_slice(forced_expert_lbtk, moe_index) if isinstance(block.ffn, MoE) else None
            x, k, v, routing = block.extend(x, cache.k_bksh[i], cache.v_bksh[i], cache.lengths_b, forced)
            new_k.append(k)
            new_v.append(v)
            if routing is not None:
                routings.append(routing)
                moe_index += 1
        cache = KVCache(tuple(new_k), tuple(new_v), cache.lengths_b + n_new_b, recent_bk)
        return self.final_norm(x), cache, collect_aux(routings)
