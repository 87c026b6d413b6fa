"""Which of the agent's files reach the grading sandbox.

The graded tree is the pristine repo with the agent's changes applied, except that any path
that can steer pytest or the interpreter (tests, conftest, pytest/tox/setup.cfg/pyproject
config, site hooks, bytecode, native extensions) always keeps its pristine content: additions
there are dropped, edits and deletions reverted. Hidden tests are laid over the result last, so
a file the agent planted where a hidden test will go is replaced too.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Mapping

from composer_jax.sandbox.files import check_relpath

PROTECTED_NAMES = {
    "conftest.py": "conftest",
    "sitecustomize.py": "site hook", "usercustomize.py": "site hook",
    "pytest.ini": "pytest config", ".pytest.ini": "pytest config", "tox.ini": "pytest config",
    "setup.cfg": "pytest config", "pyproject.toml": "pytest config",
}
PROTECTED_PATTERNS = {
    "test_*.py": "test file", "*_test.py": "test file", "*.pth": "site hook",
    "*.pyc": "bytecode", "*.pyo": "bytecode", "*.so": "native module", "*.pyd": "native module",
}
PROTECTED_DIRS = {"tests": "test directory", "test": "test directory", "__pycache__": "bytecode"}


def protected_reason(path: str) -> str | None:
    """Why the agent may not change `path` (a normalised relative path), or None."""
    *dirs, name = path.split("/")
    for d in dirs:
        if d in PROTECTED_DIRS:
            return PROTECTED_DIRS[d]
    if name in PROTECTED_NAMES:
        return PROTECTED_NAMES[name]
    for pattern, reason in PROTECTED_PATTERNS.items():
        if fnmatch.fnmatchcase(name, pattern):
            return reason
    return None


def merge(pristine: Mapping[str, str | bytes], submitted: Mapping[str, str | bytes]
          ) -> tuple[dict[str, str | bytes], list[str]]:
    """(files to grade, one note per agent change that was ignored)."""
    out = {p: c for p, c in pristine.items() if protected_reason(check_relpath(p))}
    notes, seen = [], set()
    for path, content in submitted.items():
        try:
            norm = check_relpath(path)
        except ValueError:
            notes.append(f"ignored {path!r}: outside the repository")
            continue
        seen.add(norm)
        reason = protected_reason(norm)
        if reason is None:
            out[norm] = content
        elif _as_bytes(pristine.get(norm)) != _as_bytes(content):
            notes.append(f"ignored change to {norm} ({reason})")
    for path in pristine:
        norm = check_relpath(path)
        if (reason := protected_reason(norm)) and norm not in seen:
            notes.append(f"restored deleted {norm} ({reason})")
    return out, notes


def _as_bytes(content: str | bytes | None) -> bytes | None:
    return content.encode() if isinstance(content, str) else content
