"""SFT trains only the policy's tokens and lowers their loss."""
import jax
import jax.numpy as jnp
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


def test_embed_lr_scale_multiplies_only_the_vocabulary_rows_step():
    """sft.optim.embed_lr_scale: the embedding and output head take a larger step (to learn
    tokens a pretrained checkpoint never predicted); every other parameter moves as before, and
    the optimiser state is the same (an SFT checkpoint restores under RL's optimiser)."""
    c = get_config("test")
    c.model.tie_embeddings = False
    graphdef, params = create_sharded(ModelConfig.from_config(c.model), make_mesh(c.mesh), 0)
    tx = make_optimizer(c.sft.optim)
    rng = np.random.default_rng(0)
    batch = dict(tokens=jnp.asarray(rng.integers(0, c.model.vocab_size, (2, 16)), jnp.int32),
                 positions=jnp.tile(jnp.arange(16, dtype=jnp.int32), (2, 1)),
                 segment_ids=jnp.ones((2, 16), jnp.int32), loss_mask=jnp.ones((2, 16), jnp.float32))

    def run(scale):
        state, _ = create_train_state(params, tx)
        step = jax.jit(lambda s, b: sft.sft_step(graphdef, tx, s, b, scale))
        for _ in range(2):  # past the schedule's zero first step
            before = state.params
            state, _ = step(state, batch)
        return jax.tree.map(lambda a, b: b - a, before, state.params), state.opt_state

    (plain, plain_opt), (scaled, scaled_opt) = run(1.0), run(8.0)
    assert jax.tree.structure(plain_opt) == jax.tree.structure(scaled_opt)
    ratios = {jax.tree_util.keystr(path): float(jnp.max(jnp.abs(b)) / jnp.max(jnp.abs(a)))
              for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(plain), jax.tree.leaves(scaled))}
    vocab = {k for k in ratios if "embed_vd" in k or "lm_head_dv" in k}
    assert len(vocab) == 2, ratios
    assert all(abs(ratios[k] - 8.0) < 1e-3 for k in vocab), ratios
    assert all(abs(r - 1.0) < 1e-5 for k, r in ratios.items() if k not in vocab), ratios


def test_copy_drills_train_only_the_repeated_span_and_are_seeded():
    """rl/drills.py: [noise][marker span][noise][marker span]; the loss is on the second span,
    which repeats the tokens after the marker's first occurrence; no harness token is drawn."""
    from composer_jax.rl.drills import copy_drills

    tok = Tokenizer.byte_level()
    drills = copy_drills(tok, 64, seed=3)
    specials = set(tok.special_ids.values())
    for d in drills:
        n = int(d.loss_mask.sum())
        assert 2 <= n <= 8 and d.loss_mask[-n:].all() and not d.loss_mask[:-n].any()
        marker, span = d.tokens[-n - 1], d.tokens[-n:]
        earlier = d.tokens[:-n - 1]
        assert any(earlier[i] == marker and (earlier[i + 1:i + 1 + n] == span).all()
                   for i in range(len(earlier) - n))
        assert not specials & set(d.tokens.tolist())
    again = copy_drills(tok, 64, seed=3)
    assert all((a.tokens == b.tokens).all() for a, b in zip(drills, again))
    assert any(len(a.tokens) != len(b.tokens) for a, b in zip(drills, copy_drills(tok, 64, seed=4)))


