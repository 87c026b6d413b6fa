"""Training throughput and MFU of a config on this machine's real devices (no fake ones).

    python benchmarks/train_bench.py --out benchmarks/results/train_bench.json [--sweep]
    python benchmarks/train_bench.py --config configs/small.py --steps 5 --out benchmarks/results/train_small_h200.json

Without `--config`: the tiny config at the flags' shapes. With one: the config's own batch, row
length, MoE implementation and dtype (gradient accumulation and remat included) unless a flag
names another; the peak is measured in that dtype, and on an accelerator MFU is also given
against `--peak_tflops` (the chip's datasheet figure).

MFU = tokens/s x model FLOPs per token (6 x active matmul params + causal attention, active
experts only: composer_jax.model.stats) / the matmul FLOP/s measured in the same process by a
large jnp.dot, taken as the best of measurements just before and after each setting's timed
steps (the machine is shared: a peak measured once drifts with other users' load). Batches are synthetic full-length rows (the step cost does not depend on token
values). `--sweep` tries batch size, sequence length, MoE implementation and compute dtype, and
reports every setting plus the best.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import sys
import time

import jax
import numpy as np

from composer_jax.config_loading import load_config
from composer_jax.model import ModelConfig, create_sharded
from composer_jax.sharding import batch_sharding, make_mesh
from composer_jax.train.flops import measure_peak_flops, mfu, train_flops_per_token
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import create_train_state, make_train_step


def synthetic_batch(batch: int, seq_len: int, vocab: int, sharding) -> dict:
    tokens = np.random.default_rng(0).integers(0, vocab, (batch, seq_len), dtype=np.int32)
    host = {"tokens": tokens, "segment_ids": np.ones_like(tokens),
            "positions": np.broadcast_to(np.arange(seq_len, dtype=np.int32), tokens.shape).copy()}
    return {k: jax.device_put(v, sharding) for k, v in host.items()}


def _progress(msg: str) -> None:
    """Where the time goes, on stderr as it happens (a first compile can take minutes)."""
    print(f"[train_bench] {msg}", file=sys.stderr, flush=True)


def timed_train_steps(config, mesh, steps: int, batch: int | None = None,
                      seq_len: int | None = None) -> list[float]:
    """Wall seconds of `steps` real train steps of `config` on `mesh` (synthetic tokens), after
    a compile and one warm step."""
    model_cfg = ModelConfig.from_config(config.model)
    tx = make_optimizer(config.train)
    t0 = time.perf_counter()
    graphdef, params = create_sharded(model_cfg, mesh, seed=0)
    state, shardings = create_train_state(params, tx)
    jax.block_until_ready(state)
    _progress(f"parameters and optimiser state built in {time.perf_counter() - t0:.1f} s")
    bsh = batch_sharding(mesh)
    step = make_train_step(graphdef, tx, model_cfg, config.train, shardings, bsh)
    data = synthetic_batch(batch or config.data.batch_size, seq_len or config.data.seq_len,
                           model_cfg.vocab_size, bsh)
    times = []
    with jax.set_mesh(mesh):
        for i in range(steps + 2):
            start = time.perf_counter()
            state, metrics = step(state, data)
            jax.block_until_ready(metrics)
            if i >= 2:
                times.append(time.perf_counter() - start)
            _progress(f"step {i} ({'compile + step' if i == 0 else 'warm' if i == 1 else 'timed'}): "
                      f"{time.perf_counter() - start:.2f} s")
    return times


def bench(config_path: str, batch: int, seq_len: int, moe_impl: str, dtype: str, steps: int,
          peak_tflops: float = 0.0) -> dict:
    config = load_config(config_path)
    config.model.update(moe_impl=moe_impl, dtype=dtype)
    model_cfg = ModelConfig.from_config(config.model)
    mesh = make_mesh(dict(data=-1))
    # Big enough to reach an accelerator's peak; a CPU's is reached at 4,096.
    n = 4096 if jax.default_backend() == "cpu" else 16384
    # The machine is shared: measure the peak right before and after the timed steps.
    peak = measure_peak_flops(dtype, n=n)
    times = timed_train_steps(config, mesh, steps, batch, seq_len)
    peak = max(peak, measure_peak_flops(dtype, n=n))
    step_s = float(np.median(times))
    tokens_per_s = batch * seq_len / step_s
    flops = train_flops_per_token(model_cfg, seq_len)
    out = dict(config=config_path, batch=batch, seq_len=seq_len, moe_impl=moe_impl, dtype=dtype,
               grad_accum=int(config.train.get("grad_accum", 1)), remat=str(config.model.get("remat", "")),
               step_s=step_s, step_times_s=times, tokens_per_s=tokens_per_s, flops_per_token=flops,
               peak_flops=peak, mfu=mfu(tokens_per_s, flops, peak, mesh.size))
    if peak_tflops:
        out["mfu_vs_datasheet"] = mfu(tokens_per_s, flops, peak_tflops * 1e12, mesh.size)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--config", default="", help="path.py[:variant]; default: configs/tiny.py at the flags' shapes")
    parser.add_argument("--batch", type=int, help="rows per step (default: 8, or the config's)")
    parser.add_argument("--seq_len", type=int, help="tokens per row (default: 256, or the config's)")
    parser.add_argument("--moe_impl", choices=["blocked", "ragged", "dense", "expert_parallel"],
                        help="default: blocked, or the config's")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], help="default: float32, or the config's")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per setting (median)")
    parser.add_argument("--peak_tflops", type=float, default=0.0,
                        help="the chip's datasheet dense peak in the config's dtype (H100/H200 bf16: 989)")
    parser.add_argument("--sweep", action="store_true", help="try a grid of settings (tiny config)")
    args = parser.parse_args()
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        raise SystemExit("XLA_FLAGS fakes several devices: benchmark the real ones (unset it)")
    if args.sweep and args.config:
        raise SystemExit("--sweep tries the tiny config's grid: drop --config")
    own = load_config(args.config) if args.config else None
    defaults = (dict(batch=own.data.batch_size, seq_len=own.data.seq_len, moe_impl=own.model.moe_impl,
                     dtype=own.model.dtype) if own else dict(batch=8, seq_len=256, moe_impl="blocked", dtype="float32"))
    setting = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in defaults.items()}
    config_path = args.config or "configs/tiny.py"

    if args.sweep:
        # Small on purpose: each setting compiles anew, on a shared 2-core machine.
        grid = [(8, 256, "blocked", "float32"), (8, 256, "ragged", "float32"), (8, 256, "dense", "float32"),
                (16, 256, "dense", "float32"), (8, 256, "dense", "bfloat16")]
    else:
        grid = [tuple(setting[k] for k in ("batch", "seq_len", "moe_impl", "dtype"))]
    results = []
    for b, l, m, d in grid:
        results.append(bench(config_path, b, l, m, d, args.steps, args.peak_tflops))
        print(json.dumps(results[-1]), flush=True)
    best = max(results, key=lambda r: r["mfu"])
    out = dict(best, devices=jax.device_count(), backend=jax.default_backend(),
               cpu_count=os.cpu_count(), load_average=os.getloadavg(), machine=platform.machine(),
               jax=jax.__version__, device_kind=jax.devices()[0].device_kind, settings=results)
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1))
    print(json.dumps({k: out[k] for k in ("tokens_per_s", "mfu", "peak_flops", "batch", "seq_len",
                                          "moe_impl", "dtype")}))


if __name__ == "__main__":
    main()
