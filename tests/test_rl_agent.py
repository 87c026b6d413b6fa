"""Agent loop: continuous batching, self-summarisation on LongHorizon, and bad input."""
import dataclasses

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tokenizers
from flax import nnx
from tokenizers import decoders, models, pre_tokenizers

import environments  # noqa: F401 - registers the environments
from composer_jax.checkpoints.chat_template import CHATML
from composer_jax.config_loading import load_config
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.errors import ConfigError
from composer_jax.harness import special_tokens as st
from composer_jax.harness.protocol import Message, ToolCallError, encode_message, parse_tool_call
from composer_jax.model import ModelConfig, Transformer
from composer_jax.rl.agent import AgentLoop
from composer_jax.rl.engine_host import RolloutEngine, TeacherForcedOnly
from composer_jax.rl.rollout_config import RolloutConfig
from environments.scripted import ExpertPolicy, NoteChainPolicy
from composer_jax.rl.summarize import SpecialIds
from composer_jax.rl.trajectory import SEGMENT_END_REASONS

TOY = RolloutConfig(window=512, summary_budget=16, turn_budget=8, slots=4, max_segments=4,
                    max_turns=6, prefill_buckets=(32, 256), temperature=1.0)
LONG = RolloutConfig(window=3072, summary_budget=192, turn_budget=512, slots=2, max_segments=40,
                     max_turns=80, prefill_buckets=(64, 256))


class ToyEnv(gym.Env):
    """Ends after `turns` steps; options make it raise or return huge prompts or observations."""

    def reset(self, *, seed=None, options=None):
        o = dict(options or {})
        self.turn, self.turns = 0, o.get("turns", 3)
        self.obs_chars, self.raise_at = o.get("obs_chars", 0), o.get("raise_at")
        self.obs_text = o.get("obs_text", "")
        if o.get("raise_on_reset"):
            raise RuntimeError("no sandbox")
        prompt = "Do the thing." + "y" * o.get("prompt_chars", 0)
        return prompt, {"task_id": f"toy-{seed}", "system_prompt": "You are a test agent."}

    def step(self, action):
        self.turn += 1
        if self.turn == self.raise_at:
            raise RuntimeError("sandbox died")
        call = parse_tool_call(action)
        obs = call.observation() if isinstance(call, ToolCallError) else "ok"
        done = self.turn >= self.turns
        obs += "z" * self.obs_chars + self.obs_text
        return obs, float(done), done, False, {"tool": "submit" if done else None}


@pytest.fixture(scope="module")
def tokenizer():
    return Tokenizer.byte_level()


@pytest.fixture(scope="module")
def model_parts():
    cfg = ModelConfig.from_config(load_config("configs/tiny.py:test").model)
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    return cfg, graphdef, params


@pytest.fixture(scope="module")
def toy_engine(model_parts, tokenizer):
    cfg, graphdef, params = model_parts
    return RolloutEngine(graphdef, params, cfg, TOY, valid_vocab=tokenizer.vocab_size)


@pytest.fixture(scope="module")
def long_engine(model_parts, tokenizer):
    cfg, graphdef, params = model_parts
    return RolloutEngine(graphdef, params, cfg, LONG, valid_vocab=tokenizer.vocab_size)


def check_ended(episodes):
    for ep in episodes:
        assert ep.end_reason in SEGMENT_END_REASONS
        assert all(s.end_reason == "summary_reset" for s in ep.segments[:-1])
        assert ep.segments[-1].end_reason == ep.end_reason


def test_continuous_batching_equals_each_episode_alone(toy_engine, tokenizer):
    """Five episodes of different lengths in four slots (slots refill as episodes end) give the
    same token streams and log-probs as running each one alone. Turns hit the budget, summaries
    overflow: the model is random."""
    tasks = [{"seed": i, "options": {"turns": t}} for i, t in enumerate([5, 1, 3, 2, 4])]
    loop = AgentLoop(toy_engine, tokenizer, TOY, ToyEnv)
    together = loop.run(tasks)
    alone = [loop.run([task], episode_ids=[i])[0] for i, task in enumerate(tasks[:3])]
    for a, b in zip(alone, together):
        assert len(a.segments) == len(b.segments)
        for sa, sb in zip(a.segments, b.segments):
            assert sa.all_tokens == sb.all_tokens and sa.loss_mask == sb.loss_mask
            np.testing.assert_allclose(sa.logp, sb.logp, atol=1e-5)
    check_ended(together)
    assert [ep.turns for ep in together] == [5, 1, 3, 2, 4]
    assert [ep.end_reason for ep in together] == ["submit"] * 5
    long = together[0]
    assert len(long.segments) >= 2 and "summary_overflow" in long.flags and "turn_truncated" in long.flags
    summary = long.segments[0].turns[-1]
    assert summary.kind == "summary" and summary.end_reason == "budget"
    assert summary.end - summary.start == TOY.summary_budget
    # The cut summary opens the next segment as generated ids, closed by the harness.
    body = long.segments[0].tokens[summary.start:summary.end]
    assert long.segments[1].prompt[-len(body) - 2:-2] == body


