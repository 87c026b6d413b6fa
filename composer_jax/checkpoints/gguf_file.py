"""Read a GGUF file (llama.cpp) into Hugging Face names/layouts: (config.json dict, tensors,
tokenizer metadata). Quantised tensors are dequantised to float32 with the `gguf` package.

llama.cpp's converter permutes Q/K rows only for llama-arch models (interleaved rope); qwen2 is
converted unpermuted and run with NEOX (rotate-half) rope, which is our convention, so the
weights map as they are.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping

import gguf
import numpy as np

from composer_jax.errors import ConfigError

Q = gguf.GGMLQuantizationType
SUPPORTED_TYPES = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q5_0, Q.Q4_K, Q.Q5_K, Q.Q6_K)
SUPPORTED_ARCHS = ("qwen2",)

GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
BLOCK_NAMES = {"attn_norm.weight": "input_layernorm.weight",
               "attn_q.weight": "self_attn.q_proj.weight", "attn_q.bias": "self_attn.q_proj.bias",
               "attn_k.weight": "self_attn.k_proj.weight", "attn_k.bias": "self_attn.k_proj.bias",
               "attn_v.weight": "self_attn.v_proj.weight", "attn_v.bias": "self_attn.v_proj.bias",
               "attn_output.weight": "self_attn.o_proj.weight",
               "ffn_norm.weight": "post_attention_layernorm.weight",
               "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
               "ffn_down.weight": "mlp.down_proj.weight"}


def hf_name(gguf_name: str) -> str:
    if gguf_name in GLOBAL_NAMES:
        return GLOBAL_NAMES[gguf_name]
    m = re.fullmatch(r"blk\.(\d+)\.(.+)", gguf_name)
    if m is None or m.group(2) not in BLOCK_NAMES:
        raise ConfigError(f"GGUF tensor {gguf_name!r} has no qwen2 counterpart")
    return f"model.layers.{m.group(1)}.{BLOCK_NAMES[m.group(2)]}"


def open_reader(path: str | os.PathLike) -> gguf.GGUFReader:
    """A reader over the whole file: a bad magic, a cut header or tensor data running past the
    end (a truncated download) fails here."""
    size = os.path.getsize(path)
    try:
        return gguf.GGUFReader(path)
    except (ValueError, IndexError, KeyError, OSError) as e:
        raise ConfigError(f"{path}: not a complete GGUF file ({size} bytes; {e}); expected a GGUF v2/v3 "
                          "header, metadata and every tensor's data: the file is truncated or corrupted") from e


def metadata(reader: gguf.GGUFReader) -> dict[str, object]:
    return {name: field.contents() for name, field in reader.fields.items()
            if not name.startswith("GGUF.")}


def dequantized(t) -> np.ndarray:
    if t.tensor_type not in SUPPORTED_TYPES:
        raise ConfigError(f"GGUF tensor {t.name!r} has quantisation type {t.tensor_type.name}; supported: "
                          f"{', '.join(q.name for q in SUPPORTED_TYPES)}")
    shape = tuple(int(n) for n in reversed(t.shape))  # GGUF lists dims innermost first
    return gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)


def hf_config(meta: Mapping[str, object], tensors: Mapping[str, np.ndarray]) -> dict:
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ConfigError(f"GGUF architecture {arch!r} is not supported (expected one of {', '.join(SUPPORTED_ARCHS)})")

    def get(key, default=None):
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise ConfigError(f"GGUF metadata {arch}.{key} is missing")
        return value

    return dict(model_type=arch, vocab_size=tensors["model.embed_tokens.weight"].shape[0],
                hidden_size=get("embedding_length"), num_hidden_layers=get("block_count"),
                num_attention_heads=get("attention.head_count"),
                num_key_value_heads=get("attention.head_count_kv"),
                intermediate_size=get("feed_forward_length"), rope_theta=get("rope.freq_base", 10_000.0),
                rms_norm_eps=get("attention.layer_norm_rms_epsilon"),
                max_position_embeddings=get("context_length"),
                tie_word_embeddings="lm_head.weight" not in tensors)


def read_gguf(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray], dict[str, object]]:
    """(HF-style config dict, float32 tensors under HF names, metadata)."""
    reader = open_reader(path)
    meta = metadata(reader)
    arch = meta.get("general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise ConfigError(f"GGUF architecture {arch!r} is not supported (expected one of {', '.join(SUPPORTED_ARCHS)})")
    tensors = {hf_name(t.name): dequantized(t) for t in reader.tensors}
    return hf_config(meta, tensors), tensors, meta
