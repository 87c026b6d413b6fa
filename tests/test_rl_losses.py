"""Each loss against numbers worked out by hand (numpy), gradients included."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from composer_jax.rl.losses import LossConfig, policy_loss

# two sequences in one row: tokens 0-1 (seq 1), 2-3 (seq 2), column 4 padding
LOGP = np.array([[-1.0, -0.5, -2.0, -0.2, 0.0]], np.float32)
OLD = np.array([[-1.2, -0.5, -1.5, -0.9, 0.0]], np.float32)
ADV = np.array([[1.0, 1.0, -1.0, -1.0, 0.0]], np.float32)
MASK = np.array([[1, 1, 1, 1, 0]], np.float32)
SEQ = np.array([[1, 1, 2, 2, 0]], np.int32)


def run(cfg, logp=LOGP, sampler=OLD, ref=None):
    f = lambda lp: policy_loss(cfg, lp, OLD, sampler, ADV, MASK, SEQ, ref)
    (loss, m), g = jax.value_and_grad(f, has_aux=True)(jnp.asarray(logp))
    return float(loss), m, np.asarray(g)


def test_ppo_asymmetric_clip_token_mean_with_gradient():
    loss, m, g = run(LossConfig("ppo", clip_low=0.2, clip_high=0.28, tis_cap=0))
    r = np.exp(LOGP - OLD)[0, :4]  # [1.2214, 1, 0.6065, 2.0138]
    a = ADV[0, :4]
    clipped = np.clip(r, 0.8, 1.28)
    per = -np.minimum(r * a, clipped * a)  # [-1.2214, -1, 0.8 (clipped), 2.0138 (unclipped: pessimistic)]
    assert loss == pytest.approx(per.mean(), rel=1e-5)
    # gradient flows only where the unclipped branch is active: d/dlogp(-r a) = -r a / 4
    active = (r * a <= clipped * a)
    np.testing.assert_allclose(g[0, :4], np.where(active, -r * a / 4, 0.0), rtol=1e-5)
    assert g[0, 4] == 0
    assert float(m["clip_fraction"]) == pytest.approx(0.25)


def test_ppo_aggregations():
    r = np.exp(LOGP - OLD)[0, :4]
    per = -np.minimum(r * ADV[0, :4], np.clip(r, 0.8, 1.28) * ADV[0, :4])
    seq, _, _ = run(LossConfig("ppo", aggregation="seq_mean", tis_cap=0))
    assert seq == pytest.approx((per[:2].mean() + per[2:].mean()) / 2, rel=1e-5)
    const, _, _ = run(LossConfig("ppo", aggregation="constant", norm_constant=10.0, tis_cap=0))
    assert const == pytest.approx(per.sum() / 10.0, rel=1e-5)


def test_gspo_sequence_ratio_with_gradient():
    cfg = LossConfig("gspo", gspo_clip_low=0.5, gspo_clip_high=0.05, aggregation="seq_mean", tis_cap=0)
    loss, _, g = run(cfg)
    d = (LOGP - OLD)[0, :4]
    s1, s2 = np.exp(d[:2].mean()), np.exp(d[2:].mean())  # 1.1052 (A=+1), 0.7047 (A=-1)
    assert s1 > 1.05
    l1 = -1.05  # s1 clipped to 1.05: the clipped branch is the min, no gradient
    l2 = s2  # -min(-s2, -clip(s2)) with s2 inside [0.5, 1.05]
    assert loss == pytest.approx((l1 + l2) / 2, abs=1e-6)
    # d l2 / d logp_t = s2 * (1/2 tokens), then / 2 sequences
    np.testing.assert_allclose(g[0, :2], 0.0, atol=1e-7)
    np.testing.assert_allclose(g[0, 2:4], s2 / 4, rtol=1e-5)


def test_cispo_keeps_every_token_gradient():
    cfg = LossConfig("cispo", cispo_is_low=1.0, cispo_is_high=0.28, tis_cap=0)
    loss, m, g = run(cfg)
    r = np.exp(LOGP - OLD)[0, :4]
    w = np.clip(r, 0.0, 1.28)
    assert loss == pytest.approx(np.mean(-w * ADV[0, :4] * LOGP[0, :4]), rel=1e-5)
    np.testing.assert_allclose(g[0, :4], -w * ADV[0, :4] / 4, rtol=1e-5)  # clipped tokens keep gradient
    assert np.all(g[0, :4] != 0)


def test_truncated_importance_sampling_kl_and_entropy():
    sampler = OLD - np.array([[1.0, 0.0, -0.5, 0.0, 0.0]], np.float32)  # w = min(e^1, 2)=2, 1, e^-.5, 1
    cfg = LossConfig("ppo", tis_cap=2.0)
    loss, m, _ = run(cfg, sampler=sampler)
    r = np.exp(LOGP - OLD)[0, :4]
    per = -np.minimum(r * ADV[0, :4], np.clip(r, 0.8, 1.28) * ADV[0, :4])
    w = np.minimum(np.exp((OLD - sampler)[0, :4]), 2.0)
    assert loss == pytest.approx((per * w).mean(), rel=1e-5)
    assert float(m["tis_capped_fraction"]) == pytest.approx(0.25)
    # Mismatch is sampler vs the learner before the step (old); drift is old vs the current policy
    mismatch = (sampler - OLD)[0, :4]
    assert float(m["kl_sampler_learner_k1"]) == pytest.approx(mismatch.mean(), rel=1e-5)
    assert float(m["kl_sampler_learner_k3"]) == pytest.approx(np.mean(np.exp(-mismatch) + mismatch - 1), rel=1e-5)
    assert float(m["max_abs_logp_diff"]) == pytest.approx(1.0)
    drift = (OLD - LOGP)[0, :4]
    assert float(m["kl_old_new_k3"]) == pytest.approx(np.mean(np.exp(-drift) + drift - 1), rel=1e-4)
    ref = LOGP + 0.3
    loss_kl, m, _ = run(LossConfig("ppo", tis_cap=0, kl_coef=0.5, kl_estimator="k3"), ref=ref)
    k3 = np.exp(0.3) - 0.3 - 1
    assert loss_kl == pytest.approx(per.mean() + 0.5 * k3, rel=1e-5)
    assert float(m["kl_ref"]) == pytest.approx(k3, rel=1e-4)
    assert float(m["kl_sampler_learner_k1"]) == 0.0 and float(m["max_abs_logp_diff"]) == 0.0  # sampler == old
    ent = jnp.full((1, 5), 2.0)
    l_ent, _ = policy_loss(LossConfig("ppo", tis_cap=0, entropy_coef=0.1), LOGP, OLD, OLD, ADV, MASK, SEQ,
                           entropy_bt=ent)
    assert float(l_ent) == pytest.approx(per.mean() - 0.2, rel=1e-5)


def test_unknown_loss_is_a_config_error():
    from composer_jax.errors import ConfigError
    with pytest.raises(ConfigError, match="rl.loss.name"):
        LossConfig.from_config({"name": "reinforce++"})
