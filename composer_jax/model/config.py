"""Frozen model config, built from the `model` block of an ml_collections config and validated."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from composer_jax.errors import ConfigError, reject_unknown_fields


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int  # dense FFN width
    rope_base: float = 10_000.0
    qkv_bias: bool = False
    tie_embeddings: bool = True
    norm_eps: float = 1e-6
    max_seq_len: int = 2048
    dtype: str = "float32"  # compute dtype; parameters stay float32
    # Token shift: add learned embeddings of the `token_shift` previous tokens (same sequence)
    # to each input, so one attention layer can match "the token after an earlier copy of this
    # context" (induction) without first building previous-token heads. 0 = off.
    token_shift: int = 0
    # Mixture of experts: n_experts == 0 means a dense model.
    n_experts: int = 0
    top_k: int = 0
    d_ff_expert: int = 0
    n_shared_experts: int = 0
    first_dense_layers: int = 0
    router_score: str = "softmax"  # softmax | sigmoid
    # ragged | blocked | dense | expert_parallel. On a mesh of more than one device every impl
    # but the dense reference dispatches expert-parallel (moe.py), ragged/blocked naming the
    # grouped-matmul kernel; expert_parallel picks it by backend and needs a mesh.
    moe_impl: str = "ragged"
    # 0 = dropless. >0: an expert takes ceil(T k / E * factor) assignments; under expert_parallel
    # each device sends ceil(T_dev k / shards * factor) rows to each expert shard.
    capacity_factor: float = 0.0
    routed_scale: float = 1.0
    remat: str = "none"  # none | full | save_dots_except_mlp
    # Score targets (losses, prefill log-probs) this many positions at a time, so no whole row's
    # float32 logits are held (model/vocab_scores.py); 0 = a whole row at once.
    logits_chunk: int = 0
    # Attention: "gqa" (grouped-query) or "mla" (DeepSeek multi-head latent attention, which
    # uses the ranks below instead of n_kv_heads / head_dim).
    attention: str = "gqa"
    q_lora_rank: int = 0  # 0 = full-rank query projection
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek-V3 group-limited routing: experts split into n_groups; a token may only pick
    # experts from its topk_groups best groups (ranked by each group's top-2 biased scores).
    n_groups: int = 1
    topk_groups: int = 1

    @classmethod
    def from_config(cls, model_config: Mapping[str, Any]) -> "ModelConfig":
        values = dict(model_config.items()) if hasattr(model_config, "items") else dict(model_config)
        reject_unknown_fields(cls, values, "model")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING and f.name not in values]
        if missing:
            raise ConfigError(f"model.{missing[0]}: required field is missing")
        cfg = cls(**values)
        cfg.validate()
        return cfg

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        return self.is_moe and layer >= self.first_dense_layers

    @property
    def n_moe_layers(self) -> int:
        return sum(self.is_moe_layer(i) for i in range(self.n_layers))

    def validate(self) -> None:
        def fail(field: str, why: str):
            raise ConfigError(f"model.{field}={getattr(self, field)!r}: {why}")

        for field in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                      "d_ff", "max_seq_len"):
            if not isinstance(getattr(self, field), int) or getattr(self, field) < 1:
                fail(field, "must be a positive integer")
        if self.n_heads % self.n_kv_heads:
            fail("n_heads", f"must be a multiple of model.n_kv_heads={self.n_kv_heads} (grouped-query attention)")
        if self.head_dim % 2:
            fail("head_dim", "must be even (rotary embeddings rotate pairs)")
        if self.rope_base <= 1:
            fail("rope_base", "must be > 1")
        if not isinstance(self.token_shift, int) or self.token_shift < 0:
            fail("token_shift", "must be an integer >= 0 (previous tokens embedded; 0 = off)")
        if not isinstance(self.logits_chunk, int) or self.logits_chunk < 0:
            fail("logits_chunk", "must be an integer >= 0 (positions scored at a time; 0 = whole rows)")
        if self.dtype not in ("float32", "bfloat16"):
            fail("dtype", "must be 'float32' or 'bfloat16'")
        if self.remat not in ("none", "full", "save_dots_except_mlp"):
            fail("remat", "must be one of none | full | save_dots_except_mlp")
        if self.attention not in ("gqa", "mla"):
            fail("attention", "must be 'gqa' or 'mla'")
        if self.attention == "mla":
            for field in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if not isinstance(getattr(self, field), int) or getattr(self, field) < 1:
                    fail(field, "must be a positive integer for multi-head latent attention")
            if self.qk_rope_head_dim % 2:
                fail("qk_rope_head_dim", "must be even (rotary embeddings rotate pairs)")
            if self.q_lora_rank < 0:
                fail("q_lora_rank", "must be >= 0 (0 = full-rank query projection)")
        if self.n_experts < 0:
            fail("n_experts", "must be >= 0")
        if not self.is_moe:
            return
        if not 1 <= self.top_k <= self.n_experts:
            fail("top_k", f"must be in [1, model.n_experts={self.n_experts}]")
        if self.d_ff_expert < 1:
            fail("d_ff_expert", "must be a positive integer for an MoE model")
        if self.n_shared_experts < 0:
            fail("n_shared_experts", "must be >= 0")
        if not 0 <= self.first_dense_layers <= self.n_layers:
            fail("first_dense_layers", f"must be in [0, model.n_layers={self.n_layers}]")
        if self.router_score not in ("softmax", "sigmoid"):
            fail("router_score", "must be 'softmax' or 'sigmoid'")
        if self.moe_impl not in ("ragged", "blocked", "dense", "expert_parallel"):
            fail("moe_impl", "must be 'ragged' (sort + ragged_dot), 'blocked' (sort + block-padded "
                             "batched matmul), 'dense' (one-hot reference) or 'expert_parallel' "
                             "(all-to-all dispatch over the mesh's expert axis)")
        if self.capacity_factor < 0:
            fail("capacity_factor", "must be >= 0 (0 = dropless)")
        if self.n_groups < 1 or self.n_experts % self.n_groups:
            fail("n_groups", f"must be a positive divisor of model.n_experts={self.n_experts}")
        if not 1 <= self.topk_groups <= self.n_groups:
            fail("topk_groups", f"must be in [1, model.n_groups={self.n_groups}]")
        if self.n_groups > 1 and self.n_experts // self.n_groups < 2:
            fail("n_groups", "each group needs >= 2 experts (groups are ranked by their top-2 scores)")