def test_recorded_logprobs_match_a_full_forward_over_each_segment(toy_engine, tokenizer, model_parts):
    _, graphdef, params = model_parts
    model = nnx.merge(graphdef, params)
    ep = AgentLoop(toy_engine, tokenizer, TOY, ToyEnv).run([{"seed": 3, "options": {"turns": 4}}])[0]
    assert len(ep.segments) >= 2
    for seg in ep.segments:
        tokens = seg.all_tokens
        padded = tokens + [0] * (TOY.window - len(tokens))  # one shape, one compile; causal
        logits, _ = model(jnp.asarray([padded]))
        logp = np.asarray(jax.nn.log_softmax(logits[0] / TOY.temperature)[jnp.arange(len(tokens) - 1),
                                                                        jnp.asarray(tokens[1:])])
        mask = np.asarray(seg.loss_mask, bool)
        assert mask.sum() > 0 and seg.all_experts().shape[0] == len(tokens)
        np.testing.assert_allclose(np.asarray(seg.logp)[mask], logp[len(seg.prompt) - 1:][mask], atol=2e-5)


def test_bad_inputs_end_or_flag_episodes_and_the_batch_goes_on(toy_engine, tokenizer, capsys):
    tasks = [
        {"seed": 0, "options": {"turns": 3, "obs_chars": 3000}},  # observations larger than the window
        {"seed": 1, "options": {"turns": 5, "raise_at": 2}},  # env raises mid-episode
        {"seed": 2, "options": {"raise_on_reset": True}},  # env raises at reset
        {"seed": 3, "options": {"turns": 2}},
        {"seed": 4, "options": {"turns": 50}},  # longer than rollout.max_turns
    ]
    loop = AgentLoop(toy_engine, tokenizer, TOY, ToyEnv)
    huge, broken, no_reset, fine, endless = loop.run(tasks, progress="bad inputs")
    check_ended([huge, broken, no_reset, fine, endless])
    assert "bad inputs: 100%" in capsys.readouterr().err  # the bar counts failed episodes too
    assert "observation_truncated" in huge.flags and huge.end_reason in ("submit", "max_segments")
    assert max(s.context_len for s in huge.segments) <= TOY.window
    assert broken.end_reason == "env_error" and "sandbox died" in broken.info["error"] and broken.turns == 2
    assert no_reset.end_reason == "env_error" and "no sandbox" in no_reset.info["error"]
    assert fine.end_reason == "submit" and fine.reward == 1.0
    assert endless.end_reason in ("max_turns", "max_segments")
    # Unclosed tool calls: each turn hit its budget and came back as an error observation.
    first = fine.segments[0]
    assert first.turns[0].end_reason == "budget" and "turn_truncated" in fine.flags
    assert "Error (" in tokenizer.decode(first.tokens[first.turns[0].end:])
    assert 0 <= loop.stats["env_fraction"] < 1


def test_an_observation_the_tokenizer_rejects_ends_only_its_episode(toy_engine, tokenizer):
    """A lone surrogate makes the tokenizer raise TypeError inside the episode: that episode is
    an env_error and its env is replaced; the batch goes on."""
    made = []

    def make_env():
        made.append(ToyEnv())
        return made[-1]

    tasks = [{"seed": 0, "options": {"turns": 3, "obs_text": "bad\udcff.py"}},
             *({"seed": i, "options": {"turns": 2}} for i in range(1, 5))]
    bad, *fine = AgentLoop(toy_engine, tokenizer, TOY, make_env).run(tasks)
    check_ended([bad, *fine])
    assert bad.end_reason == "env_error" and bad.info["error"].startswith("TypeError") and bad.turns == 1
    assert [ep.end_reason for ep in fine] == ["submit"] * 4
    assert len(made) == TOY.slots + 1  # the fifth task ran in a fresh env, not the broken one


