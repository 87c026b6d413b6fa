"""An imported model on disk: model.json (ModelConfig), tokenizer.json + chat template, and the
parameters as an orbax checkpoint; restored straight onto a mesh when one is given."""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib

import jax
import orbax.checkpoint as ocp
from flax import nnx

from composer_jax.checkpoints.hf_import import Imported
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.errors import ConfigError
from composer_jax.model.config import ModelConfig
from composer_jax.model.create import abstract_model
from composer_jax.sharding import state_shardings


def save_imported(directory: str | os.PathLike, imported: Imported) -> None:
    directory = pathlib.Path(directory).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(directory / "params", nnx.to_pure_dict(imported.state), force=True)
    (directory / "model.json").write_text(json.dumps(dataclasses.asdict(imported.cfg), indent=1))
    if imported.tokenizer is not None:
        imported.tokenizer.save(directory / "tokenizer.json")
        (directory / "special_text.json").write_text(json.dumps(imported.tokenizer.special_text, indent=1))


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """A tokenizer.json, with the chat template of an imported model when `special_text.json`
    sits beside it."""
    template = pathlib.Path(path).with_name("special_text.json")
    return Tokenizer.load(path, json.loads(template.read_text()) if template.is_file() else None)


def shapes(cfg: ModelConfig) -> tuple:
    """What must agree for a checkpoint's params to fit a model (runtime fields may differ)."""
    return (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
            cfg.d_ff, cfg.qkv_bias, cfg.tie_embeddings, cfg.rope_base)


def load_model_config(directory: str | os.PathLike, **overrides) -> ModelConfig:
    path = pathlib.Path(directory) / "model.json"
    if not path.is_file():
        raise ConfigError(f"{directory}: no model.json (not an imported checkpoint; run the setup step)")
    cfg = ModelConfig(**{**json.loads(path.read_text()), **overrides})
    cfg.validate()
    return cfg


def load_imported(directory: str | os.PathLike, mesh: jax.sharding.Mesh | None = None, **overrides) -> Imported:
    """`overrides` change runtime fields only (dtype, moe_impl, max_seq_len), never shapes."""
    directory = pathlib.Path(directory).absolute()
    cfg = load_model_config(directory, **overrides)
    graphdef, abstract = abstract_model(cfg)
    if mesh is not None:
        abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                                abstract, state_shardings(abstract, mesh))
    with ocp.StandardCheckpointer() as ckpt:
        restored = ckpt.restore(directory / "params", nnx.to_pure_dict(abstract))
    nnx.replace_by_pure_dict(abstract, restored)
    tokenizer = load_tokenizer(directory / "tokenizer.json") if (directory / "tokenizer.json").is_file() else None
    return Imported(cfg, graphdef, abstract, tokenizer)
