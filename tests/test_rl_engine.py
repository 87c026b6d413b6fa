"""Rollout engine: resets, log-probs against a full forward pass, slot independence, sharding."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from composer_jax.config_loading import load_config
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, Transformer, create_sharded
from composer_jax.rl.engine_host import RolloutEngine
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.rl.sampling import sample
from composer_jax.sharding import make_mesh

VALID = 300  # sample only ids below this (a tokenizer smaller than the model's vocabulary)
ROLLOUT = RolloutConfig(window=96, summary_budget=8, turn_budget=12, slots=4, temperature=0.8,
                        top_p=0.9, prefill_buckets=(8, 32))


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig.from_config(load_config("configs/tiny.py:test").model)
    return Transformer(cfg, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def engine(model):
    graphdef, params = nnx.split(model)
    return RolloutEngine(graphdef, params, model.cfg, ROLLOUT, valid_vocab=VALID)


def prompt(n, seed):
    return np.random.default_rng(seed).integers(11, VALID, n).tolist()


def full_logp(model, tokens, temperature, experts=None):
    """Tempered log-prob of each token after the first, from one full forward pass."""
    forced = None if experts is None else jnp.asarray(experts).transpose(1, 0, 2)[:, None]
    logits, _ = model(jnp.asarray([tokens]), forced_expert_lbtk=forced)
    logp = jax.nn.log_softmax(logits[0] / temperature, axis=-1)
    return np.asarray(logp[jnp.arange(len(tokens) - 1), jnp.asarray(tokens[1:])])


def test_recorded_logprobs_equal_a_full_forward(engine, model):
    """Sampled and teacher-forced tokens (a forced chunk longer than the largest bucket) are
    scored exactly as the learner's forward pass scores them; routing replay reproduces it."""
    engine.start([0, 1, 2], [jax.random.key(i) for i in range(3)])
    prompts = [prompt(5, 0), prompt(40, 1), prompt(17, 2)]
    engine.append([0, 1, 2], prompts)
    gen = engine.generate([0, 1, 2], [12, 7, 12], [[], [], []])
    forced = prompt(37, 3)
    scored = engine.append([1], [forced])[0]
    assert [len(g.tokens) for g in gen] == [12, 7, 12] and not any(g.stopped for g in gen)
    assert all(int(t) < VALID for g in gen for t in g.tokens)
    for p, g in zip(prompts, gen):
        expected = full_logp(model, p + g.tokens.tolist(), ROLLOUT.temperature)[len(p) - 1:]
        np.testing.assert_allclose(g.logp, expected, atol=2e-5, rtol=0)
        # Top-p and the vocabulary limit renormalise a subset: never less likely than the full softmax.
        assert np.all(g.logp_sampler >= g.logp - 1e-6)
    stream = prompts[1] + gen[1].tokens.tolist() + forced
    np.testing.assert_allclose(scored.logp, full_logp(model, stream, ROLLOUT.temperature)[-len(forced):],
                               atol=2e-5, rtol=0)
    assert gen[2].experts.shape == (12, model.cfg.n_moe_layers, model.cfg.top_k)


def test_an_unscored_prefill_leaves_the_same_state_and_samples(engine):
    """score=False skips the log-probs of appended tokens (prompts, harness text), nothing
    else: the same KV, next-token logits and expert choices, so the same samples follow."""
    prompts = [prompt(40, 4), prompt(9, 5)]  # 40: two chunks of the largest bucket
    runs = []
    for score in (True, False):
        engine.start([0, 3], [jax.random.key(7), jax.random.key(8)])
        scored = engine.append([0, 3], prompts, score=score)
        runs.append((scored, np.asarray(engine.state.next_logits_sv)[[0, 3]],
                     engine.generate([0, 3], [10, 10], [[], []])))
    (scored, logits, gen), (unscored, logits_u, gen_u) = runs
    assert all(s.logp is None for s in unscored) and all(len(s.logp) == len(p) for s, p in zip(scored, prompts))
    for a, b in zip(scored, unscored):
        np.testing.assert_array_equal(a.experts, b.experts)
    np.testing.assert_array_equal(logits, logits_u)
    for a, b in zip(gen, gen_u):
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_array_equal(a.logp, b.logp)


