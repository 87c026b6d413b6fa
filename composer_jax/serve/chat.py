"""OpenAI chat requests <-> the harness protocol: messages and tool schemas in, tool calls out.

The model's own chat template is the harness protocol (`harness/protocol.py`), which a pretrained
tokenizer maps onto its template (ChatML and `<tool_call>` tags for the imported Qwen), so a
request renders exactly as the agent loop's episodes do. Tools given as OpenAI function schemas
are listed in the system message; a generated `<|tool_call|>{"name", "arguments"}<|/tool_call|>`
naming one of them with arguments that fit its schema becomes an OpenAI `tool_calls` entry, and
anything else comes back as plain content (never an error: the client decides what to do).

Every check of the request raises `RequestError`, which the app answers with an OpenAI-style
error object naming the offending parameter.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from composer_jax.harness import special_tokens as st
from composer_jax.harness.protocol import Message, escape_special_tokens, format_tool_call


class RequestError(ValueError):
    def __init__(self, message: str, param: str | None = None, *, status: int = 400,
                 code: str | None = None, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.status, self.code, self.kind = message, param, status, code, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


JSON_TYPES = {"object": dict, "array": list, "string": str, "integer": int, "number": (int, float),
              "boolean": bool, "null": type(None)}
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclasses.dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]  # a JSON Schema object


def parse_tools(tools: Any) -> dict[str, Tool]:
    """The request's `tools` (OpenAI function tools) by name, checked."""
    if tools is None:
        return {}
    if not isinstance(tools, list):
        raise RequestError("'tools' must be a list of function tools", "tools")
    out: dict[str, Tool] = {}
    for i, t in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict):
            raise RequestError(f"{where} must be {{'type': 'function', 'function': {{...}}}}", where)
        fn = t["function"]
        name = fn.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise RequestError(f"{where}.function.name must match {TOOL_NAME.pattern}", f"{where}.function.name")
        if name in out:
            raise RequestError(f"{where}: duplicate tool name {name!r}", f"{where}.function.name")
        params = fn.get("parameters", {"type": "object", "properties": {}})
        problem = schema_problem(params)
        if problem:
            raise RequestError(f"{where}.function.parameters is not a JSON Schema object: {problem}",
                               f"{where}.function.parameters")
        description = fn.get("description", "")
        if not isinstance(description, str):
            raise RequestError(f"{where}.function.description must be a string", f"{where}.function.description")
        out[name] = Tool(name, description, params)
    return out


def schema_problem(schema: Any, depth: int = 0) -> str | None:
    """What makes `schema` unusable as a function's parameters (None when fine). Checks the
    parts this server relies on: an object type, properties that are schemas, `required` names."""
    if depth > 32:
        return "nested too deeply"
    if not isinstance(schema, dict):
        return f"expected an object, got {type(schema).__name__}"
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    if any(k not in JSON_TYPES for k in kinds):
        return f"unknown type {kind!r} (JSON Schema types: {', '.join(JSON_TYPES)})"
    if depth == 0 and kinds != ["object"]:
        return "the top level must have \"type\": \"object\""
    props = schema.get("properties", {})
    if not isinstance(props, dict):
        return "'properties' must be an object"
    for name, sub in props.items():
        problem = schema_problem(sub, depth + 1)
        if problem:
            return f"property {name!r}: {problem}"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return "'required' must be a list of property names"
    if "items" in schema and (problem := schema_problem(schema["items"], depth + 1)):
        return f"items: {problem}"
    return None


def arguments_problem(schema: Mapping[str, Any], value: Any, path: str = "arguments") -> str | None:
    """Whether generated arguments fit the tool's schema (types, required, enum, properties)."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    if kinds and not any(_is_type(value, k) for k in kinds):
        return f"{path} must be {' or '.join(kinds)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} must be one of {schema['enum']}"
    if isinstance(value, dict):
        props = schema.get("properties", {})
        missing = [r for r in schema.get("required", []) if r not in value]
        if missing:
            return f"{path} is missing {missing}"
        if schema.get("additionalProperties") is False and (extra := sorted(set(value) - set(props))):
            return f"{path} has unexpected {extra}"
        for k, v in value.items():
            if k in props and (problem := arguments_problem(props[k], v, f"{path}.{k}")):
                return problem
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            if problem := arguments_problem(schema["items"], v, f"{path}[{i}]"):
                return problem
    return None


def _is_type(value: Any, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    return isinstance(value, JSON_TYPES[kind])


def tools_prompt(tools: Mapping[str, Tool], template: str = "harness") -> str:
    """The system text that lists the tools and the call format: the harness's own, or for an
    imported model the text its chat template was trained with (Qwen2.5's `# Tools` block)."""
    if template == "qwen2":
        listing = "\n".join(json.dumps({"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": t.parameters}}) for t in tools.values())
        return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                + listing + "\n</tools>\n\nFor each function call, return a json object with function name and "
                "arguments within " + st.TOOL_CALL_OPEN + st.TOOL_CALL_CLOSE + " XML tags:\n" + st.TOOL_CALL_OPEN
                + '\n{"name": <function-name>, "arguments": <args-json-object>}\n' + st.TOOL_CALL_CLOSE)
    lines = [f"- {t.name}: {t.description}\n  parameters: {json.dumps(t.parameters, sort_keys=True)}"
             for t in tools.values()]
    return ("To call a tool, emit exactly one " + st.TOOL_CALL_OPEN
            + '{"name": "<tool>", "arguments": {...}}' + st.TOOL_CALL_CLOSE + " and stop.\nTools:\n"
            + "\n".join(lines))


