"""Model FLOPs utilisation: the model's FLOPs per token (model/stats.py) over a measured peak."""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from composer_jax.model.config import ModelConfig
from composer_jax.model.stats import model_stats


def measure_peak_flops(dtype: str = "float32", n: int = 2048, repeats: int = 5,
                       device: jax.Device | None = None) -> float:
    """FLOP/s of the best of `repeats` [n, n] @ [n, n] matmuls on one device: the attainable
    peak that MFU is measured against on hosts without a published number (CPUs)."""
    device = device or jax.devices()[0]
    keys = jax.random.split(jax.random.key(0))
    a, b = (jax.device_put(jax.random.normal(k, (n, n), jnp.dtype(dtype)), device) for k in keys)
    matmul = jax.jit(jnp.dot)
    matmul(a, b).block_until_ready()  # compile
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2.0 * n**3 / best


def train_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """6 x active matmul parameters + causal attention (active experts only)."""
    return model_stats(cfg, seq_len).flops_per_token_train


def mfu(tokens_per_s: float, flops_per_token: float, peak_flops: float, n_devices: int = 1) -> float:
    return tokens_per_s * flops_per_token / (peak_flops * n_devices)
