"""Expert parallelism: equal to the dense reference on every mesh shape, and, read from the
compiled train step, each device does 1/N of the work and no collective carries all experts'
weights or the global batch's tokens."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import get_config
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, Transformer
from composer_jax.model.moe import send_capacity
from composer_jax.sharding import batch_sharding, check_divisibility, make_mesh, state_shardings
from composer_jax.tools.compile_step import compile_train_step
from composer_jax.tools.hlo import program_stats

MESHES = {"1x1x8x1": dict(expert=8), "2x2x2x1": dict(data=2, fsdp=2, expert=2),
          "1x2x2x2": dict(fsdp=2, expert=2, tensor=2)}
BATCH, SEQ = 8, 40  # 320 global tokens: no weight shard of the test model has a 320 or 40 dimension


def scaling_config(**model):
    c = get_config("scaling")
    c.model.update(model)
    return c


def model_cfg(**model) -> ModelConfig:
    return ModelConfig.from_config(scaling_config(**model).model)


def tokens():
    return jax.random.randint(jax.random.key(0), (BATCH, SEQ), 0, 1024)


def loss_and_grads(cfg: ModelConfig, mesh=None, forced=None):
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(1)))

    def loss(state, toks):
        logits, aux = nnx.merge(graphdef, state)(toks, forced_expert_lbtk=forced)
        value = jnp.mean(jax.nn.log_softmax(logits)[..., 0]) + aux["load_balance_loss"] + aux["router_z_loss"]
        return value, (logits, aux)

    fn = jax.jit(jax.value_and_grad(loss, has_aux=True))
    if mesh is None:
        return jax.device_get(fn(state, tokens()))
    with jax.set_mesh(mesh):
        state = jax.device_put(state, state_shardings(state, mesh))
        return jax.device_get(fn(state, jax.device_put(tokens(), batch_sharding(mesh))))


@pytest.fixture(scope="module")
def dense_reference():
    return loss_and_grads(model_cfg(moe_impl="dense", capacity_factor=0.0))


@pytest.mark.parametrize("mesh_name", list(MESHES))
def test_expert_parallel_equals_dense_reference_forward_and_gradients(dense_reference, mesh_name):
    (loss_d, (logits_d, aux_d)), grads_d = dense_reference
    # 8 = shards x min(k, experts per shard) / k at expert=8: the dropless bound, nothing dropped
    cfg = model_cfg(moe_impl="expert_parallel", capacity_factor=8.0)
    (loss, (logits, aux)), grads = loss_and_grads(cfg, make_mesh(MESHES[mesh_name]))
    assert float(aux["dropped_fraction"]) == 0.0
    np.testing.assert_allclose(logits, logits_d, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(loss, loss_d, atol=1e-5)
    for name in ("load_balance_loss", "router_z_loss", "expert_counts_le", "expert_choice_ltk"):
        np.testing.assert_allclose(aux[name], aux_d[name], atol=1e-5, err_msg=name)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(grads_d)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)


def test_routing_replay_and_capacity_drops_are_per_device_and_counted():
    mesh = make_mesh(MESHES["1x1x8x1"])
    free = loss_and_grads(model_cfg(moe_impl="expert_parallel", capacity_factor=8.0), mesh)
    choice_ltk = free[0][1][1]["expert_choice_ltk"]
    forced_lbtk = choice_ltk.reshape(choice_ltk.shape[0], BATCH, SEQ, -1)
    replayed = loss_and_grads(model_cfg(moe_impl="expert_parallel", capacity_factor=8.0), mesh,
                              forced=jnp.asarray(forced_lbtk))
    np.testing.assert_allclose(replayed[0][1][0], free[0][1][0], atol=1e-6)

    # Half capacity: each device (one batch row at expert=8) keeps at most `capacity` rows per
    # expert shard (2 experts each); what it drops is counted, never silent.
    cfg = model_cfg(moe_impl="expert_parallel", capacity_factor=0.5)
    (_, (_, aux)), _ = loss_and_grads(cfg, mesh)
    capacity = send_capacity(SEQ, cfg.top_k, 8, cfg.n_experts // 8, 0.5)
    shard_lbn = np.asarray(aux["expert_choice_ltk"]).reshape(-1, BATCH, SEQ * cfg.top_k) // 2
    kept = sum(min(int(np.sum(row == s)), capacity) for layer in shard_lbn for row in layer
               for s in range(8))
    expected = 1 - kept / shard_lbn.size
    assert expected > 0.2
    np.testing.assert_allclose(aux["dropped_fraction"], expected, rtol=1e-6)


@pytest.fixture(scope="module")
def compiled():
    """The real train step compiled once per (impl, mesh): 1 device (the reference work),
    expert-parallel on each mesh, and the old blocked dispatch at expert=8."""
    out = {}
    one = make_mesh(dict(data=1), jax.devices()[:1])
    out["1dev"] = program_stats(compile_train_step(scaling_config(moe_impl="blocked"), one, BATCH, SEQ))
    for name, mesh in MESHES.items():
        out[name] = program_stats(compile_train_step(scaling_config(moe_impl="expert_parallel"),
                                                     make_mesh(mesh), BATCH, SEQ))
    out["dense@1x1x8x1"] = program_stats(compile_train_step(
        scaling_config(moe_impl="dense"), make_mesh(MESHES["1x1x8x1"]), BATCH, SEQ))
    return out


def all_experts_projection_bytes(cfg: ModelConfig) -> int:
    return cfg.n_experts * cfg.d_model * cfg.d_ff_expert * 4


def global_token_arrays(stats):
    """Collectives over an array with the global batch's token dimension(s)."""
    def is_global(dims):
        pairs = zip(dims, dims[1:])
        return BATCH * SEQ in dims or (BATCH, SEQ) in pairs
    return [c for c in stats.collectives if any(is_global(d) for _, d in c.shapes)]


