"""Hugging Face tensor names/layouts (torch Linear: [out, in]) -> our named, dim-labelled params.

`state_from_hf` fills the abstract state of `Transformer(cfg)` and fails, naming the tensor, on
a missing, unexpected or wrongly shaped one: an import is exact or it does not happen.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

import jax.numpy as jnp
import numpy as np
from flax import nnx

from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig
from composer_jax.model.create import abstract_model

Path = tuple
Tensors = Mapping[str, np.ndarray]


def deinterleave(n_rope: int) -> np.ndarray:
    """DeepSeek stores rotary dims as interleaved pairs (x0,x1),(x2,x3)...; our rope rotates
    halves. Reordering the rope rows to evens-then-odds makes the two identical."""
    return np.concatenate([np.arange(0, n_rope, 2), np.arange(1, n_rope, 2)])


def mlp_entries(prefix: str, path: Path) -> dict[Path, tuple[str, Callable]]:
    return {path + ("w_gate_df",): (f"{prefix}.gate_proj.weight", np.transpose),
            path + ("w_up_df",): (f"{prefix}.up_proj.weight", np.transpose),
            path + ("w_down_fd",): (f"{prefix}.down_proj.weight", np.transpose)}


def gqa_entries(cfg: ModelConfig, p: str, path: Path) -> dict[Path, tuple[str, Callable]]:
    d, n, k, h = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    out = {path + ("wq_dnh",): (f"{p}.q_proj.weight", lambda w: w.T.reshape(d, n, h)),
           path + ("wk_dkh",): (f"{p}.k_proj.weight", lambda w: w.T.reshape(d, k, h)),
           path + ("wv_dkh",): (f"{p}.v_proj.weight", lambda w: w.T.reshape(d, k, h)),
           path + ("wo_nhd",): (f"{p}.o_proj.weight", lambda w: w.T.reshape(n, h, d))}
    if cfg.qkv_bias:
        out |= {path + ("bq_nh",): (f"{p}.q_proj.bias", lambda b: b.reshape(n, h)),
                path + ("bk_kh",): (f"{p}.k_proj.bias", lambda b: b.reshape(k, h)),
                path + ("bv_kh",): (f"{p}.v_proj.bias", lambda b: b.reshape(k, h))}
    return out


def mla_entries(cfg: ModelConfig, p: str, path: Path, interleaved: bool) -> dict[Path, tuple[str, Callable]]:
    d, n, c = cfg.d_model, cfg.n_heads, cfg.kv_lora_rank
    nope, r, v = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    rope_order = deinterleave(r) if interleaved else np.arange(r)
    head_order = np.concatenate([np.arange(nope), nope + rope_order])

    def q_heads(w_oi):  # [n*(nope+r), in] -> [in, n, nope+r], rope dims reordered
        return w_oi.T.reshape(-1, n, nope + r)[:, :, head_order]

    out = {path + ("wkv_a_dc",): (f"{p}.kv_a_proj_with_mqa.weight", lambda w: w[:c].T),
           path + ("wk_rope_dr",): (f"{p}.kv_a_proj_with_mqa.weight", lambda w: w[c:][rope_order].T),
           path + ("kv_norm", "scale"): (f"{p}.kv_a_layernorm.weight", np.asarray),
           path + ("wk_b_cnp",): (f"{p}.kv_b_proj.weight", lambda w: w.T.reshape(c, n, nope + v)[:, :, :nope]),
           path + ("wv_b_cnv",): (f"{p}.kv_b_proj.weight", lambda w: w.T.reshape(c, n, nope + v)[:, :, nope:]),
           path + ("wo_nvd",): (f"{p}.o_proj.weight", lambda w: w.T.reshape(n, v, d))}
    if cfg.q_lora_rank:
        out |= {path + ("wq_a_dq",): (f"{p}.q_a_proj.weight", np.transpose),
                path + ("q_norm", "scale"): (f"{p}.q_a_layernorm.weight", np.asarray),
                path + ("wq_b_qnh",): (f"{p}.q_b_proj.weight", q_heads)}
    else:
        out[path + ("wq_dnh",)] = (f"{p}.q_proj.weight", q_heads)
    return out


def moe_entries(cfg: ModelConfig, p: str, path: Path) -> dict[Path, tuple[str, Callable]]:
    out = {path + ("w_router_de",): (f"{p}.gate.weight", np.transpose),
           path + ("router_bias_e",): (f"{p}.gate.e_score_correction_bias", np.asarray)}
    if cfg.n_shared_experts:
        out |= mlp_entries(f"{p}.shared_experts", path + ("shared",))
    return out


def stacked_experts(tensors: Tensors, p: str, n_experts: int) -> dict[Path, np.ndarray]:
    """[E, ...] expert weights from per-expert tensors (hub layout) or fused ones (transformers 5)."""
    if f"{p}.experts.gate_up_proj" in tensors:
        gate_up_efd = np.swapaxes(tensors[f"{p}.experts.gate_up_proj"], 1, 2)
        f = gate_up_efd.shape[2] // 2
        return {("w_gate_edf",): gate_up_efd[:, :, :f], ("w_up_edf",): gate_up_efd[:, :, f:],
                ("w_down_efd",): np.swapaxes(tensors[f"{p}.experts.down_proj"], 1, 2)}

    def stack(name):
        return np.stack([tensors[f"{p}.experts.{e}.{name}.weight"].T for e in range(n_experts)])

    return {("w_gate_edf",): stack("gate_proj"), ("w_up_edf",): stack("up_proj"),
            ("w_down_efd",): stack("down_proj")}


def expert_tensor_names(tensors: Tensors, p: str, n_experts: int) -> set[str]:
    if f"{p}.experts.gate_up_proj" in tensors:
        return {f"{p}.experts.gate_up_proj", f"{p}.experts.down_proj"}
    return {f"{p}.experts.{e}.{w}.weight" for e in range(n_experts) for w in ("gate_proj", "up_proj", "down_proj")}


def state_from_hf(cfg: ModelConfig, tensors: Tensors, rope_interleaved: bool = False) -> tuple[nnx.GraphDef, nnx.State]:
    """(graphdef, float32 state) of `Transformer(cfg)` holding the checkpoint's weights."""
    entries = {("embed_vd",): ("model.embed_tokens.weight", np.asarray),
               ("final_norm", "scale"): ("model.norm.weight", np.asarray)}
    if not cfg.tie_embeddings:
        entries[("lm_head_dv",)] = ("lm_head.weight", np.transpose)
    values: dict[Path, np.ndarray] = {}
    used: set[str] = set()
    for i in range(cfg.n_layers):
        p, path = f"model.layers.{i}", ("layers", i)
        entries[path + ("attn_norm", "scale")] = (f"{p}.input_layernorm.weight", np.asarray)
        entries[path + ("ffn_norm", "scale")] = (f"{p}.post_attention_layernorm.weight", np.asarray)
        if cfg.attention == "mla":
            entries |= mla_entries(cfg, f"{p}.self_attn", path + ("attn",), rope_interleaved)
        else:
            entries |= gqa_entries(cfg, f"{p}.self_attn", path + ("attn",))
        if cfg.is_moe_layer(i):
            entries |= moe_entries(cfg, f"{p}.mlp", path + ("ffn",))
            missing = expert_tensor_names(tensors, f"{p}.mlp", cfg.n_experts) - set(tensors)
            if missing:
                raise ConfigError(f"checkpoint: missing tensor {sorted(missing)[0]!r}")
            for sub, arr in stacked_experts(tensors, f"{p}.mlp", cfg.n_experts).items():
                values[path + ("ffn",) + sub] = arr
            used |= expert_tensor_names(tensors, f"{p}.mlp", cfg.n_experts)
        else:
            entries |= mlp_entries(f"{p}.mlp", path + ("ffn",))
    for path, (name, transform) in entries.items():
        if name not in tensors:
            raise ConfigError(f"checkpoint: missing tensor {name!r}")
        values[path] = transform(np.asarray(tensors[name], np.float32))
        used.add(name)
    # Multi-token-prediction layers (DeepSeek's num_nextn_predict_layers) sit past n_layers.
    extra = sorted(n for n in set(tensors) - used if not is_mtp_tensor(n, cfg.n_layers))
    if extra:
        raise ConfigError(f"checkpoint: unexpected tensor {extra[0]!r} (not part of a {cfg.attention} "
                          f"model with {cfg.n_layers} layers)")
    return fill_state(cfg, values)


def is_mtp_tensor(name: str, n_layers: int) -> bool:
    parts = name.split(".")
    return len(parts) > 2 and parts[:2] == ["model", "layers"] and int(parts[2]) >= n_layers


def fill_state(cfg: ModelConfig, values: Mapping[Path, np.ndarray]) -> tuple[nnx.GraphDef, nnx.State]:
    graphdef, abstract = abstract_model(cfg)
    flat = []
    for path, var in nnx.to_flat_state(abstract):
        if path not in values:
            raise ConfigError(f"checkpoint: nothing maps onto parameter {'.'.join(map(str, path))}")
        arr = values[path]
        if arr.shape != var.shape:
            raise ConfigError(f"checkpoint: parameter {'.'.join(map(str, path))} expects shape "
                              f"{var.shape}, the checkpoint gives {arr.shape}")
        flat.append((path, var.replace(jnp.asarray(arr, jnp.float32))))
    return graphdef, nnx.from_flat_state(flat)
