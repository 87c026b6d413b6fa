"""The `experiment` block of an experiment's config file, typed: which RL arms train from which
SFT run, which policies are evaluated on which held-out task sets, and which pairs are compared
episode by episode. Every recipe setting lives in the config file; the runner
(experiments/run.py) only executes it.

    experiment = ExperimentConfig.from_config(config.experiment)

    sft:         SFT run -> rollout overrides its demonstrations play under, and under the key
                 "sft" its sft.* overrides ("sft" is plain SFT; e.g. "sft_harness":
                 {"compaction": "harness"}, "sft_mixed": {"sft": {"harnesses": [...]}})
    arms:        RL arm -> {sft: the SFT run it starts from, rl: rl.* overrides, rollout: rollout.*}
    policies:    evaluated policy -> {checkpoint: an SFT run, an arm or a checkpoints directory,
                 rollout: overrides it is evaluated under}
    evaluations: task set -> {tasks: N held-out tasks (0: all), env_id / suite_options / rl /
                 rollout: how the set differs from rl.*, x: its place on a plot's axis,
                 policies: which policies play it (default all)}
    pairs:       "a:b" McNemar comparisons, made on every set both policies played
    only:        an arm name: train SFT and this arm only, evaluate nothing (arms side by side
                 in one workdir; the full command then reuses them)
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from composer_jax.errors import ConfigError, check_field_types, reject_unknown_fields


def _plain(value):
    """ConfigDicts and tuples as plain dicts and lists (hashable into stage identities)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _typed(cls, values: Mapping[str, Any], block: str):
    values = _plain(values)
    reject_unknown_fields(cls, values, block)
    check_field_types(cls, values, block)
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class ArmConfig:
    sft: str = "sft"  # the SFT run it starts from
    rl: dict = dataclasses.field(default_factory=dict)  # rl.* overrides, e.g. {"train_summaries": False}
    rollout: dict = dataclasses.field(default_factory=dict)  # rollout.* overrides, while training


@dataclasses.dataclass(frozen=True)
class PolicyConfig:
    checkpoint: str  # an SFT run, an arm, or a checkpoints directory (a pretrained base)
    rollout: dict = dataclasses.field(default_factory=dict)  # rollout.* overrides, while evaluated


@dataclasses.dataclass(frozen=True)
class EvalSetConfig:
    tasks: int  # held-out tasks (0: the whole split); the suite picks which (TaskSuite.sample_ids)
    x: float = 0.0  # the set's place on the plots' x axis (e.g. the horizon in windows); 0: none
    env_id: str = ""  # another suite than rl.env_id (its suite_options then start empty)
    suite_options: dict = dataclasses.field(default_factory=dict)  # merged onto the suite's options
    rl: dict = dataclasses.field(default_factory=dict)  # rl.* overrides (e.g. env_max_turns)
    rollout: dict = dataclasses.field(default_factory=dict)  # rollout.* overrides, under the policy's
    policies: tuple = ()  # the policies that play it; () = every policy


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    arms: dict  # name -> ArmConfig
    policies: dict  # name -> PolicyConfig
    evaluations: dict  # name -> EvalSetConfig
    sft: dict = dataclasses.field(default_factory=lambda: {"sft": {}})  # name -> rollout overrides
    pairs: tuple = ()  # "a:b": policy a against policy b, on the same episodes
    only: str = ""  # train SFT and this one arm, evaluate nothing

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> ExperimentConfig:
        values = _plain(values)
        reject_unknown_fields(cls, values, "experiment")
        check_field_types(cls, values, "experiment")
        out = cls(
            arms={k: _typed(ArmConfig, v, f"experiment.arms.{k}") for k, v in values.get("arms", {}).items()},
            policies={k: _typed(PolicyConfig, v, f"experiment.policies.{k}")
                      for k, v in values.get("policies", {}).items()},
            # in order of x, then name (a ConfigDict lists its keys sorted, not as written)
            evaluations=dict(sorted(((k, _typed(EvalSetConfig, v, f"experiment.evaluations.{k}"))
                                     for k, v in values.get("evaluations", {}).items()),
                                    key=lambda item: (item[1].x, item[0]))),
            sft=values.get("sft", {"sft": {}}), pairs=tuple(values.get("pairs", ())), only=values.get("only", ""))
        out.validate()
        return out

    def validate(self) -> None:
        runs = set(self.sft) | set(self.arms)
        for name, arm in self.arms.items():
            if arm.sft not in self.sft:
                raise ConfigError(f"experiment.arms.{name}.sft={arm.sft!r}: not an SFT run of experiment.sft "
                                  f"{sorted(self.sft)}")
        for name, policy in self.policies.items():
            if policy.checkpoint not in runs and "/" not in policy.checkpoint:
                raise ConfigError(f"experiment.policies.{name}.checkpoint={policy.checkpoint!r}: neither an SFT "
                                  f"run {sorted(self.sft)}, an arm {sorted(self.arms)} nor a checkpoints directory")
        for name, ev in self.evaluations.items():
            if ev.tasks < 0:
                raise ConfigError(f"experiment.evaluations.{name}.tasks={ev.tasks}: must be >= 0 (0: all)")
            if unknown := sorted(set(ev.policies) - set(self.policies)):
                raise ConfigError(f"experiment.evaluations.{name}.policies: {unknown} not in experiment.policies")
        for pair in self.pairs:
            a, sep, b = pair.partition(":")
            if not sep or a not in self.policies or b not in self.policies:
                raise ConfigError(f"experiment.pairs: {pair!r} is not 'a:b' with a and b in experiment.policies "
                                  f"{sorted(self.policies)}")
        if self.only and self.only not in self.arms:
            raise ConfigError(f"experiment.only={self.only!r}: not an arm of experiment.arms {sorted(self.arms)}")

    def plays(self, eval_set: str) -> list[str]:
        """The policies that play `eval_set`, in experiment.policies order."""
        wanted = self.evaluations[eval_set].policies
        return [p for p in self.policies if not wanted or p in wanted]
