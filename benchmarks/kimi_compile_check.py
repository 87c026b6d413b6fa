"""Compile the train step at Kimi-K2.5 dims on a fake CPU mesh and check the planner against it.

    python benchmarks/kimi_compile_check.py --out benchmarks/results/kimi_compile.json

configs/kimi_k2_5.py (d_model 7168, 384 experts top-8, expert FFN 2048, MLA, 163,840 vocab)
cut to `--layers` layers (first dense), lowered and compiled with jax.ShapeDtypeStruct inputs
(tools/compile_step.py: nothing is allocated, so 194 GiB per device compiles in ~0.9 GB of host
RAM) on 64 fake devices. For each MoE impl it records the compiled program's memory per device
(arguments + temporaries; the donated state's outputs alias its arguments) against the plan for
the same program (`plan(..., cpu_slice(64))`), FLOPs per device, collective bytes by kind, and
every collective that moves expert weights: expert-parallel must gather only a device's own
experts, never one projection of all 384.

Mesh: the planned v5p-1024 slice is fsdp 32 x expert 16 (512 chips); 64 devices keep expert 16
(the same 16-way all-to-all, 24 experts per device and so the same gathered-expert and dispatch
buffers per device) and scale FSDP to 4, so the sharded training state per device is 8x the
real plan's. Batch 256 x 1,024 with no accumulation gives each device 4,096 tokens per
micro-batch, what the real plan's micro-batch gives each chip (8,192 x 4,096 / 16 / 512).

Remat: every compile here is remat="none". XLA:CPU does not lower the peak with remat (tiny:
17.6 MB with remat=full vs 17.0 MB without), so the plan's remat terms cannot be checked on CPU.
On XLA:CPU, expert_parallel runs its blocked kernel (model/moe.py picks ragged_dot only on
TPU/GPU), whose block-expanded weights dominate; `ragged` runs the same expert-parallel
dispatch with the ragged_dot kernel, which XLA:CPU lowers densely (every local expert on every
row, float32), a CPU-only term the plan names; `dense` is the global-routing reference.
"""
from __future__ import annotations

import os
import re
import sys


def _device_count(argv) -> int:
    for i, a in enumerate(argv):
        if a == "--devices":
            return int(argv[i + 1])
        if a.startswith("--devices="):
            return int(a.split("=", 1)[1])
    return 64


_flags = re.sub(r"--xla_force_host_platform_device_count=\d+", "", os.environ.get("XLA_FLAGS", ""))
os.environ["XLA_FLAGS"] = (_flags + f" --xla_force_host_platform_device_count={_device_count(sys.argv)}").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

from benchmarks.common import write_result  # noqa: E402
from composer_jax.config_loading import apply_override, load_config  # noqa: E402
from composer_jax.errors import ConfigError  # noqa: E402
from composer_jax.sharding import make_mesh  # noqa: E402
from composer_jax.tools.compile_step import compile_train_step  # noqa: E402
from composer_jax.tools.hardware import cpu_slice, parse_slice  # noqa: E402
from composer_jax.tools.hlo import DTYPE_BYTES, program_stats  # noqa: E402
from composer_jax.tools.plan import plan, refusal  # noqa: E402

GIB = 2**30
TOLERANCE = 0.2


def kimi_config(impl: str, layers: int, batch: int, seq: int, mesh: dict):
    c = load_config("configs/kimi_k2_5.py")
    c.model.update(n_layers=layers, moe_impl=impl, capacity_factor=1.25, remat="none")
    c.data.update(batch_size=batch, seq_len=seq)
    c.train.grad_accum = 1
    c.mesh.update(**mesh)
    return c


