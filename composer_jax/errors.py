"""Errors a user can act on: each names the config field or file at fault."""
import dataclasses
from collections.abc import Mapping

import ml_collections


class ConfigError(ValueError):
    """A config value is impossible; the message names the field (e.g. `model.n_heads`)."""


def reject_unknown_fields(dataclass_type, values, block: str) -> None:
    """A config block may only name fields of the frozen dataclass it builds."""
    known = {f.name for f in dataclasses.fields(dataclass_type)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{block}.{unknown[0]}: unknown field (known: {', '.join(sorted(known))})")


_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "dict": (Mapping, ml_collections.ConfigDict),
          "tuple": (list, tuple)}


def check_field_types(dataclass_type, values, block: str) -> None:
    """Each value of a config block has its field's type (an int is a float; a bool is not an
    int): a string where a number belongs fails here, naming the field, not deep in a run."""
    for f in dataclasses.fields(dataclass_type):
        if f.name not in values:
            continue
        v, kind = values[f.name], str(f.type).split("[")[0].split(" ")[0]
        ok = _TYPES.get(kind)
        if ok is None:
            continue
        if isinstance(v, bool) and bool not in ok or not isinstance(v, ok):
            raise ConfigError(f"{block}.{f.name}={v!r}: expected {kind}, got {type(v).__name__}")
