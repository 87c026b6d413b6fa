"""Sparse upcycling: the MoE equals the dense model at step 0 and departs from it after training."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import get_config
from composer_jax.checkpoints.upcycle import upcycle, upcycled_config
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, Transformer
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import init_train_state, make_train_step


def dense_model():
    c = get_config("test")
    c.model.update(n_experts=0, first_dense_layers=c.model.n_layers)
    return Transformer(ModelConfig.from_config(c.model), rngs=nnx.Rngs(3)), c.train


@pytest.mark.parametrize("router_score,n_shared", [("softmax", 0), ("sigmoid", 1)])
def test_upcycled_model_equals_dense_then_trains_away(router_score, n_shared):
    dense, train_cfg = dense_model()
    cfg = upcycled_config(dense.cfg, n_experts=4, top_k=2, n_shared_experts=n_shared,
                          first_dense_layers=1, router_score=router_score, moe_impl="blocked")
    graphdef, state = upcycle(nnx.state(dense), cfg, seed=1)
    toks = jax.random.randint(jax.random.key(0), (2, 16), 0, cfg.vocab_size)
    dense_logits, _ = dense(toks)
    moe_logits, aux = nnx.merge(graphdef, state)(toks)
    assert aux["expert_counts_le"].shape == (1, 4)  # the second layer really is routed
    np.testing.assert_allclose(moe_logits, dense_logits, atol=1e-5, rtol=0)

    train_cfg.warmup_steps = 1  # the schedule's first step has lr 0: the second one moves
    tx = make_optimizer(train_cfg)
    step = make_train_step(graphdef, tx, cfg, train_cfg)
    batch = dict(tokens=toks, positions=jnp.broadcast_to(jnp.arange(16), (2, 16)),
                 segment_ids=jnp.ones((2, 16), jnp.int32))
    new_state, metrics = step(init_train_state(state, tx), batch)
    new_state, metrics = step(new_state, batch)
    assert np.isfinite(float(metrics["loss"]))
    trained_logits, _ = nnx.merge(graphdef, new_state.params, new_state.buffers)(toks)
    assert float(jnp.max(jnp.abs(trained_logits - dense_logits))) > 1e-3
    experts = new_state.params["layers"][1]["ffn"]["w_gate_edf"][...]
    assert float(jnp.max(jnp.abs(experts[0] - experts[1]))) > 0  # the router's tokens split them


def test_upcycling_an_moe_is_an_error():
    moe = ModelConfig.from_config(get_config("test").model)
    with pytest.raises(ConfigError, match="already a mixture of experts"):
        upcycled_config(moe, n_experts=4, top_k=2)
