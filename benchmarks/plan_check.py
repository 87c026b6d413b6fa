"""Check the planner against what the tiny config really uses on this machine; writes JSON.

    python benchmarks/plan_check.py --out benchmarks/results/plan_check.json

Memory: the planner's train-step bytes (every term but the rollout KV cache, planned for this
CPU: tools/hardware.py cpu_chip) vs XLA's own accounting of the compiled train step
(arguments + temporaries; the donated outputs alias the arguments). Step time: the planner's
prediction at the MFU it assumes vs the measured median step, and the MFU that would have made
the prediction exact.
"""
from __future__ import annotations

import argparse

import jax
import numpy as np

from benchmarks.common import write_result
from benchmarks.train_bench import timed_train_steps
from configs.tiny import get_config
from composer_jax.sharding import make_mesh
from composer_jax.tools.compile_step import compile_train_step
from composer_jax.tools.hardware import Slice, cpu_chip
from composer_jax.tools.plan import plan
from composer_jax.train.flops import measure_peak_flops


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--mfu", type=float, default=0.35, help="the planner's assumed MFU")
    args = parser.parse_args()
    config = get_config()
    with config.unlocked():
        config.mesh.data = 1
    mesh = make_mesh(dict(config.mesh), jax.devices()[:1])
    memory = compile_train_step(config, mesh).memory_analysis()
    times = timed_train_steps(config, mesh, args.steps)
    peak = measure_peak_flops("float32", n=4096)
    cpu = Slice("cpu-1", cpu_chip(peak_flops=peak), 1)
    predicted = plan(config, cpu, args.mfu)
    measured_bytes = memory.argument_size_in_bytes + memory.temp_size_in_bytes
    step_s = float(np.median(times))
    write_result(args.out, dict(
        planned_memory_bytes=predicted.train_step_bytes, planned_terms=predicted.memory_bytes,
        measured_memory_bytes=measured_bytes, measured_argument_bytes=memory.argument_size_in_bytes,
        measured_temp_bytes=memory.temp_size_in_bytes,
        memory_error=predicted.train_step_bytes / measured_bytes - 1,
        planned_step_s=predicted.step_time_s, assumed_mfu=args.mfu, measured_step_s=step_s,
        step_time_error=predicted.step_time_s / step_s - 1,
        implied_mfu=args.mfu * predicted.step_time_s / step_s, peak_flops=peak))


if __name__ == "__main__":
    main()