def test_a_prompt_too_long_is_counted_every_prompt_too_long_is_a_config_error(toy_engine, tokenizer):
    loop = AgentLoop(toy_engine, tokenizer, TOY, ToyEnv)
    long_task = {"seed": 0, "options": {"prompt_chars": TOY.window}}
    too_long, fine = loop.run([long_task, {"seed": 1, "options": {"turns": 1}}])
    assert too_long.end_reason == "prompt_too_long" and fine.end_reason == "submit"
    # Otherwise RL would run steps with nothing to train on (seen: five no-op Qwen steps)
    with pytest.raises(ConfigError, match=r"rollout.window: all 2 prompts \(5\d\d-5\d\d tokens\)"):
        loop.run([long_task, dict(long_task, seed=2)])


class LongSummary:
    """Scripted policy whose summary runs far past the budget after the facts."""

    def __init__(self, env):
        self.inner = NoteChainPolicy(env)

    def act(self, context):
        return self.inner.act(context)

    def summarize(self, context):
        return self.inner.summarize(context) + "\n" + "word " * 500


def longhorizon_env(**suite):
    return lambda: gym.make("composer/LongHorizon-v0", split="validation", max_turns=LONG.max_turns,
                            suite_options=dict(validation_size=4, **suite))


def test_longhorizon_summaries_carry_the_facts_across_resets(long_engine, tokenizer):
    """The note-chain policy sees only its context: with summaries that carry the key and
    fragments it solves the task over several segments; with summaries that drop them it fails."""
    tasks = [{"options": {"task_index": 0}}, {"options": {"task_index": 1}}]
    carry = AgentLoop(long_engine, tokenizer, LONG, longhorizon_env(hops=4, filler_lines=4),
                      make_policy=NoteChainPolicy).run(tasks)
    forget = AgentLoop(long_engine, tokenizer, LONG, longhorizon_env(hops=4, filler_lines=4),
                       make_policy=lambda env: NoteChainPolicy(env, carry_facts=False)).run(tasks)
    check_ended(carry + forget)
    for ep in carry:
        assert ep.reward == 1.0 and ep.end_reason == "submit" and not ep.flags, (ep.flags, ep.info)
        assert len(ep.segments) >= 3
        assert max(s.context_len for s in ep.segments) <= LONG.window
        assert sum(t.kind == "summary" for s in ep.segments for t in s.turns) == len(ep.segments) - 1
        # Summaries are policy tokens (trained), and the next segment's prompt carries them.
        seg = ep.segments[0]
        summary = seg.turns[-1]
        assert summary.kind == "summary" and all(seg.loss_mask[summary.start:summary.end])
    assert all(ep.reward == 0.0 and ep.end_reason == "submit" for ep in forget)


@pytest.mark.parametrize("tier", ["registers", "code"])
def test_compaction_error_counts_the_facts_a_summary_dropped(long_engine, tokenizer, tier):
    """On the registers tier (24 notes, ~4 windows) the env names the facts later turns need:
    the expert's summaries keep all of them at a bounded length and it passes; summaries that
    keep only the position drop the key at every reset; the harness baseline (sliding window of
    fact-like lines, no policy summary) keeps them while they fit, then drops the oldest (the key).
    carry="code": the same with modules, whose facts are a handler function and its module; the
    expert passes by importing them into app.py, which the hidden tests call."""
    from composer_jax.rl.learner import episode_stats

    rollout = dataclasses.replace(LONG, summary_budget=320, max_turns=40)
    free = TeacherForcedOnly(long_engine.cfg, rollout)
    env = longhorizon_env(hops=24, filler_lines=2, secrets="words", carry=tier)
    tasks = [{"options": {"task_index": i}} for i in range(2)]

    def run(policy, **changes):
        r = dataclasses.replace(rollout, **changes)
        return AgentLoop(free, tokenizer, r, env, make_policy=policy).run(tasks)

    carry, forget = run(NoteChainPolicy), run(lambda e: NoteChainPolicy(e, carry_facts=False))
    harness = run(NoteChainPolicy, compaction="harness")
    check_ended(carry + forget + harness)
    for ep in carry:
        assert ep.reward == 1.0 and len(ep.segments) >= 5 and len(ep.compactions) == len(ep.segments) - 1
        assert all(c["dropped"] == 0 and c["needed"] >= 2 for c in ep.compactions)
        # a key, 3 registers (with their modules), a pointer: however long (byte-level tokens)
        assert max(c["tokens"] for c in ep.compactions) < {"registers": 220, "code": 300}[tier]
    assert episode_stats(carry)["compaction_error"] == 0.0
    assert all(ep.reward == 0.0 and all(c["dropped"] >= 1 for c in ep.compactions) for ep in forget)
    assert 0.3 < episode_stats(forget)["compaction_error"] < 1.0
    for ep in harness:  # the harness wrote every summary: no policy tokens in them, no summary turns
        assert len(ep.segments) >= 5 and not any(t.kind == "summary" for s in ep.segments for t in s.turns)
        if tier == "registers":
            assert ep.compactions[0]["dropped"] == 0 and any(c["dropped"] for c in ep.compactions)
        else:  # a handler's line does not name its module: lines kept as they were cannot hold the fact
            assert all(c["dropped"] for c in ep.compactions if c["needed"] > 2)
        assert all(c["tokens"] <= rollout.summary_budget for c in ep.compactions)
        assert all(len(s.loss_mask) == len(s.tokens) == s.all_experts().shape[0] - len(s.prompt) for s in ep.segments)
    assert episode_stats(harness)["reward"] < 1.0


