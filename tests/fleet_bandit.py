"""A tiny stand-in policy and learner for the RL schedulers: a softmax over `arms` logits.

It has what the schedulers care about and no model: samples drawn from fold_in(key, index)
with the sampler's log-prob recorded, and a policy-gradient step through the learner's own loss
(rl/losses.py policy_loss, truncated IS included), so a lagged sample is corrected exactly as
in the real learner. Rewards are fixed per arm: the best arm's probability must rise.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from composer_jax.fleet.async_rl import Sample
from composer_jax.rl.losses import LossConfig, policy_loss, tis_weight


def init_params(arms: int) -> jax.Array:
    return jnp.zeros((arms,), jnp.float32)


def sample_arms(params: jax.Array, indices: Sequence[int], seed: int = 0) -> list[tuple[int, float]]:
    """(arm, sampler log-prob) per sample index, drawn with the policy `params`."""
    logp_all = jax.nn.log_softmax(params)
    out = []
    for i in indices:
        arm = int(jax.random.categorical(jax.random.fold_in(jax.random.key(seed), i), params))
        out.append((arm, float(logp_all[arm])))
    return out


@functools.partial(jax.jit, static_argnames=("cfg", "lr"))
def _update(params, arms, logp_sampler, rewards, cfg: LossConfig, lr: float):
    adv = (rewards - rewards.mean())[:, None]
    mask = jnp.ones_like(adv)
    seq = jnp.arange(arms.shape[0])[:, None]
    sampler = logp_sampler[:, None]

    def loss_fn(p):
        logp = jax.nn.log_softmax(p)[arms][:, None]
        old = jax.lax.stop_gradient(logp)  # one update per batch: the policy before it is p
        loss, metrics = policy_loss(cfg, logp, old, sampler, adv, mask, seq)
        return loss, (metrics, tis_weight(old, sampler, cfg.tis_cap))

    (_, (metrics, weights)), grad = jax.value_and_grad(loss_fn, has_aux=True)(params)
    metrics = dict(metrics, is_weight_mean=weights.mean(), is_weight_max=weights.max())
    return params - lr * grad, metrics


def train_step(params, batch: list[Sample], *, rewards: Sequence[float], lr: float = 0.5,
               cfg: LossConfig = LossConfig()) -> tuple[jax.Array, dict[str, float]]:
    """One PG step on samples whose data is (arm, sampler log-prob); reward = rewards[arm]."""
    arms = np.array([s.data[0] for s in batch], np.int32)
    logp_sampler = np.array([s.data[1] for s in batch], np.float32)
    r = np.asarray(rewards, np.float32)[arms]
    params, metrics = _update(params, arms, logp_sampler, r, cfg, lr)
    return params, {k: float(v) for k, v in metrics.items()}
