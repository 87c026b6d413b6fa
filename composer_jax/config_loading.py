"""Load `path/to/config.py[:arg]` files that define `get_config(arg)` (big_vision style), and
apply command-line `--config.KEY=VALUE` overrides to them: the syntax of ml_collections'
config_flags, which launch/xm_launch.py and train/midtrain.py parse themselves, so every entry
point takes the same flags.

    argv, overrides = split_overrides(sys.argv[1:])     # ["--config.rl.steps=4"] -> ["rl.steps=4"]
    config = load_config("configs/tiny.py:test", overrides)
"""
from __future__ import annotations

import ast
import importlib.util
import os
from collections.abc import Sequence

import ml_collections

from composer_jax.errors import ConfigError


PREFIX = "--config."


def split_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the other arguments, each `--config.KEY=VALUE` or `--config.KEY VALUE` as KEY=VALUE)."""
    rest, overrides, items = [], [], list(argv)
    while items:
        arg = items.pop(0)
        if not arg.startswith(PREFIX):
            rest.append(arg)
        elif "=" in arg:
            overrides.append(arg[len(PREFIX):])
        elif items:
            overrides.append(f"{arg[len(PREFIX):]}={items.pop(0)}")
        else:
            raise ConfigError(f"{arg}: expected {arg}=VALUE")
    return rest, overrides


def load_config(spec: str, overrides: Sequence[str] = ()) -> ml_collections.ConfigDict:
    """The config `path.py[:arg]` with `overrides` (KEY=VALUE) applied in order."""
    c = _load(spec)
    for item in overrides:
        apply_override(c, item)
    return c


def _load(spec: str) -> ml_collections.ConfigDict:
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
    flag = f"{PREFIX}{item}"
    if not sep:
        raise ConfigError(f"{flag}: expected {PREFIX}KEY=VALUE")
    *parents, leaf = key.split(".")
    node = c
    for name in parents:
        node = node[name] if name in node else None
        if node is None:
            raise ConfigError(f"{flag}: no config section {name!r}")
    if leaf not in node:
        raise ConfigError(f"{flag}: no config key {key!r}")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    old = node[leaf]
    try:
        node[leaf] = type(old)(value) if isinstance(old, (int, float)) and not isinstance(old, bool) else value
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{flag}: {key} holds a {type(old).__name__} ({old!r}): {e}") from e
