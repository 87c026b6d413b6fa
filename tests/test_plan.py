"""The planner: exact training-state bytes, memory and all-to-all bytes that agree with the
compiled train step, Kimi-scale plans refused or accepted with the term that decides, and
refusals that say why."""
import json
import math
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs.tiny import get_config
from composer_jax.config_loading import apply_override, load_config
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, create_sharded
from composer_jax.sharding import make_mesh
from composer_jax.tools.compile_step import compile_train_step
from composer_jax.tools.hardware import cpu_slice, parse_slice
from composer_jax.tools.hlo import program_stats
from composer_jax.tools.plan import main as plan_main, plan, refusal, state_bytes_per_chip
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import create_train_state

KIMI_32K = ["data.seq_len=32768", "data.batch_size=1024"]


def run_plan(*args):
    return subprocess.run([sys.executable, "-m", "composer_jax.tools.plan", *args],
                          capture_output=True, text=True)


def kimi(*overrides):
    config = load_config("configs/kimi_k2_5.py")
    for item in overrides:
        apply_override(config, item)
    return config


@pytest.mark.parametrize("mesh", [dict(data=1, fsdp=1, expert=1, tensor=1),
                                  dict(data=1, fsdp=2, expert=2, tensor=2)])
def test_state_bytes_match_a_real_train_state(mesh):
    config = get_config("test")
    config.model.capacity_factor = 1.25  # expert-parallel on mesh.expert > 1 needs one
    cfg = ModelConfig.from_config(config.model)
    n = int(np.prod(list(mesh.values())))
    mesh_obj = make_mesh(mesh, jax.devices()[:n])
    _, state = create_sharded(cfg, mesh_obj)
    train_state, _ = create_train_state(state, make_optimizer(config.train))
    # Bytes actually held by device 0: parameters and the two AdamW moments.
    def on_device0(tree):
        return sum(s.data.nbytes for x in jax.tree.leaves(tree) for s in x.addressable_shards
                   if s.device == jax.devices()[0] and x.ndim > 0)
    planned = state_bytes_per_chip(cfg, mesh)
    assert planned["params_f32"] == on_device0(train_state.params)
    assert planned["adam_moments_f32"] == on_device0(train_state.opt_state)


@pytest.mark.parametrize("impl", ["expert_parallel", "blocked", "ragged", "dense"])
def test_planned_memory_and_all_to_all_match_the_compiled_step(impl):
    """The test model (2 MoE layers, 16 experts top-2) on the 8-device mesh fsdp 2 x expert 4.
    Compiled = XLA's arguments + temporaries per device (the donated state's outputs alias its
    arguments, so this is the step's peak); planned = every term but the rollout KV cache,
    on a CPU slice (XLA:CPU runs expert_parallel with the blocked kernel, ragged_dot densely)."""
    mesh = dict(data=1, fsdp=2, expert=4, tensor=1)
    config = get_config("scaling")
    config.model.moe_impl = impl
    config.mesh.update(**mesh)
    stats = program_stats(compile_train_step(config, make_mesh(mesh, jax.devices()[:8])))
    p = plan(config, cpu_slice(8), 0.35)
    compiled = stats.argument_bytes + stats.temp_bytes
    assert abs(p.train_step_bytes / compiled - 1) <= 0.2, (p.train_step_bytes, compiled, p.memory_bytes)
    if impl != "dense":  # every multi-device impl but the reference dispatches expert-parallel
        assert p.moe["dispatch"] == "expert_parallel"
        # Capacity-sized buffers both ways, forward and backward, plus the expert ids: exact.
        assert stats.collective_bytes()["all-to-all"] == p.communication_bytes["all-to-all"]
    else:
        assert p.moe["dispatch"] == "global" and "all-to-all" not in p.communication_bytes


def test_kimi_at_32k_context_is_refused_with_the_reason():
    # 1,024 rows / 16 micro-batches = 64 rows cannot split over 512 batch shards.
    with pytest.raises(ConfigError, match="rows per micro-batch"):
        plan(kimi(*KIMI_32K), parse_slice("v5p-1024"), 0.35)
    # One 32k row per chip: without flash attention its scores alone outgrow the chip.
    p = plan(kimi(*KIMI_32K, "train.grad_accum=2"), parse_slice("v5p-1024"), 0.35)
    assert not p.fits and "the largest term is attention_scores" in refusal(p)


