"""SFT on scripted-expert demonstrations: the bridge from the mid-trained model to RL.

Demonstrations are episodes of a scripted policy played through the real agent loop in
teacher-forced mode (environments/scripted.py, chosen by each suite), so they carry exactly the token layout RL will see,
context resets and summaries included; expert transcripts (environments/experts.py) convert
too. Both pack into the RL learner's rows (rl/segments.py) and train with cross-entropy on the
policy's tokens only (assistant actions and summaries; prompts and observations masked).
"""
from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from composer_jax.harness.protocol import encode_conversation
from composer_jax.rl import segments
from composer_jax.rl.learner import learner_logp
from composer_jax.rl.trajectory import Episode
from composer_jax.train.step import TrainState
from composer_jax.train.update import jit_update, update


def demo_sequences(episodes: Sequence[Episode], *, successful_only: bool = True) -> list[segments.TrainSeq]:
    """Every segment of every (successful) demonstration, policy tokens masked in. With
    `successful_only=False` failed ones too: cloning an imperfect demonstrator as it is."""
    out = []
    for ep in episodes:
        if successful_only and ep.reward < 1.0:
            continue
        out += segments.episode_sequences(ep, 1.0)
    return out


def transcript_sequence(transcript, tokenizer) -> segments.TrainSeq:
    """An expert `Transcript` (no context resets) as one sequence: assistant turns trained."""
    ids, mask = encode_conversation(transcript.messages(), tokenizer)
    return segments.TrainSeq(np.asarray(ids, np.int32), np.asarray(mask, np.float32),
                             np.zeros(len(ids), np.float32), 1.0)


def sft_loss(params, buffers, graphdef, batch):
    model = nnx.merge(graphdef, params, buffers)
    logp_bt, _, _ = learner_logp(model, batch, 1.0, replay=False)
    mask = batch["loss_mask"]
    n = jnp.maximum(jnp.sum(mask), 1.0)
    nll = -jnp.sum(logp_bt * mask) / n
    accuracy_proxy = jnp.sum(jnp.exp(logp_bt) * mask) / n  # mean P(target) on trained tokens
    return nll, dict(loss=nll, mean_target_prob=accuracy_proxy, tokens=jnp.sum(mask))


def sft_step(graphdef, tx, state: TrainState, batch, embed_lr_scale: float = 1.0):
    return update(lambda params, b: sft_loss(params, state.buffers, graphdef, b), tx, state, batch,
                  embed_lr_scale=embed_lr_scale)


def make_sft_step(graphdef, tx, embed_lr_scale: float = 1.0):
    return jit_update(lambda state, batch: sft_step(graphdef, tx, state, batch, embed_lr_scale))


def train_sft(state: TrainState, graphdef, tx, seqs: Sequence[segments.TrainSeq], *, row_len: int,
              batch_rows: int, steps: int, seed: int, put=jnp.asarray, log=None,
              embed_lr_scale: float = 1.0, stop=None) -> tuple[TrainState, list[dict]]:
    """`steps` updates over minibatches of packed rows, reshuffled every pass (seeded);
    `embed_lr_scale` multiplies the embedding's and head's step (train/optim.py). `stop(step,
    state)`: called after each update; True ends training there (len(history) updates done)."""
    keys = ("tokens", "positions", "segment_ids", "loss_mask")
    rows = segments.pack(list(seqs), row_len, row_multiple=batch_rows)
    step_fn = make_sft_step(graphdef, tx, embed_lr_scale)
    history, order, cursor, epoch = [], np.arange(0), 0, 0
    for step in range(steps):
        if cursor + batch_rows > len(order):
            order, cursor = np.random.default_rng([seed, epoch]).permutation(rows.rows), 0
            epoch += 1
        batch = rows.take(order[cursor:cursor + batch_rows])
        cursor += batch_rows
        state, m = step_fn(state, {k: put(batch[k]) for k in keys})
        m = {k: float(v) for k, v in jax.device_get(m).items()}
        if not np.isfinite(m["loss"]):
            raise FloatingPointError(f"SFT step {step}: non-finite loss {m['loss']}; lower rl.sft.lr")
        history.append(m)
        if log is not None:
            log(step, m)
        if stop is not None and stop(step, state):
            break
    return state, history
