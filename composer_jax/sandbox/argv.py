"""Command lines that enter a sandbox: launcher (cgroups, rlimits) -> namespaces -> uid drop -> argv.

Both backends build the same picture: new mount/pid/ipc/uts(/net) namespaces, a read-only view
of the system and the Python install, `/workspace` writable, private /tmp and /dev, and the
command running as an unprivileged uid with no capabilities and no-new-privs. A namespace init
that stays root (bwrap's own init, or `sh` for unshare) keeps its parent-death signal — a uid
change would clear it — so killing the launcher takes down the whole pid namespace.
"""
from __future__ import annotations

import shlex
from collections.abc import Sequence

from composer_jax.sandbox.base import Limits
from composer_jax.sandbox.view import SANDBOX_PATH, View, parent_dirs

TMP_BYTES = 256 << 20  # the private /tmp (tmpfs); its pages also count against the memory cgroup
NS_OVERHEAD_PROCS = 4  # launcher-side processes (outer tool, namespace init) counted by pids.max


def launcher(cgroup_dirs: Sequence[str], limits: Limits, inner: Sequence[str]) -> list[str]:
    """`sh` joins the cgroups before anything else runs, then `prlimit` sets the rlimits that
    the whole tree inherits. Root ignores RLIMIT_NPROC, so it binds only after the uid drop."""
    join = "".join(f"echo $$ > {shlex.quote(d + '/cgroup.procs')} || exit 125; " for d in cgroup_dirs)
    rlimits = [
        f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}",
        f"--as={limits.memory_bytes}",
        f"--fsize={limits.max_file_bytes}",
        f"--nproc={limits.max_procs}",
        "--core=0",
    ]
    return ["/bin/sh", "-c", join + 'exec "$@"', "cj-launch", "prlimit", *rlimits, "--", *inner]


def drop_privileges(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs",
            "--inh-caps=-all", "--bounding-set=-all", "--"]


def bwrap_argv(view: View, host_ws: str, uid: int, limits: Limits, argv: Sequence[str]) -> list[str]:
    out = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
           "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if not limits.network:
        out.append("--unshare-net")
    # The private /tmp comes first: read-only binds that live under /tmp (a checkout or venv
    # there) are then mounted on top of it instead of being hidden by it.
    out += ["--size", str(TMP_BYTES), "--perms", "1777", "--tmpfs", "/tmp"]
    # bwrap copies host permissions onto directories it creates for mount points (/root is
    # 0700), which would hide the interpreter from the unprivileged uid.
    for d in parent_dirs([s for _, s in view.ro_binds]):
        out += ["--perms", "0755", "--dir", d]
    for host, sandbox in view.ro_binds:
        out += ["--ro-bind", host, sandbox]
    for target, sandbox in view.symlinks:
        out += ["--symlink", target, sandbox]
    for path in view.hidden:
        out += ["--size", "4096", "--perms", "0755", "--tmpfs", path]
    out += ["--bind", host_ws, SANDBOX_PATH, "--proc", "/proc", "--dev", "/dev", "--chdir", SANDBOX_PATH,
            "--remount-ro", "/", "--clearenv"]
    for k, v in view.env:
        out += ["--setenv", k, v]
    return out + ["--", *drop_privileges(uid), *argv]


def _unshare_script(view: View) -> str:
    """Run by `sh` as pid 1 of the new namespaces, still root: build the root, pivot into it."""
    q = shlex.quote
    # Each line costs a fork+exec or two; directories, files and links are made in one go each.
    devices = ("null", "zero", "full", "random", "urandom", "tty")
    dirs = parent_dirs([s for _, s in view.ro_binds] + [SANDBOX_PATH + "/x"])
    dirs += [s for _, s in view.ro_binds] + ["/tmp", "/proc", "/dev", "/.old", SANDBOX_PATH]
    lines = ['set -e', 'R=$1; W=$2; shift 2', 'mount -t tmpfs -o mode=0755,size=1m cjroot "$R"',
             # /tmp first, so binds under /tmp (a checkout or venv there) land on top of it.
             'mkdir "$R/tmp"',
             f'mount -t tmpfs -o mode=1777,size={TMP_BYTES},nosuid,nodev cjtmp "$R/tmp"',
             "mkdir -p " + " ".join(f'"$R"{q(d)}' for d in dirs)]
    lines += [f'mount -o bind,ro {q(host)} "$R"{q(sandbox)}' for host, sandbox in view.ro_binds]
    lines += [f'ln -s {q(target)} "$R"{q(sandbox)}' for target, sandbox in view.symlinks]
    lines += [f'mount -t tmpfs -o mode=0755,size=4k cjhide "$R"{q(path)}' for path in view.hidden]
    lines += [
        f'mount --bind "$W" "$R{SANDBOX_PATH}"',
        'mount -t tmpfs -o mode=0755,nosuid cjdev "$R/dev"',
        'mkdir "$R/dev/shm"; touch ' + " ".join(f'"$R/dev/{n}"' for n in devices),
        *(f'mount --bind /dev/{n} "$R/dev/{n}"' for n in devices),
        'mount -t tmpfs -o mode=1777,nosuid,nodev cjshm "$R/dev/shm"',
        'ln -s /proc/self/fd "$R/dev/fd"; ln -s /proc/self/fd/0 "$R/dev/stdin"',
        'ln -s /proc/self/fd/1 "$R/dev/stdout"; ln -s /proc/self/fd/2 "$R/dev/stderr"',
        'cd "$R"; pivot_root . .old',
        'mount -t proc -o nosuid,nodev,noexec proc /proc; umount -l /.old',  # umount reads /proc
        'mount -o remount,ro,bind /',
        f'cd {SANDBOX_PATH}',
        'hostname sandbox',
        # Not exec: this root shell stays pid 1 so the launcher's death still kills the namespace.
        'set +e; "$@"; exit $?',
    ]
    return "\n".join(lines)


def unshare_argv(view: View, host_ws: str, mount_point: str, uid: int, limits: Limits,
                 argv: Sequence[str]) -> list[str]:
    ns = ["--mount", "--pid", "--ipc", "--uts", "--cgroup"] + ([] if limits.network else ["--net"])
    env = ["env", "-i", *(f"{k}={v}" for k, v in view.env)]
    # The pdeathsig mirrors bwrap's --die-with-parent: if the host process dies, so does the run.
    return ["setpriv", "--pdeathsig=KILL", "--", "unshare", *ns, "--fork", "--kill-child",
            "--propagation", "private", "--",
            "/bin/sh", "-c", _unshare_script(view), "cj-ns", mount_point, host_ws,
            *drop_privileges(uid), *env, *argv]
