"""Errors a user can act on: each names the config field or file at fault."""
import dataclasses


class ConfigError(ValueError):
    """A config value is impossible; the message names the field (e.g. `model.n_heads`)."""


def reject_unknown_fields(dataclass_type, values, block: str) -> None:
    """A config block may only name fields of the frozen dataclass it builds."""
    known = {f.name for f in dataclasses.fields(dataclass_type)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{block}.{unknown[0]}: unknown field (known: {', '.join(sorted(known))})")
