"""Host-side workspace files: write a mapping into a directory, read it back, hand it to a uid.

Everything here runs as root on agent-controlled trees, so nothing follows symlinks: reads use
O_NOFOLLOW, ownership changes walk with directory fds (`os.fwalk`) and never dereference links.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import posixpath
import stat
import subprocess
import tempfile
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Quota:
    """Caps on one workspace: apparent bytes (st_size, so a sparse file counts in full) and
    entries (files, directories and links)."""

    max_bytes: int = 64 << 20
    max_files: int = 10_000
    max_depth: int = 64  # nested directories; host-side walks never go deeper (MAX_DEPTH)


@dataclasses.dataclass(frozen=True)
class Usage:
    bytes: int  # counted so far: the walk stops at the first cap passed
    entries: int
    exceeded: str | None = None  # which cap was passed, or None within quota


DEFAULT_QUOTA = Quota()
# Host-side walks (read_tree, chown_tree, the file tools) stop here: os.fwalk and os.walk
# recurse, and a tree 5,000 directories deep would end them in RecursionError. A deeper
# workspace is over quota, so nothing below this depth is ever graded.
MAX_DEPTH = DEFAULT_QUOTA.max_depth


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


def prune(rel_dir: str, dirnames: list[str]) -> None:
    """In a top-down walk, descend no deeper than MAX_DEPTH below the root."""
    if rel_dir != "." and rel_dir.count("/") + 1 >= MAX_DEPTH:
        dirnames.clear()


def remove_tree(path: str) -> None:
    """Delete a tree however deep (`rm -rf` walks without recursing; shutil.rmtree does not)."""
    subprocess.run(["rm", "-rf", "--one-file-system", "--", path], check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def read_tree(root: str) -> dict[str, bytes]:
    """Every regular file under `root`; symlinks, fifos and devices are skipped, never followed."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        prune(rel_dir, dirnames)
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
    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        prune(os.path.relpath(dirpath, root), dirnames)
        for name in dirnames + filenames:
            try:
                st = os.lstat(name, dir_fd=dirfd)
                if st.st_uid != uid or st.st_gid != gid:
                    os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
            except FileNotFoundError:
                continue


def workspace_usage(root: str, quota: Quota = DEFAULT_QUOTA) -> Usage:
    """Apparent bytes and entries under `root`, walked with lstat (links are counted, never
    followed). Stops as soon as a cap is passed, so it costs O(quota) on any tree."""
    size = entries = 0
    pending = [(root, 0)]
    while pending:
        path, depth = pending.pop()
        if depth > quota.max_depth:
            return Usage(size, entries, f"directories nested deeper than {quota.max_depth}")
        try:
            it = os.scandir(path)
        except OSError:  # vanished or replaced by a file meanwhile
            continue
        with it:
            for entry in it:
                entries += 1
                if entries > quota.max_files:
                    return Usage(size, entries, f"more than {quota.max_files} files, directories and links")
                if entry.is_dir(follow_symlinks=False):
                    pending.append((entry.path, depth + 1))
                    continue
                with contextlib.suppress(OSError):
                    size += entry.stat(follow_symlinks=False).st_size
                if size > quota.max_bytes:
                    return Usage(size, entries, f"more than {quota.max_bytes} bytes in files")
    return Usage(size, entries)


def atomic_write(path: str, data: bytes, mode: int = 0o644) -> None:
    """Replace the file at `path` with `data` at once: a temp file in the same directory, then
    os.replace. A failure leaves the old file (or none) and no temp file; an existing file keeps
    its mode. `path` must not be a symlink (callers pass resolved paths)."""
    with contextlib.suppress(FileNotFoundError):
        mode = stat.S_IMODE(os.lstat(path).st_mode)
    fd, tmp = tempfile.mkstemp(prefix=".cj-write-", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
