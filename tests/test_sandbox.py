"""Real isolation checks for both local backends (bubblewrap and unshare)."""
from __future__ import annotations

import os
import shutil
import socket
import time

import pytest

from composer_jax.sandbox import Limits, SandboxUnavailableError, get_backend, local
from composer_jax.sandbox.view import SANDBOX_UID_BASE, sandbox_uid

PY = "python"


@pytest.fixture(scope="module", params=["bwrap", "unshare"])
def backend(request):
    try:
        return get_backend(request.param)
    except SandboxUnavailableError as e:
        pytest.skip(f"{request.param} cannot run here: {e}")


@pytest.fixture
def ws(backend):
    w = backend.create({"hello.txt": "hi\n", "pkg/mod.py": "X = 1\n"})
    yield w
    backend.destroy(w)


def sh(backend, ws, script, **limits):
    return backend.run(ws, ["sh", "-c", script], Limits(**{"wall_s": 20.0, **limits}))


def sandbox_pids(ws) -> list[int]:
    """Live processes of this workspace's sandbox uid."""
    uid, out = sandbox_uid(ws.id), []
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{p}").st_uid == uid:
                out.append(int(p))
        except FileNotFoundError:
            pass
    return out


def test_no_network(backend, ws):
    """A server listening on the host's loopback is out of reach (the sandbox's network namespace
    has only its own, unconnected `lo`); nothing is sent anywhere else."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = ("import socket\nprint(sorted(n for _, n in socket.if_nameindex()))\n"
                f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n    print('CONNECTED')\n"
                "except OSError as e:\n    print('blocked')\n")
        res = backend.run(ws, [PY, "-c", code])
    assert res.stdout.splitlines() == ["['lo']", "blocked"], res.stderr


def test_own_pid_namespace(backend, ws):
    res = sh(backend, ws, "ls /proc | grep -c '^[0-9]'; tr '\\0\\n' '  ' < /proc/1/cmdline")
    count, init = res.stdout.splitlines()
    assert int(count) <= 5  # init, sh, ls, grep (+ tr)
    assert init.startswith(("bwrap", "/bin/sh -c set -e"))


def test_unprivileged_and_read_only_system(backend, ws):
    site = next(p for p in __import__("sys").path if p.endswith("site-packages"))
    script = (f"id -u; grep CapEff /proc/self/status; cat /etc/shadow >/dev/null 2>&1 || echo noshadow; "
              f"for d in / /usr /etc {site} {os.path.realpath(__import__('sys').base_prefix)}; do "
              "touch $d/cj-probe 2>/dev/null && echo WROTE $d; done; echo ok")
    res = sh(backend, ws, script)
    uid, caps, *rest = res.stdout.splitlines()
    assert int(uid) >= SANDBOX_UID_BASE
    assert caps.split() == ["CapEff:", "0000000000000000"]
    assert rest == ["noshadow", "ok"], res.stdout
    assert not os.path.exists("/usr/cj-probe")


def test_bundled_wheels_are_hidden(backend, ws):
    """ensurepip's pip and setuptools wheels vendor six, idna, packaging, more_itertools, ...:
    RealRepos' pristine sources. The host has them; the sandbox sees an empty directory."""
    import ensurepip
    bundled = os.path.join(os.path.dirname(ensurepip.__file__), "_bundled")
    if not os.path.isdir(bundled):  # Debian/Ubuntu system Pythons ship ensurepip without its wheels
        pytest.skip(f"{bundled} does not exist on this Python")
    assert any(n.endswith(".whl") for n in os.listdir(bundled))
    res = backend.run(ws, [PY, "-c", f"import os; print(os.listdir({bundled!r}))"])
    assert res.stdout.strip() == "[]", (res.stdout, res.stderr)


def test_workspace_writable_and_read_back(backend, ws):
    with open(os.path.join(ws.path, "host_written.txt"), "w") as f:  # a host tool, as root
        f.write("from host\n")
    res = sh(backend, ws, "cat hello.txt; echo more >> host_written.txt; mkdir -p new/dir; "
             "echo x > new/dir/f.txt; ln -s /etc/passwd leak; echo tmp > /tmp/t; pwd")
    assert res.stdout.splitlines() == ["hi", "/workspace"], res.stderr
    got = backend.read_files(ws)
    assert got["host_written.txt"] == b"from host\nmore\n"
    assert got["new/dir/f.txt"] == b"x\n" and "leak" not in got
    assert "t" not in sh(backend, ws, "ls /tmp").stdout.split()  # /tmp is private to each run


def test_stdin_and_ro_binds(backend, ws, tmp_path):
    (tmp_path / "data.txt").write_text("bound\n")
    tmp_path.chmod(0o755)  # binds keep host permissions; the sandbox uid is not root
    res = backend.run(ws, ["sh", "-c", "cat; cat /extra/data.txt; touch /extra/x || echo ro"],
                      stdin="from stdin\n", ro_binds={str(tmp_path): "/extra"})
    assert res.stdout.splitlines() == ["from stdin", "bound", "ro"]


def test_stdin_is_unreachable_once_consumed(backend, ws):
    """The grader passes its key on stdin; no other process's fds expose it to the sandbox uid."""
    res = backend.run(ws, ["sh", "-c", "cat >/dev/null; for p in /proc/[0-9]*; do cat $p/fd/0 2>/dev/null; done; echo end"],
                      stdin="secret-key\n")
    assert res.stdout == "end\n"


