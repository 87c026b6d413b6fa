"""Sparse upcycling (Komatsuzaki et al. 2022): a dense checkpoint -> an MoE one whose output at
step 0 equals the dense model's, so MoE mid-training starts from the real base.

Every routed expert is a copy of the layer's dense FFN. Top-k weights are renormalised to sum to
`routed_scale` = 1 (softmax or sigmoid alike), so identical experts reproduce the FFN whatever
the router picks; the router starts random and experts diverge through the tokens they get.
With shared experts, the dense FFN is split evenly: the shared experts and the routed mixture
each carry half of its down projection (their sum is the FFN again).
"""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
from flax import nnx

from composer_jax.checkpoints.hf_weights import fill_state
from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig


def upcycled_config(dense: ModelConfig, n_experts: int, top_k: int, n_shared_experts: int = 0,
                    first_dense_layers: int = 0, router_score: str = "softmax", **overrides) -> ModelConfig:
    if dense.is_moe:
        raise ConfigError("upcycling: the source model is already a mixture of experts (expected dense)")
    cfg = dataclasses.replace(dense, n_experts=n_experts, top_k=top_k, d_ff_expert=dense.d_ff,
                              n_shared_experts=n_shared_experts, first_dense_layers=first_dense_layers,
                              router_score=router_score, routed_scale=1.0, **overrides)
    cfg.validate()
    return cfg


def upcycle(dense_state: nnx.State, moe_cfg: ModelConfig, seed: int = 0,
            router_std: float = 0.02) -> tuple[nnx.GraphDef, nnx.State]:
    """(graphdef, state) of the MoE model `moe_cfg` (from `upcycled_config`) built from a dense state."""
    values = {path: np.asarray(var.get_value()) for path, var in nnx.to_flat_state(dense_state)}
    shared_share = 0.5 if moe_cfg.n_shared_experts else 0.0
    keys = iter(jax.random.split(jax.random.key(seed), moe_cfg.n_layers))
    for i in range(moe_cfg.n_layers):
        key = next(keys)
        if not moe_cfg.is_moe_layer(i):
            continue
        ffn = ("layers", i, "ffn")
        gate_df, up_df, down_fd = (values.pop(ffn + (n,)) for n in ("w_gate_df", "w_up_df", "w_down_fd"))
        e, n_shared = moe_cfg.n_experts, moe_cfg.n_shared_experts
        values[ffn + ("w_gate_edf",)] = np.broadcast_to(gate_df, (e, *gate_df.shape))
        values[ffn + ("w_up_edf",)] = np.broadcast_to(up_df, (e, *up_df.shape))
        values[ffn + ("w_down_efd",)] = np.broadcast_to(down_fd * (1 - shared_share), (e, *down_fd.shape))
        values[ffn + ("w_router_de",)] = router_std * np.asarray(
            jax.random.normal(key, (moe_cfg.d_model, e), np.float32))
        values[ffn + ("router_bias_e",)] = np.zeros((e,), np.float32)
        if n_shared:  # n_shared copies side by side, each with its share of the down projection
            values[ffn + ("shared", "w_gate_df")] = np.concatenate([gate_df] * n_shared, axis=1)
            values[ffn + ("shared", "w_up_df")] = np.concatenate([up_df] * n_shared, axis=1)
            values[ffn + ("shared", "w_down_fd")] = np.concatenate([down_fd * shared_share / n_shared] * n_shared)
    return fill_state(moe_cfg, values)
