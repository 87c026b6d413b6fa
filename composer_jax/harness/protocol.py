"""The chat/turn protocol as text and tokens, and the tool-call wire format.

A conversation renders as a sequence of turns, each `<role token> content <|end_of_turn|>`:

    <|system|>...<|end_of_turn|><|user|>task...<|end_of_turn|>
    <|assistant|>thoughts<|tool_call|>{"name": ..., "arguments": {...}}<|/tool_call|><|end_of_turn|>
    <|tool_result|>observation<|end_of_turn|>
    <|assistant|><|summary|>progress so far...<|/summary|><|end_of_turn|>

The model emits exactly one tool call per assistant turn. Anything that is not a well-formed
call to a known tool with valid arguments parses to a `ToolCallError`, which the environment
answers with an error observation (costing a turn) instead of raising.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from composer_jax.harness import special_tokens as st
from composer_jax.harness.tool_specs import TOOL_SPECS, ToolSpec, validate_arguments

ROLES = ("system", "user", "assistant", "tool")
ROLE_TOKENS = {
    "system": st.SYSTEM,
    "user": st.USER,
    "assistant": st.ASSISTANT,
    "tool": st.TOOL_RESULT,
}

SUMMARIZE_INSTRUCTION = (
    "Your context is about to be reset. Write a summary of your progress so far: the task, "
    "every fact you will still need (names, values, file paths, what you changed), and what "
    "remains to do. Wrap it in " + st.SUMMARY_OPEN + " and " + st.SUMMARY_CLOSE + "."
)


@dataclasses.dataclass(frozen=True)
class Message:
    role: str  # one of ROLES
    content: str

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"unknown role {self.role!r}; expected one of {ROLES}")


@dataclasses.dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class ToolCallError:
    """Why an assistant turn did not parse into a valid tool call."""

    kind: str  # no_tool_call | missing_close | multiple_calls | malformed_json | unknown_tool | bad_arguments
    message: str

    def observation(self) -> str:
        return f"Error ({self.kind}): {self.message}"


class Tokenizer(Protocol):
    special_text: dict[str, str]  # harness token -> a pretrained model's template text ({} for ours)

    def encode(self, text: str) -> list[int]: ...

    def token_to_id(self, token: str) -> int: ...

    def special_seq(self, token: str) -> tuple[int, ...]: ...


# ---------------------------------------------------------------------------------------------
# Text rendering
# ---------------------------------------------------------------------------------------------


def escape_special_tokens(text: str) -> str:
    """Break up special-token strings in untrusted text (file contents, tool output) so they
    can never be read back as control tokens."""
    for token in st.SPECIAL_TOKENS:
        text = text.replace(token, "<\u200b" + token[1:])
    return text


def render_message(message: Message) -> str:
    """One turn as text. Only assistant content may carry special tokens (the model emits them)."""
    content = message.content if message.role == "assistant" else escape_special_tokens(message.content)
    return ROLE_TOKENS[message.role] + content + st.END_OF_TURN


def render_conversation(messages: Sequence[Message], *, add_generation_prompt: bool = False) -> str:
    """The whole conversation as text; with `add_generation_prompt` it ends ready for the
    model's next assistant turn."""
    text = "".join(render_message(m) for m in messages)
    return text + st.ASSISTANT if add_generation_prompt else text


def summary_text(summary: str) -> str:
    return st.SUMMARY_OPEN + summary + st.SUMMARY_CLOSE


def extract_summary(assistant_text: str) -> str | None:
    """The summary inside an assistant turn, or None. A missing close token is tolerated
    because generation may stop at the length bound."""
    start = assistant_text.find(st.SUMMARY_OPEN)
    if start < 0:
        return None
    body = assistant_text[start + len(st.SUMMARY_OPEN):]
    end = body.find(st.SUMMARY_CLOSE)
    return (body if end < 0 else body[:end]).strip()


# ---------------------------------------------------------------------------------------------
# Token ids
# ---------------------------------------------------------------------------------------------


def _split_on_special_tokens(text: str) -> list[str]:
    """Split text into pieces where every special token is its own piece."""
    pieces, i, start = [], 0, 0
    while i < len(text):
        match = next((t for t in st.SPECIAL_TOKENS if text.startswith(t, i)), None)
        if match is None:
            i += 1
            continue
        if start < i:
            pieces.append(text[start:i])
        pieces.append(match)
        i += len(match)
        start = i
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def encode_text_with_specials(text: str, tokenizer: Tokenizer) -> list[int]:
    """Encode text in which special-token strings stand for their reserved ids."""
    ids: list[int] = []
    for piece in _split_on_special_tokens(text):
        if piece in st.SPECIAL_TOKENS:
            ids.extend(tokenizer.special_seq(piece))
        else:
            ids.extend(tokenizer.encode(piece))
    return ids


