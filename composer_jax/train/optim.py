"""Optimiser: AdamW with warmup + cosine decay, global-norm clipping, decay on matrices only."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import optax


def learning_rate_schedule(train_cfg: Mapping[str, Any]) -> optax.Schedule:
    peak = train_cfg["lr"]
    warmup = max(int(train_cfg["warmup_steps"]), 1)
    decay_steps = max(int(train_cfg["steps"]), warmup + 1)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=peak, warmup_steps=warmup, decay_steps=decay_steps,
        end_value=peak * train_cfg["min_lr_ratio"])


def decay_mask(params) -> Any:
    """Weight decay on matrices only: norms and biases (1-D) are skipped. The router balancing
    bias is not a parameter at all, so it never reaches the optimiser."""
    return jax.tree.map(lambda p: p.ndim >= 2, params)


def make_optimizer(train_cfg: Mapping[str, Any]) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(train_cfg["clip_norm"]),
        optax.adamw(learning_rate_schedule(train_cfg), b1=train_cfg["b1"], b2=train_cfg["b2"],
                    eps=train_cfg["eps"], weight_decay=train_cfg["weight_decay"], mask=decay_mask),
    )
