"""SFT trains only the policy's tokens and lowers their loss."""
import jax
import numpy as np
import pytest

from composer_jax.data.tokenizer import Tokenizer
from composer_jax.model.config import ModelConfig
from composer_jax.model.create import create_sharded
from composer_jax.rl import sft
from composer_jax.sharding import make_mesh
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import create_train_state
from configs.tiny import get_config
from environments.experts import Transcript


def transcript():
    return Transcript("t", "fix it", "sys", [("fix it", "<|tool_call|>{\"name\": \"submit\"}<|/tool_call|>")],
                      "ok", 1.0, {})


def test_transcript_sequence_masks_all_but_assistant_tokens():
    tok = Tokenizer.byte_level()
    s = sft.transcript_sequence(transcript(), tok)
    trained = s.tokens[s.loss_mask == 1]
    text = tok.decode(trained.tolist())
    assert text.startswith("<|tool_call|>") and text.endswith("<|end_of_turn|>")
    assert "sys" not in text and "fix it" not in text


def test_sft_lowers_loss_on_demonstrations():
    tok = Tokenizer.byte_level()
    c = get_config("test")
    c.mesh.data = -1
    mesh = make_mesh(c.mesh)
    cfg = ModelConfig.from_config(c.model)
    optim = dict(c.sft.optim, steps=12, lr=1e-2, warmup_steps=1)
    tx = make_optimizer(optim)
    graphdef, params = create_sharded(cfg, mesh, 0)
    state, _ = create_train_state(params, tx)
    seqs = [sft.transcript_sequence(transcript(), tok)] * 4
    with jax.set_mesh(mesh):
        state, hist = sft.train_sft(state, graphdef, tx, seqs, row_len=128, batch_rows=8, steps=12, seed=0)
    assert hist[-1]["loss"] < 0.6 * hist[0]["loss"]
    assert hist[0]["tokens"] == pytest.approx(4 * (len(seqs[0].tokens[seqs[0].loss_mask == 1]) - 0))
    assert np.isfinite(hist[-1]["grad_norm"])
