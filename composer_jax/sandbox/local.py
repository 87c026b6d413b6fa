"""Local sandbox backend: bubblewrap or util-linux `unshare`, rlimits, cgroup v1 caps.

Each workspace is a host directory (mode 0700 parent, so other host users cannot look in)
owned by a uid unique to the workspace; it is bind-mounted at /workspace and is the only
writable place besides a private /tmp. Needs root: the uid drop and cgroups require it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import weakref
from collections.abc import Mapping, Sequence

from composer_jax.sandbox import argv as argv_lib
from composer_jax.sandbox import cgroups, files, runtime
from composer_jax.sandbox.base import (
    Limits,
    RunResult,
    Runtime,
    SandboxBackend,
    SandboxProcess,
    SandboxUnavailableError,
    Workspace,
)
from composer_jax.sandbox.process import LAUNCH_PATH, Piped, killpg, run_capped
from composer_jax.sandbox.view import sandbox_uid, system_view

FLAVOURS = ("bwrap", "unshare")
PREFIX = "cj-sandbox-"
OWNER_FILE = ".owner"  # pid of the process that made the directory
REQUIRED_TOOLS = {
    "bwrap": {"bwrap": "apt-get install bubblewrap", "setpriv": "apt-get install util-linux",
              "prlimit": "apt-get install util-linux"},
    "unshare": {"unshare": "apt-get install util-linux", "setpriv": "apt-get install util-linux",
                "prlimit": "apt-get install util-linux", "pivot_root": "apt-get install util-linux",
                "mount": "apt-get install mount"},
}


def missing_tools(flavour: str) -> list[str]:
    """'tool (install hint)' for each tool of `flavour` the launcher cannot run: it looks on
    LAUNCH_PATH, not the caller's PATH (a bwrap in /usr/local/bin passed a PATH check, then
    every launch failed with 'prlimit: failed to execute bwrap')."""
    return [f"{t} ({hint}; not in {LAUNCH_PATH})" for t, hint in REQUIRED_TOOLS[flavour].items()
            if shutil.which(t, path=LAUNCH_PATH) is None]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user
    return True


def sweep_orphans(parent: str) -> list[str]:
    """Remove sandbox directories whose owning process is gone (it was killed before its
    finaliser ran: SIGKILL, OOM, a killed notebook kernel). Directories without an owner file
    are left alone."""
    removed = []
    for name in os.listdir(parent):
        path = os.path.join(parent, name)
        if not name.startswith(PREFIX):
            continue
        try:
            with open(os.path.join(path, OWNER_FILE)) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            continue
        if pid != os.getpid() and not _alive(pid):
            files.remove_tree(path)
            removed.append(path)
    return removed


class LocalBackend(SandboxBackend):
    def __init__(self, flavour: str = "bwrap", base_dir: str | None = None, use_cgroups: bool = True):
        if flavour not in FLAVOURS:
            raise ValueError(f"unknown local sandbox flavour {flavour!r}; expected one of {FLAVOURS}")
        if missing := missing_tools(flavour):
            raise SandboxUnavailableError(f"{flavour} sandbox needs: {', '.join(missing)}")
        if os.geteuid() != 0:
            raise SandboxUnavailableError(f"{flavour} sandbox must run as root (uid drop, cgroups)")
        self.name = flavour
        sweep_orphans(base_dir or tempfile.gettempdir())
        self.base_dir = tempfile.mkdtemp(prefix=PREFIX, dir=base_dir)  # 0700
        with open(os.path.join(self.base_dir, OWNER_FILE), "w") as f:
            f.write(str(os.getpid()))
        self.mount_point = os.path.join(self.base_dir, ".root")  # unshare builds its root here
        os.mkdir(self.mount_point)
        weakref.finalize(self, files.remove_tree, self.base_dir)
        self.cgroup_parents = cgroups.parents() if use_cgroups else {}
        self._probe()

    @property
    def uses_cgroups(self) -> bool:
        return bool(self.cgroup_parents)

    def _probe(self) -> None:
        ws = self.create({})
        try:
            res = self.run(ws, ["true"], Limits(wall_s=10.0))
        finally:
            self.destroy(ws)
        if res.returncode != 0:
            raise SandboxUnavailableError(
                f"{self.name} sandbox does not start here (rc={res.returncode}): {res.stderr.strip()[-500:]}")

    def create(self, files_: Mapping[str, str | bytes], runtime: Runtime | None = None) -> Workspace:
        wid = uuid.uuid4().hex
        path = os.path.join(self.base_dir, wid)
        os.mkdir(path, 0o755)
        try:
            files.write_tree(path, files_)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        return Workspace(id=wid, path=path, is_local=True, runtime=runtime)

    def _launcher(self, workspace: Workspace, argv: Sequence[str], limits: Limits,
                  ro_binds: Mapping[str, str] | None) -> tuple[list[str], list[str]]:
        """(the command line that enters the sandbox, the run's cgroup directories)."""
        if not argv:
            raise ValueError("empty argv")
        uid = sandbox_uid(workspace.id)
        files.chown_tree(workspace.path, uid, uid)  # host-side tools may have written as root
        view = system_view(workspace.runtime or runtime.build(), ro_binds)
        if self.name == "bwrap":
            inner = argv_lib.bwrap_argv(view, workspace.path, uid, limits, argv)
        else:
            inner = argv_lib.unshare_argv(view, workspace.path, self.mount_point, uid, limits, argv)
        cg = cgroups.make(self.cgroup_parents, f"cj-{uuid.uuid4().hex}", limits.memory_bytes,
                          limits.max_procs + argv_lib.NS_OVERHEAD_PROCS) if self.cgroup_parents else []
        return argv_lib.launcher(cg, limits, inner), cg

    def run(self, workspace: Workspace, argv: Sequence[str], limits: Limits = Limits(), *,  # noqa: B008 - as in base
            stdin: str | None = None, ro_binds: Mapping[str, str] | None = None) -> RunResult:
        launcher, cg = self._launcher(workspace, argv, limits, ro_binds)

        def kill_tree(pid: int) -> None:
            killpg(pid)  # the launcher; its death takes the namespace init and so the namespace
            cgroups.kill(cg)

        try:
            cap = run_capped(launcher, stdin, limits.wall_s, limits.max_output_bytes, kill_tree)
        finally:
            cgroups.kill(cg)
            cgroups.remove(cg)
        return RunResult(returncode=cap.returncode, stdout=cap.stdout.decode(errors="replace"),
                         stderr=cap.stderr.decode(errors="replace"), timed_out=cap.timed_out,
                         wall_s=cap.wall_s, output_truncated=cap.truncated)

    def spawn(self, workspace: Workspace, argv: Sequence[str], limits: Limits = Limits(), *,  # noqa: B008 - as in base
              ro_binds: Mapping[str, str] | None = None) -> SandboxProcess:
        launcher, cg = self._launcher(workspace, argv, limits, ro_binds)
        try:
            return LocalProcess(Piped(launcher, limits.max_output_bytes), cg)
        except BaseException:
            cgroups.remove(cg)
            raise

    def read_files(self, workspace: Workspace) -> dict[str, bytes]:
        return files.read_tree(workspace.path)

    def destroy(self, workspace: Workspace) -> None:
        files.remove_tree(workspace.path)


class LocalProcess(SandboxProcess):
    def __init__(self, piped: Piped, cg: list[str]):
        self._piped, self._cg = piped, cg
        self.stdin_fd, self.stdout_fd = piped.proc.stdin.fileno(), piped.proc.stdout.fileno()

    def close(self) -> str:
        if self._piped is None:
            return ""
        try:
            killpg(self._piped.proc.pid)
            cgroups.kill(self._cg)
            return self._piped.close()
        finally:
            cgroups.remove(self._cg)
            self._piped = None
