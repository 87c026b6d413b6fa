"""Self-summarisation as token ids: the request, the trigger, and the context after a reset.

Before a turn the agent asks `needs_summary`; if so it appends `request_ids` (a user turn with
the harness's summarise instruction, then `<|assistant|><|summary|>`), the policy writes the
summary body (stopping at `<|/summary|>` or its budget), and the slot is reset to
`reset_prompt(base, body)` = [system, task, `<|assistant|><|summary|>body<|/summary|><|end_of_turn|>`].
The body ids are the generated ids themselves, never re-tokenised text.
"""
from __future__ import annotations

import dataclasses

from composer_jax.harness import special_tokens as st
from composer_jax.harness.protocol import SUMMARIZE_INSTRUCTION, Message, encode_message
from composer_jax.rl.rollout_config import RolloutConfig


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """Harness token ids and the fixed token sequences the agent loop appends."""
    assistant: int
    end_of_turn: int
    eos: int
    tool_call_close: int
    summary_open: int
    summary_close: int
    request: tuple[int, ...]  # summarise instruction turn + "<|assistant|><|summary|>"
    truncation_marker: tuple[int, ...]  # ends an observation cut to fit the window

    @classmethod
    def from_tokenizer(cls, tok) -> SpecialIds:
        ids = {name: tok.token_to_id(token) for name, token in dict(
            assistant=st.ASSISTANT, end_of_turn=st.END_OF_TURN, eos=st.EOS,
            tool_call_close=st.TOOL_CALL_CLOSE, summary_open=st.SUMMARY_OPEN,
            summary_close=st.SUMMARY_CLOSE).items()}
        request, _ = encode_message(Message("user", SUMMARIZE_INSTRUCTION), tok)
        return cls(**ids, request=(*request, ids["assistant"], ids["summary_open"]),
                   truncation_marker=tuple(tok.encode("\n[observation truncated to fit the context window]")))

    @property
    def turn_stops(self) -> tuple[int, ...]:
        return self.tool_call_close, self.end_of_turn, self.eos

    @property
    def summary_stops(self) -> tuple[int, ...]:
        return self.summary_close, self.end_of_turn, self.eos

    def end_reason(self, last_token: int | None, n: int, budget: int) -> str:
        names = {self.tool_call_close: "tool_call", self.end_of_turn: "end_of_turn", self.eos: "eos",
                 self.summary_close: "summary_close"}
        if last_token in names:
            return names[last_token]
        return "budget" if n >= budget else "no_stop"


def reserve(rollout: RolloutConfig, ids: SpecialIds) -> int:
    """Context kept free at all times so a summary can still be requested and written."""
    return len(ids.request) + rollout.summary_budget + 1  # + the end_of_turn closing a turn


def turn_limit(rollout: RolloutConfig, ids: SpecialIds) -> float:
    """A turn may start only while context + generation prompt + turn_budget stays under this."""
    return min(rollout.summarize_at * rollout.window, rollout.window - reserve(rollout, ids))


def needs_summary(context_len: int, rollout: RolloutConfig, ids: SpecialIds) -> bool:
    return context_len + 1 + rollout.turn_budget > turn_limit(rollout, ids)


def reset_prompt(base: list[int], body: list[int], ids: SpecialIds) -> list[int]:
    return [*base, ids.assistant, ids.summary_open, *body, ids.summary_close, ids.end_of_turn]


def max_prompt_len(rollout: RolloutConfig, ids: SpecialIds) -> int:
    """Longest system + task prompt that still leaves room, after a reset with a full-length
    summary, for one turn, the next summary and a (truncated) observation."""
    return (rollout.window - reserve(rollout, ids) - 1 - rollout.turn_budget
            - (rollout.summary_budget + 4) - (len(ids.truncation_marker) + 2))