@pytest.mark.slow
def test_sft_stops_once_target_streak_checks_in_a_row_reach_the_target_reward(tmp_path, monkeypatch):
    """sft.target_reward: the policy plays train tasks it was not shown every target_every steps
    from target_from (a real evaluation on its own engine) and SFT ends at the first check where
    target_streak checks in a row were at or above the target (a lone 0.6 between 0.2 and 0.4 does
    not end it at streak 2); its checkpoint is that step's. The check's reward is scripted here (a tiny
    policy scores 0 on everything), the rest is the real run."""
    from composer_jax.errors import ConfigError
    from composer_jax.rl import train

    c = get_config("test")
    c.rl.system_prompt = "Tools: read_file(path), submit()."  # byte-level ids: the env's manual fills the window
    c.rl.env_max_turns = 2
    c.rollout.update(window=768, max_turns=2, max_segments=1, turn_budget=16, summary_budget=16, slots=8,
                     prefill_buckets=(512,))
    c.sft.update(successful_only=False, demos=4, target_reward=0.5, target_tasks=2, target_every=2, target_from=2,
                 target_streak=2)
    c.sft.optim.update(steps=12)
    real, scripted, played = train.evaluate, iter([0.2, 0.6, 0.4, 0.7, 0.9]), []

    def evaluate(loop, ids, **kw):
        played.append(list(ids))
        return dict(real(loop, ids, **kw), reward=next(scripted))

    monkeypatch.setattr(train, "evaluate", evaluate)
    out = train.run_sft(c, tmp_path)
    demos = train.sample_ids(c.rl, "train", 4)
    assert out["steps"] == 10 and out["target_reached"] and [ch["step"] for ch in out["target_checks"]] == [2, 4, 6, 8, 10]
    assert out["target_warning"] is None  # crossed between two checks: the stop is near the target
    assert played[0] == played[1] and len(played[0]) == 2 and not set(played[0]) & set(demos)
    assert train.Checkpointer(tmp_path / "checkpoints", c, keep=1).all_steps() == [10]

    c.sft.target_from = 12
    with pytest.raises(ConfigError, match="target_from"):
        train.run_sft(c, tmp_path / "bad")
    c.sft.update(target_from=2, target_streak=0)
    with pytest.raises(ConfigError, match="target_streak >= 1 \\(is 0\\)"):
        train.run_sft(c, tmp_path / "bad")


def test_target_verdict_warns_when_the_stop_cannot_be_near_the_target():
    """A first check already at or above the target says nothing about where SFT crossed it (the
    policy may be far stronger than intended); a target never reached leaves the last step's policy.
    Both are flagged; a crossing between two checks is not."""
    from composer_jax.rl.train import streak_reached, target_verdict

    def checks(*rewards):
        return [dict(step=10 * (i + 1), reward=r, pass_rate=0.0) for i, r in enumerate(rewards)]

    assert target_verdict(checks(0.4, 0.6), 0.57, 20) == (True, None)
    reached, warning = target_verdict(checks(0.86), 0.57, 10)
    assert reached and "first check (step 10)" in warning and "sft.target_from" in warning
    reached, warning = target_verdict(checks(0.3, 0.5), 0.57, 20)
    assert not reached and "never reached" in warning and "best reward 0.500" in warning
    reached, warning = target_verdict([], 0.57, 5)
    assert not reached and "never reached" in warning
    # target_streak=2: a lone check over the target is not a stop; two in a row are
    reached, warning = target_verdict(checks(0.4, 0.6, 0.5), 0.57, 30, streak=2)
    assert not reached and "2 check(s) in a row" in warning and "best reward 0.600" in warning
    assert target_verdict(checks(0.4, 0.6, 0.7), 0.57, 30, streak=2) == (True, None)
    reached, warning = target_verdict(checks(0.7, 0.8), 0.57, 20, streak=2)
    assert reached and "first check (step 10)" in warning
    # sft.target_pass: the fraction reward credits the registers without the key (run 5's seed 1
    # met 0.57 two checks in a row at a pass rate of 0.06); a check counts only with both reached
    low_pass = [dict(step=10 * (i + 1), reward=r, pass_rate=p) for i, (r, p) in enumerate(
        [(0.6, 0.06), (0.57, 0.06), (0.8, 0.5), (0.7, 0.4), (0.9, 0.6), (0.85, 0.5)])]
    assert streak_reached(low_pass[:2], 0.57, 2) and not streak_reached(low_pass[:2], 0.57, 2, target_pass=0.5)
    reached, warning = target_verdict(low_pass[:4], 0.57, 40, streak=2, target_pass=0.5)
    assert not reached and "sft.target_pass=0.5" in warning and "pass 0.500" in warning
    assert target_verdict(low_pass, 0.57, 60, streak=2, target_pass=0.5) == (True, None)
    assert streak_reached(low_pass[4:], 0.0, 2, target_pass=0.5)  # the pass rate alone
    from composer_jax.errors import ConfigError
    from composer_jax.rl.config import SFTConfig

    c = get_config("test")
    c.sft.update(target_pass=1.5)
    with pytest.raises(ConfigError, match=r"sft.target_pass=1.5: must be in \[0, 1\]"):
        SFTConfig.from_config(c.sft)
    c.sft.update(target_pass=0.5, target_from=c.sft.optim.steps)  # the pass rate alone turns the checks on
    with pytest.raises(ConfigError, match="target_pass=0.5: needs .* 0 <= target_from < sft.optim.steps"):
        SFTConfig.from_config(c.sft)
