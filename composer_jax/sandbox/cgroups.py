"""cgroup v1 `pids` and `memory` groups per sandboxed run: hard caps on process count and memory
that, unlike RLIMIT_NPROC/RLIMIT_AS, hold for the whole tree whatever uid it runs as, and a
membership list to sweep with SIGKILL when the run ends.

Without writable v1 controllers (no root, cgroup v2 only) `make` returns no directories and the
backend falls back to rlimits alone: RLIMIT_NPROC against a uid unique to the workspace, and
RLIMIT_AS per process.
"""
from __future__ import annotations

import os
import signal
import time

CONTROLLERS = ("pids", "memory")


def _v1_mounts() -> dict[str, str]:
    mounts: dict[str, str] = {}
    with open("/proc/self/mounts") as f:
        for line in f:
            _, where, fstype, opts, *_ = line.split()
            if fstype == "cgroup":
                for c in CONTROLLERS:
                    if c in opts.split(","):
                        mounts[c] = where
    return mounts


def _own_paths() -> dict[str, str]:
    paths: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, names, path = line.rstrip("\n").split(":", 2)
            for c in names.split(","):
                paths[c] = path
    return paths


def parents() -> dict[str, str]:
    """controller -> directory under which run cgroups are created (our own cgroup), or {}."""
    if os.geteuid() != 0:
        return {}
    mounts, own = _v1_mounts(), _own_paths()
    out = {c: os.path.join(mounts[c], own.get(c, "/").lstrip("/")) for c in CONTROLLERS if c in mounts}
    if len(out) != len(CONTROLLERS) or not all(os.access(d, os.W_OK) for d in out.values()):
        return {}
    return out


def make(parent_dirs: dict[str, str], name: str, memory_bytes: int, max_procs: int) -> list[str]:
    dirs = []
    try:
        for c, parent in parent_dirs.items():
            d = os.path.join(parent, name)
            os.mkdir(d)
            dirs.append(d)
            knob, value = ("pids.max", max_procs) if c == "pids" else ("memory.limit_in_bytes", memory_bytes)
            with open(os.path.join(d, knob), "w") as f:
                f.write(str(value))
    except OSError:
        remove(dirs)
        raise
    return dirs


def _members(d: str) -> list[int]:
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def kill(dirs: list[str], timeout_s: float = 2.0) -> None:
    """SIGKILL every member until the groups are empty. pids.max bounds how many can appear."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = {p for d in dirs for p in _members(d)}
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.005)


def remove(dirs: list[str]) -> None:
    for d in dirs:
        for _ in range(1000):  # a killed task leaves the group only once it is reaped (5 s at most)
            try:
                os.rmdir(d)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.005)