def test_an_imperfect_demonstrator_drops_the_key_from_a_share_of_its_summaries(long_engine, tokenizer):
    """suite_options.expert_drop_key: the suite's scripted expert leaves the access key out of
    that share of its summaries, the same ones on every run (seeded by the task); a run that
    lost it fails, and SFT clones those runs only when asked (sft.successful_only=False)."""
    from composer_jax.rl import sft

    free = TeacherForcedOnly(long_engine.cfg, LONG)

    def run(q):
        make_env = longhorizon_env(hops=4, filler_lines=4, expert_drop_key=q)
        policy = make_env().unwrapped.suite.scripted_policy
        return AgentLoop(free, tokenizer, LONG, make_env, make_policy=policy).run(
            [{"options": {"task_index": i}} for i in range(4)])

    def summaries(episodes):
        return [tokenizer.decode_harness(s.tokens[t.start:t.end])
                for ep in episodes for s in ep.segments for t in s.turns if t.kind == "summary"]

    never, always, half, again = run(0.0), run(1.0), run(0.5), run(0.5)
    assert all(ep.reward == 1.0 for ep in never) and all("access key" in s for s in summaries(never))
    assert all(ep.reward == 0.0 for ep in always) and not any("access key" in s for s in summaries(always))
    kept = ["access key" in s for s in summaries(half)]
    assert 0 < sum(kept) < len(kept) and summaries(half) == summaries(again)
    assert sft.demo_sequences(always) == []
    assert len(sft.demo_sequences(always, successful_only=False)) == sum(len(ep.segments) for ep in always)


def test_scripted_episodes_without_a_model_equal_those_through_the_engine(long_engine, tokenizer):
    """Demonstrations (every token scripted, summaries and context resets included) come out the
    same from the model-free engine: only the log-probs, which SFT does not read, are zeros."""
    tasks = [{"options": {"task_index": 2}}]
    env = longhorizon_env(hops=3, filler_lines=4)
    real = AgentLoop(long_engine, tokenizer, LONG, env, make_policy=NoteChainPolicy).run(tasks)[0]
    free_engine = TeacherForcedOnly(long_engine.cfg, LONG)
    free = AgentLoop(free_engine, tokenizer, LONG, env, make_policy=NoteChainPolicy).run(tasks)[0]
    assert real.reward == free.reward == 1.0 and len(real.segments) == len(free.segments) >= 2
    assert (real.end_reason, real.flags, real.turns) == (free.end_reason, free.flags, free.turns)
    for a, b in zip(real.segments, free.segments):
        assert a.all_tokens == b.all_tokens and a.loss_mask == b.loss_mask and a.end_reason == b.end_reason
        assert not np.any(b.logp) and np.any(a.logp)
    with pytest.raises(RuntimeError, match="runs no model"):
        free_engine.generate([0], [4], [[]])


def test_expert_loop_finishes_a_transcript_ten_windows_long(long_engine, tokenizer):
    loop = AgentLoop(long_engine, tokenizer, LONG, longhorizon_env(hops=40, filler_lines=6),
                     make_policy=ExpertPolicy)
    ep = loop.run([{"options": {"task_index": 0}}])[0]
    assert ep.reward == 1.0 and ep.end_reason == "submit", (ep.flags, ep.info)
    assert ep.transcript_tokens >= 10 * LONG.window
    assert len(ep.segments) >= 10 and max(s.context_len for s in ep.segments) <= LONG.window


