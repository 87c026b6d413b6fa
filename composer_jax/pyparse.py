"""`ast.parse` that is safe to call from many threads."""
from __future__ import annotations

import ast
import threading

_AST_LOCK = threading.Lock()


def parse_python(source: str) -> ast.Module:
    """`ast.parse`, one thread at a time: CPython 3.11 keeps the AST builder's recursion counter
    per interpreter, so parses from concurrent env threads (the agent loop steps envs in a thread
    pool) can fail with "SystemError: AST constructor recursion depth mismatch"."""
    with _AST_LOCK:
        return ast.parse(source)
