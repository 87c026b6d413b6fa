"""Run one launcher process with a wall-clock deadline and capped output.

stdout/stderr are read by one selector loop (no threads). Once a stream reaches its cap the
read end is closed, so a runaway writer gets EPIPE/SIGPIPE instead of burning the deadline.
"""
from __future__ import annotations

import dataclasses
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence


@dataclasses.dataclass
class Captured:
    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool
    wall_s: float


# The launcher runs with this PATH alone: the caller's environment never reaches a sandbox.
LAUNCH_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"

def _stdin_file(data: str):
    """stdin from an unlinked root-owned 0600 temp file: writing it never blocks us, and the
    sandbox uid can read it only through the fd it inherits (reopening it via /proc/<pid>/fd
    is refused), so a secret the grader passes this way is gone once consumed."""
    f = tempfile.TemporaryFile()  # noqa: SIM115 - handed to Popen, closed by the caller
    f.write(data.encode())
    f.seek(0)
    return f


def run_capped(argv: Sequence[str], stdin: str | None, wall_s: float, max_bytes: int,
               kill_tree: Callable[[int], None]) -> Captured:
    start = time.monotonic()
    fin = _stdin_file(stdin) if stdin is not None else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(list(argv), stdin=fin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, close_fds=True, env={"PATH": LAUNCH_PATH})
    finally:
        if stdin is not None:
            fin.close()
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    pipes = {out_fd: proc.stdout, err_fd: proc.stderr}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    deadline, timed_out, truncated = start + wall_s, False, False
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            if timed_out:
                break
            timed_out = True
            kill_tree(proc.pid)
            deadline = time.monotonic() + 2.0  # the tree is dead; drain what is left, briefly
            continue
        for key, _ in sel.select(timeout=left):
            chunk = os.read(key.fd, 1 << 16)
            buf = bufs[key.fd]
            buf += chunk[: max(max_bytes - len(buf), 0)]
            if not chunk or len(buf) >= max_bytes:
                truncated |= bool(chunk)
                sel.unregister(key.fd)
                pipes[key.fd].close()
    sel.close()
    for p in pipes.values():
        p.close()
    try:
        rc = proc.wait(timeout=max(deadline - time.monotonic(), 0.05))
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_tree(proc.pid)
        rc = proc.wait()
    return Captured(rc, bytes(bufs[out_fd]), bytes(bufs[err_fd]), timed_out, truncated,
                    time.monotonic() - start)


class Piped:
    """A process with its stdin and stdout as pipes and its stderr in an unlinked file (capped
    by RLIMIT_FSIZE inside the sandbox), so a chatty process never blocks on a full pipe."""

    def __init__(self, argv: Sequence[str], max_bytes: int):
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.max_bytes = max_bytes
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     start_new_session=True, close_fds=True, env={"PATH": LAUNCH_PATH})

    def close(self) -> str:
        """Reap the (killed) process; the tail of what it wrote to stderr."""
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:  # a write end whose reader is gone
                pass
        self.proc.wait()
        self.err.seek(max(0, self.err.seek(0, os.SEEK_END) - self.max_bytes))
        tail = self.err.read().decode(errors="replace")
        self.err.close()
        return tail


def killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
