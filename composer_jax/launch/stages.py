"""Pipeline stages: each reads earlier stages' outputs from the workdir and leaves a marker.

A stage is finished when `workdir/stages/<name>.json` exists (written atomically after the
stage succeeds, holding its metrics and the hash of the config it ran with); a rerun skips
finished stages, and an interrupted stage resumes from its own checkpoints. A finished stage
of another config is refused: its outputs would pass for this config's.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import pathlib
import time
from collections.abc import Callable, Sequence

from composer_jax.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class Stage:
    name: str
    requires: tuple[str, ...]
    run: Callable[[object, pathlib.Path], dict]  # (config, workdir) -> metrics
    description: str


def _data(config, workdir: pathlib.Path) -> dict:
    from composer_jax.data.build import build
    return build(config, workdir / "data")


def _midtrain(config, workdir: pathlib.Path) -> dict:
    from composer_jax.train.loop import train
    result = train(config, workdir / "midtrain", data_dir=workdir / "data")
    if result.status != "completed":
        raise KeyboardInterrupt(f"mid-training {result.status} at step {result.step}")
    return dict(step=result.step, **{f"val_{k}": v for k, v in (result.eval or {}).items()},
                **{f"train_{k}": v for k, v in result.train.items()})


def chained(config, workdir: pathlib.Path):
    """The config with each stage reading its predecessor's outputs: the code tokenizer from
    `data`, SFT starting from mid-training's checkpoint, RL from SFT's."""
    config = copy.deepcopy(config)
    with config.unlocked():
        config.rl.tokenizer = str(workdir / "data" / "tokenizer.json")
        config.sft.init_from = str(workdir / "midtrain" / "checkpoints")
        config.rl.init_from = str(workdir / "sft" / "checkpoints")
    return config


def _sft(config, workdir: pathlib.Path) -> dict:
    from composer_jax.rl.train import run_sft
    return run_sft(chained(config, workdir), workdir / "sft")


def _rl(config, workdir: pathlib.Path) -> dict:
    from composer_jax.rl.train import run_rl
    out = run_rl(chained(config, workdir), workdir / "rl")
    evals = {str(step): ev for step, ev in out["evals"].items()}
    return dict(final=out["metrics"], evals=evals, counts=out["counts"])


def _eval(config, workdir: pathlib.Path) -> dict:
    """The final policy on held-out validation tasks of every suite (one engine, one compile)."""
    from composer_jax.rl.train import evaluate_policy
    return evaluate_policy(chained(config, workdir), str(workdir / "rl" / "checkpoints"),
                           dict(config.pipeline.eval_suites), int(config.pipeline.eval_tasks))


STAGES: dict[str, Stage] = {
    s.name: s for s in (
        Stage("data", (), _data, "corpus manifest, code tokenizer, token stores"),
        Stage("midtrain", ("data",), _midtrain, "next-token mid-training of the MoE decoder"),
        Stage("sft", ("midtrain",), _sft, "SFT on scripted-expert demonstrations"),
        Stage("rl", ("sft",), _rl, "on-policy RL with self-summarisation"),
        Stage("eval", ("rl",), _eval, "held-out tasks of every suite"),
    )
}


def marker(workdir: pathlib.Path, name: str) -> pathlib.Path:
    return workdir / "stages" / f"{name}.json"


def select(names: Sequence[str] | None, workdir: pathlib.Path) -> list[Stage]:
    """The stages to run, in order; a stage whose prerequisite is neither selected nor already
    finished is refused before any work starts."""
    names = list(STAGES) if not names else list(names)
    unknown = [n for n in names if n not in STAGES]
    if unknown:
        raise ConfigError(f"--stages: unknown stage {unknown[0]!r} (stages: {', '.join(STAGES)})")
    chosen = [STAGES[n] for n in STAGES if n in names]
    for stage in chosen:
        for need in stage.requires:
            if need not in names and not marker(workdir, need).exists():
                raise ConfigError(
                    f"--stages: stage {stage.name!r} needs the output of stage {need!r}, which has "
                    f"not run in {workdir} (add it: --stages={need},{stage.name})")
    return chosen


def write_marker(path: pathlib.Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2, default=float))
    os.replace(tmp, path)  # atomic: a crash leaves either no marker or a whole one


def config_hash(config) -> str:
    """The config's identity for stage reuse (every field counts)."""
    text = "" if config is None else config.to_json_best_effort(sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_stages(config, workdir: pathlib.Path, names: Sequence[str] | None = None,
               log: Callable[[str], None] = print) -> dict[str, dict]:
    """Run (or skip, when finished) each selected stage; returns every stage's record."""
    records, identity = {}, config_hash(config)
    chosen = select(names, workdir)
    for stage in chosen:  # before any work: a stale stage would feed every later one
        path = marker(workdir, stage.name)
        if path.exists() and json.loads(path.read_text()).get("config_hash") != identity:
            raise ConfigError(f"{path}: stage {stage.name!r} finished under a different config than this "
                              f"one; use a fresh --workdir (or remove {workdir}: its checkpoints are that config's too)")
    for i, stage in enumerate(chosen, 1):
        path = marker(workdir, stage.name)
        if path.exists():
            records[stage.name] = json.loads(path.read_text())
            log(f"[{i}] {stage.name}: finished earlier, reusing ({path})")
            continue
        log(f"[{i}] {stage.name}: {stage.description}")
        start = time.perf_counter()
        metrics = stage.run(config, workdir)
        record = dict(stage=stage.name, seconds=time.perf_counter() - start, metrics=metrics, config_hash=identity)
        write_marker(path, record)
        records[stage.name] = record
        log(f"[{i}] {stage.name}: done in {record['seconds']:.0f} s")
    return records
