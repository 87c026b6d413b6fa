"""Packed rows reproduce per-segment log-probs; MoE routing replay removes the routing mismatch."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from composer_jax.model.config import ModelConfig
from composer_jax.model.transformer import Transformer
from composer_jax.rl import segments
from composer_jax.rl.learner import learner_logp
from composer_jax.rl.trajectory import Episode, Segment, Turn
from configs.tiny import get_config


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig.from_config(get_config("test").model)
    return Transformer(cfg, rngs=nnx.Rngs(0))


def make_segment(rng, n_prompt, n_stream, n_layers=1, k=2):
    seg = Segment(prompt=rng.integers(11, 200, n_prompt).tolist(), prompt_experts=np.zeros((n_prompt, n_layers, k), np.int32))
    seg.add(rng.integers(11, 200, 3).tolist(), np.zeros((3, n_layers, k)))
    start = len(seg.tokens)
    seg.add(rng.integers(11, 200, n_stream).tolist(), np.zeros((n_stream, n_layers, k)),
            logp=rng.normal(size=n_stream), policy=True)
    seg.turns.append(Turn("summary" if n_stream % 2 else "action", start, len(seg.tokens), "eos"))
    return seg


def alone_logp(model, tokens):
    logits, _ = model(jnp.asarray([tokens]))
    logp = jax.nn.log_softmax(logits[0], -1)
    return np.asarray(jnp.take_along_axis(logp[:-1], jnp.asarray(tokens[1:])[:, None], -1)[:, 0])


def test_packed_logp_equals_each_segment_alone(model):
    rng = np.random.default_rng(0)
    ep = Episode(0, {}, segments=[make_segment(rng, 7, 5), make_segment(rng, 4, 9), make_segment(rng, 12, 6)])
    seqs = segments.episode_sequences(ep, 0.5)
    rows = segments.pack(seqs, 32, row_multiple=2)
    assert rows.rows == 2 and rows.segment_ids.max() == 2  # 15 + 16 in row 0, 21 in row 1
    b = {k: jnp.asarray(v) for k, v in rows.arrays().items()}
    logp_bt, _, _ = learner_logp(model, b, 1.0, replay=False)
    logp_bt = np.asarray(logp_bt)
    layout = segments.first_fit([len(s.tokens) for s in seqs], 32)
    for r, members in enumerate(layout):
        col = 0
        for i in members:
            s = seqs[i]
            n = len(s.tokens)
            np.testing.assert_allclose(logp_bt[r, col:col + n - 1], alone_logp(model, s.tokens.tolist()),
                                       atol=2e-5)
            # target-aligned policy mask / sampler log-probs / advantage
            np.testing.assert_array_equal(rows.loss_mask[r, col:col + n - 1], s.loss_mask[1:])
            np.testing.assert_array_equal(rows.sampler_logp[r, col:col + n - 1], s.logp[1:])
            np.testing.assert_allclose(rows.advantages[r, col:col + n - 1], 0.5 * s.loss_mask[1:])
            assert rows.loss_mask[r, col + n - 1] == 0  # a sequence's last column predicts nothing
            col += n
    assert rows.loss_mask.sum() == sum(s.loss_mask[1:].sum() for s in seqs)


def test_masked_summaries_and_overlong_sequence():
    rng = np.random.default_rng(1)
    seg = make_segment(rng, 4, 5)  # odd stream -> a summary turn
    ep = Episode(0, {}, segments=[seg])
    trained = segments.episode_sequences(ep, 1.0)[0]
    masked = segments.episode_sequences(ep, 1.0, train_summaries=False)[0]
    assert trained.loss_mask.sum() == 5 and masked.loss_mask.sum() == 0
    with pytest.raises(ValueError, match="row length"):
        segments.pack([trained], 8)


def test_routing_replay_matches_sampler_when_routing_moves(model):
    """The sampler routed with one router bias; the learner's bias has moved since (the
    aux-loss-free balancing step between rollout and update). Replaying the recorded experts
    recovers the sampler's log-probs exactly; recomputing routing does not."""
    rng = np.random.default_rng(2)
    tokens = rng.integers(11, 300, 24).tolist()
    logits, aux = model(jnp.asarray([tokens]))
    sampler = alone_logp(model, tokens)
    experts_ltk = np.asarray(aux["expert_choice_ltk"])  # [L, t, k]
    seq = segments.TrainSeq(np.asarray(tokens, np.int32), np.ones(24, np.float32),
                            np.concatenate([[0.0], sampler]).astype(np.float32), 1.0,
                            np.transpose(experts_ltk, (1, 0, 2)))
    rows = segments.pack([seq], 32, expert_shape=experts_ltk.shape[::2])
    batch = {k: jnp.asarray(v) for k, v in rows.arrays().items()}
    graphdef, state = nnx.split(model)
    moved = jax.tree.map(lambda x: x, state)
    moe = nnx.merge(graphdef, moved)
    for layer in moe.layers:
        if hasattr(layer.ffn, "router_bias_e"):
            layer.ffn.router_bias_e[...] = jnp.asarray(rng.normal(size=layer.ffn.router_bias_e.shape) * 0.5,
                                                       jnp.float32)
    with_replay = np.asarray(learner_logp(moe, batch, 1.0, replay=True)[0])[0, :23]
    without = np.asarray(learner_logp(moe, batch, 1.0, replay=False)[0])[0, :23]
    assert np.max(np.abs(with_replay - sampler)) < 1e-5
    assert np.max(np.abs(without - sampler)) > 1e-3
