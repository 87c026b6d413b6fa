"""Mixture-of-experts feed-forward: float32 router, dropless ragged_dot experts, dense reference.

Routing follows DeepSeek-V3's auxiliary-loss-free balancing: experts are *selected* on
score + bias, the bias is a non-optimised variable nudged after each step towards equal load
(`update_router_bias`), and the combine weights come from the unbiased scores.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx, struct

from composer_jax.model.config import ModelConfig
from composer_jax.model.layers import MLP, param
from composer_jax.sharding import constrain


class RouterBias(nnx.Variable):
    """Per-expert selection bias: outside the optimiser and weight decay."""


class Routing(struct.PyTreeNode):
    expert_tk: jax.Array  # int32 [tokens, k] chosen experts
    weight_tk: jax.Array  # float32 [tokens, k] combine weights (0 for dropped assignments)
    counts_e: jax.Array  # float32 [experts] assignments per expert (before dropping)
    load_balance_loss: jax.Array  # scalar, Switch-style E * sum_e f_e p_e
    router_z_loss: jax.Array  # scalar, mean logsumexp(logits)^2
    dropped_fraction: jax.Array  # scalar, fraction of assignments over capacity


def capacity_keep_mask(expert_tk: jax.Array, n_experts: int, capacity: int) -> jax.Array:
    """Which assignments fit in their expert's capacity; first choices are served first."""
    t, k = expert_tk.shape
    onehot_ne = jax.nn.one_hot(expert_tk.T.reshape(-1), n_experts, dtype=jnp.int32)
    position_n = jnp.sum(jnp.cumsum(onehot_ne, axis=0) * onehot_ne, axis=-1) - 1
    return (position_n < capacity).reshape(k, t).T


