"""Optimiser: AdamW with warmup + cosine decay, global-norm clipping, decay on matrices only; and
`scale_vocab_updates` for a larger step on the token embedding and output head."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import optax


def learning_rate_schedule(train_cfg: Mapping[str, Any]) -> optax.Schedule:
    peak = train_cfg["lr"]
    warmup = int(train_cfg["warmup_steps"])
    decay_steps = max(int(train_cfg["steps"]), warmup + 1)
    if warmup == 0:  # no warmup: the first step already moves (optax's would start at init_value 0)
        return optax.cosine_decay_schedule(peak, decay_steps, alpha=train_cfg["min_lr_ratio"])
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


VOCAB_PARAMS = ("embed_vd", "lm_head_dv")


def scale_vocab_updates(updates, scale: float):
    """The optimiser's updates with the token embedding's and output head's multiplied by `scale`.

    Applied to the updates, not inside the optimiser, so its state keeps one structure whatever the
    scale: a checkpoint restores under any other optimiser config (SFT's under RL's). Used by SFT,
    where a pretrained checkpoint's never-predicted template tokens (its tool-call ids) sit ~20
    nats below the rest and their rows move far too slowly at a fine-tuning lr."""
    if scale == 1.0:
        return updates
    return jax.tree_util.tree_map_with_path(
        lambda path, u: u * scale if any(getattr(k, "key", None) in VOCAB_PARAMS for k in path) else u, updates)