def test_token_shift_engine_scores_like_a_full_forward():
    """With token shift the cache carries each slot's newest tokens: decode, forced chunks and a
    reset (whose first tokens have no predecessors) all score as the learner's forward pass."""
    cfg = ModelConfig.from_config({**load_config("configs/tiny.py:test").model, "token_shift": 2})
    model = Transformer(cfg, rngs=nnx.Rngs(3))
    engine = RolloutEngine(*nnx.split(model), cfg, ROLLOUT, valid_vocab=VALID)
    engine.start([0, 1], [jax.random.key(0), jax.random.key(1)])
    prompts = [prompt(6, 10), prompt(21, 11)]
    engine.append([0, 1], prompts)
    gen = engine.generate([0, 1], [9, 9], [[], []])
    forced = prompt(13, 12)
    scored = engine.append([0], [forced])[0]
    stream = prompts[0] + gen[0].tokens.tolist() + forced
    np.testing.assert_allclose(gen[1].logp, full_logp(model, prompts[1] + gen[1].tokens.tolist(),
                                                      ROLLOUT.temperature)[len(prompts[1]) - 1:], atol=2e-5, rtol=0)
    np.testing.assert_allclose(scored.logp, full_logp(model, stream, ROLLOUT.temperature)[-len(forced):],
                               atol=2e-5, rtol=0)
    engine.clear([0])
    engine.append([0], [prompts[1]])  # slot 0's stale newest token must not leak into the new context
    np.testing.assert_allclose(np.asarray(engine.state.next_logits_sv)[0],
                               np.asarray(model(jnp.asarray([prompts[1]]))[0][0, -1]), atol=1e-5, rtol=0)


def test_a_rewind_to_the_prompt_continues_exactly_like_a_fresh_prefill():
    """A summary reset that keeps the prompt's KV (rewind to the mark, then prefill only the
    summary) gives the same next logits, log-probs and samples as emptying the slot and
    prefilling prompt + summary again, with token shift (the newest tokens are restored too)."""
    cfg = ModelConfig.from_config({**load_config("configs/tiny.py:test").model, "token_shift": 3})
    model = Transformer(cfg, rngs=nnx.Rngs(4))
    engine = RolloutEngine(*nnx.split(model), cfg, ROLLOUT, valid_vocab=VALID)
    base, summary = prompt(19, 20), prompt(11, 21)
    engine.start([0, 2], [jax.random.key(5), jax.random.key(6)])
    engine.append([0, 2], [base, prompt(7, 22)])
    engine.mark([0, 2])
    engine.generate([0, 2], [12, 12], [[], []])  # the first segment: its tokens are thrown away
    engine.append([0], [prompt(30, 23)])
    engine.rewind([0])
    assert engine.lengths()[0] == len(base)
    kept = engine.append([0], [summary])[0]
    engine.start([1], [jax.random.key(5)])  # a fresh slot with the same key and counter ...
    engine.append([1], [base])
    engine.state = engine.state.replace(steps_s=engine.state.steps_s.at[1].set(engine.state.steps_s[0]))
    fresh = engine.append([1], [summary])[0]  # ... prefilled with the whole reset prompt
    logits = np.asarray(engine.state.next_logits_sv)
    np.testing.assert_allclose(logits[0], logits[1], atol=1e-5, rtol=0)
    np.testing.assert_allclose(kept.logp, fresh.logp, atol=1e-5, rtol=0)
    np.testing.assert_allclose(kept.logp, full_logp(model, base + summary, ROLLOUT.temperature)[-len(summary):],
                               atol=2e-5, rtol=0)
    a, b = engine.generate([0, 1], [12, 12], [[], []])
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logp, full_logp(model, base + summary + a.tokens.tolist(),
                                                 ROLLOUT.temperature)[len(base) + len(summary) - 1:],
                               atol=2e-5, rtol=0)


