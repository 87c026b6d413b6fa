"""Experiment configs: one file per experiment, `get_config(arg)`; variants by `path.py:ARG`."""


def parse_variant(arg: str | None, defaults: dict, path: str) -> dict:
    """ARG as a comma list of `flag` (a bool default set True) and `name=value` (the default's
    type): `parse_variant("quick,hops=8", dict(quick=False, hops=4), ...)` -> quick True, hops 8.
    Anything else is a ValueError naming the config file and what it accepts."""
    out = dict(defaults)
    usage = ", ".join(k if isinstance(v, bool) else f"{k}={type(v).__name__}" for k, v in defaults.items())
    for item in filter(None, (arg or "").split(",")):
        key, eq, value = item.partition("=")
        kind = type(defaults.get(key))
        try:
            if kind is bool and not eq:
                out[key] = True
            elif kind in (int, float) and eq:
                out[key] = kind(value)
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"{path}: unknown variant {item!r}; use {usage}") from None
    return out