def test_kimi_as_configured_fits_a_v5p_1024_with_communication_in_the_step_time(capsys):
    # In-process: the abstract 1T-parameter model is built once per test session.
    assert plan_main(["--config", "configs/kimi_k2_5.py", "--slice", "v5p-1024"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["n_chips"] == 512 and p["fits"] and p["mesh"]["fsdp"] == 32 and p["mesh"]["expert"] == 16
    moe = p["moe"]
    assert moe["dispatch"] == "expert_parallel" and moe["kernel"] == "ragged"  # TPU: ragged_dot
    assert moe["tokens_per_device"] == 4096 and moe["experts_per_device"] == 24
    # Tokens x top_k x d_model x bf16 x 2 directions: 0.94 GB per layer per micro-batch; forward
    # and backward double it. Only local experts are gathered: no 384-expert term.
    assert moe["token_bytes_per_layer"] == 4096 * 8 * 7168 * 2 * 2 * 2
    assert math.isclose(moe["token_bytes_per_layer"] / 2, 0.94e9, rel_tol=0.01)
    times = p["communication_time_s"]
    a2a_bytes = p["communication_bytes"]["all-to-all"]
    assert math.isclose(times["all-to-all"], a2a_bytes * 15 / 16 / 600e9)  # v5p: 600 GB/s one way
    overlapped = sum(t for kind, t in times.items() if kind != "all-to-all")
    assert math.isclose(p["step_time_s"], max(p["compute_time_s"], overlapped) + times["all-to-all"])


@pytest.mark.parametrize("impl,term", [("blocked", "moe_block_expanded_weights"),
                                       ("dense", "moe_dense_replicated_cotangent")])
def test_kimi_non_expert_parallel_kernels_are_refused_naming_their_term(impl, term):
    p = plan(kimi(f"model.moe_impl={impl}"), parse_slice("v5p-1024"), 0.35)
    assert not p.fits and f"the largest term is {term}" in refusal(p)
    if impl == "dense":  # the reference gathers all 384 experts of every layer
        assert p.memory_bytes["gathered_weights"] > 3 * 384 * 7168 * 2048 * 4


def test_plan_that_does_not_fit_is_refused_naming_the_term():
    out = run_plan("--config", "configs/kimi_k2_5.py", "--slice", "v5p-32")
    assert out.returncode != 0
    assert "error:" in out.stderr and ("largest term" in out.stderr or "mesh" in out.stderr)


def test_unknown_slice_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown slice"):
        parse_slice("tpu9000-8")
    assert parse_slice("v5p-1024").n_chips == 512 and parse_slice("v6e-256").n_chips == 256
    assert parse_slice("cpu-64").chip.kind == "cpu"
    # NVLink within a node, the NIC beyond it.
    h100 = parse_slice("h100-8").chip
    assert h100.collective_bytes_per_s(8) == 450e9 and h100.collective_bytes_per_s(16) == 50e9


def test_small_config_fits_one_h100_only_with_its_gradient_accumulation():
    out = run_plan("--config", "configs/small.py", "--slice", "h100-1")
    assert out.returncode == 0, out.stderr
    assert '"n_chips": 1' in out.stdout and '"fits": true' in out.stdout
    # Without accumulation the full batch's attention scores and logits outgrow the chip.
    config = load_config("configs/small.py")
    config.train.grad_accum = 1
    p = plan(config, parse_slice("h100-1"), 0.35)
    assert not p.fits and "the largest term is attention_scores" in refusal(p)
    assert p.memory_bytes["logits_f32"] > 30 * 2**30


@pytest.mark.slow
def test_kimi_dims_compile_agrees_with_the_plan_and_gathers_no_expert_weights(tmp_path):
    """configs/kimi_k2_5.py with 3 layers compiled on 64 fake devices (fsdp 4 x expert 16),
    benchmarks/kimi_compile_check.py; about a minute."""
    out = tmp_path / "kimi.json"
    run = subprocess.run([sys.executable, "benchmarks/kimi_compile_check.py", "--impls",
                          "expert_parallel", "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    (r,) = json.loads(out.read_text())["results"]
    assert r["within_tolerance"], r["planned_over_compiled"]
    assert r["max_experts_in_a_collective"] == 24 and not r["gathers_all_experts"]
    assert r["largest_collective_array_bytes"] < r["one_projection_all_experts_f32_bytes"] / 4
    assert r["compiled_collective_bytes"]["all-to-all"] == r["planned_collective_bytes"]["all-to-all"]
