"""Run metrics: a JSON-lines file (every step) and TensorBoard event files, both in the workdir."""
from __future__ import annotations

import hashlib
import json
import math
import pathlib
from collections.abc import Mapping

import numpy as np
from tensorboardX import SummaryWriter


def batch_digest(batch: Mapping[str, np.ndarray]) -> str:
    """Short hash of a host batch: lets two runs prove they consumed the same data in order."""
    h = hashlib.sha256()
    for key in sorted(batch):
        h.update(key.encode())
        h.update(np.ascontiguousarray(batch[key]).tobytes())
    return h.hexdigest()[:16]


def to_python(metrics: Mapping) -> dict:
    """Device/numpy scalars -> floats (ints stay ints) for JSON."""
    out = {}
    for k, v in metrics.items():
        v = np.asarray(v) if not isinstance(v, (str, int, float)) else v
        out[k] = v.item() if isinstance(v, np.ndarray) else v
    return out


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 700.0))  # exp overflows float64 past ~709


def read_jsonl(path: str | pathlib.Path) -> list[dict]:
    path = pathlib.Path(path)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class MetricsWriter:
    """Appends `{"step": s, "kind": k, ...}` records to workdir/metrics.jsonl and scalars to
    TensorBoard under workdir/tensorboard.

    On resume from step `resume_step`, records past it (written by a run killed after its last
    checkpoint) are dropped, so the file always reads as one uninterrupted run.
    """

    def __init__(self, workdir: str | pathlib.Path, resume_step: int = 0):
        workdir = pathlib.Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = workdir / "metrics.jsonl"
        kept = [r for r in read_jsonl(self.path) if r["step"] <= resume_step]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))
        self._file = self.path.open("a")
        self._tb = SummaryWriter(str(workdir / "tensorboard"))

    def write(self, step: int, kind: str, metrics: Mapping, tensorboard: bool = True) -> None:
        record = {"step": step, "kind": kind, **to_python(metrics)}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if tensorboard:
            for k, v in record.items():
                if k not in ("step", "kind") and isinstance(v, (int, float)):
                    self._tb.add_scalar(f"{kind}/{k}", v, step)

    def close(self) -> None:
        self._file.close()
        self._tb.close()
