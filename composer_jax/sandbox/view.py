"""What a sandbox sees of the host: system directories, the base interpreter and one runtime
venv (sandbox/runtime.py), all read-only; every other Python package directory is hidden.

Paths keep their host names (a venv's `bin/python` and `pyvenv.cfg` hold absolute paths). The
project's venv is never bound, and where it or any site-/dist-packages directory lies under a
bound tree, an empty tmpfs is mounted over it: installed packages carry benchmark data.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import sys
from collections.abc import Mapping

from composer_jax.sandbox.base import Runtime

# Top-level entries a dynamically linked program needs; /home, /root, /work, /srv, ... stay out.
SYSTEM_ENTRIES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
SANDBOX_PATH = "/workspace"
SANDBOX_UID_BASE = 200_000  # sandbox uids live above any real account


@dataclasses.dataclass(frozen=True)
class View:
    ro_binds: tuple[tuple[str, str], ...]  # (host path, sandbox path)
    symlinks: tuple[tuple[str, str], ...]  # (link target, sandbox path)
    env: tuple[tuple[str, str], ...]  # the whole environment of a sandboxed command
    hidden: tuple[str, ...] = ()  # sandbox paths covered by an empty tmpfs


def _covered(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def python_roots() -> list[str]:
    """Host directories the base interpreter needs (its installation), outside /usr."""
    roots: list[str] = []
    for p in (sys.base_prefix, os.path.dirname(os.path.realpath(sys._base_executable))):
        real = os.path.realpath(p)
        if not _covered(real, ["/usr"]) and not _covered(real, roots):
            roots.append(real)
    return roots


def package_dirs(roots: list[str], keep: str) -> list[str]:
    """Python package directories under the bound trees, except the runtime `keep`: every
    site-/dist-packages directory, trees that vendor third-party packages (ensurepip's bundled
    pip and setuptools wheels, Debian's python-wheels and the Google Cloud SDK carry six, idna,
    cachetools, more_itertools, ...: RealRepos' pristine sources), and the project's venv if it
    lies under one of them."""
    patterns = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages",
                "local/lib/python3*/site-packages", "local/lib/python3*/dist-packages",
                "lib/python3*/ensurepip/_bundled", "share/python-wheels", "lib/google-cloud-sdk")
    found = {os.path.realpath(p) for r in roots for pat in patterns for p in glob.glob(os.path.join(r, pat))}
    venv = os.path.realpath(sys.prefix)
    if venv != os.path.realpath(sys.base_prefix) and _covered(venv, roots):
        found.add(venv)
    keep = os.path.realpath(keep)
    return sorted(p for p in found if not _covered(p, [keep]) and not _covered(keep, [p]) and os.path.isdir(p))


def system_view(runtime: Runtime, extra_ro: Mapping[str, str] | None = None) -> View:
    binds: list[tuple[str, str]] = []
    links: list[tuple[str, str]] = []
    for entry in SYSTEM_ENTRIES:
        if os.path.islink(entry):
            links.append((os.readlink(entry), entry))
        elif os.path.isdir(entry):
            binds.append((entry, entry))
    binds += [(r, r) for r in python_roots()]
    hidden = package_dirs([h for h, _ in binds], runtime.prefix)
    binds.append((runtime.prefix, runtime.prefix))
    binds += [(os.path.realpath(h), s) for h, s in (extra_ro or {}).items()]
    path = ":".join([os.path.join(runtime.prefix, "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    env = (("PATH", path), ("HOME", "/tmp"), ("TMPDIR", "/tmp"), ("LANG", "C.UTF-8"),
           ("PYTHONDONTWRITEBYTECODE", "1"), ("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1"))
    return View(tuple(binds), tuple(links), env, tuple(hidden))


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