@pytest.mark.parametrize("mesh_name", list(MESHES))
def test_compiled_step_partitions_the_moe(compiled, mesh_name):
    cfg = model_cfg()
    stats = compiled[mesh_name]
    ideal = compiled["1dev"].flops / 8
    assert stats.flops <= 1.3 * ideal, (stats.flops, ideal)
    assert stats.largest_array_bytes() < all_experts_projection_bytes(cfg)
    assert global_token_arrays(stats) == []
    # All-to-all: each device's tokens x top-k rows of d_model, there and back, per MoE layer,
    # forward and backward; the capacity factor (1.25) and the expert ids add to it.
    batch_shards = math.prod(MESHES[mesh_name].get(a, 1) for a in ("data", "fsdp", "expert"))
    estimate = BATCH * SEQ / batch_shards * cfg.top_k * cfg.d_model * 4 * 2
    per_layer = stats.collective_bytes()["all-to-all"] / (cfg.n_moe_layers * 2)
    assert estimate <= per_layer <= 1.5 * estimate, (per_layer, estimate)


def test_the_checks_catch_a_moe_that_does_not_partition(compiled):
    """The dense reference at expert=8 moves every expert's weights: the same checks fail."""
    stats = compiled["dense@1x1x8x1"]
    assert stats.largest_array_bytes() >= all_experts_projection_bytes(model_cfg())


def test_bad_expert_parallel_configs_fail_naming_the_field():
    with pytest.raises(ConfigError, match="model.n_experts=12"):
        check_divisibility(model_cfg(n_experts=12, moe_impl="expert_parallel"),
                           make_mesh(MESHES["1x1x8x1"]))
    with pytest.raises(ConfigError, match="model.capacity_factor=0"):
        check_divisibility(model_cfg(capacity_factor=0.0, moe_impl="expert_parallel"),
                           make_mesh(MESHES["1x1x8x1"]))
    check_divisibility(model_cfg(capacity_factor=0.0), make_mesh(dict(data=8)))  # dropless is cheap
    with pytest.raises(ConfigError, match="model.moe_impl='expert_parallel' needs a device mesh"):
        Transformer(model_cfg(moe_impl="expert_parallel"), rngs=nnx.Rngs(0))(tokens())