def test_network_can_be_allowed(backend, ws):
    res = backend.run(ws, [PY, "-c", "import socket; print(len(socket.if_nameindex()))"], Limits(network=True))
    assert int(res.stdout) > 1


def test_timeout_kills_the_whole_tree(backend, ws):
    start = time.monotonic()
    res = sh(backend, ws, "sleep 300 & (setsid sleep 300 &); echo started; sleep 300", wall_s=1.0)
    assert res.timed_out and res.stdout == "started\n"
    assert time.monotonic() - start < 5
    assert sandbox_pids(ws) == []


def test_background_children_die_with_the_command(backend, ws):
    res = sh(backend, ws, "(setsid sleep 300 &); nohup sleep 300 >/dev/null 2>&1 & echo done")
    assert not res.timed_out and res.stdout == "done\n" and res.wall_s < 5
    assert sandbox_pids(ws) == []


def test_cpu_limit(backend, ws):
    res = backend.run(ws, [PY, "-c", "while True: pass"], Limits(wall_s=20.0, cpu_s=1))
    assert not res.timed_out and res.returncode != 0 and res.wall_s < 10


def test_memory_limit(backend, ws):
    code = "b = bytearray(1 << 30)\nprint('allocated')"
    res = backend.run(ws, [PY, "-c", code], Limits(memory_bytes=256 << 20))
    assert "MemoryError" in res.stderr and "allocated" not in res.stdout


def test_file_size_limit(backend, ws):
    res = sh(backend, ws, "head -c 3000000 /dev/zero > big; ls -l big", max_file_bytes=1 << 20)
    assert res.returncode != 0 or "1048576" in res.stdout
    assert os.path.getsize(os.path.join(ws.path, "big")) <= 1 << 20


FORKER = """
import os, time
n = 0
for _ in range(200):
    try:
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
    except OSError:
        break
print(n)
"""


def test_process_limit(backend, ws):
    res = backend.run(ws, [PY, "-c", FORKER], Limits(max_procs=16, wall_s=20.0))
    assert 0 < int(res.stdout) < 16, res.stderr
    assert sandbox_pids(ws) == []


def test_process_limit_without_cgroups(ws, backend):
    """The documented fallback: RLIMIT_NPROC against the workspace's own uid."""
    plain = local.LocalBackend(backend.name, use_cgroups=False)
    assert not plain.uses_cgroups
    w = plain.create({})
    try:
        res = plain.run(w, [PY, "-c", FORKER], Limits(max_procs=16, wall_s=20.0))
    finally:
        plain.destroy(w)
    assert 0 < int(res.stdout) < 16, res.stderr


def test_output_is_capped(backend, ws):
    res = sh(backend, ws, "yes; echo never", max_output_bytes=10_000, wall_s=10.0)
    assert res.output_truncated and len(res.stdout) == 10_000
    assert not res.timed_out and res.wall_s < 5  # yes dies of SIGPIPE once we stop reading


def test_path_traversal_is_refused(backend):
    for bad in ["../escape.txt", "/etc/evil", "a/../../b"]:
        with pytest.raises(ValueError):
            backend.create({bad: "x"})


def test_unknown_backend_name():
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        get_backend("docker")


def test_missing_tool_names_the_package(monkeypatch):
    real = shutil.which
    monkeypatch.setattr(local.shutil, "which", lambda t, path=None: None if t == "bwrap" else real(t, path=path))
    with pytest.raises(SandboxUnavailableError, match="apt-get install bubblewrap"):
        local.LocalBackend("bwrap")


def test_a_tool_only_on_the_callers_path_is_missing(monkeypatch, tmp_path):
    """The launcher runs with LAUNCH_PATH alone, so a tool the caller's PATH alone finds (a
    bwrap copied to /usr/local/bin, say) could never start a sandbox: it counts as missing."""
    tool = tmp_path / "cj-only-here"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setitem(local.REQUIRED_TOOLS, "bwrap", {"cj-only-here": "install it"})
    assert shutil.which("cj-only-here")
    assert local.missing_tools("bwrap") == [f"cj-only-here (install it; not in {local.LAUNCH_PATH})"]


def test_directories_of_killed_owners_are_swept(backend, tmp_path):
    import subprocess
    import sys
    # A process that made a sandbox and was SIGKILLed before its finaliser could clean up.
    code = ("import os, sys; from composer_jax.sandbox import local; "
            f"b = local.LocalBackend({backend.name!r}, base_dir={str(tmp_path)!r}); print(b.base_dir, flush=True); "
            "os.kill(os.getpid(), 9)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    orphan = out.stdout.strip()
    assert out.returncode == -9 and os.path.isdir(orphan)
    foreign = tmp_path / "cj-sandbox-unowned"  # no owner file: not ours to judge
    foreign.mkdir()
    live = local.LocalBackend(backend.name, base_dir=str(tmp_path))
    assert not os.path.exists(orphan)
    assert foreign.is_dir() and os.path.isdir(live.base_dir)
    assert local.sweep_orphans(str(tmp_path)) == []  # the live backend's own directory stays
