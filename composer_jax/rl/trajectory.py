"""Episodes as chains of segments: token ids and sampler log-probs exactly as the engine saw them.

A segment is one context: its prompt (system + task, then after a reset also the summary) and
the stream appended after it (policy turns interleaved with harness tokens and observations).
`loss_mask` marks the tokens the policy produced (actions and summaries); `logp` holds their
tempered log-probs (see rl/sampling.py); other positions hold 0.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

# Why a segment ended. Only "summary_reset" continues the episode in a new segment.
SEGMENT_END_REASONS = (
    "summary_reset",  # the policy summarised; the next segment starts from [system, task, summary]
    "submit",  # the policy called submit; the env graded the work
    "env_terminated",  # the env ended the episode for another reason
    "env_truncated",  # the env's own turn limit
    "max_turns",  # rollout.max_turns assistant turns used
    "max_segments",  # a summary was needed past rollout.max_segments: truncated
    "prompt_too_long",  # system + task leave no room for a turn and a summary in the window
    "env_error",  # env.reset/step raised, or the episode could not process what it returned; info["error"]
)
# Why an assistant turn ended.
TURN_END_REASONS = ("tool_call", "end_of_turn", "eos", "summary_close", "budget", "no_stop")


@dataclasses.dataclass
class Turn:
    kind: str  # "action" | "summary"
    start: int  # [start, end) in Segment.tokens: the policy's tokens of this turn
    end: int
    end_reason: str  # one of TURN_END_REASONS


@dataclasses.dataclass
class Segment:
    prompt: list[int]
    prompt_experts: np.ndarray | None = None  # [len(prompt), moe_layers, k]
    tokens: list[int] = dataclasses.field(default_factory=list)
    logp: list[float] = dataclasses.field(default_factory=list)
    logp_sampler: list[float] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    experts: list[np.ndarray] = dataclasses.field(default_factory=list)  # per appended chunk
    turns: list[Turn] = dataclasses.field(default_factory=list)
    end_reason: str | None = None

    def add(self, tokens: Sequence[int], experts: np.ndarray, *, logp=None, logp_sampler=None,
            policy: bool = False) -> None:
        n = len(tokens)
        self.tokens += [int(t) for t in tokens]
        self.logp += [float(x) for x in logp] if policy else [0.0] * n
        self.logp_sampler += [float(x) for x in (logp_sampler if logp_sampler is not None else logp)] \
            if policy else [0.0] * n
        self.loss_mask += [1 if policy else 0] * n
        self.experts.append(np.asarray(experts))

    @property
    def context_len(self) -> int:
        return len(self.prompt) + len(self.tokens)

    @property
    def all_tokens(self) -> list[int]:
        return self.prompt + self.tokens

    def all_experts(self) -> np.ndarray:
        """Expert choices of every token (prompt + stream), for routing replay."""
        return np.concatenate([self.prompt_experts, *self.experts], axis=0)

    @property
    def policy_turns(self) -> int:
        return len(self.turns)


@dataclasses.dataclass
class Episode:
    index: int  # position in the task list given to the agent loop
    task: dict[str, Any]  # env.reset kwargs (seed, options)
    task_id: str | None = None
    segments: list[Segment] = dataclasses.field(default_factory=list)
    reward: float = 0.0
    info: dict[str, Any] = dataclasses.field(default_factory=dict)  # the env's last info
    end_reason: str | None = None
    flags: list[str] = dataclasses.field(default_factory=list)  # turn_truncated, summary_overflow, ...
    turns: int = 0  # assistant action turns (summaries not counted)
    # One per reset where the env names the facts later turns need (info["carry_facts"]):
    # {needed, dropped, tokens}: facts needed, facts the summary lost, summary length.
    compactions: list[dict] = dataclasses.field(default_factory=list)

    def flag(self, name: str) -> None:
        if name not in self.flags:
            self.flags.append(name)

    def finish(self, reason: str) -> Episode:
        if reason not in SEGMENT_END_REASONS:
            raise ValueError(f"unknown end reason {reason!r}")
        self.end_reason = reason
        if self.segments:
            self.segments[-1].end_reason = reason
        return self

    @property
    def transcript_tokens(self) -> int:
        """Length of the whole conversation: the first prompt and every segment's stream (the
        prompts that resets rebuild are not counted again)."""
        return len(self.segments[0].prompt) + sum(len(s.tokens) for s in self.segments) if self.segments else 0
