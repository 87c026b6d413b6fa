"""Plan a run on paper: per-chip memory, FLOPs per step and step time, before launching it.

  python -m composer_jax.tools.plan --config configs/kimi_k2_5.py --slice v5p-1024

Memory per chip = training state (float32 params, grads, AdamW moments; each variable split
as the logical-axis rules in composer_jax/sharding.py place it) + saved activations
(per the remat policy) + the rollout KV cache. A plan that does not fit is refused, naming the
largest term.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

import jax
import numpy as np
from flax import nnx

from composer_jax.config_loading import load_config
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, init_cache
from composer_jax.model.create import abstract_model
from composer_jax.model.stats import model_stats
from composer_jax.sharding import MESH_AXES, logical_to_spec
from composer_jax.tools.hardware import Slice, parse_slice

USABLE_MEMORY_FRACTION = 0.9  # headroom for XLA scratch and fragmentation


@dataclasses.dataclass(frozen=True)
class Plan:
    slice: str
    n_chips: int
    mesh: dict
    memory_bytes: dict  # per chip, by term
    memory_total_bytes: float
    memory_available_bytes: float
    flops_per_step: float
    tokens_per_step: int
    assumed_mfu: float
    step_time_s: float
    fits: bool


def resolve_mesh(mesh_config, n_chips: int) -> dict:
    sizes = {a: int(mesh_config.get(a, 1)) for a in MESH_AXES}
    fixed = math.prod(s for s in sizes.values() if s != -1)
    for axis, size in sizes.items():
        if size == -1:
            if n_chips % fixed:
                raise ConfigError(f"mesh.{axis}=-1: the other axes ({fixed}) do not divide {n_chips} chips")
            sizes[axis] = n_chips // fixed
    if math.prod(sizes.values()) != n_chips:
        raise ConfigError(f"mesh: {sizes} uses {math.prod(sizes.values())} chips but the slice has {n_chips}")
    return sizes


def shards_of(spec, mesh: dict) -> int:
    """How many ways a PartitionSpec splits an array on a mesh of the given axis sizes."""
    axes = [a for entry in spec if entry is not None
            for a in ((entry,) if isinstance(entry, str) else entry)]
    return math.prod(mesh[a] for a in axes)


def state_bytes_per_chip(cfg: ModelConfig, mesh: dict) -> dict:
    """Training state per chip, each variable divided by the shards its logical axes map to."""
    _, state = abstract_model(cfg)
    variables = jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nnx.Variable))
    per_chip = sum(int(np.prod(v.shape)) / shards_of(logical_to_spec(v.get_metadata()["logical_axes"]), mesh)
                   for v in variables if isinstance(v, nnx.Param))
    out = dict(params_f32=4 * per_chip, grads_f32=4 * per_chip, adam_moments_f32=8 * per_chip)
    if cfg.dtype == "bfloat16":
        out["params_bf16_copy"] = 2 * per_chip
    return out


def activation_bytes_per_token_layer(cfg: ModelConfig, seq_len: int, tensor: int) -> float:
    """Bytes kept for the backward pass per token per layer under the remat policy."""
    width = 2 if cfg.dtype == "bfloat16" else 4
    attn_proj = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim + cfg.n_heads * cfg.head_dim
    if cfg.remat == "full":
        return width * cfg.d_model  # the layer input only
    if cfg.remat == "save_dots_except_mlp":
        return width * (2 * cfg.d_model + attn_proj / tensor)
    ffn = (cfg.top_k + cfg.n_shared_experts) * cfg.d_ff_expert if cfg.is_moe else cfg.d_ff
    scores = cfg.n_heads * seq_len / tensor  # attention probabilities (no flash attention on CPU)
    return width * (6 * cfg.d_model + (attn_proj + 3 * ffn) / tensor) + 4 * scores


def plan(config, slice_: Slice, mfu: float) -> Plan:
    cfg = ModelConfig.from_config(config.model)
    mesh = resolve_mesh(config.mesh, slice_.n_chips)
    seq_len, batch = int(config.data.seq_len), int(config.data.batch_size)
    batch_shards = mesh["data"] * mesh["fsdp"] * mesh["expert"]
    if batch % batch_shards:
        raise ConfigError(f"data.batch_size={batch} is not divisible by the {batch_shards} batch "
                          f"shards (mesh data x fsdp x expert)")
    micro_tokens_per_chip = batch * seq_len / batch_shards / int(config.train.grad_accum)
    memory = state_bytes_per_chip(cfg, mesh)
    memory["activations"] = (micro_tokens_per_chip * cfg.n_layers
                             * activation_bytes_per_token_layer(cfg, seq_len, mesh["tensor"]))
    memory["logits_f32"] = micro_tokens_per_chip * cfg.vocab_size / mesh["tensor"] * 4 * 2
    if "rollout" in config:
        cache = jax.eval_shape(lambda: init_cache(cfg, int(config.rollout.slots), int(config.rollout.window)))
        cache_bytes = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(cache))
        memory["rollout_kv_cache"] = cache_bytes / batch_shards
    total = float(sum(memory.values()))
    available = slice_.chip.hbm_bytes * USABLE_MEMORY_FRACTION
    flops = model_stats(cfg, seq_len).flops_per_token_train * batch * seq_len
    step_time = flops / (slice_.n_chips * slice_.chip.peak_flops * mfu)
    return Plan(slice_.name, slice_.n_chips, mesh, memory, total, available, flops, batch * seq_len,
                mfu, step_time, total <= available)


def refusal(p: Plan) -> str:
    term, size = max(p.memory_bytes.items(), key=lambda kv: kv[1])
    return (f"plan does not fit: {p.memory_total_bytes / 2**30:.1f} GiB per chip needed, "
            f"{p.memory_available_bytes / 2**30:.1f} GiB usable on {p.slice}; the largest term is "
            f"{term} = {size / 2**30:.1f} GiB (shard it further, use remat, or a bigger slice)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="path/to/config.py[:variant]")
    parser.add_argument("--slice", required=True, help="e.g. v5p-1024, v6e-256, h100-8")
    parser.add_argument("--mfu", type=float, default=0.35, help="assumed model FLOPs utilisation")
    args = parser.parse_args(argv)
    try:
        p = plan(load_config(args.config), parse_slice(args.slice), args.mfu)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(p), indent=2))
    if not p.fits:
        print(f"error: {refusal(p)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
