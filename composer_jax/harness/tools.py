"""The tools an agent uses inside its workspace. Every failure is an observation, never a raise.

File tools (list/read/edit/write) act on the workspace's local directory after checking that
the path stays inside it; `grep`, `run_tests` and `run` execute in the sandbox so that a
pathological regex or command is bounded by the sandbox's limits. `submit` is not here: the
environment intercepts it and calls the grader.

A failed call changes nothing: writes go to a temp file that replaces the target at once, and
every argument is checked before anything is touched. Observations are valid UTF-8 and never
show the workspace's host path.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import os
import re
import shlex
import stat
from collections.abc import Callable, Mapping

from composer_jax.grading.submission import merge
from composer_jax.harness.protocol import ToolCall, escape_special_tokens
from composer_jax.harness.tool_specs import TOOL_SPECS, validate_arguments
from composer_jax.sandbox import files
from composer_jax.sandbox.base import Limits, RunResult, SandboxBackend, Workspace

LIST_SCAN_FACTOR = 10  # list_dir stops walking after this many times the entries it shows
SKIPPED_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache"}
SANDBOX_ROOT = "/workspace"  # where commands see the workspace; observations name it so
FILE_TEXT_ARGS = {"content", "old", "new"}  # may hold NUL; every other argument is a path or a command
TEST_FILE_PATTERNS = ("test_*.py", "*_test.py")  # pytest's default python_files
# What an observation may not hold (gymnasium's Text space of the env allows printable Basic
# Multilingual Plane text, tab, newline and CR): lone surrogates, control characters, and the
# characters beyond the BMP.
_SURROGATE = re.compile("[\ud800-\udfff]")
_UNSHOWABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff\U00010000-\U0010ffff]")


@dataclasses.dataclass(frozen=True)
class ToolConfig:
    observation_chars: int = 8000  # longer observations keep head and tail around a marker
    read_max_lines: int = 400  # read_file shows at most this many lines per call
    list_max_entries: int = 300
    max_write_bytes: int = 1 << 20
    max_read_bytes: int = 8 << 20  # read_file refuses larger files: they are read whole on the host
    python: tuple[str, ...] = ("python",)  # the sandbox puts the host venv's python on PATH
    limits: Limits = Limits(wall_s=30.0, cpu_s=30)


@dataclasses.dataclass(frozen=True)
class Observation:
    text: str
    ok: bool  # False for errors (bad path, no match, failed command is still ok=True)


def _error(message: str) -> Observation:
    return Observation(f"Error: {message}", ok=False)


def utf8_text(text: str) -> str:
    """`text` as an observation may show it: it always encodes as UTF-8 and stays in the env's
    text space. An undecodable byte of a file name (Python's surrogateescape) shows as \\xff,
    other surrogates and control characters as \\uXXXX / \\xNN, characters beyond the BMP as
    \\UXXXXXXXX."""
    return _UNSHOWABLE.sub(_escape, text)


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else (f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


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
    if _SURROGATE.search(path):
        return _error(f"path {path!r} is not valid UTF-8")
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
    entries, cap = [], LIST_SCAN_FACTOR * max_entries  # a tree of 270,000 files is not walked whole
    for dirpath, dirnames, filenames in os.walk(target):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        rel_dir = _relative(root, dirpath)
        files.prune(os.path.relpath(dirpath, target), dirnames)
        entries += [os.path.normpath(os.path.join(rel_dir, d)) + "/" for d in dirnames]
        entries += [os.path.normpath(os.path.join(rel_dir, f)) for f in sorted(filenames)]
        if len(entries) > cap:
            break
    entries.sort()
    shown = [utf8_text(e) for e in entries[:max_entries]]
    more = len(entries) - max_entries
    more = (f"\n[... {more} more entries ...]" if len(entries) <= cap else "\n[... many more entries ...]") \
        if more > 0 else ""
    return Observation("\n".join(shown) + more if shown else "(empty directory)", ok=True)


def _file_path(root: str, path: str) -> str | Observation:
    """The host path of a file (existing or not) at `path`, or the error: a path that ends in
    "/", "." or ".." or names a directory is not a file (resolving alone would drop the "/")."""
    target = resolve_path(root, path)
    if isinstance(target, Observation):
        return target
    if os.path.basename(path) in ("", ".", ".."):
        return _error(f"{path!r} names a directory (it ends in '/', '.' or '..'); give the path of a file")
    if os.path.isdir(target):
        return _error(f"{path!r} is a directory; give the path of a file")
    return target


def _read_text(root: str, path: str, max_bytes: int) -> tuple[str, str] | Observation:
    """(host path, UTF-8 content) of a workspace file, or the error observation."""
    host_path = _file_path(root, path)
    if isinstance(host_path, Observation):
        return host_path
    try:  # O_NONBLOCK: a fifo must not hang the tool; fstat then refuses it
        fd = os.open(host_path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return _error(f"file {path!r} does not exist")
    except OSError as e:
        return _error(f"cannot read {path!r}: {e.strerror}")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return _error(f"{path!r} is not a regular file")
        if st.st_size > max_bytes:
            return _error(f"{path!r} is larger than {max_bytes} bytes")
        data = f.read(max_bytes + 1)
    try:
        return host_path, data.decode("utf-8")
    except UnicodeDecodeError:
        return _error(f"{path!r} is not a UTF-8 text file")


def _encoded(text: str, what: str, max_bytes: int) -> bytes | Observation:
    """`text` as the UTF-8 bytes to write, or why it cannot be written."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as e:
        return _error(f"{what} is not valid UTF-8 text (a lone surrogate at position {e.start})")
    if len(data) > max_bytes:
        return _error(f"{what} is larger than {max_bytes} bytes")
    return data


def numbered_lines(lines: list[str], start_line: int = 1) -> str:
    """Lines as read_file shows them: the 1-based number right-aligned, a tab, the text."""
    return "\n".join(f"{n:>5}\t{line}" for n, line in enumerate(lines, start_line))


def read_file(
    root: str, path: str, start_line: int = 1, end_line: int | None = None, *, max_lines: int = 400,
    max_bytes: int = 8 << 20,
) -> Observation:
    loaded = _read_text(root, path, max_bytes)
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


def edit_file(root: str, path: str, old: str, new: str, *, max_bytes: int = 1 << 20) -> Observation:
    loaded = _read_text(root, path, max_bytes)
    if isinstance(loaded, Observation):
        return loaded
    target, text = loaded
    if not old:
        return _error("'old' must not be empty; use write_file to create content")
    count = text.count(old)
    if count != 1:
        hint = "it does not occur" if count == 0 else f"it occurs {count} times; include more context"
        return _error(f"'old' must match exactly once in {path}, but {hint} (found {count} matches)")
    data = _encoded(text.replace(old, new, 1), "the edited file", max_bytes)
    if isinstance(data, Observation):
        return data
    try:
        files.atomic_write(target, data)
    except OSError as e:
        return _error(f"cannot write {path!r}: {e.strerror}")
    return Observation(f"Edited {path}.", ok=True)


def write_file(root: str, path: str, content: str, *, max_bytes: int = 1 << 20) -> Observation:
    target = _file_path(root, path)
    if isinstance(target, Observation):
        return target
    data = _encoded(content, "content", max_bytes)
    if isinstance(data, Observation):
        return data
    made = _missing_dirs(os.path.dirname(target))
    try:
        for d in made:
            os.mkdir(d)
        files.atomic_write(target, data)
    except OSError as e:
        for d in reversed(made):  # a failed write leaves no new directories either
            with contextlib.suppress(OSError):
                os.rmdir(d)
        return _error(f"cannot write {path!r}: {e.strerror}")
    return Observation(f"Wrote {path} ({len(content.splitlines())} lines).", ok=True)


def _missing_dirs(directory: str) -> list[str]:
    """The ancestors of a file that do not exist yet, outermost first."""
    missing = []
    while not os.path.lexists(directory):
        missing.append(directory)
        directory = os.path.dirname(directory)
    return missing[::-1]


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


def _selection(selection: str) -> list[str] | Observation:
    try:
        targets = shlex.split(selection)
    except ValueError as e:
        return _error(f"cannot parse selection: {e}")
    if any(t.startswith("-") for t in targets):
        return _error("selection takes test files or node ids only, not pytest options")
    return targets


def pytest_argv(python: tuple[str, ...], selection: str) -> list[str] | Observation:
    targets = _selection(selection)
    if isinstance(targets, Observation):
        return targets
    return [*python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *targets]


def visible_tests(pristine: Mapping[str, str | bytes]) -> list[str]:
    """The task's own test files: the only ones a restricted run_tests runs."""
    return sorted(p for p in pristine
                  if any(fnmatch.fnmatchcase(os.path.basename(p), pat) for pat in TEST_FILE_PATTERNS))


def restricted_pytest_argv(python: tuple[str, ...], targets: list[str]) -> list[str]:
    # -I (isolated, so neither the working directory nor PYTHON* variables reach sys.path),
    # no ini file and importlib mode: pytest imports nothing of the workspace but the tests.
    return [*python, "-I", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", "/dev/null",
            f"--rootdir={SANDBOX_ROOT}", "--import-mode=importlib", *targets]


def _test_file(target: str) -> str | None:
    """The normalised file part of a node id, None if it could leave the workspace."""
    try:
        return files.check_relpath(target.split("::", 1)[0])
    except ValueError:
        return None


def argument_problem(name: str, value: object) -> str | None:
    """Why a tool argument that fits its spec still cannot be used, or None. File names are
    written as UTF-8 and commands as C strings, so no argument may hold a lone surrogate and
    only file text may hold NUL."""
    if not isinstance(value, str):
        return None
    if _SURROGATE.search(value):
        return f"argument {name!r} is not valid UTF-8 text (it holds a lone surrogate)"
    if "\x00" in value and name not in FILE_TEXT_ARGS:
        return f"argument {name!r} must not contain NUL characters"
    return None


class Toolbox:
    """Runs parsed tool calls against one workspace.

    With `pristine` (the task's files; for environments that withhold `run`), run_tests is no
    way to run code: it runs only the task's own visible tests, in a fresh workspace where
    protected files (tests, conftest.py, pytest config, site hooks) keep their pristine content,
    with nothing of the workspace on sys.path (so those tests must read the agent's files, e.g.
    parse them with `ast`, rather than import them)."""

    def __init__(self, backend: SandboxBackend, workspace: Workspace, config: ToolConfig = ToolConfig(), *,
                 pristine: Mapping[str, str | bytes] | None = None, quota: files.Quota = files.DEFAULT_QUOTA):
        if not workspace.is_local:
            raise ValueError(
                f"backend {backend.name!r} gives non-local workspaces; the file tools need a local one"
            )
        self.backend, self.workspace, self.config = backend, workspace, config
        self.pristine, self.quota = pristine, quota
        self._handlers: Mapping[str, Callable[..., Observation]] = {
            "list_dir": self._list_dir,
            "read_file": self._read_file,
            "grep": self._grep,
            "edit_file": lambda path, old, new: edit_file(
                self.root, path, old, new, max_bytes=config.max_write_bytes),
            "write_file": lambda path, content: write_file(
                self.root, path, content, max_bytes=config.max_write_bytes),
            "run_tests": self._run_tests if pristine is None else self._run_pristine_tests,
            "run": lambda cmd: self._sandboxed(["/bin/sh", "-c", cmd]),
        }

    @property
    def root(self) -> str:
        return self.workspace.path

    def execute(self, call: ToolCall) -> Observation:
        return self.shown(self._dispatch(call))

    def shown(self, obs: Observation) -> Observation:
        """`obs` as the agent sees it: special tokens broken up, valid UTF-8, the workspace named
        by its sandbox path (an OS error or /proc can carry the host one), long text cut."""
        text = escape_special_tokens(utf8_text(obs.text))
        for host in {os.path.realpath(self.root), os.path.abspath(self.root)}:
            text = text.replace(host, SANDBOX_ROOT)
        return Observation(truncate(text, self.config.observation_chars), obs.ok)

    def _dispatch(self, call: ToolCall) -> Observation:
        handler = self._handlers.get(call.name)
        if handler is None:
            return _error(f"tool {call.name!r} is not handled here")
        problems = (argument_problem(k, v) for k, v in call.arguments.items())
        problem = validate_arguments(TOOL_SPECS[call.name], call.arguments) or next(filter(None, problems), None)
        if problem:
            return _error(f"{call.name}: {problem}")
        return handler(**call.arguments)

    def _list_dir(self, path: str = ".") -> Observation:
        return list_dir(self.root, path, max_entries=self.config.list_max_entries)

    def _read_file(self, path: str, start_line: int = 1, end_line: int | None = None) -> Observation:
        return read_file(self.root, path, start_line, end_line, max_lines=self.config.read_max_lines,
                         max_bytes=self.config.max_read_bytes)

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

    def _run_pristine_tests(self, selection: str = "") -> Observation:
        targets = _selection(selection)
        if isinstance(targets, Observation):
            return targets
        allowed = visible_tests(self.pristine)
        if not allowed:
            return _error("this task has no visible tests")
        refused = [t for t in targets if _test_file(t) not in allowed]
        if refused:
            return _error(f"run_tests runs only the task's own test files ({', '.join(allowed)}), "
                          f"not {refused[0]!r}")
        usage = files.workspace_usage(self.root, self.quota)
        if usage.exceeded:  # do not read it all to the host
            return _error(f"workspace over quota: {usage.exceeded}")
        merged, _ = merge(self.pristine, self.backend.read_files(self.workspace))
        ws = self.backend.create(merged, self.workspace.runtime)
        try:
            result = self.backend.run(ws, restricted_pytest_argv(self.config.python, targets or allowed),
                                      self.config.limits)
        finally:
            self.backend.destroy(ws)
        return Observation(format_run_result(result), ok=True)

    def shell(self, cmd: str) -> RunResult:
        """A shell command in the workspace's sandbox, as `run` does, with the raw result (a
        third-party harness formats its own observations)."""
        return self._run(["/bin/sh", "-c", cmd])

    def _sandboxed(self, argv: list[str]) -> Observation:
        return Observation(format_run_result(self._run(argv)), ok=True)

    def _run(self, argv: list[str]) -> RunResult:
        return self.backend.run(self.workspace, argv, self.config.limits)


def observe(toolbox: Toolbox, call: ToolCall) -> Observation:
    """Execute with a last-resort guard: a tool bug must not crash a rollout worker."""
    try:
        return toolbox.execute(call)
    except Exception as e:  # noqa: BLE001 - reported to the agent and in info, never swallowed silently
        return toolbox.shown(_error(f"internal tool failure ({type(e).__name__}: {e})"))
