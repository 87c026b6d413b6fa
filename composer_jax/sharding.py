"""Device mesh and the one logical-axis rules table.

Model code names logical axes only (`('embed', 'mlp')`); this file maps them to the mesh axes
`data`, `fsdp`, `expert`, `tensor`. Change parallelism here, nowhere else.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from composer_jax.errors import ConfigError

MESH_AXES = ("data", "fsdp", "expert", "tensor")

# Logical axis -> mesh axis (or tuple of mesh axes, or None = replicated).
RULES: dict[str, Any] = {
    # activations
    "batch": ("data", "fsdp", "expert"),
    "length": None,
    "act_embed": None,
    "act_heads": "tensor",
    "act_mlp": "tensor",
    "act_vocab": "tensor",
    # parameters
    "vocab": "tensor",
    "embed": "fsdp",
    "heads": "tensor",
    "kv_heads": "tensor",
    "head_dim": None,
    "mlp": "tensor",
    "expert": "expert",
    "expert_mlp": "tensor",
    "router_experts": None,
    "norm": None,
    # kv cache
    "cache_batch": ("data", "fsdp", "expert"),
    "cache_length": None,
    "cache_kv_heads": "tensor",
}


def logical_to_spec(names: Sequence[str | None]) -> P:
    """PartitionSpec for a tuple of logical axis names (unknown names are an error)."""
    spec = []
    for name in names:
        if name is None:
            spec.append(None)
            continue
        if name not in RULES:
            raise KeyError(f"logical axis {name!r} is not in composer_jax.sharding.RULES")
        spec.append(RULES[name])
    return P(*spec)


def mesh_shape_from_config(mesh_config: Mapping[str, int], n_devices: int) -> tuple[int, ...]:
    """Resolve the `mesh` config block (one axis may be -1 = all remaining devices)."""
    sizes = {axis: int(mesh_config.get(axis, 1)) for axis in MESH_AXES}
    unknown = sorted(set(mesh_config) - set(MESH_AXES))
    if unknown:
        raise ConfigError(f"mesh.{unknown[0]}: unknown mesh axis (axes: {', '.join(MESH_AXES)})")
    wildcards = [a for a, s in sizes.items() if s == -1]
    if len(wildcards) > 1:
        raise ConfigError(f"mesh.{wildcards[1]}: only one mesh axis may be -1")
    for axis, size in sizes.items():
        if size == 0 or size < -1:
            raise ConfigError(f"mesh.{axis}={size}: must be a positive integer or -1")
    fixed = int(np.prod([s for s in sizes.values() if s != -1]))
    if wildcards:
        if n_devices % fixed:
            raise ConfigError(
                f"mesh.{wildcards[0]}=-1: the other axes ({fixed} devices) do not divide the "
                f"{n_devices} available devices")
        sizes[wildcards[0]] = n_devices // fixed
    elif fixed != n_devices:
        raise ConfigError(
            f"mesh: {dict(sizes)} uses {fixed} devices but {n_devices} are available; "
            "set one axis to -1 or change the sizes")
    return tuple(sizes[a] for a in MESH_AXES)


def make_mesh(mesh_config: Mapping[str, int], devices: Sequence[jax.Device] | None = None) -> jax.sharding.Mesh:
    devices = list(devices if devices is not None else jax.devices())
    shape = mesh_shape_from_config(mesh_config, len(devices))
    return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                         devices=devices)


def check_divisibility(model_cfg, mesh: jax.sharding.Mesh, batch_size: int | None = None) -> None:
    """Fail at config time when a mesh axis does not divide a dimension it shards."""
    dims = {
        "vocab": ("model.vocab_size", model_cfg.vocab_size),
        "embed": ("model.d_model", model_cfg.d_model),
        "heads": ("model.n_heads", model_cfg.n_heads),
        "kv_heads": ("model.n_kv_heads", model_cfg.n_kv_heads),
        "mlp": ("model.d_ff", model_cfg.d_ff),
    }
    if model_cfg.is_moe:
        dims["expert"] = ("model.n_experts", model_cfg.n_experts)
        dims["expert_mlp"] = ("model.d_ff_expert", model_cfg.d_ff_expert)
    if batch_size is not None:
        dims["batch"] = ("batch size", batch_size)
    for logical, (field, size) in dims.items():
        mesh_axes = mesh_axes_of(logical)
        shards = int(np.prod([mesh.shape[a] for a in mesh_axes]))
        if size % shards:
            raise ConfigError(
                f"{field}={size} is not divisible by the {shards} shards of mesh axes "
                f"{'x'.join(mesh_axes)} ({', '.join(f'mesh.{a}={mesh.shape[a]}' for a in mesh_axes)})")
    n_expert_shards = int(np.prod([mesh.shape[a] for a in mesh_axes_of("expert")]))
    if (model_cfg.is_moe and model_cfg.moe_impl != "dense" and n_expert_shards > 1
            and model_cfg.capacity_factor <= 0):
        dropless = n_expert_shards * min(model_cfg.top_k, model_cfg.n_experts // n_expert_shards) / model_cfg.top_k
        raise ConfigError(
            f"model.capacity_factor=0 (dropless) with expert-parallel dispatch (moe_impl="
            f"{model_cfg.moe_impl!r}) on mesh.expert={n_expert_shards} sizes every send buffer for all of a device's tokens "
            f"going to one shard; set model.capacity_factor (1.25 is usual; >= {dropless:g} "
            "never drops)")


def mesh_axes_of(logical: str) -> tuple[str, ...]:
    """The mesh axes a logical axis is split over, as a tuple (() = replicated)."""
    axes = RULES[logical]
    return (axes,) if isinstance(axes, str) else tuple(axes or ())


def _spec_of(variable: nnx.Variable) -> P:
    names = variable.get_metadata().get("logical_axes")
    if names is None:
        return P()
    return logical_to_spec(names)


def state_shardings(state: nnx.State, mesh: jax.sharding.Mesh) -> nnx.State:
    """NamedShardings for every variable of an (abstract) nnx state, from its `logical_axes`."""
    return jax.tree.map(
        lambda v: v.replace(NamedSharding(mesh, _spec_of(v))),
        state,
        is_leaf=lambda x: isinstance(x, nnx.Variable),
    )


def state_specs(state: nnx.State) -> nnx.State:
    return jax.tree.map(lambda v: v.replace(_spec_of(v)), state,
                        is_leaf=lambda x: isinstance(x, nnx.Variable))


def constrain(x: jax.Array, logical_axes: Sequence[str | None]) -> jax.Array:
    """Sharding constraint on an activation under the current mesh (no-op without one)."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        return x
    return jax.lax.with_sharding_constraint(x, logical_to_spec(logical_axes))


def batch_sharding(mesh: jax.sharding.Mesh) -> NamedSharding:
    """Sharding of [batch, length] input arrays."""
    return NamedSharding(mesh, logical_to_spec(("batch", "length")))