def test_scripted_summary_over_budget_is_cut_and_flagged(long_engine, tokenizer):
    ep = AgentLoop(long_engine, tokenizer, LONG, longhorizon_env(hops=2, filler_lines=4),
                   make_policy=LongSummary).run([{"options": {"task_index": 0}}])[0]
    check_ended([ep])
    assert "summary_overflow" in ep.flags and ep.reward == 1.0  # the cut kept the facts
    cut = ep.segments[0].turns[-1]
    assert cut.kind == "summary" and cut.end - cut.start == LONG.summary_budget


@pytest.fixture(scope="module")
def chatml_tokenizer():
    """Bytes plus Qwen's template tokens and no harness tokens, as an imported pretrained model
    has: `<|assistant|>`, `<|end_of_turn|>`, `<|summary|>` ... are each several ids."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = tokenizers.Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"])
    return Tokenizer(tok, CHATML)


def test_chat_template_tokenizer_runs_summaries_and_tool_calls(long_engine, chatml_tokenizer):
    """The agent loop on a pretrained model's template: the note-chain policy still solves a task
    over several segments, and every harness token reaches the model as the template's text."""
    tok = chatml_tokenizer
    assert len(tok.special_seq(st.ASSISTANT)) > 1 and len(tok.special_seq(st.SUMMARY_CLOSE)) > 1
    ep = AgentLoop(long_engine, tok, LONG, longhorizon_env(hops=4, filler_lines=4),
                   make_policy=NoteChainPolicy).run([{"options": {"task_index": 0}}])[0]
    check_ended([ep])
    assert ep.reward == 1.0 and ep.end_reason == "submit" and not ep.flags, (ep.flags, ep.info)
    assert len(ep.segments) >= 3 and max(s.context_len for s in ep.segments) <= LONG.window
    first, second = ep.segments[0], ep.segments[1]
    summary = first.turns[-1]
    body = tok.decode(first.tokens[summary.start:summary.end])
    assert summary.kind == "summary" and body.endswith("<|im_end|>") and "</summary>" not in body
    text = tok.decode(second.prompt)
    assert "<|im_start|>assistant\n<summary>" + body[:-len("<|im_end|>")] + "</summary><|im_end|>\n" in text
    raw = tok.decode(second.all_tokens)
    assert "<|im_start|>user\n<tool_response>\n" in raw and '<tool_call>{"name": "read_file"' in raw
    assert not any(t in raw for t in st.SPECIAL_TOKENS)  # no harness token leaks into the model's text
    assert tok.decode_harness(second.all_tokens).count(st.TOOL_CALL_OPEN) == raw.count("<tool_call>")


def test_chat_template_stops_and_summary_close(chatml_tokenizer):
    """Generation stops on single ids only: ChatML's <|im_end|> is both EOS and the end of a
    turn (a turn, not an episode, ends there), and a summary written with its multi-id close
    keeps only its body."""
    ids = SpecialIds.from_tokenizer(chatml_tokenizer)
    assert ids.eos == ids.end_of_turn and ids.end_reason(ids.end_of_turn, 3, 8) == "end_of_turn"
    assert ids.end_of_turn_tail == tuple(chatml_tokenizer.encode("\n"))
    assert ids.summary_stops[0] == ids.end_of_turn  # "</summary>" is several ids: stop at <|im_end|>
    body = chatml_tokenizer.encode("key `k`")
    closed = [*body, *ids.summary_close, ids.end_of_turn]
    assert ids.summary_body(closed, "end_of_turn") == body
    assert ids.summary_body([*body, ids.end_of_turn], "end_of_turn") == body
    assert ids.summary_body(body, "budget") == body
    system, _ = encode_message(Message("system", f"Call tools as {st.TOOL_CALL_OPEN}...{st.TOOL_CALL_CLOSE}"),
                               chatml_tokenizer)
    assert "Call tools as <tool_call>...</tool_call><|im_end|>" in chatml_tokenizer.decode(system)
    tool, _ = encode_message(Message("tool", f"file says {st.TOOL_CALL_OPEN}"), chatml_tokenizer)
    assert st.TOOL_CALL_OPEN not in chatml_tokenizer.decode(tool)  # untrusted text stays escaped
    msg, mask = encode_message(Message("assistant", "hi"), chatml_tokenizer)
    assert chatml_tokenizer.decode(msg) == "<|im_start|>assistant\nhi<|im_end|>\n"
    assert [chatml_tokenizer.decode([t]) for t, m in zip(msg, mask) if m] == ["h", "i", "<|im_end|>"]
