"""The one optimiser update of every phase (mid-training, SFT, RL).

    state, metrics = update(loss_fn, tx, state, batch, grad_accum=1, embed_lr_scale=1.0)

loss_fn(params, batch) -> (scalar loss, metrics). The gradient is averaged over `grad_accum`
micro-batches (a scan keeps memory at one micro-batch); a non-finite loss or gradient leaves
params and optimiser state unchanged (`skipped_nonfinite` = 1, the step counter does not move:
the caller decides whether to stop); the token embedding's and output head's step is scaled by
`embed_lr_scale` (train/optim.py). Jit it with the state donated (`jit_update`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax

from composer_jax.train.optim import scale_vocab_updates

SUMMED = ("tokens", "expert_counts_le")  # metrics that add over micro-batches; the rest average


def split_microbatches(batch: Mapping[str, jax.Array], n: int):
    return jax.tree.map(lambda x: x.reshape(n, x.shape[0] // n, *x.shape[1:]), batch)


def accumulate_grads(loss_fn: Callable, params, batch, grad_accum: int = 1):
    """(gradient, metrics) of loss_fn averaged over `grad_accum` equal micro-batches."""
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    if grad_accum == 1:
        (_, metrics), grads = grad_fn(params, batch)
        return grads, metrics
    micro = split_microbatches(batch, grad_accum)

    def body(carry, mb):
        (_, metrics), grads = grad_fn(params, mb)
        return jax.tree.map(jnp.add, carry, (grads, metrics)), None

    (_, metrics0), grads0 = jax.tree.map(jnp.zeros_like, jax.eval_shape(grad_fn, params,
                                                                        jax.tree.map(lambda x: x[0], micro)))
    (grads, metrics), _ = jax.lax.scan(body, (grads0, metrics0), micro)
    metrics = {k: (v if k in SUMMED else v / grad_accum) for k, v in metrics.items()}
    return jax.tree.map(lambda g: g / grad_accum, grads), metrics


def update(loss_fn: Callable, tx: optax.GradientTransformation, state, batch, *, grad_accum: int = 1,
           embed_lr_scale: float = 1.0):
    """(new TrainState, metrics with grad_norm and skipped_nonfinite)."""
    grads, metrics = accumulate_grads(loss_fn, state.params, batch, grad_accum)
    grad_norm = optax.global_norm(grads)
    ok = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
    grads = jax.tree.map(lambda g: jnp.where(ok, g, 0.0), grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, scale_vocab_updates(updates, embed_lr_scale))
    keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)  # noqa: E731
    new = state.replace(step=state.step + ok.astype(jnp.int32), params=keep(params, state.params),
                        opt_state=keep(opt_state, state.opt_state))
    return new, dict(metrics, grad_norm=grad_norm, skipped_nonfinite=(~ok).astype(jnp.int32))


def jit_update(fn: Callable[[Any, Any], tuple[Any, dict]], state_sharding=None, batch_sharding=None):
    """`fn(state, batch)` jitted with the state donated; shardings pin the layouts when given."""
    if state_sharding is None:
        return jax.jit(fn, donate_argnums=0)
    return jax.jit(fn, in_shardings=(state_sharding, batch_sharding), out_shardings=(state_sharding, None),
                   donate_argnums=0)
