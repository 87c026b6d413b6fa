"""Hugging Face `config.json` -> our ModelConfig, for the architectures we can import exactly."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig

SUPPORTED = ("qwen2", "deepseek_v3", "kimi_k2")


def rope_base(hf: Mapping[str, Any]) -> float:
    """Plain RoPE only: scaled variants (yarn, linear, dynamic) would silently change logits."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type != "default":
        raise ConfigError(f"config.json: rope type {rope_type!r} is not supported (expected 'default')")
    return float(params.get("rope_theta", hf.get("rope_theta", 10_000.0)))


def common_fields(hf: Mapping[str, Any], max_seq_len: int | None) -> dict[str, Any]:
    if hf.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"config.json: hidden_act {hf['hidden_act']!r} is not supported (expected 'silu')")
    return dict(
        vocab_size=int(hf["vocab_size"]),
        d_model=int(hf["hidden_size"]),
        n_layers=int(hf["num_hidden_layers"]),
        n_heads=int(hf["num_attention_heads"]),
        d_ff=int(hf["intermediate_size"]),
        rope_base=rope_base(hf),
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        max_seq_len=int(max_seq_len or hf.get("max_position_embeddings", 2048)),
    )


def qwen2_fields(hf: Mapping[str, Any]) -> dict[str, Any]:
    if hf.get("use_sliding_window"):
        raise ConfigError("config.json: use_sliding_window=true is not supported (full attention only)")
    n_heads = int(hf["num_attention_heads"])
    return dict(n_kv_heads=int(hf.get("num_key_value_heads", n_heads)),
                head_dim=int(hf.get("head_dim") or hf["hidden_size"] // n_heads), qkv_bias=True)


def deepseek_v3_fields(hf: Mapping[str, Any]) -> dict[str, Any]:
    if hf.get("attention_bias"):
        raise ConfigError("config.json: attention_bias=true is not supported for multi-head latent attention")
    if int(hf.get("moe_layer_freq", 1)) != 1:
        raise ConfigError(f"config.json: moe_layer_freq={hf['moe_layer_freq']} is not supported (expected 1)")
    if hf.get("scoring_func", "sigmoid") != "sigmoid" or hf.get("topk_method", "noaux_tc") != "noaux_tc":
        raise ConfigError("config.json: only sigmoid scoring with noaux_tc (bias-corrected) top-k is supported")
    if not hf.get("norm_topk_prob", True):
        raise ConfigError("config.json: norm_topk_prob=false is not supported (top-k weights are renormalised)")
    nope, rope = int(hf["qk_nope_head_dim"]), int(hf["qk_rope_head_dim"])
    return dict(
        attention="mla", n_kv_heads=int(hf["num_attention_heads"]), head_dim=nope + rope,
        q_lora_rank=int(hf.get("q_lora_rank") or 0), kv_lora_rank=int(hf["kv_lora_rank"]),
        qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=int(hf["v_head_dim"]),
        n_experts=int(hf["n_routed_experts"]), top_k=int(hf["num_experts_per_tok"]),
        d_ff_expert=int(hf["moe_intermediate_size"]), n_shared_experts=int(hf.get("n_shared_experts") or 0),
        first_dense_layers=int(hf.get("first_k_dense_replace", 0)), router_score="sigmoid",
        routed_scale=float(hf.get("routed_scaling_factor", 1.0)),
        n_groups=int(hf.get("n_group") or 1), topk_groups=int(hf.get("topk_group") or 1),
    )


def model_config_from_hf(hf: Mapping[str, Any], max_seq_len: int | None = None, **overrides) -> ModelConfig:
    """ModelConfig for a checkpoint's config.json; `overrides` set runtime fields (dtype, moe_impl)."""
    model_type = hf.get("model_type")
    if model_type not in SUPPORTED:
        raise ConfigError(f"config.json: model_type {model_type!r} is not supported "
                          f"(expected one of {', '.join(SUPPORTED)})")
    arch = qwen2_fields(hf) if model_type == "qwen2" else deepseek_v3_fields(hf)
    cfg = ModelConfig(**{**common_fields(hf, max_seq_len), **arch, **overrides})
    cfg.validate()
    return cfg
