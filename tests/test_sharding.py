"""Sharding: parameters are born sharded by the rules, and every mesh shape gives the same
forward pass and the same gradient step as a single device."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import get_config
from composer_jax.model import ModelConfig, create_sharded
from composer_jax.sharding import batch_sharding, logical_to_spec, make_mesh
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import create_train_state, make_train_step

MESHES = {
    "1dev": dict(data=1, fsdp=1, expert=1, tensor=1),
    "8x1x1x1": dict(data=8, fsdp=1, expert=1, tensor=1),
    "2x2x2x1": dict(data=2, fsdp=2, expert=2, tensor=1),
    "1x2x2x2": dict(data=1, fsdp=2, expert=2, tensor=2),
}


def one_step(mesh_name):
    config = get_config("test")
    # Expert-parallel dispatch on every multi-device mesh; at this factor it drops nothing.
    config.model.capacity_factor = 2.0
    cfg = ModelConfig.from_config(config.model)
    devices = jax.devices()[:1] if mesh_name == "1dev" else jax.devices()
    mesh = make_mesh(MESHES[mesh_name], devices)
    graphdef, state = create_sharded(cfg, mesh, seed=0)
    tx = make_optimizer(config.train)
    batch = dict(tokens=jax.random.randint(jax.random.key(1), (8, 32), 0, cfg.vocab_size),
                 segment_ids=jnp.ones((8, 32), jnp.int32).at[:, 20:].set(2),
                 positions=jnp.concatenate([jnp.arange(20), jnp.arange(12)])[None].repeat(8, 0))
    with jax.set_mesh(mesh):
        batch = jax.device_put(batch, batch_sharding(mesh))
        logits, _ = jax.jit(lambda s, t: nnx.merge(graphdef, s)(t))(state, batch["tokens"])
        train_state, shardings = create_train_state(state, tx)
        step = make_train_step(graphdef, tx, cfg, config.train, shardings, batch_sharding(mesh))
        train_state, metrics = step(train_state, batch)
    return dict(state=state, logits=np.asarray(logits), metrics=jax.device_get(metrics),
                params=jax.device_get(train_state.params), buffers=jax.device_get(train_state.buffers))


@pytest.fixture(scope="module")
def reference():
    return one_step("1dev")


@pytest.mark.parametrize("mesh_name", ["8x1x1x1", "2x2x2x1", "1x2x2x2"])
def test_mesh_shapes_match_single_device(reference, mesh_name):
    out = one_step(mesh_name)
    np.testing.assert_allclose(out["logits"], reference["logits"], atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(out["metrics"]["loss"], reference["metrics"]["loss"], rtol=1e-5)
    assert out["metrics"]["dropped_fraction"] == reference["metrics"]["dropped_fraction"] == 0
    np.testing.assert_allclose(out["metrics"]["grad_norm"], reference["metrics"]["grad_norm"], rtol=1e-4)
    for a, b in zip(jax.tree.leaves(out["params"]), jax.tree.leaves(reference["params"])):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)
    for a, b in zip(jax.tree.leaves(out["buffers"]), jax.tree.leaves(reference["buffers"])):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # Parameters were born with the shardings the rules table names.
    def check(variable):
        array = variable[...]
        expected = logical_to_spec(variable.get_metadata()["logical_axes"])
        assert array.sharding.spec == expected, (variable.get_metadata()["logical_axes"], array.sharding.spec)
    jax.tree.map(check, out["state"], is_leaf=lambda x: isinstance(x, nnx.Variable))
    if mesh_name == "1x2x2x2":
        w = out["state"]["layers"][1]["ffn"]["w_gate_edf"][...]
        # experts split 2 ways, embed 2 ways (fsdp), expert_mlp 2 ways (tensor): 1/8 per device
        assert w.addressable_shards[0].data.shape == (w.shape[0] // 2, w.shape[1] // 2, w.shape[2] // 2)
