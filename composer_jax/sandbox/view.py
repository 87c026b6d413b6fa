"""What a sandbox sees of the host: system directories and the current Python, all read-only.

The venv is bound at its own path (its `bin/python` and `pyvenv.cfg` hold absolute paths), which
is cheaper than any copy and lets `python -m pytest` start exactly as it does outside.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping

# Top-level entries a dynamically linked program needs; /home, /root, /work, /srv, ... stay out.
SYSTEM_ENTRIES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SANDBOX_PATH = "/workspace"
SANDBOX_UID_BASE = 200_000  # sandbox uids live above any real account


@dataclasses.dataclass(frozen=True)
class View:
    ro_binds: tuple[tuple[str, str], ...]  # (host path, sandbox path)
    symlinks: tuple[tuple[str, str], ...]  # (link target, sandbox path)
    env: tuple[tuple[str, str], ...]  # the whole environment of a sandboxed command


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def python_roots() -> list[str]:
    """Host directories the current interpreter needs: its installation and the venv."""
    roots: list[str] = []
    for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        real = os.path.realpath(p)
        if not _covered(real, ["/usr"]) and not _covered(real, roots):
            roots.append(real)
    return roots


def system_view(extra_ro: Mapping[str, str] | None = None) -> View:
    binds: list[tuple[str, str]] = []
    links: list[tuple[str, str]] = []
    for entry in SYSTEM_ENTRIES:
        if os.path.islink(entry):
            links.append((os.readlink(entry), entry))
        elif os.path.isdir(entry):
            binds.append((entry, entry))
    binds += [(r, r) for r in python_roots()]
    binds += [(os.path.realpath(h), s) for h, s in (extra_ro or {}).items()]
    path = ":".join([os.path.join(sys.prefix, "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    env = (("PATH", path), ("HOME", "/tmp"), ("TMPDIR", "/tmp"), ("LANG", "C.UTF-8"),
           ("PYTHONDONTWRITEBYTECODE", "1"), ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1"))
    return View(tuple(binds), tuple(links), env)


def parent_dirs(paths: list[str]) -> list[str]:
    """Every proper ancestor of the sandbox paths, outermost first, without duplicates."""
    out: list[str] = []
    for p in paths:
        parts = p.strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/" + "/".join(parts[:i])
            if d not in out:
                out.append(d)
    return out


def sandbox_uid(workspace_id: str) -> int:
    """One unprivileged uid per workspace, so RLIMIT_NPROC counts only this workspace's
    processes and two sandboxes never share an owner."""
    return SANDBOX_UID_BASE + int(workspace_id[:8], 16) % 800_000
