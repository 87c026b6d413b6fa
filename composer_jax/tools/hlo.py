"""Read a compiled XLA program: its collectives (kind, payload bytes, where), FLOPs and memory.

One small parser shared by the sharding tests, the planner check and the benchmarks, so that
"who does the work and what moves" is asserted from the program the compiler produced:

  compiled = jax.jit(step).lower(*args).compile()
  program_stats(compiled).collective_bytes()   # {'all-to-all': 1.2e6, ...}
"""
from __future__ import annotations

import dataclasses
import math
import re
from collections import defaultdict

COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                    "ragged-all-to-all", "collective-permute", "collective-broadcast")
DTYPE_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1,
               "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4, "u32": 4,
               "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}
_SHAPE = re.compile(r"\b(" + "|".join(DTYPE_BYTES) + r")\[([0-9,]*)\]")
# `%name = <result shape> <op>(` where op may carry an async suffix (-start; -done repeats it).
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.*?)\s+(?P<op>[a-z][a-z0-9\-]*)\(")
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?(?P<name>[\w.\-]+)\s.*\{\s*$")


def array_shapes(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(dtype, dims) of every array in an HLO shape string (a tuple lists its elements)."""
    return tuple((dtype, tuple(int(d) for d in dims.split(",") if d))
                 for dtype, dims in _SHAPE.findall(text))


def shape_bytes(text: str) -> float:
    """Bytes of every array shape in an HLO shape string (a tuple sums its elements)."""
    return sum(DTYPE_BYTES[dtype] * math.prod(dims) for dtype, dims in array_shapes(text))


def group_size(line: str) -> int | None:
    """Devices per replica group of a collective's HLO line (None when it does not say).
    Handles the explicit ({{0,1},{2,3}}), iota ([4,2]<=[8]) and mesh (mesh['axis_0'=2,...]
    {'axis_0'}) spellings."""
    explicit = re.search(r"replica_groups=\{\{([0-9,]*)\}", line)
    if explicit:
        return len(explicit.group(1).split(",")) if explicit.group(1) else None
    iota = re.search(r"replica_groups=\[(\d+),(\d+)\]<=", line)
    if iota:
        return int(iota.group(2))
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\](.*)", line)
    if mesh:
        sizes = {name: int(size) for name, size in re.findall(r"'(\w+)'=(\d+)", mesh.group(1))}
        over = re.search(r"\{('[^}]*')\}", mesh.group(2))
        names = re.findall(r"'(\w+)'", over.group(1)) if over else list(sizes)
        return math.prod(sizes.get(n, 1) for n in names)
    return None


@dataclasses.dataclass(frozen=True)
class Collective:
    kind: str  # one of COLLECTIVE_KINDS
    bytes: float  # the result's payload on one device
    computation: str  # the HLO computation it sits in (a while body runs it every iteration)
    name: str
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = ()  # XLA combines many arrays into one op

    @property
    def largest_array_bytes(self) -> float:
        return max((DTYPE_BYTES[t] * math.prod(dims) for t, dims in self.shapes), default=0.0)


def collectives(hlo_text: str) -> list[Collective]:
    """Every collective in a (per-device, SPMD-partitioned) HLO module that moves data: groups
    of one device are left out. Async pairs count once (the -start op, whose result tuple
    holds the operand too, so only the last element counts)."""
    found, computation = [], ""
    # `/*index=5*/` comments in long tuples would hide a computation's header (the `=` test).
    for line in re.sub(r"/\*.*?\*/", "", hlo_text).splitlines():
        header = _COMPUTATION.match(line)
        if header and "=" not in line.split("{")[0]:
            computation = header.group("name")
            continue
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        op = match.group("op")
        kind = op.removesuffix("-start")
        if kind not in COLLECTIVE_KINDS or op.endswith("-done") or group_size(line) == 1:
            continue
        shape = match.group("shape")
        if op.endswith("-start") and shape.startswith("("):
            shape = _SHAPE.findall(shape)[-1]
            shape = f"{shape[0]}[{shape[1]}]"
        found.append(Collective(kind, shape_bytes(shape), computation, match.group("name"),
                                array_shapes(shape)))
    return found


def loop_computations(hlo_text: str) -> set[str]:
    """Names of the computations that run once per iteration of a `while`: bodies and conditions."""
    return {name for key in ("body", "condition")
            for name in re.findall(rf"\bwhile\(.*?\b{key}=%?([\w.\-]+)", hlo_text)}


def loop_collectives(compiled) -> list[Collective]:
    """The collectives a compiled program (or its HLO text) runs once per loop iteration, e.g.
    per decoded token of a decode loop."""
    text = compiled if isinstance(compiled, str) else compiled.as_text()
    loops = loop_computations(text)
    return [c for c in collectives(text) if c.computation in loops]


@dataclasses.dataclass(frozen=True)
class ProgramStats:
    flops: float  # per device
    bytes_accessed: float
    argument_bytes: float
    output_bytes: float
    temp_bytes: float
    alias_bytes: float
    collectives: tuple[Collective, ...]

    @property
    def peak_bytes(self) -> float:
        """Live memory per device: arguments + outputs + temporaries, minus donated aliases."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes - self.alias_bytes

    def collective_bytes(self, computations: set[str] | None = None) -> dict[str, float]:
        """Payload bytes per collective kind (optionally only inside the named computations)."""
        out: dict[str, float] = defaultdict(float)
        for c in self.collectives:
            if computations is None or c.computation in computations:
                out[c.kind] += c.bytes
        return dict(out)

    def largest_array_bytes(self, computations: set[str] | None = None) -> float:
        """The biggest single array any collective moves (combined ops counted per array)."""
        return max((c.largest_array_bytes for c in self.collectives
                    if computations is None or c.computation in computations), default=0.0)


def program_stats(compiled) -> ProgramStats:
    """FLOPs, memory and collectives of a `jax.jit(...).lower(...).compile()` result."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    memory = compiled.memory_analysis()
    return ProgramStats(
        flops=float(cost.get("flops", 0.0)),
        bytes_accessed=float(cost.get("bytes accessed", 0.0)),
        argument_bytes=float(memory.argument_size_in_bytes),
        output_bytes=float(memory.output_size_in_bytes),
        temp_bytes=float(memory.temp_size_in_bytes),
        alias_bytes=float(memory.alias_size_in_bytes),
        collectives=tuple(collectives(compiled.as_text())),
    )
