"""The one optimiser update (train/update.py) of mid-training, SFT and RL: micro-batch
accumulation equals the whole batch, a non-finite step changes nothing, and the embedding /
head step scale touches only those parameters."""
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

from composer_jax.train.step import TrainState
from composer_jax.train.update import update

X = jnp.asarray(np.random.default_rng(0).normal(size=(8, 3)), jnp.float32)


def state_of(tx):
    params = {"embed_vd": jnp.ones((4, 3)), "w": jnp.asarray([0.5, -1.0, 2.0])}
    return TrainState(jnp.zeros((), jnp.int32), params, {}, tx.init(params))


def loss_fn(params, batch):
    pred = batch["x"] @ params["w"] + jnp.sum(params["embed_vd"][batch["ids"]], axis=-1)
    loss = jnp.mean((pred - batch["y"]) ** 2)  # every row weighs the same: micro-batch means average exactly
    return loss, {"loss": loss, "tokens": jnp.asarray(batch["x"].shape[0], jnp.float32)}


def batch(y_scale=1.0):
    return {"x": X, "ids": jnp.arange(8) % 4, "y": jnp.arange(8, dtype=jnp.float32) * y_scale}


def test_accumulated_micro_batches_equal_the_whole_batch():
    tx = optax.adamw(1e-2)
    whole, m1 = update(loss_fn, tx, state_of(tx), batch())
    accum, m4 = update(loss_fn, tx, state_of(tx), batch(), grad_accum=4)
    for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(accum.params), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m1["loss"], m4["loss"], rtol=1e-6)
    assert float(m4["tokens"]) == 8.0  # summed over micro-batches, not averaged
    assert int(whole.step) == int(accum.step) == 1


def test_a_non_finite_step_leaves_params_and_optimiser_state_unchanged():
    tx = optax.adamw(1e-2)
    start = state_of(tx)
    new, m = update(loss_fn, tx, start, batch(y_scale=jnp.nan))
    assert int(m["skipped_nonfinite"]) == 1 and int(new.step) == 0
    for a, b in zip(jax.tree.leaves((start.params, start.opt_state)), jax.tree.leaves((new.params, new.opt_state)),
                    strict=True):
        np.testing.assert_array_equal(a, b)


def test_embed_lr_scale_multiplies_only_the_vocabulary_step():
    tx = optax.sgd(0.1)
    start = state_of(tx)
    plain, _ = update(loss_fn, tx, start, batch())
    scaled, _ = update(loss_fn, tx, start, batch(), embed_lr_scale=3.0)
    np.testing.assert_allclose(scaled.params["embed_vd"] - start.params["embed_vd"],
                               3.0 * (plain.params["embed_vd"] - start.params["embed_vd"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(scaled.params["w"], plain.params["w"])


def _sft_step_temp_bytes(remat: str) -> int:
    from composer_jax.config_loading import load_config
    from composer_jax.model.config import ModelConfig
    from composer_jax.model.create import abstract_model
    from composer_jax.rl import sft
    from composer_jax.sharding import make_mesh
    from composer_jax.train.checkpoint import abstract_train_state
    from composer_jax.train.optim import make_optimizer

    c = load_config("configs/tiny.py:dense", [f"model.remat={remat}", "model.n_layers=8", "model.max_seq_len=2048",
                                               "mesh.data=1", "mesh.fsdp=1"])
    cfg, mesh, tx = ModelConfig.from_config(c.model), make_mesh(c.mesh, jax.devices()[:1]), make_optimizer(c.sft.optim)
    graphdef, _ = abstract_model(cfg)
    with jax.set_mesh(mesh):
        state = abstract_train_state(cfg, mesh, tx)
        rows = {k: jax.ShapeDtypeStruct((1, 2048), jnp.float32 if k == "loss_mask" else jnp.int32)
                for k in ("tokens", "positions", "segment_ids", "loss_mask")}
        return sft.make_sft_step(graphdef, tx).lower(state, rows).compile().memory_analysis().temp_size_in_bytes


def test_remat_saves_memory_on_cpu():
    """XLA:CPU's concurrency-ordered scheduler keeps every layer's recomputed activations live,
    so remat saved 2% of an SFT step's temporaries (and a Qwen-0.5B step on one 1,536-token row
    ran out of 24 GB). The training entry points ask for the memory-aware order (24% saved
    here); a fresh process, since the flag acts only before jax starts its backend."""
    code = ("import sys; sys.path.insert(0, 'tests'); import composer_jax; composer_jax.memory_aware_cpu_schedule(); "
            "from test_train_update import _sft_step_temp_bytes as t; print(t('full') / t('none'))")
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
                         cwd=pathlib.Path(__file__).resolve().parents[1])
    assert run.returncode == 0, run.stderr[-3000:]
    assert float(run.stdout.split()[-1]) < 0.85
