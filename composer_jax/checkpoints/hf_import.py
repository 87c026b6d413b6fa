"""Import a Hugging Face safetensors directory or a GGUF file: model config, weights, tokenizer."""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import numpy as np
from flax import nnx
from safetensors.numpy import load_file

from composer_jax.checkpoints.chat_template import TEMPLATES
from composer_jax.checkpoints.gguf_file import read_gguf
from composer_jax.checkpoints.gguf_tokenizer import tokenizer_from_gguf_metadata
from composer_jax.checkpoints.hf_config import model_config_from_hf
from composer_jax.checkpoints.hf_weights import state_from_hf
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig


@dataclasses.dataclass
class Imported:
    cfg: ModelConfig
    graphdef: nnx.GraphDef
    state: nnx.State
    tokenizer: Tokenizer | None

    @property
    def model(self):
        return nnx.merge(self.graphdef, self.state)


def check_tokenizer_fits(tokenizer: Tokenizer, vocab_size: int, source: str) -> None:
    """Every token id must have an embedding row (a model may pad its vocabulary beyond)."""
    if tokenizer.vocab_size > vocab_size:
        raise ConfigError(f"{source}: the tokenizer has {tokenizer.vocab_size} tokens but the model's "
                          f"vocabulary has {vocab_size} rows; expected at most {vocab_size} tokens")


def read_safetensors_dir(path: pathlib.Path) -> dict[str, np.ndarray]:
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"{path}: no *.safetensors files")
    tensors: dict[str, np.ndarray] = {}
    for f in files:
        tensors |= load_file(str(f))
    return tensors


def import_safetensors_dir(path: str | os.PathLike, max_seq_len: int | None = None, **overrides) -> Imported:
    """`path` holds config.json, *.safetensors and optionally tokenizer.json."""
    path = pathlib.Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path}: no config.json (expected a Hugging Face checkpoint directory)")
    hf = json.loads((path / "config.json").read_text())
    cfg = model_config_from_hf(hf, max_seq_len, **overrides)
    interleaved = cfg.attention == "mla" and hf.get("rope_interleave", True)
    graphdef, state = state_from_hf(cfg, read_safetensors_dir(path), rope_interleaved=interleaved)
    tokenizer = None
    if (path / "tokenizer.json").is_file():
        tokenizer = Tokenizer.load(path / "tokenizer.json", TEMPLATES.get(hf["model_type"]))
        check_tokenizer_fits(tokenizer, cfg.vocab_size, str(path / "tokenizer.json"))
    return Imported(cfg, graphdef, state, tokenizer)


def import_gguf(path: str | os.PathLike, max_seq_len: int | None = None, **overrides) -> Imported:
    hf, tensors, meta = read_gguf(path)
    cfg = model_config_from_hf(hf, max_seq_len, **overrides)
    graphdef, state = state_from_hf(cfg, tensors)
    tokenizer = Tokenizer(tokenizer_from_gguf_metadata(meta), TEMPLATES.get(hf["model_type"]))
    check_tokenizer_fits(tokenizer, cfg.vocab_size, f"{path} (tokenizer.ggml.tokens)")
    return Imported(cfg, graphdef, state, tokenizer)
