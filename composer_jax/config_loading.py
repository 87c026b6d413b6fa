"""Load `path/to/config.py[:arg]` files that define `get_config(arg)` (big_vision style)."""
from __future__ import annotations

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
