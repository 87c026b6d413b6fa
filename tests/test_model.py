"""Model correctness: MoE paths agree, packing isolates documents, the KV cache is exact,
and every mesh shape computes the same numbers."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from configs.tiny import get_config
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, RouterBias, Transformer, init_cache
from composer_jax.model.moe import bias_update, capacity_keep_mask
from composer_jax.sharding import check_divisibility, make_mesh


def small_cfg(**overrides) -> ModelConfig:
    c = get_config("test").model
    c.update(overrides)
    return ModelConfig.from_config(c)


def tokens(shape, vocab, seed=0):
    return jax.random.randint(jax.random.key(seed), shape, 0, vocab)


@pytest.mark.parametrize("fast_impl", ["ragged", "blocked"])
def test_fast_moe_paths_agree_with_dense_reference_forward_and_grad(fast_impl):
    """Same weights; the sparse dispatch must equal every-expert-on-every-token."""
    ragged = Transformer(small_cfg(moe_impl=fast_impl), rngs=nnx.Rngs(1))
    dense = Transformer(small_cfg(moe_impl="dense"), rngs=nnx.Rngs(1))
    toks = tokens((2, 24), ragged.cfg.vocab_size)

    def loss(model):
        logits, aux = model(toks)
        return jnp.mean(jax.nn.log_softmax(logits)[..., 0]) + aux["load_balance_loss"], logits

    (l_r, logits_r), g_r = nnx.value_and_grad(loss, has_aux=True)(ragged)
    (l_d, logits_d), g_d = nnx.value_and_grad(loss, has_aux=True)(dense)
    np.testing.assert_allclose(logits_r, logits_d, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(l_r, l_d, atol=1e-6)
    for a, b in zip(jax.tree.leaves(g_r), jax.tree.leaves(g_d)):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("fast_impl", ["ragged", "blocked"])
def test_capacity_factor_drops_tokens_identically_in_both_paths(fast_impl):
    cfg_r = small_cfg(moe_impl=fast_impl, capacity_factor=0.5)
    cfg_d = small_cfg(moe_impl="dense", capacity_factor=0.5)
    toks = tokens((2, 32), cfg_r.vocab_size, seed=3)
    logits_r, aux_r = Transformer(cfg_r, rngs=nnx.Rngs(2))(toks)
    logits_d, aux_d = Transformer(cfg_d, rngs=nnx.Rngs(2))(toks)
    assert float(aux_r["dropped_fraction"]) > 0.3  # half capacity must drop a lot
    np.testing.assert_allclose(aux_r["dropped_fraction"], aux_d["dropped_fraction"])
    np.testing.assert_allclose(logits_r, logits_d, atol=1e-5, rtol=1e-5)
    dropless, _ = Transformer(small_cfg(), rngs=nnx.Rngs(2))(toks)
    assert not np.allclose(dropless, logits_r, atol=1e-4)


def test_capacity_mask_serves_first_choices_first():
    expert_tk = jnp.array([[0, 1], [0, 1], [0, 2]])  # expert 0 is everyone's first choice
    keep = capacity_keep_mask(expert_tk, n_experts=3, capacity=2)
    np.testing.assert_array_equal(keep, [[True, True], [True, True], [False, True]])


@pytest.mark.parametrize("token_shift", [0, 3])
def test_packed_rows_never_attend_across_documents(token_shift):
    """Also: token shift never reads the previous document's last token."""
    cfg = small_cfg(token_shift=token_shift)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    doc_a, doc_b = tokens((1, 10), cfg.vocab_size, 1), tokens((1, 14), cfg.vocab_size, 2)
    packed = jnp.concatenate([doc_a, doc_b], axis=1)
    segments = jnp.array([[1] * 10 + [2] * 14])
    positions = jnp.array([list(range(10)) + list(range(14))])
    logits_packed, _ = model(packed, positions, segments)
    logits_a, _ = model(doc_a)
    logits_b, _ = model(doc_b)
    np.testing.assert_allclose(logits_packed[:, :10], logits_a, atol=1e-5)
    np.testing.assert_allclose(logits_packed[:, 10:], logits_b, atol=1e-5)


@pytest.mark.parametrize("variant", [dict(), dict(n_experts=0, first_dense_layers=2, qkv_bias=True,
                                                 tie_embeddings=False, rope_base=1e6),
                                     dict(token_shift=3)])
