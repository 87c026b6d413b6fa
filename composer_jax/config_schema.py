"""Every block of a config, typed. `validate(config)` builds each block's frozen dataclass, so an
unknown block or key, or a value of the wrong type, is a ConfigError naming the field before any
work starts. Every entry point calls it (rl.train, the pipeline, experiments, midtrain).

    validate(load_config("configs/tiny.py:pipeline"))
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from composer_jax.errors import ConfigError, check_field_types, reject_unknown_fields


def typed(cls, values: Mapping[str, Any], block: str, **nested):
    """`cls` built from a config block: unknown keys and wrong types are named; a key the block
    leaves out takes the dataclass's default."""
    values = dict(values.items())
    reject_unknown_fields(cls, values, block)
    check_field_types(cls, values, block)
    return cls(**{**values, **nested})


def _positive(block: str, obj, *fields: str) -> None:
    for name in fields:
        if getattr(obj, name) < 1:
            raise ConfigError(f"{block}.{name}={getattr(obj, name)}: must be >= 1")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Mid-training (train/loop.py): the optimiser, the auxiliary losses, logging."""
    steps: int
    lr: float
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8
    clip_norm: float = 1.0
    grad_accum: int = 1
    z_loss_weight: float = 1e-4  # output-logit z-loss
    load_balance_weight: float = 1e-3  # Switch load-balance loss (also the RL learner's)
    router_z_weight: float = 1e-3
    bias_update_rate: float = 1e-3  # aux-loss-free router bias step; 0 disables
    log_every: int = 10
    eval_every: int = 100
    eval_batches: int = 8
    peak_flops: float = 0.0  # FLOP/s for MFU; 0 = measured at start-up

    def check(self) -> None:
        _positive("train", self, "steps", "grad_accum", "log_every", "eval_every", "eval_batches")
        if self.lr <= 0:
            raise ConfigError(f"train.lr={self.lr}: must be > 0")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    every: int = 100
    keep: int = 3
    async_save: bool = True

    def check(self) -> None:
        _positive("checkpoint", self, "every", "keep")


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """The code corpus, its token stores and the loader (data/)."""
    corpus_paths: tuple = ()
    include_stdlib: bool = True
    val_fraction: float = 0.02
    max_file_bytes: int = 1 << 20
    num_shards: int = 8
    seq_len: int = 256
    batch_size: int = 8
    shuffle_seed: int = 0
    tokenizer_agent_tasks: int = 0  # expert transcripts of rl.env_id in the tokenizer's corpus
    tokenizer_agent_repeat: int = 1
    mixture: dict = dataclasses.field(default_factory=lambda: {"code": 1.0})

    def check(self) -> None:
        _positive("data", self, "num_shards", "batch_size", "tokenizer_agent_repeat")
        if self.seq_len < 2:
            raise ConfigError(f"data.seq_len must be >= 2 (a token and its target), got {self.seq_len}")
        if not 0 <= self.val_fraction < 1:
            raise ConfigError(f"data.val_fraction={self.val_fraction}: must be in [0, 1)")
        if self.tokenizer_agent_tasks < 0:
            raise ConfigError(f"data.tokenizer_agent_tasks={self.tokenizer_agent_tasks}: must be >= 0")


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """Cloud launch (launch/xm_launch.py --launch_mode=vertex|gke)."""
    slice: str = "v5e-8"
    image: str = "python:3.11"
    chips_per_host: int = 4
    one_job_per_stage: bool = False

    def check(self) -> None:
        _positive("launch", self, "chips_per_host")


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """The pipeline's final evaluation (launch/stages.py)."""
    eval_suites: dict = dataclasses.field(default_factory=dict)  # name -> env id
    eval_tasks: int = 8  # held-out tasks per suite

    def check(self) -> None:
        _positive("pipeline", self, "eval_tasks")


@dataclasses.dataclass(frozen=True)
class SampleConfig:
    """Single-turn sampling of an imported checkpoint (benchmarks/humaneval_bench.py)."""
    checkpoint: str  # the imported model's directory (checkpoints.qwen_setup writes it)
    batch_size: int = 16
    max_new_tokens: int = 512

    def check(self) -> None:
        _positive("sample", self, "batch_size", "max_new_tokens")


def _mesh(values) -> None:
    from composer_jax.sharding import MESH_AXES

    for axis, size in dict(values.items()).items():
        if axis not in MESH_AXES:
            raise ConfigError(f"mesh.{axis}: unknown mesh axis (axes: {', '.join(MESH_AXES)})")
        if isinstance(size, bool) or not isinstance(size, int) or size == 0 or size < -1:
            raise ConfigError(f"mesh.{axis}={size!r}: must be a positive integer or -1 (the devices left)")


def _block(cls):
    def build(values, block):
        typed(cls, values, block).check()
    return build


def validate(config) -> None:
    """Every block of `config`; the first bad field is a ConfigError naming it."""
    from composer_jax.experiments.config import ExperimentConfig
    from composer_jax.fleet import FleetConfig
    from composer_jax.model.config import ModelConfig
    from composer_jax.rl.config import EvalRolloutConfig, RLConfig, SFTConfig
    from composer_jax.rl.rollout_config import RolloutConfig

    blocks = dict(
        model=lambda v, _: ModelConfig.from_config(v), train=_block(TrainConfig),
        checkpoint=_block(CheckpointConfig), mesh=lambda v, _: _mesh(v), data=_block(DataConfig),
        rollout=lambda v, _: RolloutConfig.from_config(v), eval_rollout=lambda v, _: EvalRolloutConfig.from_config(v),
        launch=_block(LaunchConfig), rl=lambda v, _: RLConfig.from_config(v), sft=lambda v, _: SFTConfig.from_config(v),
        fleet=lambda v, _: FleetConfig.from_config(v), pipeline=_block(PipelineConfig),
        # optional blocks: an experiment's recipe (experiments/run.py), a sampling benchmark's
        experiment=lambda v, _: ExperimentConfig.from_config(v), sample=_block(SampleConfig))
    optional = ("experiment", "sample")
    scalars = dict(name=str, seed=int)
    for key in config.keys():
        if key not in blocks and key not in scalars:
            raise ConfigError(f"{key}: unknown config block (blocks: {', '.join(sorted(blocks))}; "
                              f"values: {', '.join(scalars)})")
    for key, kind in scalars.items():
        if not isinstance(config.get(key), kind) or isinstance(config.get(key), bool):
            raise ConfigError(f"{key}={config.get(key)!r}: expected {kind.__name__}")
    for key, build in blocks.items():
        if key in config:
            build(config[key], key)
        elif key not in optional:
            raise ConfigError(f"{key}: missing config block (configs/tiny.py defines every block)")
    if "mini_swe_agent" in SFTConfig.from_config(config.sft).harnesses:  # its demonstrations act by shell
        try:
            RLConfig.from_config({**dict(config.rl.items()), "harness": "mini_swe_agent"})
        except ConfigError as e:
            raise ConfigError(f"sft.harnesses names 'mini_swe_agent': {e}") from None
