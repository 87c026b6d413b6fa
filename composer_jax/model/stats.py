"""Parameter counts and FLOPs per token, from abstract shapes (works for a 1T-parameter config)."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np

from composer_jax.model.config import ModelConfig
from composer_jax.model.create import abstract_model

# Bytes of training state per parameter: float32 master weights, float32 gradients, and
# AdamW's two float32 moments; a bf16 compute copy adds 2 more when model.dtype is bfloat16.
STATE_BYTES = dict(params_f32=4, grads_f32=4, adam_mu_f32=4, adam_nu_f32=4)


@dataclasses.dataclass(frozen=True)
class ModelStats:
    total_params: int
    active_params_per_token: int  # counts top_k routed + shared experts, embeddings included
    embedding_params: int
    flops_per_token_train: float  # 6 * (active matmul params) + causal attention
    flops_per_token_forward: float
    bytes_per_param_state: dict
    state_bytes_total: float


def count_params(cfg: ModelConfig) -> int:
    _, state = abstract_model(cfg)
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(state)))


def model_stats(cfg: ModelConfig, seq_len: int) -> ModelStats:
    total = count_params(cfg)
    per_expert = 3 * cfg.d_model * cfg.d_ff_expert
    inactive = cfg.n_moe_layers * (cfg.n_experts - cfg.top_k) * per_expert
    shift_tables = cfg.token_shift * cfg.vocab_size * cfg.d_model
    embedding = cfg.vocab_size * cfg.d_model * (1 if cfg.tie_embeddings else 2) + shift_tables
    active = total - inactive
    # Input embeddings (token-shift tables too) are lookups, not matmuls; the output projection is a matmul.
    matmul_active = active - cfg.vocab_size * cfg.d_model * (0 if cfg.tie_embeddings else 1) - shift_tables
    # Causal attention: QK^T and AV, 2 FLOPs per MAC, half the score matrix.
    # MLA: scores over qk_nope + qk_rope dims, values over v_head_dim.
    qk_dim, v_dim = ((cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim)
                     if cfg.attention == "mla" else (cfg.head_dim, cfg.head_dim))
    attn_forward = 2 * cfg.n_layers * seq_len * cfg.n_heads * (qk_dim + v_dim) / 2
    forward = 2 * matmul_active + attn_forward
    state = dict(STATE_BYTES)
    if cfg.dtype == "bfloat16":
        state["params_bf16_copy"] = 2
    return ModelStats(
        total_params=total,
        active_params_per_token=active,
        embedding_params=embedding,
        flops_per_token_train=3 * forward,
        flops_per_token_forward=forward,
        bytes_per_param_state=state,
        state_bytes_total=float(total * sum(state.values())),
    )
