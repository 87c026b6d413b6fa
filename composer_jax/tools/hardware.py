"""Accelerator slices the planner knows: chips, memory and peak bf16 matmul FLOP/s per chip."""
from __future__ import annotations

import dataclasses
import re

from composer_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    hbm_bytes: float
    peak_flops: float  # dense bf16
    cores_per_chip: int  # TPU slice names count TensorCores for v4/v5p, chips for v5e/v6e
    torus_dims: int = 0  # 3 for v4/v5p (3-D torus), 2 for v5e/v6e, 0 for GPUs


# Public per-chip figures.
CHIPS = {
    "v4": Chip("v4", 32 * 2**30, 275e12, 2, 3),
    "v5p": Chip("v5p", 95 * 2**30, 459e12, 2, 3),
    "v5e": Chip("v5e", 16 * 2**30, 197e12, 1, 2),
    "v5litepod": Chip("v5e", 16 * 2**30, 197e12, 1, 2),
    "v6e": Chip("v6e", 32 * 2**30, 918e12, 1, 2),
    "h100": Chip("h100", 80 * 2**30, 989e12, 1),
    "h200": Chip("h200", 141 * 2**30, 989e12, 1),
}


@dataclasses.dataclass(frozen=True)
class Slice:
    name: str
    chip: Chip
    n_chips: int

    @property
    def topology(self) -> str:
        """Chip grid as TPU APIs spell it (v5p-1024 -> 8x8x8, v6e-256 -> 16x16), else `N`."""
        if not self.chip.torus_dims:
            return str(self.n_chips)
        dims = [1] * self.chip.torus_dims
        remaining = self.n_chips
        while remaining > 1:  # hand out factors of two to the smallest side first
            dims[dims.index(min(dims))] *= 2
            remaining //= 2
        return "x".join(str(d) for d in sorted(dims))


def parse_slice(name: str) -> Slice:
    """`v5p-1024` (1024 TensorCores = 512 chips), `v6e-256`, `h100-8`."""
    match = re.fullmatch(r"([a-z0-9]+)-(\d+)", name)
    if not match or match.group(1) not in CHIPS:
        raise ConfigError(f"--slice={name!r}: unknown slice; use <chip>-<count> with chip one of "
                          f"{', '.join(sorted(CHIPS))} (e.g. v5p-1024, v6e-256, h100-8)")
    chip = CHIPS[match.group(1)]
    count = int(match.group(2))
    if count % chip.cores_per_chip or count == 0:
        raise ConfigError(f"--slice={name!r}: {chip.name} slices count {chip.cores_per_chip} cores per chip")
    if chip.torus_dims and count & (count - 1):
        raise ConfigError(f"--slice={name!r}: TPU slices come in powers of two")
    return Slice(name, chip, count // chip.cores_per_chip)
