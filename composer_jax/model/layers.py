"""Small building blocks: parameter init, RMSNorm, rotary embeddings, SwiGLU MLP."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name

from composer_jax.sharding import constrain


def param(rngs: nnx.Rngs, shape: tuple[int, ...], logical_axes: tuple, fan_in: int | None = None,
          std: float | None = None) -> nnx.Param:
    """A float32 parameter, truncated-normal with std 1/sqrt(fan_in) unless `std` is given."""
    std = std if std is not None else fan_in ** -0.5
    init = jax.nn.initializers.truncated_normal(stddev=std)
    return nnx.Param(init(rngs.params(), shape, jnp.float32), logical_axes=logical_axes)


def zeros_param(shape: tuple[int, ...], logical_axes: tuple) -> nnx.Param:
    return nnx.Param(jnp.zeros(shape, jnp.float32), logical_axes=logical_axes)


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float):
        self.scale = nnx.Param(jnp.ones((dim,), jnp.float32), logical_axes=("norm",))
        self.eps = eps

    def __call__(self, x_btd: jax.Array) -> jax.Array:
        # Statistics in float32 whatever the compute dtype.
        x32 = x_btd.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (x32 * self.scale[...]).astype(x_btd.dtype)


def rope(x_btnh: jax.Array, positions_bt: jax.Array, base: float) -> jax.Array:
    """Rotary embedding, rotate-half convention (as in Llama/Qwen checkpoints)."""
    half = x_btnh.shape[-1] // 2
    inv_freq_h = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles_bth = positions_bt.astype(jnp.float32)[..., None] * inv_freq_h
    sin, cos = jnp.sin(angles_bth)[:, :, None, :], jnp.cos(angles_bth)[:, :, None, :]
    x1, x2 = jnp.split(x_btnh.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x_btnh.dtype)


def swiglu(x_btd, w_gate_df, w_up_df, w_down_fd, dtype) -> jax.Array:
    gate = checkpoint_name(jnp.einsum("btd,df->btf", x_btd, w_gate_df.astype(dtype)), "mlp_gate")
    up = checkpoint_name(jnp.einsum("btd,df->btf", x_btd, w_up_df.astype(dtype)), "mlp_up")
    h_btf = constrain(jax.nn.silu(gate) * up, ("batch", "length", "act_mlp"))
    return jnp.einsum("btf,fd->btd", h_btf, w_down_fd.astype(dtype))


class MLP(nnx.Module):
    """SwiGLU feed-forward: the dense layers and the shared experts."""

    def __init__(self, d_model: int, d_ff: int, rngs: nnx.Rngs):
        self.w_gate_df = param(rngs, (d_model, d_ff), ("embed", "mlp"), fan_in=d_model)
        self.w_up_df = param(rngs, (d_model, d_ff), ("embed", "mlp"), fan_in=d_model)
        self.w_down_fd = param(rngs, (d_ff, d_model), ("mlp", "embed"), fan_in=d_ff)

    def __call__(self, x_btd: jax.Array) -> jax.Array:
        return swiglu(x_btd, self.w_gate_df[...], self.w_up_df[...], self.w_down_fd[...], x_btd.dtype)
