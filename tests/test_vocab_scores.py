"""Chunked target scoring (model/vocab_scores.py): the same numbers and gradients as scoring a
whole row, in the losses and the engine's prefill, with far less memory."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from composer_jax.config_loading import load_config
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, Transformer
from composer_jax.model.vocab_scores import score_targets
from composer_jax.rl.engine_host import RolloutEngine
from composer_jax.rl.learner import learner_logp
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.train.step import lm_loss

TRAIN_CFG = dict(z_loss_weight=1e-3, load_balance_weight=1e-2, router_z_weight=1e-3)


def test_logp_entropy_and_logz_match_the_softmax_definitions():
    logits = jax.random.normal(jax.random.key(0), (2, 5, 11)) * 3
    targets = jax.random.randint(jax.random.key(1), (2, 5), 0, 11)
    w = jnp.eye(11)  # tied head [v, d] with d = v: the hidden states are the logits
    for temperature in (0.7, 0.0):  # 0 (greedy) scores at temperature 1
        s = score_targets(logits, w, True, targets, temperature)
        logp = jax.nn.log_softmax(logits / (temperature or 1.0), axis=-1)
        np.testing.assert_allclose(s.logp_bt, jnp.take_along_axis(logp, targets[..., None], -1)[..., 0], atol=1e-5)
        np.testing.assert_allclose(s.entropy_bt, -jnp.sum(jnp.exp(logp) * logp, -1), atol=1e-5)
        np.testing.assert_allclose(s.logz_bt, jax.nn.logsumexp(logits / (temperature or 1.0), -1), atol=1e-5)


@pytest.mark.parametrize("tied", [True, False])
def test_chunked_scores_and_gradients_equal_whole_rows(tied):
    """A chunk that does not divide the length (padding cut off), both head layouts."""
    k = jax.random.split(jax.random.key(2), 3)
    xn = jax.random.normal(k[0], (3, 10, 8))
    w = jax.random.normal(k[1], (50, 8) if tied else (8, 50))
    targets = jax.random.randint(k[2], (3, 10), 0, 50)

    def objective(xn, w, chunk):
        s = score_targets(xn, w, tied, targets, 0.8, chunk)
        return jnp.sum(s.logp_bt) + 0.1 * jnp.sum(s.entropy_bt) + 1e-2 * jnp.sum(s.logz_bt ** 2), s

    (v0, s0), g0 = jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)(xn, w, 0)
    (v3, s3), g3 = jax.value_and_grad(objective, argnums=(0, 1), has_aux=True)(xn, w, 3)
    assert s3.logp_bt.shape == (3, 10)
    for a, b in zip((v0, *s0, *g0), (v3, *s3, *g3)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)


def model_pair(chunk: int):
    """The tiny test model twice, same weights, scoring whole rows and `chunk` positions at a time."""
    cfg = ModelConfig.from_config(load_config("configs/tiny.py:test").model)
    whole = Transformer(cfg, rngs=nnx.Rngs(0))
    graphdef, _ = nnx.split(Transformer(dataclasses.replace(cfg, logits_chunk=chunk), rngs=nnx.Rngs(1)))
    return whole, nnx.merge(graphdef, nnx.state(whole))


def test_midtraining_and_rl_losses_are_unchanged_by_chunking():
    whole, chunked = model_pair(7)
    toks = jax.random.randint(jax.random.key(3), (2, 24), 0, whole.cfg.vocab_size)
    batch = dict(tokens=toks, positions=jnp.broadcast_to(jnp.arange(24), (2, 24)),
                 segment_ids=jnp.ones((2, 24), jnp.int32).at[1, 15:].set(2))

    def both(model):
        loss, _ = lm_loss(model, batch, TRAIN_CFG)
        logp, entropy, _ = learner_logp(model, batch, 0.9, replay=False)
        return loss + jnp.mean(logp) + 0.01 * jnp.mean(entropy), (loss, logp, entropy)

    (v0, aux0), g0 = nnx.value_and_grad(both, has_aux=True)(whole)
    (v7, aux7), g7 = nnx.value_and_grad(both, has_aux=True)(chunked)
    for a, b in zip((v0, *aux0), (v7, *aux7)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(g0), jax.tree.leaves(g7)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)


def test_engine_prefill_scores_are_unchanged_by_chunking():
    """Teacher-forced tokens appended across several calls (the stored next-token logits score
    each call's first token), then sampled ones: identical log-probs either way."""
    whole, chunked = model_pair(5)
    rollout = RolloutConfig(window=96, summary_budget=8, turn_budget=12, slots=2, temperature=0.8,
                            top_p=1.0, prefill_buckets=(8, 32))
    results = []
    for model in (whole, chunked):
        graphdef, state = nnx.split(model)
        engine = RolloutEngine(graphdef, state, model.cfg, rollout, valid_vocab=300)
        engine.start([0, 1], [jax.random.key(0), jax.random.key(1)])
        rng = np.random.default_rng(0)
        first = engine.append([0, 1], [rng.integers(11, 300, 19).tolist(), rng.integers(11, 300, 6).tolist()])
        second = engine.append([0, 1], [rng.integers(11, 300, 11).tolist(), rng.integers(11, 300, 3).tolist()])
        gen = engine.generate([0, 1], [6, 6], [[], []])
        results.append([s.logp for s in first + second] + [g.logp for g in gen] + [g.tokens for g in gen])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, atol=2e-5)


def test_chunking_bounds_the_compiled_loss_memory():
    """Scratch memory XLA plans for a loss and its gradient over vocabulary-dominated shapes
    (logits 32 MB): chunks of 64 positions need a small fraction of whole-row scoring."""
    xn = jax.ShapeDtypeStruct((2, 512, 32), jnp.float32)
    w = jax.ShapeDtypeStruct((32, 8192), jnp.float32)
    targets = jax.ShapeDtypeStruct((2, 512), jnp.int32)

    def temp_bytes(chunk):
        loss = lambda xn, w, t: -jnp.mean(score_targets(xn, w, False, t, 1.0, chunk).logp_bt)
        compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).lower(xn, w, targets).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    whole, chunked = temp_bytes(0), temp_bytes(64)
    assert whole >= 2 * 512 * 8192 * 4  # at least one whole-row logits buffer
    assert chunked < whole / 4, (chunked, whole)


def test_logits_chunk_must_be_a_non_negative_integer():
    for bad in (-1, 2.5):
        c = load_config("configs/tiny.py:test").model
        c.logits_chunk = bad
        with pytest.raises(ConfigError, match="logits_chunk"):
            ModelConfig.from_config(c)
