"""The sandbox backend interface: create a workspace, run commands in it with limits, destroy it.

Every backend (local namespaces/bubblewrap today, a remote Ray pool later) implements
`SandboxBackend`. Callers never touch the host filesystem of a workspace except through
`Workspace.path` on backends where it is local (`Workspace.is_local`).
"""
from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits for one command run inside a sandbox."""

    wall_s: float = 20.0  # wall clock; the whole process tree is killed after it
    cpu_s: int = 20  # RLIMIT_CPU per process
    memory_bytes: int = 1 << 30  # address space / cgroup memory
    max_procs: int = 64  # processes in the sandbox
    max_file_bytes: int = 16 << 20  # RLIMIT_FSIZE
    max_output_bytes: int = 64 << 10  # stdout and stderr are each cut to this
    network: bool = False


@dataclasses.dataclass(frozen=True)
class RunResult:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    output_truncated: bool = False


@dataclasses.dataclass(frozen=True)
class Runtime:
    """The Python a sandbox runs: a venv over the base interpreter with declared packages only."""

    prefix: str  # the venv's directory, mounted read-only at the same path

    @property
    def python(self) -> str:
        return f"{self.prefix}/bin/python"


@dataclasses.dataclass
class Workspace:
    """A disposable writable directory tree that commands run in (mounted at `/workspace`)."""

    id: str
    path: str  # host path, meaningful when is_local
    is_local: bool = True
    runtime: Runtime | None = None  # None: the default runtime (sandbox.runtime.build())


class SandboxProcess(abc.ABC):
    """A sandboxed process that the caller talks to over its stdin and stdout pipes."""

    stdin_fd: int  # write end of the process's stdin
    stdout_fd: int  # read end of its stdout

    @abc.abstractmethod
    def close(self) -> str:
        """Kill the process tree, release its resources; returns the tail of its stderr."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SandboxUnavailableError(RuntimeError):
    """The requested backend cannot run on this machine; the message says what to install."""


class SandboxBackend(abc.ABC):
    name: str = "abstract"

    @abc.abstractmethod
    def create(self, files: Mapping[str, str | bytes], runtime: Runtime | None = None) -> Workspace:
        """A new workspace holding `files` (relative path -> content); its commands run
        `runtime`'s Python."""

    @abc.abstractmethod
    def run(
        self,
        workspace: Workspace,
        argv: Sequence[str],
        limits: Limits = Limits(),
        *,
        stdin: str | None = None,
        ro_binds: Mapping[str, str] | None = None,
    ) -> RunResult:
        """Run argv with cwd=/workspace. `ro_binds` maps host paths to read-only sandbox paths."""

    @abc.abstractmethod
    def spawn(self, workspace: Workspace, argv: Sequence[str], limits: Limits = Limits(), *,
              ro_binds: Mapping[str, str] | None = None) -> SandboxProcess:
        """Start argv like `run`, but hand back its pipes; `limits.wall_s` is the caller's to
        enforce (close the process by then)."""

    @abc.abstractmethod
    def read_files(self, workspace: Workspace) -> dict[str, bytes]:
        """All regular files of the workspace (relative path -> bytes)."""

    @abc.abstractmethod
    def destroy(self, workspace: Workspace) -> None:
        """Remove the workspace and everything it holds."""