def test_kv_cache_decoding_equals_full_forward(variant):
    """Rows of different prompt lengths: prefill (padded), then one-token decode steps."""
    cfg = small_cfg(**variant)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    full = tokens((3, 20), cfg.vocab_size, seed=5)
    prompt_lens = jnp.array([4, 9, 7])
    full_logits, _ = model(full)

    cache = init_cache(cfg, batch=3, max_len=32)
    prefill_logits, cache, _ = model.extend(full[:, :9], cache, n_new_b=prompt_lens)
    for b, n in enumerate(prompt_lens.tolist()):
        np.testing.assert_allclose(prefill_logits[b, :n], full_logits[b, :n], atol=1e-5, rtol=1e-5)
    step = jax.jit(lambda m, t, c: m.extend(t, c)[:2])
    for _ in range(8):
        next_tok = full[jnp.arange(3), cache.lengths_b][:, None]
        logits, cache = step(model, next_tok, cache)
        pos = cache.lengths_b - 1
        np.testing.assert_allclose(logits[:, 0], full_logits[jnp.arange(3), pos], atol=1e-5, rtol=1e-5)


def test_router_bias_is_not_a_param_and_balances_load():
    model = Transformer(small_cfg(), rngs=nnx.Rngs(0))
    params = nnx.state(model, nnx.Param)
    biases = nnx.state(model, RouterBias)
    assert len(jax.tree.leaves(biases)) == model.cfg.n_moe_layers
    assert not any("router_bias" in str(path) for path, _ in jax.tree_util.tree_leaves_with_path(params))
    counts = jnp.array([10.0, 2.0, 6.0, 6.0])
    new = bias_update(jnp.zeros(4), counts, rate=0.1)
    np.testing.assert_allclose(new, [-0.1, 0.1, 0.0, 0.0])


@pytest.mark.parametrize("overrides, field", [
    (dict(n_heads=3), "model.n_heads"),
    (dict(token_shift=-1), "model.token_shift"),
    (dict(top_k=9), "model.top_k"),
    (dict(router_score="relu"), "model.router_score"),
    (dict(head_dim=15), "model.head_dim"),
    (dict(bogus=1), "model.bogus"),
])
def test_impossible_model_configs_name_the_field(overrides, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        small_cfg(**overrides)


def test_mesh_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"mesh: .* uses 6 devices but 8"):
        make_mesh(dict(data=3, fsdp=2, expert=1, tensor=1))
    with pytest.raises(ConfigError, match=r"mesh\.data=-1"):
        make_mesh(dict(data=-1, fsdp=3, expert=1, tensor=1))
    mesh = make_mesh(dict(data=1, fsdp=1, expert=8, tensor=1))
    with pytest.raises(ConfigError, match=r"model\.n_experts=4 .*mesh\.expert=8"):
        check_divisibility(small_cfg(n_experts=4), mesh)
    mesh = make_mesh(dict(data=1, fsdp=1, expert=1, tensor=8))
    with pytest.raises(ConfigError, match=r"model\.n_heads=4 .*mesh\.tensor=8"):
        check_divisibility(small_cfg(), mesh)


@pytest.mark.parametrize("remat", ["full", "save_dots_except_mlp"])
def test_remat_train_step_equals_no_remat_on_the_moe(remat):
    """The real train step (params traced, the router bias a buffer) under each remat policy:
    same loss, gradients and updated parameters as without remat."""
    from composer_jax.train.optim import make_optimizer
    from composer_jax.train.step import init_train_state, make_train_step

    def step(policy):
        config = get_config("test")
        config.model.remat = policy
        cfg = ModelConfig.from_config(config.model)
        _, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
        tx = make_optimizer(config.train)
        toks = tokens((2, 16), cfg.vocab_size, seed=5)
        batch = dict(tokens=toks, segment_ids=jnp.ones_like(toks),
                     positions=jnp.broadcast_to(jnp.arange(16), toks.shape))
        graphdef = nnx.graphdef(Transformer(cfg, rngs=nnx.Rngs(0)))
        train_state, metrics = make_train_step(graphdef, tx, cfg, config.train)(
            init_train_state(state, tx), batch)
        return jax.device_get(metrics), jax.device_get(train_state.params)

    (m_ref, p_ref), (m, p) = step("none"), step(remat)
    np.testing.assert_allclose(m["loss"], m_ref["loss"], rtol=1e-6)
    np.testing.assert_allclose(m["grad_norm"], m_ref["grad_norm"], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(p), jax.tree.leaves(p_ref)):
        np.testing.assert_allclose(a, b, atol=1e-6)
