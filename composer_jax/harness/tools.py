"""The tools an agent uses inside its workspace. Every failure is an observation, never a raise.

File tools (list/read/edit/write) act on the workspace's local directory after checking that
the path stays inside it; `grep`, `run_tests` and `run` execute in the sandbox so that a
pathological regex or command is bounded by the sandbox's limits. `submit` is not here: the
environment intercepts it and calls the grader.
"""
from __future__ import annotations

import dataclasses
import os
import shlex
from collections.abc import Callable, Mapping

from composer_jax.harness.protocol import ToolCall, escape_special_tokens
from composer_jax.sandbox.base import Limits, RunResult, SandboxBackend, Workspace

SKIPPED_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache"}


@dataclasses.dataclass(frozen=True)
class ToolConfig:
    observation_chars: int = 8000  # longer observations keep head and tail around a marker
    read_max_lines: int = 400  # read_file shows at most this many lines per call
    list_max_entries: int = 300
    max_write_bytes: int = 1 << 20
    python: tuple[str, ...] = ("python",)  # the sandbox puts the host venv's python on PATH
    limits: Limits = Limits(wall_s=30.0, cpu_s=30)


@dataclasses.dataclass(frozen=True)
class Observation:
    text: str
    ok: bool  # False for errors (bad path, no match, failed command is still ok=True)


