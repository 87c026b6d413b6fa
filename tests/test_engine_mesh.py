"""The rollout engine on a mesh: the policy in the inference layout, pinned jits (no compile
after warm-up), no weight-sized collective per decoded token, the same tokens as one device."""
import math

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from composer_jax.config_loading import load_config
from composer_jax.model import ModelConfig, abstract_model, create_sharded
from composer_jax.rl.engine_host import (FOLDED_WEIGHTS_FRACTION, RolloutEngine, folded_weights_fit,
                                         inference_mesh, inference_shardings)
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.sharding import make_mesh, state_shardings
from composer_jax.tools.compiles import count_compiles
from composer_jax.tools.hlo import loop_collectives

VALID = 300
ROLLOUT = RolloutConfig(window=48, summary_budget=4, turn_budget=6, slots=8, temperature=0.8,
                        top_p=0.9, prefill_buckets=(8,))
# capacity_factor 2 with 2 expert shards of 4 experts, top-2, is the dropless bound of the
# expert-parallel dispatch: the engine must then give the one-device dropless tokens. (The dense
# impl's global capacity would drop: padding rows all route alike.)
MODEL = dict(load_config("configs/tiny.py:test").model, moe_impl="expert_parallel", capacity_factor=2.0)
DROPLESS = {"expert_parallel": 2.0, "dense": 0.0}
MESHES = {"2x2x2": dict(data=2, fsdp=2, expert=2, tensor=1),
          "1x2x2x2": dict(data=1, fsdp=2, expert=2, tensor=2)}


def episode(engine, params):
    """One policy update's worth of engine calls: new weights, two episodes, prompt, decode."""
    engine.set_params(params)
    engine.start([1, 6], [jax.random.key(3), jax.random.key(4)])
    scored = engine.append([1, 6], [list(range(11, 18)), list(range(40, 45))])
    return scored, engine.generate([1, 6], [6, 6], [[], []])


@pytest.fixture(scope="module")
def one_device():
    """Reference tokens and log-probs: the dropless blocked MoE (global routing) on one device."""
    cfg = ModelConfig.from_config({**MODEL, "moe_impl": "blocked", "capacity_factor": 0.0})
    graphdef, params = create_sharded(cfg, make_mesh({"data": 1}, jax.devices()[:1]), seed=0)
    return episode(RolloutEngine(graphdef, params, cfg, ROLLOUT, valid_vocab=VALID), params)


def test_inference_mesh_folds_fsdp_into_data():
    mesh = make_mesh(MESHES["2x2x2"])
    inference = inference_mesh(mesh)
    assert dict(inference.shape) == dict(data=4, fsdp=1, expert=2, tensor=1)
    assert inference_mesh(make_mesh({"data": -1})).shape == make_mesh({"data": -1}).shape
    # Every device keeps the same slots (the batch axes map rows to devices as on the train mesh).
    batch = P(("data", "fsdp", "expert"))
    assert (NamedSharding(mesh, batch).devices_indices_map((8,))
            == NamedSharding(inference, batch).devices_indices_map((8,)))
    cfg = ModelConfig.from_config(MODEL)
    _, abstract = abstract_model(cfg)
    sh = inference_shardings(abstract, mesh)
    gate = sh["layers"][1]["ffn"]["w_gate_edf"].get_value()
    assert gate.shard_shape((8, 64, 32)) == (4, 64, 32)  # split over expert only, no FSDP
    assert sh["embed_vd"].get_value().shard_shape((512, 64)) == (512, 64)
    both = inference_shardings(abstract, make_mesh(MESHES["1x2x2x2"]), fold=("fsdp", "tensor"))
    assert both["layers"][1]["ffn"]["w_gate_edf"].get_value().shard_shape((8, 64, 32)) == (4, 64, 32)
    # The engine folds only when its own copy of the folded weights fits beside training.
    folded = sum(math.prod(s.shard_shape(x.shape)) * x.dtype.itemsize
                 for x, s in zip(jax.tree.leaves(abstract), jax.tree.leaves(sh)))
    assert folded_weights_fit(abstract, mesh, bytes_limit=folded / FOLDED_WEIGHTS_FRACTION + 1)
    assert not folded_weights_fit(abstract, mesh, bytes_limit=folded / FOLDED_WEIGHTS_FRACTION - 1)
    assert folded_weights_fit(abstract, mesh)  # CPU devices report no limit


def smallest_weight_bytes(engine) -> int:
    """Bytes of the smallest weight matrix (>= 2 dims) one device holds (the router)."""
    return min(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
               for x in engine._params if x.ndim >= 2)


@pytest.mark.parametrize("mesh_name,impl", [("2x2x2", "expert_parallel"), ("1x2x2x2", "expert_parallel"),
                                            ("2x2x2", "dense")])
def test_engine_on_a_mesh(mesh_name, impl, one_device):
    cfg = ModelConfig.from_config({**MODEL, "moe_impl": impl, "capacity_factor": DROPLESS[impl]})
    mesh = make_mesh(MESHES[mesh_name])
    graphdef, params = create_sharded(cfg, mesh, seed=0)
    engine = RolloutEngine(graphdef, params, cfg, ROLLOUT, valid_vocab=VALID, mesh=mesh)
    assert all(p.sharding.mesh == engine.mesh for p in engine._params)

    # Per decoded token (the decode loop's body and condition) only activations move.
    per_token = loop_collectives(engine.compile_decode())
    largest = max(c.largest_array_bytes for c in per_token)
    assert largest < smallest_weight_bytes(engine), [(c.kind, c.shapes) for c in per_token]
    kinds = [c.kind for c in per_token]
    if impl == "expert_parallel":  # the MoE's all-to-alls: rows, their expert ids, results
        assert kinds.count("all-to-all") == 3 * cfg.n_moe_layers, kinds
        if MESHES[mesh_name]["tensor"] == 1:  # + the loop condition's any(), a 1-device psum
            assert len(per_token) <= 3 * cfg.n_moe_layers + 2, kinds

    # Warm-up compiles every jit once; a policy update arriving in the train layout (a learner
    # step's output) and another episode then compile nothing.
    episode(engine, params)
    update = jax.jit(lambda p: jax.tree.map(lambda x: x * 1.0, p),
                     out_shardings=state_shardings(params, mesh))(params)
    with count_compiles() as compiled:
        scored, generated = episode(engine, update)
    assert compiled == []

    ref_scored, ref_generated = one_device
    for a, b in zip(generated, ref_generated):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.logp, b.logp, atol=2e-5, rtol=0)
        np.testing.assert_array_equal(np.sort(a.experts, -1), np.sort(b.experts, -1))
    for a, b in zip(scored, ref_scored):  # (a new context's first token has no predecessor)
        np.testing.assert_allclose(a.logp[1:], b.logp[1:], atol=2e-5, rtol=0)