def limit_to_top_groups(choice_te: jax.Array, n_groups: int, topk_groups: int) -> jax.Array:
    """DeepSeek-V3 group-limited routing: keep the experts of each token's `topk_groups` best
    groups (a group's score is the sum of its two best scores); the rest become -inf."""
    t, e = choice_te.shape
    choice_tgx = choice_te.reshape(t, n_groups, e // n_groups)
    group_score_tg = jnp.sum(jax.lax.top_k(choice_tgx, 2)[0], axis=-1)
    _, top_group_tk = jax.lax.top_k(group_score_tg, topk_groups)
    keep_tg = jnp.zeros((t, n_groups), bool).at[jnp.arange(t)[:, None], top_group_tk].set(True)
    return jnp.where(keep_tg[:, :, None], choice_tgx, -jnp.inf).reshape(t, e)


def route(x_td: jax.Array, w_de: jax.Array, bias_e: jax.Array, cfg: ModelConfig,
          forced_expert_tk: jax.Array | None = None) -> Routing:
    """Top-k routing in float32. `forced_expert_tk` replays a recorded choice (RL routing replay)."""
    e, k = cfg.n_experts, cfg.top_k
    logits_te = jnp.einsum("td,de->te", x_td.astype(jnp.float32), w_de.astype(jnp.float32))
    if cfg.router_score == "softmax":
        scores_te = jax.nn.softmax(logits_te, axis=-1)
        probs_te = scores_te
    else:
        scores_te = jax.nn.sigmoid(logits_te)
        probs_te = scores_te / jnp.sum(scores_te, axis=-1, keepdims=True)
    if forced_expert_tk is None:
        choice_te = scores_te + jax.lax.stop_gradient(bias_e)
        if cfg.n_groups > 1:
            choice_te = limit_to_top_groups(choice_te, cfg.n_groups, cfg.topk_groups)
        _, expert_tk = jax.lax.top_k(choice_te, k)
    else:
        expert_tk = forced_expert_tk
    weight_tk = jnp.take_along_axis(scores_te, expert_tk, axis=-1)
    weight_tk = weight_tk / jnp.sum(weight_tk, axis=-1, keepdims=True) * cfg.routed_scale

    t = x_td.shape[0]
    counts_e = jnp.zeros((e,), jnp.float32).at[expert_tk.reshape(-1)].add(1.0)
    if cfg.capacity_factor > 0:
        capacity = math.ceil(t * k / e * cfg.capacity_factor)
        keep_tk = capacity_keep_mask(expert_tk, e, capacity)
        weight_tk = weight_tk * keep_tk
        dropped = 1.0 - jnp.mean(keep_tk.astype(jnp.float32))
    else:
        dropped = jnp.zeros((), jnp.float32)
    fraction_e = counts_e / (t * k)
    load_balance = e * jnp.sum(jax.lax.stop_gradient(fraction_e) * jnp.mean(probs_te, axis=0))
    z_loss = jnp.mean(jax.nn.logsumexp(logits_te, axis=-1) ** 2)
    return Routing(expert_tk.astype(jnp.int32), weight_tk, counts_e, load_balance, z_loss, dropped)


def sort_by_expert(expert_tk: jax.Array, n_experts: int):
    """Assignment order grouped by expert: (order, token of each sorted assignment, group sizes)."""
    k = expert_tk.shape[1]
    flat_expert = expert_tk.reshape(-1)
    order = jnp.argsort(flat_expert, stable=True)
    return order, order // k, jnp.bincount(flat_expert, length=n_experts).astype(jnp.int32)


def ragged_experts(x_td, expert_tk, weight_tk, w_gate_edf, w_up_edf, w_down_efd) -> jax.Array:
    """Dropless: sort assignments by expert, one `lax.ragged_dot` per projection, scatter back.
    The fast path on TPU/GPU; XLA:CPU lowers ragged_dot densely (every expert on every row)."""
    dt = x_td.dtype
    order, token_of, group_sizes = sort_by_expert(expert_tk, w_gate_edf.shape[0])
    x_sorted = x_td[token_of]
    gate = jax.lax.ragged_dot(x_sorted, w_gate_edf.astype(dt), group_sizes)
    up = jax.lax.ragged_dot(x_sorted, w_up_edf.astype(dt), group_sizes)
    y_sorted = jax.lax.ragged_dot(jax.nn.silu(gate) * up, w_down_efd.astype(dt), group_sizes)
    y_sorted = y_sorted * weight_tk.reshape(-1)[order][:, None].astype(dt)
    return jnp.zeros_like(x_td).at[token_of].add(y_sorted)


def block_size(n_assignments: int, n_experts: int) -> int:
    """Rows per block: large enough for efficient matmuls, small enough that padding every
    expert's group up to a whole block wastes at most about half the work."""
    target = max(n_assignments // (2 * n_experts), 1)
    return int(min(max(2 ** (target.bit_length() - 1), 8), 128))


def blocked_experts(x_td, expert_tk, weight_tk, w_gate_edf, w_up_edf, w_down_efd) -> jax.Array:
    """Dropless grouped matmul without ragged_dot: each expert's sorted rows are padded to whole
    blocks, every block belongs to one expert, and one batched matmul runs all blocks. A static
    bound (ceil(n/block) + E blocks) keeps shapes fixed. Fast on CPU."""
    dt = x_td.dtype
    t, k = expert_tk.shape
    n_experts, d = w_gate_edf.shape[0], x_td.shape[1]
    n = t * k
    block = block_size(n, n_experts)
    n_blocks = -(-n // block) + n_experts
    order, token_of, sizes = sort_by_expert(expert_tk, n_experts)
    sorted_expert = expert_tk.reshape(-1)[order]
    padded = (sizes + block - 1) // block * block
    start, padded_end = jnp.cumsum(sizes) - sizes, jnp.cumsum(padded)
    row_of = (padded_end - padded)[sorted_expert] + jnp.arange(n) - start[sorted_expert]
    x_rows = jnp.zeros((n_blocks * block, d), dt).at[row_of].set(x_td[token_of])
    block_expert = jnp.minimum(
        jnp.searchsorted(padded_end, jnp.arange(n_blocks) * block, side="right"), n_experts - 1)
    x_nbd = x_rows.reshape(n_blocks, block, d)
    gate = jnp.einsum("nbd,ndf->nbf", x_nbd, w_gate_edf[block_expert].astype(dt))
    up = jnp.einsum("nbd,ndf->nbf", x_nbd, w_up_edf[block_expert].astype(dt))
    y_nbd = jnp.einsum("nbf,nfd->nbd", jax.nn.silu(gate) * up, w_down_efd[block_expert].astype(dt))
    y_sorted = y_nbd.reshape(-1, d)[row_of] * weight_tk.reshape(-1)[order][:, None].astype(dt)
    return jnp.zeros_like(x_td).at[token_of].add(y_sorted)


def dense_experts(x_td, expert_tk, weight_tk, w_gate_edf, w_up_edf, w_down_efd) -> jax.Array:
    """Reference: every expert on every token, combined with one-hot weights (E x the FLOPs)."""
    dt = x_td.dtype
    t = x_td.shape[0]
    combine_te = jnp.zeros((t, w_gate_edf.shape[0]), dt).at[
        jnp.arange(t)[:, None], expert_tk].add(weight_tk.astype(dt))
    gate = jnp.einsum("td,edf->tef", x_td, w_gate_edf.astype(dt))
    up = jnp.einsum("td,edf->tef", x_td, w_up_edf.astype(dt))
    y_ted = jnp.einsum("tef,efd->ted", jax.nn.silu(gate) * up, w_down_efd.astype(dt))
    return jnp.einsum("ted,te->td", y_ted, combine_te)


EXPERT_IMPLS = dict(ragged=ragged_experts, blocked=blocked_experts, dense=dense_experts)


class MoE(nnx.Module):
    def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
        d, e, f = cfg.d_model, cfg.n_experts, cfg.d_ff_expert
        self.cfg = cfg
        self.w_router_de = param(rngs, (d, e), ("embed", "router_experts"), fan_in=d)
        self.router_bias_e = RouterBias(jnp.zeros((e,), jnp.float32), logical_axes=("router_experts",))
        self.w_gate_edf = param(rngs, (e, d, f), ("expert", "embed", "expert_mlp"), fan_in=d)
        self.w_up_edf = param(rngs, (e, d, f), ("expert", "embed", "expert_mlp"), fan_in=d)
        self.w_down_efd = param(rngs, (e, f, d), ("expert", "expert_mlp", "embed"), fan_in=f)
        self.shared = MLP(d, f * cfg.n_shared_experts, rngs) if cfg.n_shared_experts else None

    def __call__(self, x_btd: jax.Array, forced_expert_btk: jax.Array | None = None):
        b, t, d = x_btd.shape
        x_td = x_btd.reshape(b * t, d)
        forced = None if forced_expert_btk is None else forced_expert_btk.reshape(b * t, -1)
        routing = route(x_td, self.w_router_de[...], self.router_bias_e[...], self.cfg, forced)
        experts = EXPERT_IMPLS[self.cfg.moe_impl]
        y_td = experts(x_td, routing.expert_tk, routing.weight_tk, self.w_gate_edf[...],
                       self.w_up_edf[...], self.w_down_efd[...])
        y_btd = constrain(y_td.reshape(b, t, d), ("batch", "length", "act_embed"))
        if self.shared is not None:
            y_btd = y_btd + self.shared(x_btd)
        return y_btd, routing


def bias_update(bias_e: jax.Array, counts_e: jax.Array, rate: float) -> jax.Array:
    """Aux-loss-free balancing step: raise under-loaded experts, lower over-loaded ones."""
    return bias_e + rate * jnp.sign(jnp.mean(counts_e) - counts_e)


def update_router_bias(model: nnx.Module, counts_le: jax.Array, rate: float) -> None:
    """Apply `bias_update` to every MoE layer of `model` in place (layer order = counts order)."""
    moe_layers = [layer.ffn for layer in model.layers if isinstance(layer.ffn, MoE)]
    for i, moe in enumerate(moe_layers):
        moe.router_bias_e[...] = bias_update(moe.router_bias_e[...], counts_le[i], rate)