def _error(message: str) -> Observation:
    return Observation(f"Error: {message}", ok=False)


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of long text with a visible marker of what was cut."""
    if len(text) <= limit:
        return text
    marker_budget = 40
    keep = max(limit - marker_budget, 0)
    head, tail = keep * 2 // 3, keep - keep * 2 // 3
    cut = len(text) - head - tail
    return text[:head] + f"\n[... truncated {cut} chars ...]\n" + (text[-tail:] if tail else "")


def resolve_path(root: str, path: str) -> str | Observation:
    """The host path for a workspace-relative `path`, or an error if it leaves the workspace
    (absolute paths, `..`, symlinks pointing outside)."""
    if not isinstance(path, str) or "\x00" in path:
        return _error("invalid path")
    if os.path.isabs(path):
        return _error(f"absolute paths are not allowed ({path!r}); use paths relative to the repository root")
    real_root = os.path.realpath(root)
    real = os.path.realpath(os.path.join(real_root, path))
    if os.path.commonpath([real_root, real]) != real_root:
        return _error(f"path {path!r} is outside the repository")
    return real


def _relative(root: str, host_path: str) -> str:
    return os.path.relpath(host_path, os.path.realpath(root))


def list_dir(root: str, path: str = ".", *, max_entries: int = 300) -> Observation:
    target = resolve_path(root, path)
    if isinstance(target, Observation):
        return target
    if not os.path.isdir(target):
        return _error(f"{path!r} is not a directory")
    entries = []
    for dirpath, dirnames, filenames in os.walk(target):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        rel_dir = _relative(root, dirpath)
        entries += [os.path.normpath(os.path.join(rel_dir, d)) + "/" for d in dirnames]
        entries += [os.path.normpath(os.path.join(rel_dir, f)) for f in sorted(filenames)]
    entries.sort()
    shown = entries[:max_entries]
    more = f"\n[... {len(entries) - max_entries} more entries ...]" if len(entries) > max_entries else ""
    return Observation("\n".join(shown) + more if shown else "(empty directory)", ok=True)


def _read_text(root: str, path: str) -> tuple[str, str] | Observation:
    """(host path, UTF-8 content) of a workspace file, or the error observation."""
    host_path = resolve_path(root, path)
    if isinstance(host_path, Observation):
        return host_path
    if not os.path.isfile(host_path):
        return _error(f"file {path!r} does not exist")
    try:
        with open(host_path, encoding="utf-8") as f:
            return host_path, f.read()
    except UnicodeDecodeError:
        return _error(f"{path!r} is not a UTF-8 text file")
    except OSError as e:
        return _error(f"cannot read {path!r}: {e.strerror}")


def numbered_lines(lines: list[str], start_line: int = 1) -> str:
    """Lines as read_file shows them: the 1-based number right-aligned, a tab, the text."""
    return "\n".join(f"{n:>5}\t{line}" for n, line in enumerate(lines, start_line))


def read_file(
    root: str, path: str, start_line: int = 1, end_line: int | None = None, *, max_lines: int = 400
) -> Observation:
    loaded = _read_text(root, path)
    if isinstance(loaded, Observation):
        return loaded
    _, text = loaded
    lines = text.splitlines()
    if not lines:
        return Observation(f"({path} is empty)", ok=True)
    end_line = len(lines) if end_line is None else end_line
    if start_line < 1 or start_line > len(lines) or end_line < start_line:
        return _error(f"line range {start_line}..{end_line} is invalid; {path} has {len(lines)} lines")
    end_line = min(end_line, len(lines), start_line + max_lines - 1)
    body = numbered_lines(lines[start_line - 1:end_line], start_line)
    if end_line < len(lines):
        body += f"\n[... lines {end_line + 1}..{len(lines)} not shown; pass start_line ...]"
    return Observation(body, ok=True)


def edit_file(root: str, path: str, old: str, new: str) -> Observation:
    loaded = _read_text(root, path)
    if isinstance(loaded, Observation):
        return loaded
    target, text = loaded
    if not old:
        return _error("'old' must not be empty; use write_file to create content")
    count = text.count(old)
    if count != 1:
        hint = "it does not occur" if count == 0 else f"it occurs {count} times; include more context"
        return _error(f"'old' must match exactly once in {path}, but {hint} (found {count} matches)")
    with open(target, "w", encoding="utf-8") as f:
        f.write(text.replace(old, new, 1))
    return Observation(f"Edited {path}.", ok=True)


def write_file(root: str, path: str, content: str, *, max_bytes: int = 1 << 20) -> Observation:
    target = resolve_path(root, path)
    if isinstance(target, Observation):
        return target
    if len(content.encode("utf-8", "surrogatepass")) > max_bytes:
        return _error(f"content is larger than {max_bytes} bytes")
    if os.path.isdir(target):
        return _error(f"{path!r} is a directory")
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write(content)
    except (OSError, UnicodeEncodeError) as e:
        return _error(f"cannot write {path!r}: {e}")
    return Observation(f"Wrote {path} ({len(content.splitlines())} lines).", ok=True)


def format_run_result(result: RunResult) -> str:
    parts = [f"exit code: {result.returncode}" + (" (timed out)" if result.timed_out else "")]
    if result.stdout:
        parts.append("--- stdout ---\n" + result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("--- stderr ---\n" + result.stderr.rstrip("\n"))
    if result.output_truncated:
        parts.append("[output was cut by the sandbox]")
    return "\n".join(parts)


def grep_argv(pattern: str, path: str) -> list[str]:
    # `--` stops a pattern like "-r" from being read as an option; with no path operand grep
    # searches the working directory and prints paths without a "./" prefix.
    where = [] if path == "." else [path]
    return ["grep", "-rnIE", "--exclude-dir=__pycache__", "--exclude-dir=.git", "--", pattern, *where]


def pytest_argv(python: tuple[str, ...], selection: str) -> list[str] | Observation:
    try:
        targets = shlex.split(selection)
    except ValueError as e:
        return _error(f"cannot parse selection: {e}")
    if any(t.startswith("-") for t in targets):
        return _error("selection takes test files or node ids only, not pytest options")
    return [*python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets]


class Toolbox:
    """Runs parsed tool calls against one workspace."""

    def __init__(self, backend: SandboxBackend, workspace: Workspace, config: ToolConfig = ToolConfig()):
        if not workspace.is_local:
            raise ValueError(
                f"backend {backend.name!r} gives non-local workspaces; the file tools need a local one"
            )
        self.backend, self.workspace, self.config = backend, workspace, config
        self._handlers: Mapping[str, Callable[..., Observation]] = {
            "list_dir": self._list_dir,
            "read_file": self._read_file,
            "grep": self._grep,
            "edit_file": lambda path, old, new: edit_file(self.root, path, old, new),
            "write_file": lambda path, content: write_file(
                self.root, path, content, max_bytes=config.max_write_bytes),
            "run_tests": self._run_tests,
            "run": lambda cmd: self._sandboxed(["/bin/sh", "-c", cmd]),
        }

    @property
    def root(self) -> str:
        return self.workspace.path

    def execute(self, call: ToolCall) -> Observation:
        handler = self._handlers.get(call.name)
        if handler is None:
            return _error(f"tool {call.name!r} is not handled here")
        obs = handler(**call.arguments)
        return Observation(truncate(escape_special_tokens(obs.text), self.config.observation_chars), obs.ok)

    def _list_dir(self, path: str = ".") -> Observation:
        return list_dir(self.root, path, max_entries=self.config.list_max_entries)

    def _read_file(self, path: str, start_line: int = 1, end_line: int | None = None) -> Observation:
        return read_file(self.root, path, start_line, end_line, max_lines=self.config.read_max_lines)

    def _grep(self, pattern: str, path: str = ".") -> Observation:
        target = resolve_path(self.root, path)
        if isinstance(target, Observation):
            return target
        result = self._run(grep_argv(pattern, _relative(self.root, target)))
        if result.returncode == 1 and not result.stderr:
            return Observation("(no matches)", ok=True)
        if result.returncode > 1 or result.timed_out:
            return _error("grep failed: " + (result.stderr.strip() or format_run_result(result)))
        return Observation(result.stdout.rstrip("\n"), ok=True)

    def _run_tests(self, selection: str = "") -> Observation:
        argv = pytest_argv(self.config.python, selection)
        return argv if isinstance(argv, Observation) else self._sandboxed(argv)

    def _sandboxed(self, argv: list[str]) -> Observation:
        return Observation(format_run_result(self._run(argv)), ok=True)

    def _run(self, argv: list[str]) -> RunResult:
        return self.backend.run(self.workspace, argv, self.config.limits)


def observe(toolbox: Toolbox, call: ToolCall) -> Observation:
    """Execute with a last-resort guard: a tool bug must not crash a rollout worker."""
    try:
        return toolbox.execute(call)
    except Exception as e:  # noqa: BLE001 - reported to the agent and in info, never swallowed silently
        return _error(f"internal tool failure ({type(e).__name__}: {e})")

