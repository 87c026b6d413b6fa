"""The pure mid-training step: next-token loss over packed rows, AdamW update, router bias update.

`make_train_step` returns a function jitted with explicit in/out shardings and a donated state.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct
from jax.sharding import NamedSharding, PartitionSpec as P

from composer_jax.model import RouterBias, update_router_bias
from composer_jax.model.config import ModelConfig
from composer_jax.train.optim import learning_rate_schedule
from composer_jax.train.update import jit_update, update

Batch = Mapping[str, jax.Array]  # tokens, segment_ids, positions: int32 [batch, length]


class TrainState(struct.PyTreeNode):
    step: jax.Array
    params: nnx.State  # nnx.Param leaves: what the optimiser updates
    buffers: nnx.State  # non-optimised variables (router balancing bias)
    opt_state: Any


def split_params(state: nnx.State) -> tuple[nnx.State, nnx.State]:
    params, buffers = nnx.split_state(state, nnx.Param, RouterBias)
    return params, buffers


def init_train_state(state: nnx.State, tx: optax.GradientTransformation) -> TrainState:
    params, buffers = split_params(state)
    return TrainState(jnp.zeros((), jnp.int32), params, buffers, tx.init(params))


def next_token_targets(tokens_bt: jax.Array, segment_ids_bt: jax.Array):
    """Targets are the next token of the same document; the last token of each segment and
    padding (segment 0) carry no loss."""
    targets_bt = jnp.concatenate([tokens_bt[:, 1:], jnp.zeros_like(tokens_bt[:, :1])], axis=1)
    next_segment = jnp.concatenate([segment_ids_bt[:, 1:], jnp.zeros_like(segment_ids_bt[:, :1])], axis=1)
    mask_bt = (segment_ids_bt != 0) & (next_segment == segment_ids_bt)
    return targets_bt, mask_bt


def lm_loss(model, batch: Batch, train_cfg: Mapping[str, Any]):
    """(scalar loss to differentiate, metrics): token-mean cross-entropy plus weighted aux losses."""
    xn_btd, aux = model.hidden(batch["tokens"], batch["positions"], batch["segment_ids"])
    targets, mask = next_token_targets(batch["tokens"], batch["segment_ids"])
    mask = mask.astype(jnp.float32)
    n_tokens = jnp.maximum(jnp.sum(mask), 1.0)
    scores = model.score(xn_btd, targets)
    nll, logz = -scores.logp_bt, scores.logz_bt
    ce = jnp.sum(nll * mask) / n_tokens
    z_loss = jnp.sum(logz**2 * mask) / n_tokens
    loss = (ce + train_cfg["z_loss_weight"] * z_loss
            + train_cfg["load_balance_weight"] * aux["load_balance_loss"]
            + train_cfg["router_z_weight"] * aux["router_z_loss"])
    metrics = dict(loss=loss, ce=ce, z_loss=z_loss, tokens=jnp.sum(mask),
                   load_balance_loss=aux["load_balance_loss"], router_z_loss=aux["router_z_loss"],
                   dropped_fraction=aux["dropped_fraction"])
    if "expert_counts_le" in aux:
        metrics["expert_counts_le"] = aux["expert_counts_le"]
    return loss, metrics


def train_step(graphdef, tx, model_cfg: ModelConfig, train_cfg, state: TrainState, batch: Batch):
    def loss_fn(params, micro):
        return lm_loss(nnx.merge(graphdef, params, state.buffers), micro, train_cfg)

    lr = learning_rate_schedule(train_cfg)(state.step)  # the rate this update uses
    state, metrics = update(loss_fn, tx, state, batch, grad_accum=int(train_cfg["grad_accum"]))
    params, buffers = state.params, state.buffers
    if model_cfg.is_moe and train_cfg["bias_update_rate"] > 0:
        # Aux-loss-free balancing runs after the optimiser step, on this step's expert load.
        model = nnx.merge(graphdef, params, buffers)
        update_router_bias(model, metrics["expert_counts_le"], train_cfg["bias_update_rate"])
        _, buffers = split_params(nnx.state(model))
    # Finite iff every new parameter is: the loop checks it before it may checkpoint this state.
    metrics["param_norm"] = optax.global_norm(params)
    metrics["lr"] = lr
    if "expert_counts_le" in metrics:
        counts = metrics.pop("expert_counts_le")
        metrics["expert_load_max_over_mean"] = jnp.max(jnp.max(counts, -1) / jnp.mean(counts, -1))
    return state.replace(buffers=buffers), metrics


def make_train_step(graphdef, tx, model_cfg: ModelConfig, train_cfg, state_sharding=None,
                    batch_sharding=None) -> Callable[[TrainState, Batch], tuple[TrainState, dict]]:
    """Jitted step with the state donated; shardings pin state and batch layouts when given."""
    return jit_update(lambda state, batch: train_step(graphdef, tx, model_cfg, train_cfg, state, batch),
                      state_sharding, batch_sharding)


def train_state_shardings(abstract_state: nnx.State, tx: optax.GradientTransformation) -> TrainState:
    """Shardings of the TrainState built from `abstract_state` (arrays or ShapeDtypeStructs that
    carry shardings): optimiser moments shard like their parameters (left to propagation they
    come out replicated, losing FSDP's memory saving), counters are replicated."""
    leaf_shardings = jax.tree.map(lambda x: x.sharding, abstract_state)
    mesh = jax.tree.leaves(leaf_shardings)[0].mesh
    replicated = NamedSharding(mesh, P())
    param_shardings, buffer_shardings = split_params(leaf_shardings)
    abstract_params, _ = split_params(abstract_state)
    opt_shardings = optax.tree_map_params(
        tx, lambda _, sharding: sharding, jax.eval_shape(tx.init, abstract_params), param_shardings,
        transform_non_params=lambda _: replicated)
    return TrainState(replicated, param_shardings, buffer_shardings, opt_shardings)


def create_train_state(state: nnx.State, tx: optax.GradientTransformation):
    """Optimiser state born next to its (already sharded) parameters; returns (state, shardings)."""
    shardings = train_state_shardings(state, tx)
    train_state = jax.jit(lambda s: init_train_state(s, tx), out_shardings=shardings)(state)
    return train_state, shardings
