"""Host-side workspace files: write a mapping into a directory, read it back, hand it to a uid.

Everything here runs as root on agent-controlled trees, so nothing follows symlinks: reads use
O_NOFOLLOW, ownership changes walk with directory fds (`os.fwalk`) and never dereference links.
"""
from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Mapping


def check_relpath(path: str) -> str:
    """The normalised form of a workspace-relative path; ValueError if it could leave the root."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise ValueError(f"invalid workspace path {path!r}")
    norm = posixpath.normpath(path)
    if posixpath.isabs(norm) or norm == "." or norm.split("/")[0] == "..":
        raise ValueError(f"workspace path {path!r} is absolute or leaves the workspace")
    return norm


def write_tree(root: str, files: Mapping[str, str | bytes]) -> None:
    """Write `files` under `root` (which must exist), creating parent directories."""
    for rel, content in files.items():
        target = os.path.join(root, check_relpath(rel))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        data = content.encode() if isinstance(content, str) else bytes(content)
        with open(target, "wb") as f:
            f.write(data)


def read_tree(root: str) -> dict[str, bytes]:
    """Every regular file under `root`; symlinks, fifos and devices are skipped, never followed."""
    out: dict[str, bytes] = {}
    for dirpath, _, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        for name in filenames:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dirfd)
            except OSError:  # a symlink (ELOOP) or vanished entry
                continue
            with os.fdopen(fd, "rb") as f:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    out[posixpath.normpath(posixpath.join(rel_dir, name))] = f.read()
    return out


def chown_tree(root: str, uid: int, gid: int) -> None:
    """Give every entry under `root` (and root itself) to uid:gid so the sandbox user can edit
    files that host-side tools created as root. Links are re-owned themselves, not followed."""
    if os.lstat(root).st_uid != uid:
        os.chown(root, uid, gid, follow_symlinks=False)
    for _, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        for name in dirnames + filenames:
            try:
                st = os.lstat(name, dir_fd=dirfd)
                if st.st_uid != uid or st.st_gid != gid:
                    os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
