"""Errors a user can act on: each names the config field or file at fault."""


class ConfigError(ValueError):
    """A config value is impossible; the message names the field (e.g. `model.n_heads`)."""
