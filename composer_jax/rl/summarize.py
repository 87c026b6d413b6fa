"""Self-summarisation as token ids: the request, the trigger, and the context after a reset.

Before a turn the agent asks `needs_summary`; if so it appends `request_ids` (a user turn with
the harness's summarise instruction, then `<|assistant|><|summary|>`), the policy writes the
summary body (stopping at `<|/summary|>` or its budget), and the slot is reset to
`reset_prompt(base, body)` = [system, task, `<|assistant|><|summary|>body<|/summary|><|end_of_turn|>`].
The body ids are the generated ids themselves, never re-tokenised text.
"""
from __future__ import annotations

import dataclasses
import re

from composer_jax.harness import special_tokens as st
from composer_jax.harness.protocol import SUMMARIZE_INSTRUCTION, Message, encode_message
from composer_jax.rl.rollout_config import RolloutConfig


@dataclasses.dataclass(frozen=True)
class SpecialIds:
    """Harness token ids and the fixed token sequences the agent loop appends. With a pretrained
    chat template a harness token may be several ids (`<|assistant|>` -> "<|im_start|>assistant\n");
    generation stops only on single ids, so a multi-id summary close is stripped from the body
    and the turn ends at the end-of-turn id instead."""
    assistant: tuple[int, ...]  # the generation prompt before every policy turn
    end_of_turn: int  # the id a turn stops on
    end_of_turn_tail: tuple[int, ...]  # what the harness appends after it (ChatML's "\n")
    eos: int
    tool_call_close: int
    summary_open: tuple[int, ...]
    summary_close: tuple[int, ...]
    request: tuple[int, ...]  # summarise instruction turn + generation prompt + summary open
    truncation_marker: tuple[int, ...]  # ends an observation cut to fit the window

    @classmethod
    def from_tokenizer(cls, tok) -> SpecialIds:
        end_of_turn = tok.special_seq(st.END_OF_TURN)
        assistant, summary_open = tok.special_seq(st.ASSISTANT), tok.special_seq(st.SUMMARY_OPEN)
        request, _ = encode_message(Message("user", SUMMARIZE_INSTRUCTION), tok)
        return cls(assistant=assistant, end_of_turn=end_of_turn[0], end_of_turn_tail=end_of_turn[1:],
                   eos=tok.token_to_id(st.EOS), tool_call_close=tok.token_to_id(st.TOOL_CALL_CLOSE),
                   summary_open=summary_open, summary_close=tok.special_seq(st.SUMMARY_CLOSE),
                   request=(*request, *assistant, *summary_open),
                   truncation_marker=tuple(tok.encode("\n[observation truncated to fit the context window]")))

    @property
    def end_of_turn_seq(self) -> tuple[int, ...]:
        return (self.end_of_turn, *self.end_of_turn_tail)

    @property
    def summary_close_id(self) -> int | None:
        """The summary close as one stop id, or None when it is several (stop at end of turn)."""
        return self.summary_close[0] if len(self.summary_close) == 1 else None

    @property
    def turn_stops(self) -> tuple[int, ...]:
        return self.tool_call_close, self.end_of_turn, self.eos

    @property
    def summary_stops(self) -> tuple[int, ...]:
        close = self.end_of_turn if self.summary_close_id is None else self.summary_close_id
        return close, self.end_of_turn, self.eos

    def end_reason(self, last_token: int | None, n: int, budget: int) -> str:
        names = {self.eos: "eos", self.tool_call_close: "tool_call", self.end_of_turn: "end_of_turn"}
        if self.summary_close_id is not None:
            names[self.summary_close_id] = "summary_close"
        if last_token in names:
            return names[last_token]
        return "budget" if n >= budget else "no_stop"

    def summary_body(self, tokens: list[int], reason: str) -> list[int]:
        """The summary's own ids: without the stop id, and without a multi-id close the policy
        wrote before stopping (the reset prompt adds the close back)."""
        body = tokens if reason in ("budget", "no_stop") else tokens[:-1]
        n = len(self.summary_close)
        return body[:-n] if n > 1 and body[-n:] == list(self.summary_close) else body


def reserve(rollout: RolloutConfig, ids: SpecialIds) -> int:
    """Context kept free at all times so a summary can still be requested and written."""
    return len(ids.request) + rollout.summary_budget + len(ids.end_of_turn_seq)  # + closing a turn


def turn_limit(rollout: RolloutConfig, ids: SpecialIds) -> float:
    """A turn may start only while context + generation prompt + turn_budget stays under this."""
    return min(rollout.summarize_at * rollout.window, rollout.window - reserve(rollout, ids))


def needs_summary(context_len: int, rollout: RolloutConfig, ids: SpecialIds) -> bool:
    return context_len + 1 + rollout.turn_budget > turn_limit(rollout, ids)


def reset_prompt(base: list[int], body: list[int], ids: SpecialIds) -> list[int]:
    return [*base, *ids.assistant, *ids.summary_open, *body, *ids.summary_close, *ids.end_of_turn_seq]


def max_prompt_len(rollout: RolloutConfig, ids: SpecialIds) -> int:
    """Longest system + task prompt that still leaves room, after a reset with a full-length
    summary, for one turn, the next summary and a (truncated) observation."""
    reset = len(ids.assistant) + len(ids.summary_open) + rollout.summary_budget + len(ids.summary_close)
    observation = len(ids.truncation_marker) + 1 + len(ids.end_of_turn_seq)
    return (rollout.window - reserve(rollout, ids) - len(ids.assistant) - rollout.turn_budget
            - (reset + len(ids.end_of_turn_seq)) - observation)


def facts_dropped(facts: list[list[str]], summary: str) -> int:
    """How many of the env's facts (rl.train: `info["carry_facts"]`, each a list of words that
    must stand on one line) a summary's text lost."""
    lines = summary.splitlines()
    return sum(not any(all(w in line for w in fact) for line in lines) for fact in facts)


FACT_LINE = re.compile(r"`[^`]+`|\S+/\S+\.\w+")  # a quoted value or a file path
SPECIAL = re.compile(r"<\|[^|<>]+\|>")  # harness tokens end a line
LINE_NUMBER = re.compile(r"^\s*\d+\t")  # read_file's numbering


def fact_like(line: str) -> bool:
    """A quoted value, a path, or a short statement (prose filler runs longer); tool calls are not facts."""
    return bool(line) and not line.startswith("{") and (bool(FACT_LINE.search(line)) or len(line.split()) <= 6)


def harness_summary(text: str, budget: int, encode) -> list[int]:
    """The harness compaction baseline (rollout.compaction="harness"): no policy summary, but
    the lines of the context that look like facts (`fact_like`), newest first, each once, as
    many as fit in `budget` tokens, in context order: a sliding window over the facts seen."""
    lines = [LINE_NUMBER.sub("", ln).strip() for ln in SPECIAL.sub("\n", text).splitlines()]
    kept, used, seen = [], 0, set()
    for line in reversed(lines):
        if line in seen or not fact_like(line):
            continue
        seen.add(line)
        n = len(encode(line + "\n"))
        if used + n <= budget:
            kept.append(line)
            used += n
    return encode("\n".join(reversed(kept)))[:budget]
