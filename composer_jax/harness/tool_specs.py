"""The tools' names, arguments and descriptions: what the model may call and how it is checked."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from composer_jax.harness import special_tokens as st


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    type: type  # str or int
    required: bool = True
    description: str = ""


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    params: tuple[Param, ...] = ()


def _spec(name: str, description: str, *params: Param) -> ToolSpec:
    return ToolSpec(name, description, params)


TOOL_SPECS: dict[str, ToolSpec] = {
    s.name: s
    for s in (
        _spec("list_dir", "List files under a directory of the repository (recursive).",
              Param("path", str, False, "directory, default the repository root")),
        _spec("read_file", "Show a file with line numbers, optionally only lines start..end.",
              Param("path", str), Param("start_line", int, False), Param("end_line", int, False)),
        _spec("grep", "Search files for a regular expression; prints path:line: text.",
              Param("pattern", str), Param("path", str, False, "file or directory, default root")),
        _spec("edit_file", "Replace the one exact occurrence of `old` in a file with `new`.",
              Param("path", str), Param("old", str), Param("new", str)),
        _spec("write_file", "Create or overwrite a file with `content`.",
              Param("path", str), Param("content", str)),
        _spec("run_tests", "Run the repository's visible tests with pytest.",
              Param("selection", str, False, "test files or node ids, space separated")),
        _spec("run", "Run a shell command in the repository (no network, time-limited).",
              Param("cmd", str)),
        _spec("submit", "Finish: your changes are graded by hidden tests. Ends the episode."),
    )
}


def validate_arguments(spec: ToolSpec, arguments: Mapping[str, Any]) -> str | None:
    """None when the arguments fit the spec, else what is wrong (for the error observation)."""
    known = {p.name: p for p in spec.params}
    extra = sorted(set(arguments) - set(known))
    if extra:
        allowed = ", ".join(known) or "none"
        return f"unexpected argument(s) {extra}; allowed: {allowed}"
    missing = [p.name for p in spec.params if p.required and p.name not in arguments]
    if missing:
        return f"missing required argument(s) {missing}"
    for name, value in arguments.items():
        want = known[name].type
        # bool is an int subclass in Python, but `true` is never a line number.
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            return f"argument {name!r} must be {want.__name__}, got {type(value).__name__}"
    return None


def describe_tools(names: Iterable[str]) -> str:
    """One line per tool: signature and description, for the system prompt."""
    lines = []
    for name in names:
        spec = TOOL_SPECS[name]
        args = ", ".join(p.name if p.required else f"{p.name}?" for p in spec.params)
        lines.append(f"- {name}({args}): {spec.description}")
    return "\n".join(lines)


def system_prompt(tool_names: Iterable[str]) -> str:
    """The system message that tells a model the protocol and its tools."""
    names = list(tool_names)
    return (
        "You are a coding agent working in a repository. Each turn, think briefly, then call "
        f"exactly one tool as {st.TOOL_CALL_OPEN}"
        '{"name": "<tool>", "arguments": {...}}' + f"{st.TOOL_CALL_CLOSE}. "
        "Paths are relative to the repository root. Call submit when you are done.\n"
        "Tools:\n" + describe_tools(names)
    )
