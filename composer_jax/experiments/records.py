"""An experiment's or benchmark's JSON result, with the machine it ran on."""
from __future__ import annotations

import json
import os
import pathlib
import platform

import jax

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "results"  # the README's figures


def write_result(path: str, result: dict) -> None:
    result = dict(result, machine=dict(platform=platform.platform(), cpus=os.cpu_count(),
                                       backend=jax.default_backend(), devices=jax.device_count()))
    text = json.dumps(result, indent=2, sort_keys=True)
    print(text)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
