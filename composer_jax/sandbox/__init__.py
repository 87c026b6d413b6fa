"""Sandboxes for agent commands and grading: `get_backend("auto" | "bwrap" | "unshare")`."""
from __future__ import annotations

import functools

from composer_jax.sandbox.base import (
    Limits,
    RunResult,
    SandboxBackend,
    SandboxUnavailableError,
    Workspace,
)

BACKEND_NAMES = ("auto", "bwrap", "unshare")


@functools.cache
def get_backend(name: str = "auto") -> SandboxBackend:
    """One shared backend per name. "auto" prefers bubblewrap and falls back to unshare."""
    from composer_jax.sandbox.local import LocalBackend, missing_tools

    if name not in BACKEND_NAMES:
        raise ValueError(f"unknown sandbox backend {name!r}; expected one of {BACKEND_NAMES}")
    if name != "auto":
        return LocalBackend(name)
    if not missing_tools("bwrap"):
        return LocalBackend("bwrap")
    try:
        return LocalBackend("unshare")
    except SandboxUnavailableError as e:
        raise SandboxUnavailableError(f"no local sandbox: install bubblewrap (apt-get install bubblewrap); {e}") from e


__all__ = ["BACKEND_NAMES", "Limits", "RunResult", "SandboxBackend", "SandboxUnavailableError",
           "Workspace", "get_backend"]
