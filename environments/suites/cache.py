"""Disk cache for built task suites, keyed by a hash of the generator code and its sources.

Location: `cache_dir` argument, else $COMPOSER_JAX_CACHE, else ~/.cache/composer_jax/.
Editing a generator module or upgrading a source dataset changes the key, so stale suites
are never served.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

CACHE_ENV_VAR = "COMPOSER_JAX_CACHE"


def default_cache_dir() -> str:
    return os.environ.get(CACHE_ENV_VAR) or os.path.join(os.path.expanduser("~"), ".cache", "composer_jax")


def fingerprint(parts: Iterable[str | bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:20]


def file_bytes(*paths: str) -> list[bytes]:
    out = []
    for path in paths:
        with open(path, "rb") as f:
            out.append(f.read())
    return out


def cached_json(name: str, key: str, build: Callable[[], Any], cache_dir: str | None = None) -> Any:
    """`build()`'s JSON-serialisable result, computed once per key and stored atomically."""
    directory = os.path.join(cache_dir or default_cache_dir(), "suites")
    path = os.path.join(directory, f"{name}-{key}.json")
    os.makedirs(directory, exist_ok=True)
    # Vector-env workers start together: one builds, the others wait for its file.
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        value = build()
        fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(value, f)
        os.replace(tmp, path)
        return value
