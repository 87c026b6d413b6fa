"""Who does the MoE's work on a mesh: per-device FLOPs, collective bytes by kind and compiled
memory of the real train step, and its step time, per MoE impl and mesh; writes JSON.

    python benchmarks/moe_scaling_bench.py --out benchmarks/results/moe_scaling.json

Model: configs/tiny.py:scaling (2 MoE layers, 16 experts top-2, d_model 128, expert FFN 96,
batch 8 x 64, capacity factor 1.25), on 8 fake CPU devices. Rows marked `global routing` force
the old dispatch (every device routes and sorts the global batch) for comparison in the same
run. Step times are medians on 2 shared cores: compare ratios, not seconds. With `--gpu`, also
one train step of configs/small.py (dense and MoE) on the accelerator as MFU against a large
bf16 matmul measured in the same script.
"""
from __future__ import annotations

import os
import sys

if "--gpu" not in sys.argv:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402
import contextlib  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from benchmarks.common import write_result  # noqa: E402
from benchmarks.train_bench import timed_train_steps  # noqa: E402
from configs.tiny import get_config  # noqa: E402
from composer_jax.model import ModelConfig, moe  # noqa: E402
from composer_jax.sharding import make_mesh  # noqa: E402
from composer_jax.tools.compile_step import compile_train_step  # noqa: E402
from composer_jax.tools.hlo import program_stats  # noqa: E402

MESHES = {"1": dict(data=1), "8x1x1x1": dict(data=8), "1x1x8x1": dict(expert=8),
          "2x2x2x1": dict(data=2, fsdp=2, expert=2), "1x2x2x2": dict(fsdp=2, expert=2, tensor=2)}
# (impl, global routing forced) rows; 'blocked' on one device is the reference work.
ROWS = [("blocked", False, ["1"]),
        ("blocked", True, ["8x1x1x1", "1x1x8x1"]),
        ("dense", False, ["1x1x8x1"]),
        ("expert_parallel", False, ["1", "8x1x1x1", "1x1x8x1", "2x2x2x1", "1x2x2x2"])]


@contextlib.contextmanager
def global_routing(on: bool):
    """The pre-expert-parallel dispatch: route the global batch on every device."""
    original = moe.uses_expert_parallel
    if on:
        moe.uses_expert_parallel = lambda cfg, mesh: False
    try:
        yield
    finally:
        moe.uses_expert_parallel = original


def a2a_estimate(cfg: ModelConfig, config, mesh: dict) -> float:
    """Bytes per MoE layer per device, forward: tokens x top-k rows of d_model, there and back."""
    shards = np.prod([mesh.get(a, 1) for a in ("data", "fsdp", "expert")])
    tokens = config.data.batch_size * config.data.seq_len / shards
    return tokens * cfg.top_k * cfg.d_model * 4 * 2


def cpu_rows(steps: int) -> list[dict]:
    rows = []
    for impl, forced_global, meshes in ROWS:
        for mesh_name in meshes:
            config = get_config("scaling")
            config.model.moe_impl = impl
            cfg = ModelConfig.from_config(config.model)
            n = 1 if mesh_name == "1" else 8
            mesh = make_mesh(MESHES[mesh_name], jax.devices()[:n])
            with global_routing(forced_global):
                stats = program_stats(compile_train_step(config, mesh))
                seconds = float(np.median(timed_train_steps(config, mesh, steps)))
            a2a = stats.collective_bytes().get("all-to-all", 0.0)
            row = dict(impl=impl, global_routing=forced_global, mesh=mesh_name, devices=n,
                       gflops_per_device=stats.flops / 1e9,
                       collective_bytes=stats.collective_bytes(),
                       largest_collective_array_bytes=stats.largest_array_bytes(),
                       all_experts_projection_bytes=cfg.n_experts * cfg.d_model * cfg.d_ff_expert * 4,
                       all_to_all_bytes_per_layer_fwd_bwd=a2a / (2 * cfg.n_moe_layers),
                       all_to_all_estimate_per_layer=a2a_estimate(cfg, config, MESHES[mesh_name]),
                       peak_bytes=stats.peak_bytes, temp_bytes=stats.temp_bytes,
                       step_s=seconds)
            rows.append(row)
            print(f"{impl:16s} {'global' if forced_global else '':6s} {mesh_name:8s} "
                  f"GFLOP/dev {row['gflops_per_device']:.3f}  largest collective "
                  f"{row['largest_collective_array_bytes'] / 1e6:.2f} MB  a2a/layer "
                  f"{row['all_to_all_bytes_per_layer_fwd_bwd'] / 1e6:.3f} MB  peak "
                  f"{stats.peak_bytes / 1e6:.1f} MB  step {seconds * 1e3:.0f} ms", flush=True)
    reference = next(r for r in rows if r["mesh"] == "1" and r["impl"] == "blocked")
    for r in rows:
        r["flops_over_ideal"] = r["gflops_per_device"] / (reference["gflops_per_device"] / r["devices"])
        r["step_time_over_1_device"] = r["step_s"] / reference["step_s"]
        if r["all_to_all_estimate_per_layer"] and r["all_to_all_bytes_per_layer_fwd_bwd"]:
            r["all_to_all_over_estimate"] = (r["all_to_all_bytes_per_layer_fwd_bwd"]
                                             / r["all_to_all_estimate_per_layer"])
    return rows


def gpu_mfu(steps: int) -> list[dict]:
    """One device: train-step MFU of configs/small.py (MoE and dense) against a bf16 matmul."""
    from configs import small
    from composer_jax.model.stats import model_stats
    from composer_jax.train.flops import measure_peak_flops

    peak = measure_peak_flops("bfloat16", n=8192)
    out = []
    for variant in ("", "dense"):
        config = small.get_config(variant)
        config.train.grad_accum = 1
        config.data.batch_size = 8
        cfg = ModelConfig.from_config(config.model)
        mesh = make_mesh(dict(data=1), jax.devices()[:1])
        seconds = float(np.median(timed_train_steps(config, mesh, steps)))
        flops = model_stats(cfg, config.data.seq_len).flops_per_token_train * 8 * config.data.seq_len
        out.append(dict(config=f"small.py:{variant}", step_s=seconds, matmul_peak_flops=peak,
                        mfu_vs_matmul=flops / seconds / peak))
        print(out[-1], flush=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--gpu", action="store_true", help="MFU of configs/small.py instead")
    args = parser.parse_args()
    if args.gpu:
        write_result(args.out, dict(gpu_mfu=gpu_mfu(args.steps)))
    else:
        write_result(args.out, dict(model="configs/tiny.py:scaling", rows=cpu_rows(args.steps)))


if __name__ == "__main__":
    main()
