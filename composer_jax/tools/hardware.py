"""Accelerator slices the planner knows: chips, memory, peak bf16 matmul FLOP/s and interconnect
bandwidth per chip."""
from __future__ import annotations

import dataclasses
import re

from composer_jax.errors import ConfigError

GB = 1e9


@dataclasses.dataclass(frozen=True)
class Chip:
    name: str
    hbm_bytes: float
    peak_flops: float  # dense bf16
    cores_per_chip: int  # TPU slice names count TensorCores for v4/v5p, chips for v5e/v6e
    torus_dims: int = 0  # 3 for v4/v5p (3-D torus), 2 for v5e/v6e, 0 for GPUs
    # Interconnect bandwidth one chip can send, bytes/s, one direction (half the bidirectional
    # figure vendors quote): ICI on TPUs, NVLink within a GPU node.
    link_bytes_per_s: float = 0.0
    kind: str = "tpu"  # tpu | gpu | cpu
    # GPUs: chips per NVLink domain and the per-GPU scale-out NIC beyond it (bytes/s).
    link_domain: int = 0
    scale_out_bytes_per_s: float = 0.0

    def collective_bytes_per_s(self, n_chips: int) -> float:
        """Per-chip bandwidth for collectives on an n-chip slice: the NIC once a GPU slice
        spans more than one NVLink domain (the slowest hop bounds a ring)."""
        if self.link_domain and n_chips > self.link_domain:
            return self.scale_out_bytes_per_s
        return self.link_bytes_per_s


# Public per-chip figures. ICI, from the Cloud TPU system-architecture pages: v5p 1,200 GB/s
# bidirectional (4,800 Gbps one way), v5e 400 GB/s and v6e 800 GB/s bidirectional (their pods'
# all-reduce bandwidth / 256 chips gives the same 200 and 400 GB/s); v4 lists only its pod's
# all-reduce bandwidth, 1.1 PB/s over 4,096 chips = ~270 GB/s. NVLink 4 on H100/H200: 900 GB/s
# bidirectional per GPU; between nodes one 400 Gb/s NIC per GPU.
CHIPS = {
    "v4": Chip("v4", 32 * 2**30, 275e12, 2, 3, link_bytes_per_s=270 * GB),
    "v5p": Chip("v5p", 95 * 2**30, 459e12, 2, 3, link_bytes_per_s=600 * GB),
    "v5e": Chip("v5e", 16 * 2**30, 197e12, 1, 2, link_bytes_per_s=200 * GB),
    "v5litepod": Chip("v5e", 16 * 2**30, 197e12, 1, 2, link_bytes_per_s=200 * GB),
    "v6e": Chip("v6e", 32 * 2**30, 918e12, 1, 2, link_bytes_per_s=400 * GB),
    "h100": Chip("h100", 80 * 2**30, 989e12, 1, link_bytes_per_s=450 * GB, kind="gpu",
                 link_domain=8, scale_out_bytes_per_s=50 * GB),
    "h200": Chip("h200", 141 * 2**30, 989e12, 1, link_bytes_per_s=450 * GB, kind="gpu",
                 link_domain=8, scale_out_bytes_per_s=50 * GB),
}


def cpu_chip(hbm_bytes: float = 24 * 2**30, peak_flops: float = 1e11) -> Chip:
    """This machine's fake devices (XLA_FLAGS=--xla_force_host_platform_device_count=N), for
    checking plans against programs compiled on CPU: XLA:CPU computes bf16 matmuls in float32
    and the MoE's expert_parallel impl runs its blocked kernel there (model/moe.py)."""
    return Chip("cpu", hbm_bytes, peak_flops, 1, link_bytes_per_s=10 * GB, kind="cpu")


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


def cpu_slice(n_devices: int, **chip_kwargs) -> Slice:
    return Slice(f"cpu-{n_devices}", cpu_chip(**chip_kwargs), n_devices)


def parse_slice(name: str) -> Slice:
    """`v5p-1024` (1024 TensorCores = 512 chips), `v6e-256`, `h100-8`, `cpu-64` (fake devices)."""
    match = re.fullmatch(r"([a-z0-9]+)-(\d+)", name)
    if match and match.group(1) == "cpu" and int(match.group(2)) > 0:
        return cpu_slice(int(match.group(2)))
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