def test_recorded_expert_choices_replay_the_sampler(engine, model):
    """Every token's recorded experts are the ones a full forward picks; forcing them
    (routing replay) reproduces the sampler's log-probs."""
    engine.start([3], [jax.random.key(7)])
    p = prompt(20, 4)
    prefill = engine.append([3], [p])[0]
    gen = engine.generate([3], [12], [[]])[0]
    tokens = p + gen.tokens.tolist()
    experts_tlk = np.concatenate([prefill.experts, gen.experts])
    _, aux = model(jnp.asarray([tokens]))
    np.testing.assert_array_equal(np.sort(experts_tlk, -1),
                                  np.sort(np.asarray(aux["expert_choice_ltk"]).transpose(1, 0, 2), -1))
    replay = full_logp(model, tokens, ROLLOUT.temperature, experts=experts_tlk)
    np.testing.assert_allclose(gen.logp, replay[len(p) - 1:], atol=2e-5, rtol=0)


def test_reset_slot_equals_fresh_prefill(engine):
    """After generating in slot 0, clear + prefill a new context: its next-token logits and its
    continuation equal a never-used slot given the same context and key."""
    engine.start([0, 1], [jax.random.key(1), jax.random.key(2)])
    engine.append([0, 1], [prompt(30, 5), prompt(9, 6)])
    engine.generate([0, 1], [12, 12], [[], []])
    new_context = prompt(23, 7)
    engine.clear([0])
    engine.start([3], [jax.random.key(1)])
    engine.append([0, 3], [new_context, new_context])
    logits = np.asarray(engine.state.next_logits_sv)
    np.testing.assert_allclose(logits[0], logits[3], atol=1e-5, rtol=0)
    assert engine.lengths()[0] == engine.lengths()[3] == 23
    engine.start([0], [jax.random.key(9)])  # same key and counter for both slots again
    engine.start([3], [jax.random.key(9)])
    engine.append([0, 3], [new_context, new_context])
    a, b = engine.generate([0, 3], [12, 12], [[], []])
    np.testing.assert_array_equal(a.tokens, b.tokens)


def test_slot_samples_do_not_depend_on_other_slots(engine):
    """Decoding a slot alone or beside busy slots, with stop ids and budgets, gives the same tokens."""
    def run(slots):
        engine.start(slots, [jax.random.key(40 + s) for s in slots])
        engine.append(slots, [prompt(6 + 5 * s, s) for s in slots])
        return engine.generate(slots, [12] * len(slots), [[] for _ in slots])

    together = run([0, 1, 2, 3])
    for s in (0, 2):
        alone = run([s])[0]
        np.testing.assert_array_equal(alone.tokens, together[s].tokens)
        np.testing.assert_allclose(alone.logp, together[s].logp, atol=1e-5)
    # A stop id ends only its own slot; the stop token is the last one generated.
    stop = int(together[1].tokens[4])
    engine.start([0, 1], [jax.random.key(41), jax.random.key(41)])
    engine.append([0, 1], [prompt(11, 1)] * 2)
    stopped, free = engine.generate([0, 1], [12, 12], [[stop], []])
    assert stopped.stopped and not free.stopped
    assert stopped.tokens.tolist() == free.tokens.tolist()[:len(stopped.tokens)]
    assert stopped.tokens[-1] == stop and len(free.tokens) == 12


