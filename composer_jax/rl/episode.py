"""One episode's control flow as a generator of requests; the agent loop batches them.

`run_episode` yields requests (env reset/step, engine start/reset/append/generate) and receives
each one's result, so an episode reads as straight-line code while the agent loop serves many
episodes' requests together (one prefill, one decode for all slots). A failing env call comes
back as the exception object; it, or anything an env returns that the episode cannot process
(a tokenizer raising on an observation), ends that episode as "env_error", never the batch.
Every path ends the episode with a reason (trajectory.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Generator
from typing import Any, Protocol

import jax
import numpy as np

from composer_jax.harness.protocol import (
    Message,
    encode_conversation,
    encode_message,
    encode_text_with_specials,
)
from composer_jax.rl import summarize
from composer_jax.rl.engine_host import Generated, Scored
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.rl.trajectory import Episode, Segment, Turn


# Requests --------------------------------------------------------------------------------------
@dataclasses.dataclass
class EnvReset:
    kwargs: dict[str, Any]  # -> (observation, info) or the exception


@dataclasses.dataclass
class EnvStep:
    action: str  # -> (observation, reward, terminated, truncated, info) or the exception


@dataclasses.dataclass
class Start:
    key: jax.Array
    tokens: list[int]  # new episode in the slot: key, empty context, then these (marked) -> Scored


@dataclasses.dataclass
class Reset:
    """A new context (key and counter kept). `keep` leading tokens are the prompt already in
    the slot up to its mark: the slot rewinds to it and prefills only the rest; keep=0 empties
    the context and prefills all. -> Scored of the prefilled tokens."""
    tokens: list[int]
    keep: int = 0

    @property
    def new_tokens(self) -> list[int]:
        return self.tokens[self.keep:]


@dataclasses.dataclass
class Append:
    tokens: list[int]  # -> Scored
    score: bool = False  # their log-probs too (teacher-forced policy tokens); else Scored.logp is None


@dataclasses.dataclass
class Generate:
    budget: int
    stops: tuple[int, ...]  # -> Generated


class ScriptedPolicy(Protocol):
    """Text in, text out; the loop tokenises and teacher-forces it through the engine."""

    def act(self, context: str) -> str: ...  # next assistant turn, e.g. a format_tool_call

    def summarize(self, context: str) -> str: ...  # the summary body


PolicyFactory = Callable[[Any], ScriptedPolicy]  # env (after reset) -> policy for the episode


@dataclasses.dataclass
class EpisodeContext:
    index: int
    task: dict[str, Any]
    key: jax.Array
    env: Any
    tokenizer: Any
    rollout: RolloutConfig
    ids: summarize.SpecialIds
    make_policy: PolicyFactory | None = None


def run_episode(ctx: EpisodeContext) -> Generator[Any, Any, Episode]:
    ep = Episode(ctx.index, dict(ctx.task))
    try:
        return (yield from _episode(ctx, ep))
    except Exception as e:  # noqa: BLE001 - recorded on the episode, which training then skips
        return _env_error(ep, e)


def _episode(ctx: EpisodeContext, ep: Episode) -> Generator[Any, Any, Episode]:
    tok, rollout, ids = ctx.tokenizer, ctx.rollout, ctx.ids
    result = yield EnvReset(dict(ctx.task))
    if isinstance(result, BaseException):
        return _env_error(ep, result)
    prompt_text, info = result
    ep.info, ep.task_id = dict(info), info.get("task_id")
    base, _ = encode_conversation([Message("system", info.get("system_prompt", "")),
                                   Message("user", str(prompt_text))], tok)
    if len(base) > summarize.max_prompt_len(rollout, ids):
        ep.segments.append(Segment(prompt=base))
        ep.flag("prompt_too_long")
        return ep.finish("prompt_too_long")
    policy = ctx.make_policy(ctx.env) if ctx.make_policy is not None else None
    seg = Segment(prompt=base)
    ep.segments.append(seg)
    seg.prompt_experts = base_experts = (yield Start(ctx.key, base)).experts
    pending: list[int] = []  # harness tokens not yet appended (flushed with the next request)
    carried: list[int] | None = None  # an observation held back to open the next segment
    facts = carried_facts = None  # the env's carry_facts as of the context (of the carried observation)

    def context_text(extra: list[int]) -> str:
        return tok.decode_harness(seg.all_tokens + extra)

    def policy_tokens(text: str, budget: int, close: int, add_close: bool) -> list[int]:
        """A scripted turn's ids: up to its closing token (added to a summary), cut to budget."""
        out = encode_text_with_specials(text, tok)
        if close in out:
            out = out[:out.index(close) + 1]
        elif add_close:
            out.append(close)
        return out[:budget]

    def turn(kind: str, prefix: list[int], budget: int, stops: tuple[int, ...]):
        """Flush harness tokens + prefix, then the policy's tokens; returns (tokens, reason)."""
        nonlocal pending
        harness = pending + prefix
        pending = []
        if policy is None:
            seg.add(harness, (yield Append(harness)).experts)
            out: Generated = yield Generate(budget, stops)
            tokens, logp, logp_sampler, experts = out.tokens.tolist(), out.logp, out.logp_sampler, out.experts
        else:
            text = policy.act(context_text(harness)) if kind == "action" else policy.summarize(context_text(harness))
            body = policy_tokens(text, budget, stops[0], add_close=kind == "summary")
            scored: Scored = yield Append(harness + body, score=True)  # teacher-forced: one prefill, scored
            seg.add(harness, scored.experts[:len(harness)])
            tokens, logp, logp_sampler, experts = body, scored.logp[len(harness):], None, scored.experts[len(harness):]
        start = len(seg.tokens)
        seg.add(tokens, experts, logp=logp, logp_sampler=logp_sampler, policy=True)
        reason = ids.end_reason(tokens[-1] if tokens else None, len(tokens), budget)
        seg.turns.append(Turn(kind, start, len(seg.tokens), reason))
        return tokens, reason

    while True:
        if seg.policy_turns and (carried is not None or
                                 summarize.needs_summary(seg.context_len + len(pending), rollout, ids)):
            if len(ep.segments) >= rollout.max_segments:
                ep.flag("max_segments")
                return ep.finish("max_segments")
            if rollout.compaction == "harness":  # the baseline: the harness writes it, unscored
                old = tok.decode_harness(seg.all_tokens[len(base):] + pending)
                body = summarize.harness_summary(old, rollout.summary_budget, tok.encode)
                seg.add(pending, np.zeros((len(pending), *seg.prompt_experts.shape[1:]), np.int32))
                pending = []  # no turn follows in this segment: nothing scores past its last action
            else:
                tokens, reason = yield from turn("summary", list(ids.request), rollout.summary_budget,
                                                 ids.summary_stops)
                if reason in ("budget", "no_stop"):
                    ep.flag("summary_overflow")
                body = ids.summary_body(tokens, reason)
            if facts is not None:  # what the env says later turns need, as of what the summary saw
                ep.compactions.append(dict(needed=len(facts), tokens=len(body),
                                           dropped=summarize.facts_dropped(facts, tok.decode_harness(body))))
            seg.end_reason = "summary_reset"
            seg = Segment(prompt=summarize.reset_prompt(base, body, ids))
            ep.segments.append(seg)
            keep = len(base) if rollout.reset_keeps_prompt else 0
            experts = (yield Reset(seg.prompt, keep)).experts
            seg.prompt_experts = np.concatenate([base_experts, experts]) if keep else experts
            if carried is not None:
                room = (rollout.window - summarize.reserve(rollout, ids) - seg.context_len
                        - 1 - rollout.turn_budget)
                pending, carried, facts = _fit(carried, room, ids, ep), None, carried_facts
        if ep.turns >= rollout.max_turns:
            return ep.finish("max_turns")
        tokens, reason = yield from turn("action", list(ids.assistant), rollout.turn_budget, ids.turn_stops)
        ep.turns += 1
        if reason == "budget":
            ep.flag("turn_truncated")
        pending = list(ids.end_of_turn_tail if reason == "end_of_turn" else ids.end_of_turn_seq)
        result = yield EnvStep(tok.decode_harness(tokens))
        if isinstance(result, BaseException):
            return _env_error(ep, result)
        observation, reward, terminated, truncated, info = result
        ep.reward, ep.info = float(reward), dict(info)
        if terminated:
            return ep.finish("submit" if info.get("tool") == "submit" else "env_terminated")
        if truncated:
            return ep.finish("env_truncated")
        obs_ids, _ = encode_message(Message("tool", str(observation)), tok)
        room = rollout.window - summarize.reserve(rollout, ids) - seg.context_len - len(pending)
        if len(obs_ids) <= room:
            pending += obs_ids
            facts = info.get("carry_facts")
        elif len(ep.segments) >= rollout.max_segments:
            ep.flag("max_segments")
            return ep.finish("max_segments")
        else:  # summarise first; the observation opens the next segment
            carried, carried_facts = obs_ids, info.get("carry_facts")


def _fit(obs_ids: list[int], room: int, ids: summarize.SpecialIds, ep: Episode) -> list[int]:
    """The observation, cut to `room` tokens (keeping its head and closing token) and flagged.
    `summarize.max_prompt_len` guarantees room for the role token, the marker and the close."""
    if len(obs_ids) <= room:
        return obs_ids
    ep.flag("observation_truncated")
    keep = room - len(ids.truncation_marker) - len(ids.end_of_turn_seq)
    return obs_ids[:keep] + list(ids.truncation_marker) + list(ids.end_of_turn_seq)


def _env_error(ep: Episode, error: BaseException) -> Episode:
    ep.info = dict(ep.info, error=f"{type(error).__name__}: {error}")
    ep.flag("env_error")
    if not ep.segments:
        ep.segments.append(Segment(prompt=[]))
    return ep.finish("env_error")
