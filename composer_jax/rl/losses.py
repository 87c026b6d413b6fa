"""Policy-gradient losses over packed, target-aligned token arrays; one registry.

    ppo    -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), r = exp(logp - old)   (DAPO clip-higher)
    gspo   the same on one ratio per sequence, s = exp(mean_t(logp - old))         (GSPO)
    cispo  -sg(clip(r, 1 - is_low, 1 + is_high)) A logp: every token keeps its gradient (CISPO)

Every per-token loss is multiplied by the truncated importance weight min(exp(old - sampler), C)
(detached; corrects the sampler/learner mismatch), then gets `kl_coef * KL(learner || ref)`
(k1 or k3) added and `entropy_coef * entropy` subtracted, and is reduced by one aggregation:
    token_mean      sum(loss) / tokens
    seq_mean        mean over sequences of each sequence's token mean
    constant        sum(loss) / norm_constant   (Dr.GRPO: no length normalisation)
Arrays: [rows, len]; `seq_bt` numbers every token's sequence uniquely in the batch (row * len +
segment id); `mask_bt` is 1 on trained tokens.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from composer_jax.errors import ConfigError, check_field_types, reject_unknown_fields


@dataclasses.dataclass(frozen=True)
class LossConfig:
    name: str = "ppo"  # ppo | gspo | cispo
    clip_low: float = 0.2
    clip_high: float = 0.28
    gspo_clip_low: float = 3e-4
    gspo_clip_high: float = 4e-4
    cispo_is_low: float = 1.0  # 1.0: no lower clip of the IS weight
    cispo_is_high: float = 0.28
    aggregation: str = "token_mean"  # token_mean | seq_mean | constant
    norm_constant: float = 1024.0  # the `constant` aggregation's divisor
    tis_cap: float = 2.0  # truncated IS cap C; 0 disables the correction
    kl_coef: float = 0.0
    kl_estimator: str = "k3"  # k1 | k3
    entropy_coef: float = 0.0

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> LossConfig:
        values = dict(cfg)
        reject_unknown_fields(cls, values, "rl.loss")
        check_field_types(cls, values, "rl.loss")
        out = cls(**values)
        if out.name not in LOSSES:
            raise ConfigError(f"rl.loss.name={out.name!r}: unknown; use one of {sorted(LOSSES)}")
        if out.aggregation not in AGGREGATIONS:
            raise ConfigError(f"rl.loss.aggregation={out.aggregation!r}: use one of {sorted(AGGREGATIONS)}")
        if out.kl_estimator not in ("k1", "k3"):
            raise ConfigError(f"rl.loss.kl_estimator={out.kl_estimator!r}: use k1 or k3")
        return out


def _seq_sum(x_bt, seq_bt):
    return jax.ops.segment_sum(x_bt.reshape(-1), seq_bt.reshape(-1), num_segments=seq_bt.size)


def _seq_gather(x_s, seq_bt):
    return x_s[seq_bt]


def ppo_tokens(logp_bt, old_bt, adv_bt, mask_bt, seq_bt, cfg: LossConfig):
    ratio = jnp.exp(logp_bt - old_bt)
    clipped = jnp.clip(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high)
    loss = -jnp.minimum(ratio * adv_bt, clipped * adv_bt)
    return loss, (clipped * adv_bt < ratio * adv_bt)


def gspo_tokens(logp_bt, old_bt, adv_bt, mask_bt, seq_bt, cfg: LossConfig):
    n_s = _seq_sum(mask_bt, seq_bt)
    log_s = _seq_sum((logp_bt - old_bt) * mask_bt, seq_bt) / jnp.maximum(n_s, 1.0)
    s_bt = jnp.exp(_seq_gather(log_s, seq_bt))
    clipped = jnp.clip(s_bt, 1.0 - cfg.gspo_clip_low, 1.0 + cfg.gspo_clip_high)
    loss = -jnp.minimum(s_bt * adv_bt, clipped * adv_bt)
    return loss, (clipped * adv_bt < s_bt * adv_bt)


def cispo_tokens(logp_bt, old_bt, adv_bt, mask_bt, seq_bt, cfg: LossConfig):
    ratio = jnp.exp(logp_bt - old_bt)
    weight = jnp.clip(ratio, 1.0 - cfg.cispo_is_low, 1.0 + cfg.cispo_is_high)
    loss = -jax.lax.stop_gradient(weight) * adv_bt * logp_bt
    return loss, weight != ratio


LOSSES: dict[str, Callable] = {"ppo": ppo_tokens, "gspo": gspo_tokens, "cispo": cispo_tokens}


def token_mean(loss_bt, mask_bt, seq_bt, cfg):
    return jnp.sum(loss_bt * mask_bt) / jnp.maximum(jnp.sum(mask_bt), 1.0)


def seq_mean(loss_bt, mask_bt, seq_bt, cfg):
    n_s = _seq_sum(mask_bt, seq_bt)
    per_seq = _seq_sum(loss_bt * mask_bt, seq_bt) / jnp.maximum(n_s, 1.0)
    return jnp.sum(per_seq) / jnp.maximum(jnp.sum(n_s > 0), 1.0)


def constant(loss_bt, mask_bt, seq_bt, cfg):
    return jnp.sum(loss_bt * mask_bt) / cfg.norm_constant


AGGREGATIONS: dict[str, Callable] = {"token_mean": token_mean, "seq_mean": seq_mean, "constant": constant}


def kl_penalty(logp_bt, ref_bt, estimator: str):
    d = ref_bt - logp_bt
    return -d if estimator == "k1" else jnp.exp(d) - d - 1.0


def tis_weight(old_bt, sampler_bt, cap: float):
    """min(exp(old - sampler), C), detached: 1 when the correction is off."""
    if cap <= 0:
        return jnp.ones_like(old_bt)
    return jax.lax.stop_gradient(jnp.minimum(jnp.exp(old_bt - sampler_bt), cap))


def policy_loss(cfg: LossConfig, logp_bt, old_bt, sampler_bt, adv_bt, mask_bt, seq_bt,
                ref_bt=None, entropy_bt=None):
    """(scalar loss, diagnostics). `old_bt` (the policy before this step's updates) and
    `sampler_bt` are constants; `logp_bt` carries the gradient."""
    old_bt, sampler_bt = jax.lax.stop_gradient(old_bt), jax.lax.stop_gradient(sampler_bt)
    mask_bt = mask_bt.astype(jnp.float32)
    loss_bt, clipped_bt = LOSSES[cfg.name](logp_bt, old_bt, adv_bt, mask_bt, seq_bt, cfg)
    w_bt = tis_weight(old_bt, sampler_bt, cfg.tis_cap)
    loss_bt = loss_bt * w_bt
    n = jnp.maximum(jnp.sum(mask_bt), 1.0)
    masked_mean = lambda x: jnp.sum(x * mask_bt) / n
    metrics = {}
    if cfg.kl_coef > 0:
        if ref_bt is None:
            raise ValueError("rl.loss.kl_coef > 0 needs reference log-probs")
        kl_bt = kl_penalty(logp_bt, jax.lax.stop_gradient(ref_bt), cfg.kl_estimator)
        loss_bt = loss_bt + cfg.kl_coef * kl_bt
        metrics["kl_ref"] = masked_mean(kl_bt)
    if cfg.entropy_coef > 0:
        loss_bt = loss_bt - cfg.entropy_coef * entropy_bt
    loss = AGGREGATIONS[cfg.aggregation](loss_bt, mask_bt, seq_bt, cfg)
    # Sampler vs the learner before this step's updates (numerics, routing, async lag): against
    # the updated policy, a later minibatch would count the step's own updates as mismatch (on
    # Qwen-0.5B: 0.41 nats after four lr-1e-6 updates, 1.8e-5 before any). Reads 0 unless
    # rl.recompute_old_logp, as old is then the sampler's.
    d = sampler_bt - old_bt
    drift = old_bt - jax.lax.stop_gradient(logp_bt)  # what this step's updates have moved so far
    metrics.update(
        pg_loss=loss,
        clip_fraction=masked_mean(clipped_bt.astype(jnp.float32)),
        ratio_mean=masked_mean(jax.lax.stop_gradient(jnp.exp(logp_bt - old_bt))),
        kl_sampler_learner_k1=masked_mean(d),
        kl_sampler_learner_k3=masked_mean(jnp.exp(-d) + d - 1.0),
        max_abs_logp_diff=jnp.max(jnp.abs(d) * mask_bt),
        kl_old_new_k3=masked_mean(jnp.exp(-drift) + drift - 1.0),
        tis_capped_fraction=masked_mean((w_bt >= cfg.tis_cap).astype(jnp.float32)) if cfg.tis_cap > 0
        else jnp.zeros(()),
        trained_tokens=jnp.sum(mask_bt))
    if entropy_bt is not None:
        metrics["entropy"] = masked_mean(jax.lax.stop_gradient(entropy_bt))
    return loss, metrics
