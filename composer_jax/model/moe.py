"""Mixture-of-experts feed-forward: float32 router, grouped-matmul experts, expert parallelism
over the mesh, dense reference.

Routing follows DeepSeek-V3's auxiliary-loss-free balancing: experts are *selected* on
score + bias, the bias is a non-optimised variable nudged after each step towards equal load
(`update_router_bias`), and the combine weights come from the unbiased scores.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx, struct

from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig
from composer_jax.model.layers import MLP, param
from composer_jax.sharding import constrain, logical_to_spec, mesh_axes_of


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
          forced_expert_tk: jax.Array | None = None, token_axes: tuple[str, ...] = ()) -> Routing:
    """Top-k routing in float32. `forced_expert_tk` replays a recorded choice (RL routing replay).
    Inside shard_map, `token_axes` name the mesh axes the tokens are split over: the choice stays
    per device and only the [E]-sized statistics are summed across them."""
    e, k = cfg.n_experts, cfg.top_k
    total = (lambda a: jax.lax.psum(a, token_axes)) if token_axes else (lambda a: a)
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
    counts_e = total(jnp.zeros((e,), jnp.float32).at[expert_tk.reshape(-1)].add(1.0))
    n_tokens = total(jnp.asarray(t, jnp.float32))
    if cfg.capacity_factor > 0 and not token_axes:  # expert parallelism drops per device instead
        capacity = math.ceil(t * k / e * cfg.capacity_factor)
        keep_tk = capacity_keep_mask(expert_tk, e, capacity)
        weight_tk = weight_tk * keep_tk
        dropped = 1.0 - jnp.mean(keep_tk.astype(jnp.float32))
    else:
        dropped = jnp.zeros((), jnp.float32)
    fraction_e = counts_e / (n_tokens * k)
    mean_probs_e = total(jnp.sum(probs_te, axis=0)) / n_tokens
    load_balance = e * jnp.sum(jax.lax.stop_gradient(fraction_e) * mean_probs_e)
    z_loss = total(jnp.sum(jax.nn.logsumexp(logits_te, axis=-1) ** 2)) / n_tokens
    return Routing(expert_tk.astype(jnp.int32), weight_tk, counts_e, load_balance, z_loss, dropped)


def ragged_rows(x_nd, expert_n, w_gate_edf, w_up_edf, w_down_efd) -> jax.Array:
    """SwiGLU of each row under its expert: sort rows by expert, one `lax.ragged_dot` per
    projection, unsort. Rows with expert id == E are empty and give 0. The fast path on
    TPU/GPU; XLA:CPU lowers ragged_dot densely (every expert on every row)."""
    dt, e = x_nd.dtype, w_gate_edf.shape[0]
    order = jnp.argsort(expert_n, stable=True)
    sizes = jnp.zeros((e,), jnp.int32).at[expert_n].add(1, mode="drop")
    x_sorted = x_nd[order]
    gate = jax.lax.ragged_dot(x_sorted, w_gate_edf.astype(dt), sizes)
    up = jax.lax.ragged_dot(x_sorted, w_up_edf.astype(dt), sizes)
    y_sorted = jax.lax.ragged_dot(jax.nn.silu(gate) * up, w_down_efd.astype(dt), sizes)
    return jnp.zeros_like(y_sorted).at[order].set(y_sorted)


def block_size(n_assignments: int, n_experts: int) -> int:
    """Rows per block: large enough for efficient matmuls, small enough that padding every
    expert's group up to a whole block wastes at most about half the work."""
    target = max(n_assignments // (2 * n_experts), 1)
    return int(min(max(2 ** (target.bit_length() - 1), 8), 128))


def blocked_rows(x_nd, expert_n, w_gate_edf, w_up_edf, w_down_efd) -> jax.Array:
    """`ragged_rows` without ragged_dot: each expert's sorted rows are padded to whole blocks,
    every block belongs to one expert, and one batched matmul runs all blocks. A static bound
    (ceil(n/block) + E blocks) keeps shapes fixed. Fast on CPU."""
    dt = x_nd.dtype
    n, d = x_nd.shape
    e = w_gate_edf.shape[0]
    block = block_size(n, e)
    n_blocks = -(-n // block) + e
    order = jnp.argsort(expert_n, stable=True)
    sorted_expert = expert_n[order]
    sizes = jnp.zeros((e,), jnp.int32).at[expert_n].add(1, mode="drop")
    padded = (sizes + block - 1) // block * block
    start, padded_end = jnp.cumsum(sizes) - sizes, jnp.cumsum(padded)
    expert_of = jnp.minimum(sorted_expert, e - 1)
    row_of = (padded_end - padded)[expert_of] + jnp.arange(n) - start[expert_of]
    row_of = jnp.where(sorted_expert < e, row_of, n_blocks * block)  # empty rows: nowhere
    x_rows = jnp.zeros((n_blocks * block, d), dt).at[row_of].set(x_nd[order], mode="drop")
    block_expert = jnp.minimum(
        jnp.searchsorted(padded_end, jnp.arange(n_blocks) * block, side="right"), e - 1)
    x_nbd = x_rows.reshape(n_blocks, block, d)
    gate = jnp.einsum("nbd,ndf->nbf", x_nbd, w_gate_edf[block_expert].astype(dt))
    up = jnp.einsum("nbd,ndf->nbf", x_nbd, w_up_edf[block_expert].astype(dt))
    y_nbd = jnp.einsum("nbf,nfd->nbd", jax.nn.silu(gate) * up, w_down_efd[block_expert].astype(dt))
    y_sorted = y_nbd.reshape(-1, d).at[row_of].get(mode="fill", fill_value=0)
    return jnp.zeros_like(y_sorted).at[order].set(y_sorted)


def combine_rows(rows_impl):
    """An experts function over (tokens, routing) from a per-row kernel: one row per
    assignment, scaled by its routing weight and summed back into its token."""
    def experts(x_td, expert_tk, weight_tk, w_gate_edf, w_up_edf, w_down_efd):
        t, k = expert_tk.shape
        token_n = jnp.arange(t * k) // k
        y_nd = rows_impl(x_td[token_n], expert_tk.reshape(-1), w_gate_edf, w_up_edf, w_down_efd)
        y_nd = y_nd * weight_tk.reshape(-1)[:, None].astype(x_td.dtype)
        return jnp.zeros_like(x_td).at[token_n].add(y_nd)
    return experts


ragged_experts = combine_rows(ragged_rows)
blocked_experts = combine_rows(blocked_rows)


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
ROW_KERNELS = dict(ragged=ragged_rows, blocked=blocked_rows)


def uses_expert_parallel(cfg: ModelConfig, mesh) -> bool:
    """Whether the MoE dispatches per device over the mesh. On more than one device every
    impl but the dense reference does (blocked/ragged then name the grouped-matmul kernel):
    routing the global batch would have every device do the whole batch's MoE."""
    if cfg.moe_impl == "expert_parallel":
        return True
    return cfg.moe_impl != "dense" and not mesh.empty and mesh.size > 1


def send_capacity(tokens: int, k: int, n_shards: int, experts_per_shard: int,
                  capacity_factor: float) -> int:
    """Rows one device may send to each expert shard: ceil(t k / X * factor), never above the
    dropless bound (every token's choices within one shard); 0 = that bound."""
    dropless = tokens * min(k, experts_per_shard)
    if capacity_factor <= 0:
        return dropless
    return max(1, min(dropless, math.ceil(tokens * k / n_shards * capacity_factor)))


def dispatch_slots(expert_tk: jax.Array, experts_per_shard: int, n_shards: int, capacity: int):
    """Where each assignment goes in the [shards x capacity] send buffer.

    Assignments are taken choice-major, so every token's first choice claims capacity before
    any second choice. -> (token_n, local_expert_n, slot_n, keep_n); a dropped assignment's
    slot is n_shards * capacity (past the buffer)."""
    t, k = expert_tk.shape
    expert_n = expert_tk.T.reshape(-1)
    token_n = jnp.tile(jnp.arange(t), k)
    shard_n = expert_n // experts_per_shard
    onehot_nx = jax.nn.one_hot(shard_n, n_shards, dtype=jnp.int32)
    position_n = jnp.sum(jnp.cumsum(onehot_nx, axis=0) * onehot_nx, axis=-1) - 1
    keep_n = position_n < capacity
    slot_n = jnp.where(keep_n, shard_n * capacity + position_n, n_shards * capacity)
    return token_n, expert_n % experts_per_shard, slot_n, keep_n


def _expert_parallel_shard(x_td, forced_tk, w_router_de, bias_e, w_gate_edf, w_up_edf,
                           w_down_efd, *, cfg: ModelConfig, rows_impl):
    """One device's part (inside shard_map): its own tokens, its own experts."""
    token_axes, expert_axes = mesh_axes_of("batch"), mesh_axes_of("expert")
    embed_axes, mlp_axes = mesh_axes_of("embed"), mesh_axes_of("expert_mlp")
    # The weights enter invariant over the token axes; marking them varying before the FSDP
    # gather puts the gradient's sum over token axes after its reduce-scatter (1/fsdp the bytes).
    def vary(w, logical):
        split = {a for name in logical for a in mesh_axes_of(name)}
        return jax.lax.pcast(w, tuple(a for a in token_axes if a not in split), to="varying")
    w_router_de = vary(w_router_de, ("embed",))
    w_gate_edf, w_up_edf, w_down_efd = (vary(w, ("expert", "embed", "expert_mlp"))
                                        for w in (w_gate_edf, w_up_edf, w_down_efd))
    if embed_axes:  # FSDP: gather the router and this shard's experts only
        w_router_de = jax.lax.all_gather(w_router_de, embed_axes, axis=0, tiled=True)
        w_gate_edf = jax.lax.all_gather(w_gate_edf, embed_axes, axis=1, tiled=True)
        w_up_edf = jax.lax.all_gather(w_up_edf, embed_axes, axis=1, tiled=True)
        w_down_efd = jax.lax.all_gather(w_down_efd, embed_axes, axis=2, tiled=True)
    routing = route(x_td, w_router_de, bias_e, cfg, forced_tk, token_axes)
    dt = x_td.dtype
    (t, d), k = x_td.shape, cfg.top_k
    n_shards, experts_per_shard = jax.lax.axis_size(expert_axes), w_gate_edf.shape[0]
    capacity = send_capacity(t, k, n_shards, experts_per_shard, cfg.capacity_factor)
    token_n, local_n, slot_n, keep_n = dispatch_slots(routing.expert_tk, experts_per_shard,
                                                      n_shards, capacity)
    rows = n_shards * capacity
    send_rd = jnp.zeros((rows, d), dt).at[slot_n].set(x_td[token_n], mode="drop")
    send_r = jnp.full((rows,), experts_per_shard, jnp.int32).at[slot_n].set(local_n, mode="drop")
    exchange = lambda a: jax.lax.all_to_all(
        a.reshape(n_shards, capacity, *a.shape[1:]), expert_axes, 0, 0).reshape(a.shape)
    y_rd = rows_impl(exchange(send_rd), exchange(send_r), w_gate_edf, w_up_edf, w_down_efd)
    y_nd = exchange(y_rd).at[slot_n].get(mode="fill", fill_value=0)
    weight_n = routing.weight_tk.T.reshape(-1) * keep_n
    y_td = jnp.zeros_like(x_td).at[token_n].add(y_nd * weight_n[:, None].astype(dt))
    if mlp_axes:  # each tensor shard holds a slice of the expert FFN: partial sums
        y_td = jax.lax.psum(y_td, mlp_axes)
    dropped = (jax.lax.psum(jnp.sum((~keep_n).astype(jnp.float32)), token_axes)
               / (jax.lax.psum(t, token_axes) * k))
    return y_td, routing.replace(weight_tk=routing.weight_tk * keep_n.reshape(k, t).T,
                                 dropped_fraction=dropped)


def expert_parallel_moe(x_td, w_router_de, bias_e, w_gate_edf, w_up_edf, w_down_efd,
                        cfg: ModelConfig, forced_expert_tk=None, rows_impl=None
                        ) -> tuple[jax.Array, Routing]:
    """Expert parallelism under shard_map: each device routes and sorts only its own tokens,
    sends rows to the devices owning their experts (all-to-all over the expert axis, buffers
    of `send_capacity` rows per peer), runs a grouped matmul over its local experts
    (ragged_dot on TPU/GPU, blocked on CPU), and gets the rows back by the reverse all-to-all.
    Only [E]-sized routing statistics cross the token axes."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        raise ConfigError("model.moe_impl='expert_parallel' needs a device mesh (run under "
                          "jax.set_mesh(...)); use moe_impl='blocked' or 'ragged' without one")
    shards = math.prod(mesh.shape[a] for a in mesh_axes_of("batch"))
    if x_td.shape[0] % shards:
        raise ConfigError(f"expert-parallel MoE: {x_td.shape[0]} tokens (batch x length) do not "
                          f"split over the mesh's {shards} batch shards (data x fsdp x expert)")
    if rows_impl is None:
        rows_impl = ragged_rows if jax.default_backend() in ("tpu", "gpu") else blocked_rows
    tokens = logical_to_spec(("batch", None))
    replicated = jax.sharding.PartitionSpec()
    w_in = logical_to_spec(("expert", "embed", "expert_mlp"))
    w_out = logical_to_spec(("expert", "expert_mlp", "embed"))
    if forced_expert_tk is None:  # shard_map takes arrays only: record "no replay" as -1
        forced_expert_tk = jnp.full((x_td.shape[0], cfg.top_k), -1, jnp.int32)
        replay = False
    else:
        replay = True
    shard = lambda x, f, *w: _expert_parallel_shard(x, f if replay else None, *w, cfg=cfg,
                                                    rows_impl=rows_impl)
    out_routing = Routing(tokens, tokens, replicated, replicated, replicated, replicated)
    return jax.shard_map(
        shard, mesh=mesh,
        in_specs=(tokens, tokens, logical_to_spec(("embed", "router_experts")),
                  logical_to_spec(("router_experts",)), w_in, w_in, w_out),
        out_specs=(tokens, out_routing),
    )(x_td, forced_expert_tk, w_router_de, bias_e, w_gate_edf, w_up_edf, w_down_efd)


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
        weights = (self.w_gate_edf[...], self.w_up_edf[...], self.w_down_efd[...])
        router = (self.w_router_de[...], self.router_bias_e[...])
        if uses_expert_parallel(self.cfg, jax.sharding.get_abstract_mesh()):
            y_td, routing = expert_parallel_moe(x_td, *router, *weights, self.cfg, forced,
                                                ROW_KERNELS.get(self.cfg.moe_impl))
        else:
            routing = route(x_td, *router, self.cfg, forced)
            y_td = EXPERT_IMPLS[self.cfg.moe_impl](x_td, routing.expert_tk, routing.weight_tk, *weights)
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