def encode_message(message: Message, tokenizer: Tokenizer) -> tuple[list[int], list[int]]:
    """(ids, trainable) for one turn. `trainable` is 1 on what the assistant generated: its
    content and the first id of its end-of-turn (where generation stops), never the role ids
    that the harness inserts nor the rest of a multi-id end-of-turn, which the harness appends."""
    role = tokenizer.special_seq(ROLE_TOKENS[message.role])
    end = tokenizer.special_seq(st.END_OF_TURN)
    if message.role == "assistant":
        body = encode_text_with_specials(message.content, tokenizer)
    else:
        text = message.content
        if message.role in ("system", "user"):  # harness-written: name tokens as the model knows them
            for token, mapped in tokenizer.special_text.items():
                text = text.replace(token, mapped)
        body = tokenizer.encode(escape_special_tokens(text)) if text else []
    ids = [*role, *body, *end]
    flag = 1 if message.role == "assistant" else 0
    return ids, [0] * len(role) + [flag] * (len(body) + 1) + [0] * (len(end) - 1)


def encode_conversation(
    messages: Sequence[Message], tokenizer: Tokenizer, *, add_generation_prompt: bool = False
) -> tuple[list[int], list[int]]:
    """(ids, trainable mask) for a conversation, e.g. an expert transcript for SFT."""
    ids: list[int] = []
    mask: list[int] = []
    for message in messages:
        m_ids, m_mask = encode_message(message, tokenizer)
        ids += m_ids
        mask += m_mask
    if add_generation_prompt:
        prompt = tokenizer.special_seq(st.ASSISTANT)
        ids += prompt
        mask += [0] * len(prompt)
    return ids, mask


# ---------------------------------------------------------------------------------------------
# Tool calls
# ---------------------------------------------------------------------------------------------


def format_tool_call(name: str, **arguments: Any) -> str:
    """Exactly the text a model emits to call a tool (the harness closes the turn)."""
    return st.TOOL_CALL_OPEN + json.dumps({"name": name, "arguments": arguments}) + st.TOOL_CALL_CLOSE


def parse_tool_call(
    text: str, tools: Mapping[str, ToolSpec] = TOOL_SPECS
) -> ToolCall | ToolCallError:
    """The one tool call in an assistant turn, or a structured error. Never raises."""
    if not isinstance(text, str):
        return ToolCallError("no_tool_call", f"the action must be text, got {type(text).__name__}")
    opens = text.count(st.TOOL_CALL_OPEN)
    if opens == 0:
        # Errors reach the model as tool output, whose special tokens are escaped (a quoted
        # delimiter would read as garbage, not as the model's template): name them, never quote.
        return ToolCallError("no_tool_call", "no tool call found; emit exactly one tool call per turn")
    if opens > 1:
        return ToolCallError("multiple_calls", f"found {opens} tool calls; emit exactly one per turn")
    body = text.split(st.TOOL_CALL_OPEN, 1)[1]
    if st.TOOL_CALL_CLOSE not in body:
        return ToolCallError("missing_close", "the tool call is not closed: end it with the tool-call close token")
    payload = body.split(st.TOOL_CALL_CLOSE, 1)[0]
    try:
        call = json.loads(payload)
    except (ValueError, RecursionError) as e:  # ValueError: JSONDecodeError, or an int of 4,300+ digits
        return ToolCallError("malformed_json", f"the tool call is not valid JSON: {str(e)[:200]}")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return ToolCallError(
            "malformed_json", 'the tool call must be an object {"name": str, "arguments": object}'
        )
    extra_keys = set(call) - {"name", "arguments"}
    if extra_keys:
        return ToolCallError("malformed_json", f"unexpected keys in the tool call: {sorted(extra_keys)}")
    name, arguments = call["name"], call.get("arguments", {})
    if name not in tools:
        return ToolCallError("unknown_tool", f"unknown tool {name!r}; available: {', '.join(tools)}")
    if not isinstance(arguments, dict):
        return ToolCallError("bad_arguments", "'arguments' must be a JSON object")
    problem = validate_arguments(tools[name], arguments)
    if problem:
        return ToolCallError("bad_arguments", f"{name}: {problem}")
    return ToolCall(name, arguments)