def expert_weight_collectives(stats, cfg) -> list[dict]:
    """Collectives moving an array shaped like expert weights, [experts, d, f] or
    [experts, f, d] with d whole or split over FSDP: kind, shape, bytes, how many experts."""
    d, f = cfg.model.d_model, cfg.model.d_ff_expert
    d_splits = {d, d // cfg.mesh.fsdp}
    found = {}
    for c in stats.collectives:
        for dtype, dims in c.shapes:
            if len(dims) != 3 or not ((dims[1] in d_splits and dims[2] == f)
                                      or (dims[1] == f and dims[2] in d_splits)):
                continue
            entry = found.setdefault((c.kind, dtype, dims), dict(
                kind=c.kind, shape=f"{dtype}{list(dims)}", experts=dims[0], count=0,
                bytes=DTYPE_BYTES[dtype] * math.prod(dims)))
            entry["count"] += 1
    return sorted(found.values(), key=lambda e: -e["bytes"])


def check(impl: str, layers: int, batch: int, seq: int, mesh: dict) -> dict:
    config = kimi_config(impl, layers, batch, seq, mesh)
    n = math.prod(mesh.values())
    start = time.perf_counter()
    compiled = compile_train_step(config, make_mesh(mesh, jax.devices()[:n]))
    compile_s = time.perf_counter() - start
    stats = program_stats(compiled)
    p = plan(config, cpu_slice(n), mfu=0.35)
    compiled_bytes = stats.argument_bytes + stats.temp_bytes
    m = config.model
    projection_all_experts = m.n_experts * m.d_model * m.d_ff_expert * 4  # float32 masters
    experts = expert_weight_collectives(stats, config)
    compiled_coll = stats.collective_bytes()
    grad_kinds = ("reduce-scatter", "all-reduce")
    return dict(
        impl=impl, kernel=p.moe["kernel"], dispatch=p.moe["dispatch"], compile_s=round(compile_s, 1),
        compiled_bytes_per_device=compiled_bytes, compiled_argument_bytes=stats.argument_bytes,
        compiled_temp_bytes=stats.temp_bytes, compiled_peak_bytes=stats.peak_bytes,
        planned_bytes_per_device=p.train_step_bytes,
        planned_over_compiled=p.train_step_bytes / compiled_bytes,
        within_tolerance=abs(p.train_step_bytes / compiled_bytes - 1) <= TOLERANCE,
        planned_terms_gib={k: round(v / GIB, 3) for k, v in p.memory_bytes.items()},
        moe=p.moe,
        compiled_flops_per_device=stats.flops,
        planned_flops_per_device=p.flops_per_step / n,
        compiled_collective_bytes=compiled_coll,
        planned_collective_bytes=p.communication_bytes,
        compiled_gradient_reduction_bytes=sum(compiled_coll.get(k, 0.0) for k in grad_kinds),
        planned_gradient_reduction_bytes=sum(p.communication_bytes.get(k, 0.0) for k in grad_kinds),
        largest_collective_array_bytes=stats.largest_array_bytes(),
        one_projection_all_experts_f32_bytes=projection_all_experts,
        expert_weight_collectives=experts,
        max_experts_in_a_collective=max((e["experts"] for e in experts), default=0),
        gathers_all_experts=any(e["experts"] == m.n_experts for e in experts),
    )


def v5p_plans() -> dict:
    """The planner on the real slice: the config as it stands and the variants it points to."""
    variants = {
        "as configured (4k context, 8192 rows, grad_accum 16, remat full)": [],
        "same, moe_impl blocked": ["model.moe_impl=blocked"],
        "same, moe_impl dense": ["model.moe_impl=dense"],
        "32k context, 1024 rows, 16 micro-batches": ["data.seq_len=32768", "data.batch_size=1024"],
        "32k context, grad_accum 2 (one row per chip)": [
            "data.seq_len=32768", "data.batch_size=1024", "train.grad_accum=2"],
    }
    out = {}
    for name, overrides in variants.items():
        config = load_config("configs/kimi_k2_5.py")
        for item in overrides:
            apply_override(config, item)
        try:
            p = plan(config, parse_slice("v5p-1024"), 0.35)
        except ConfigError as e:
            out[name] = dict(overrides=overrides, error=str(e))
            continue
        out[name] = dict(
            overrides=overrides, fits=p.fits, memory_gib=round(p.memory_total_bytes / GIB, 1),
            usable_gib=round(p.memory_available_bytes / GIB, 1),
            terms_gib={k: round(v / GIB, 1) for k, v in p.memory_bytes.items()},
            refusal=None if p.fits else refusal(p), tokens_per_step=p.tokens_per_step,
            compute_s=round(p.compute_time_s, 1),
            communication_s={k: round(v, 2) for k, v in p.communication_time_s.items()},
            step_s=round(p.step_time_s, 1),
            all_to_all_gb_per_layer_per_micro_batch=round(p.moe["all_to_all_bytes_per_layer"] / 1e9, 2),
            token_bytes_gb_per_layer_per_micro_batch=round(p.moe["token_bytes_per_layer"] / 1e9, 2))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="")
    parser.add_argument("--impls", default="expert_parallel,ragged,dense")
    parser.add_argument("--layers", type=int, default=3, help="first dense, the rest MoE (2-4)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--fsdp", type=int, default=4)
    parser.add_argument("--expert", type=int, default=16)
    args = parser.parse_args()
    mesh = dict(data=args.devices // (args.fsdp * args.expert), fsdp=args.fsdp, expert=args.expert,
                tensor=1)
    results = [check(impl, args.layers, args.batch, args.seq, mesh) for impl in args.impls.split(",")]
    write_result(args.out, dict(
        model=dict(config="configs/kimi_k2_5.py", layers=args.layers, moe_layers=args.layers - 1,
                   remat="none", capacity_factor=1.25, batch=args.batch, seq_len=args.seq),
        mesh=mesh, tolerance=TOLERANCE, results=results, v5p_1024=v5p_plans(),
        max_rss_gib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)))


if __name__ == "__main__":
    main()