def _content(m: dict, where: str) -> str:
    content = m.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: only text is served
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}.content[{j}]: only text content parts are supported",
                                   f"{where}.content")
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where}.content must be a string or a list of text parts", f"{where}.content")


ROLE_OF = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


def to_messages(messages: Any, tools: Mapping[str, Tool], template: str = "harness") -> list[Message]:
    """Request messages as harness messages (tools listed in the first system message, in the
    `template`'s words: see tools_prompt)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list", "messages")
    out: list[Message] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(f"{where} must be an object", where)
        role = m.get("role")
        if role not in ROLE_OF:
            raise RequestError(f"{where}.role: unknown role {role!r}; expected one of {', '.join(ROLE_OF)}",
                               f"{where}.role")
        text = _content(m, where)
        if role == "assistant":
            text = escape_special_tokens(text)  # a client's text never smuggles control tokens
            for call in m.get("tool_calls") or []:
                name, args = call_parts(call, f"{where}.tool_calls")
                text += format_tool_call(name, **args)
        out.append(Message(ROLE_OF[role], text))
    if tools:
        listing = tools_prompt(tools, template)
        if out[0].role == "system":
            out[0] = Message("system", out[0].content + "\n\n" + listing)
        else:
            out.insert(0, Message("system", listing))
    return out


def call_parts(call: Any, where: str) -> tuple[str, dict]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise RequestError(f"{where}: each tool call needs function.name", where)
    args = fn.get("arguments", "{}")
    try:
        args = json.loads(args) if isinstance(args, str) else args
    except ValueError as e:
        raise RequestError(f"{where}: function.arguments is not JSON: {e}", where) from None
    if not isinstance(args, dict):
        raise RequestError(f"{where}: function.arguments must be a JSON object", where)
    return fn["name"], args


def strip_stop(text: str) -> str:
    """Generated text without the turn's closing token(s)."""
    for token in (st.END_OF_TURN, st.EOS):
        if text.endswith(token):
            return text[: -len(token)]
    return text


def parse_reply(text: str, tools: Mapping[str, Tool]) -> tuple[str | None, list[dict] | None]:
    """(content, tool_calls) of a generated turn (harness text). A call that is malformed, names
    an unknown tool or has arguments outside its schema stays in the content."""
    text = strip_stop(text)
    if not tools or st.TOOL_CALL_OPEN not in text or text.count(st.TOOL_CALL_OPEN) > 1:
        return text, None
    before, body = text.split(st.TOOL_CALL_OPEN, 1)
    payload = body.split(st.TOOL_CALL_CLOSE, 1)[0] if st.TOOL_CALL_CLOSE in body else None
    try:
        call = json.loads(payload) if payload is not None else None
    except (ValueError, RecursionError):
        call = None
    if not isinstance(call, dict) or call.get("name") not in tools or not isinstance(call.get("arguments", {}), dict):
        return text, None
    args = call.get("arguments", {})
    if arguments_problem(tools[call["name"]].parameters, args):
        return text, None
    call_id = "call_" + hashlib.sha256(payload.encode()).hexdigest()[:24]
    return (before.strip() or None), [{"id": call_id, "type": "function", "function": {
        "name": call["name"], "arguments": json.dumps(args)}}]


def normalise(message: Mapping[str, Any]) -> tuple:
    """A request message in a form two equal messages share (None content = "", tool-call
    arguments parsed): how the server tells that a request continues a previous completion."""
    role = message.get("role")
    try:
        content = _content(dict(message), "message")
    except RequestError:
        content = repr(message.get("content"))
    calls = []
    for call in message.get("tool_calls") or []:
        try:
            name, args = call_parts(call, "tool_calls")
        except RequestError:
            return role, content, repr(call)
        calls.append((name, json.dumps(args, sort_keys=True)))
    return ROLE_OF.get(role, role), content.strip(), tuple(calls), message.get("tool_call_id") or ""


def reply_message(content: str | None, tool_calls: Sequence[dict] | None) -> dict:
    return {"role": "assistant", "content": content, **({"tool_calls": list(tool_calls)} if tool_calls else {})}
