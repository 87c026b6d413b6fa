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


@dataclasses.dataclass
class Workspace:
    """A disposable writable directory tree that commands run in (mounted at `/workspace`)."""

    id: str
    path: str  # host path, meaningful when is_local
    is_local: bool = True


class SandboxUnavailableError(RuntimeError):
    """The requested backend cannot run on this machine; the message says what to install."""


class SandboxBackend(abc.ABC):
    name: str = "abstract"

    @abc.abstractmethod
    def create(self, files: Mapping[str, str | bytes]) -> Workspace:
        """A new workspace holding `files` (relative path -> content)."""

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
    def read_files(self, workspace: Workspace) -> dict[str, bytes]:
        """All regular files of the workspace (relative path -> bytes)."""

    @abc.abstractmethod
    def destroy(self, workspace: Workspace) -> None:
        """Remove the workspace and everything it holds."""
