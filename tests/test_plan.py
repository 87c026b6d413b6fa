"""The planner: exact training-state bytes, a Kimi-scale plan that fits, refusals that say why."""
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs.tiny import get_config
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, create_sharded
from composer_jax.sharding import make_mesh
from composer_jax.tools.hardware import parse_slice
from composer_jax.config_loading import load_config
from composer_jax.tools.plan import plan, refusal, state_bytes_per_chip
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import create_train_state


def run_plan(*args):
    return subprocess.run([sys.executable, "-m", "composer_jax.tools.plan", *args],
                          capture_output=True, text=True)


@pytest.mark.parametrize("mesh", [dict(data=1, fsdp=1, expert=1, tensor=1),
                                  dict(data=1, fsdp=2, expert=2, tensor=2)])
def test_state_bytes_match_a_real_train_state(mesh):
    config = get_config("test")
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


def test_kimi_plan_fits_a_v5p_1024_and_names_topology():
    out = run_plan("--config", "configs/kimi_k2_5.py", "--slice", "v5p-1024")
    assert out.returncode == 0, out.stderr
    assert '"n_chips": 512' in out.stdout and '"fits": true' in out.stdout


def test_plan_that_does_not_fit_is_refused_naming_the_term():
    out = run_plan("--config", "configs/kimi_k2_5.py", "--slice", "v5p-32")
    assert out.returncode != 0
    assert "error:" in out.stderr and ("largest term" in out.stderr or "mesh" in out.stderr)
    out = run_plan("--config", "configs/kimi_k2_5.py:", "--slice", "v5p-1024", "--mfu", "0.3")
    assert out.returncode == 0


def test_unknown_slice_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown slice"):
        parse_slice("tpu9000-8")
    assert parse_slice("v5p-1024").n_chips == 512 and parse_slice("v6e-256").n_chips == 256


def test_small_config_fits_one_h100_only_with_its_gradient_accumulation():
    out = run_plan("--config", "configs/small.py", "--slice", "h100-1")
    assert out.returncode == 0, out.stderr
    assert '"n_chips": 1' in out.stdout and '"fits": true' in out.stdout
    # Without accumulation the full-batch logits outgrow the chip: refused, naming them.
    config = load_config("configs/small.py")
    config.train.grad_accum = 1
    p = plan(config, parse_slice("h100-1"), 0.35)
    assert not p.fits and "the largest term is logits_f32" in refusal(p)