def test_decoding_a_few_slots_costs_their_bucket_and_leaves_the_others_alone(engine, model, monkeypatch):
    """One running slot decodes in the 1-slot bucket: its rows are gathered and scattered back,
    every other slot's cache, length, logits and counter stay bit for bit, and the compiled step
    costs a fraction of the all-slot one (of 16 slots: the tiny MoE's blocks are a fixed cost)."""
    engine.start([0, 1, 2, 3], [jax.random.key(60 + s) for s in range(4)])
    engine.append([0, 1, 2, 3], [prompt(7 + s, 60 + s) for s in range(4)])
    before = jax.tree.map(np.asarray, engine.state)
    lengths = engine.lengths()
    monkeypatch.setattr(engine, "_decode", lambda *a: pytest.fail("one running slot decoded every slot"))
    (g,) = engine.generate([2], [9], [[]])
    monkeypatch.undo()
    after = jax.tree.map(np.asarray, engine.state)
    others = np.array([0, 1, 3])
    for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(after)):
        np.testing.assert_array_equal(a[others], b[others])
    assert len(g.tokens) == 9 and engine.lengths()[2] == lengths[2] + 9
    assert after.cache.lengths_b[2] == lengths[2] + 9 and after.steps_s[2] == before.steps_s[2] + 9
    wide = RolloutEngine(*nnx.split(model), model.cfg, RolloutConfig(**{**ROLLOUT.__dict__, "slots": 16}),
                         valid_vocab=VALID)
    flops = {rows: wide.compile_decode(rows).cost_analysis()["flops"] for rows in (1, 16)}
    assert flops[1] < 0.25 * flops[16], flops


def test_context_past_the_window_is_an_error_and_budget_is_clamped(engine):
    engine.start([0], [jax.random.key(0)])
    with pytest.raises(ValueError, match="rollout.window=96"):
        engine.append([0], [prompt(97, 0)])
    engine.append([0], [prompt(90, 0)])
    assert len(engine.generate([0], [12], [[]])[0].tokens) == 6  # only 6 tokens of room left


def test_sampler_modes():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(64, 50)) * 3, jnp.float32)
    keys = jax.random.split(jax.random.key(0), 64)
    greedy, logp, lp_sampler = sample(logits, keys, jnp.float32(0), jnp.float32(1), jnp.int32(50))
    np.testing.assert_array_equal(greedy, np.argmax(logits, -1))
    np.testing.assert_array_equal(lp_sampler, 0.0)
    np.testing.assert_allclose(logp, np.max(jax.nn.log_softmax(logits), -1), atol=1e-6)
    nucleus, _, _ = sample(logits, keys, jnp.float32(1), jnp.float32(1e-6), jnp.int32(50))
    np.testing.assert_array_equal(nucleus, greedy)  # a tiny top_p keeps only the best token
    limited, _, _ = sample(logits, keys, jnp.float32(1), jnp.float32(1), jnp.int32(10))
    assert int(jnp.max(limited)) < 10


def test_sharded_engine_matches_unsharded(model, engine):
    mesh = make_mesh({"data": -1})
    rollout = RolloutConfig(**{**ROLLOUT.__dict__, "slots": 8})
    graphdef, params = create_sharded(model.cfg, mesh, seed=0)
    sharded = RolloutEngine(graphdef, params, model.cfg, rollout, valid_vocab=VALID, mesh=mesh)
    assert sharded.slot_buckets == [8]
    assert len(sharded.state.cache.k_bksh[0].sharding.device_set) == 8
    for e in (sharded, engine):
        e.start([1], [jax.random.key(5)])
        e.append([1], [prompt(13, 8)])
    a = sharded.generate([1], [12], [[]])[0]
    b = engine.generate([1], [12], [[]])[0]
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logp, b.logp, atol=1e-5)
    with pytest.raises(ConfigError, match="rollout.slots=4"):
        RolloutEngine(graphdef, params, model.cfg, ROLLOUT, mesh=mesh)


def test_rollout_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="rollout.top_p"):
        RolloutConfig.from_config({"top_p": 0.0})
    with pytest.raises(ConfigError, match="rollout.window"):
        RolloutConfig.from_config({"window": 100, "turn_budget": 64, "summary_budget": 64})
    with pytest.raises(ConfigError, match="rollout.bogus"):
        RolloutConfig.from_config({"bogus": 1})
    cfg = RolloutConfig.from_config(load_config("configs/tiny.py").rollout)
    assert cfg.prefill_buckets == (64, 256, 1024) and cfg.max_new_tokens == 256
