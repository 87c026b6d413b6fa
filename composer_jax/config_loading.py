"""Load `path/to/config.py[:arg]` files that define `get_config(arg)` (big_vision style), and
apply command-line `--set KEY=VALUE` overrides to them."""
from __future__ import annotations

import ast
import importlib.util
import os

import ml_collections

from composer_jax.errors import ConfigError


def load_config(spec: str) -> ml_collections.ConfigDict:
    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        raise ConfigError(f"--config: no such config file {path!r}")
    module_spec = importlib.util.spec_from_file_location(f"_config_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not hasattr(module, "get_config"):
        raise ConfigError(f"--config: {path} defines no get_config(arg)")
    return module.get_config(arg or None)


def apply_override(c: ml_collections.ConfigDict, item: str) -> None:
    """`KEY=VALUE` onto the config: a dotted existing key, a Python literal of its type (an int
    or float key converts the value; anything unparseable is a bare string)."""
    key, sep, text = item.partition("=")
    if not sep:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
    *parents, leaf = key.split(".")
    node = c
    for name in parents:
        node = node[name] if name in node else None
        if node is None:
            raise ConfigError(f"--set {item!r}: no config section {name!r}")
    if leaf not in node:
        raise ConfigError(f"--set {item!r}: no config key {key!r}")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    old = node[leaf]
    try:
        node[leaf] = type(old)(value) if isinstance(old, (int, float)) and not isinstance(old, bool) else value
    except (TypeError, ValueError) as e:
        raise ConfigError(f"--set {item!r}: {key} holds a {type(old).__name__} ({old!r}): {e}") from e
