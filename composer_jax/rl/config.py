"""Typed `rl`, `sft` and `eval_rollout` blocks (and the `optim` sub-blocks): built from the
config, they reject an unknown key or a value of the wrong type, naming the field, before any
work (config_schema.validate builds every block of a config).

    rl = RLConfig.from_config(config.rl)      # rl.group_size, rl.loss.kl_coef, rl.optim.lr
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from composer_jax.config_schema import typed as _build
from composer_jax.errors import ConfigError
from composer_jax.rl.losses import LossConfig

ADVANTAGES = ("grpo", "dr_grpo", "rloo")


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    steps: int
    lr: float
    warmup_steps: int = 0
    min_lr_ratio: float = 1.0
    weight_decay: float = 0.0
    b1: float = 0.9
    b2: float = 0.99
    eps: float = 1e-8
    clip_norm: float = 1.0
    embed_lr_scale: float = 1.0  # the embedding's and head's step relative to lr (train/optim.py)

    @classmethod
    def from_config(cls, values: Mapping[str, Any], block: str) -> OptimConfig:
        out = _build(cls, values, block)
        if out.steps < 1 or out.lr <= 0:
            raise ConfigError(f"{block}: steps must be >= 1 and lr > 0 (steps={out.steps}, lr={out.lr})")
        return out


@dataclasses.dataclass(frozen=True)
class RLConfig:
    env_id: str
    suite_options: dict
    env_max_turns: int
    reward_mode: str
    system_prompt: str
    tokenizer: str
    init_from: str
    steps: int
    groups_per_step: int
    group_size: int
    max_sampling_rounds: int
    advantage: str
    negative_weight: float
    mask_unfinished: bool
    train_summaries: bool
    row_len: int
    minibatch_rows: int
    epochs: int
    recompute_old_logp: bool
    routing_replay: bool
    reward_tests: float
    reward_judge: float
    judge_from: str
    max_nonfinite: int
    eval_split: str
    eval_tasks: int
    eval_samples: int
    eval_every: int
    checkpoint_every: int
    keep: int
    loss: LossConfig
    optim: OptimConfig
    # A length curriculum: train tasks from these suite_options overrides in turn (shortest
    # first), the next once a step's train pass rate reaches curriculum_promote_at; () = none.
    # Evaluations stay on rl.suite_options (the target).
    curriculum: tuple = ()
    curriculum_promote_at: float = 0.8
    harness: str = "native"  # native | mini_swe_agent (rl/harness_loop.py)

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> RLConfig:
        values = dict(values.items())
        nested = dict(loss=LossConfig.from_config(values.pop("loss", {})),
                      optim=OptimConfig.from_config(values.pop("optim", {}), "rl.optim"))
        missing = sorted({f.name for f in dataclasses.fields(cls)} - set(values) - set(nested))
        if missing:
            raise ConfigError(f"rl.{missing[0]}: missing (configs/tiny.py defines every rl field)")
        out = _build(cls, values, "rl", **nested)
        if out.advantage not in ADVANTAGES:
            raise ConfigError(f"rl.advantage={out.advantage!r}: use one of {ADVANTAGES}")
        for name in ("groups_per_step", "group_size", "row_len", "minibatch_rows", "epochs", "checkpoint_every",
                     "keep", "eval_every", "eval_samples"):
            if getattr(out, name) < 1:
                raise ConfigError(f"rl.{name}={getattr(out, name)}: must be >= 1")
        if not all(isinstance(t, Mapping) and t for t in out.curriculum):
            raise ConfigError(f"rl.curriculum={out.curriculum!r}: a tuple of suite_options overrides, "
                              "e.g. ({'hops': 2}, {'hops': 4})")
        if out.curriculum and not 0.0 < out.curriculum_promote_at <= 1.0:
            raise ConfigError(f"rl.curriculum_promote_at={out.curriculum_promote_at}: a pass rate in (0, 1]; "
                              "above 1 the curriculum would never leave its first tier")
        if not 0.0 <= out.negative_weight <= 1.0:
            raise ConfigError(f"rl.negative_weight={out.negative_weight}: must be in [0, 1]")
        if out.harness not in ("native", "mini_swe_agent"):
            raise ConfigError(f"rl.harness={out.harness!r}: use 'native' or 'mini_swe_agent'")
        if out.harness != "native" and not out.env_id.startswith(("composer/BugFix", "composer/Implement",
                                                                           "composer/RealRepos")):
            raise ConfigError(f"rl.harness={out.harness!r} acts through shell commands: rl.env_id must be a "
                              f"BugFix, Implement or RealRepos suite (the tools a shell reaches), not {out.env_id!r}")
        return out


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    demos: int
    init_from: str
    batch_rows: int
    optim: OptimConfig
    successful_only: bool = True  # False: failed demonstrations are cloned too (an imperfect demonstrator)
    copy_warmup: int = 0  # steps of copy drills (rl/drills.py) before the demonstrations
    # > 0: SFT ends at the first check (every target_every steps from target_from) where the
    # policy's mean reward on target_tasks train tasks it was not shown has reached it (and target_pass)
    # target_streak checks in a row; optim.steps is the cap. Where SFT leaves the policy sets what RL can do, and a step count lands it
    # elsewhere under another tokenizer (docs/results/rl_longhorizon.md).
    target_reward: float = 0.0
    target_tasks: int = 32
    target_every: int = 10
    target_from: int = 0
    # One 32-task check is noisy: LongHorizon seed 1 stopped on a 0.61 after four checks near 0.4
    # and its every policy collapsed (docs/results/horizon.md, run 4); 2 asks for a confirmation.
    target_streak: int = 1
    # > 0: a check counts only when its held-back pass rate has reached this too (with
    # target_reward=0: the pass rate alone). The fraction reward credits facts without the task:
    # run 5's seed 1 met 0.57 at a pass rate of 0.06 and every policy after it failed.
    target_pass: float = 0.0
    # Whose format the demonstrations are in: our agent loop's ("native") and/or mini-swe-agent's
    # through the endpoint (rl/harness_demos.py); each demonstrated task is played in each
    harnesses: tuple[str, ...] = ("native",)

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> SFTConfig:
        values = dict(values.items())
        out = _build(cls, values, "sft", optim=OptimConfig.from_config(values.pop("optim", {}), "sft.optim"))
        for name in ("target_reward", "target_pass"):
            if not 0 <= getattr(out, name) <= 1:
                raise ConfigError(f"sft.{name}={getattr(out, name)}: must be in [0, 1] (0 = no target)")
        bad = (out.target_tasks < 1 or out.target_every < 1 or out.target_streak < 1
               or not 0 <= out.target_from < out.optim.steps)
        if (out.target_reward or out.target_pass) and bad:
            raise ConfigError(f"sft.target_reward={out.target_reward}, target_pass={out.target_pass}: "
                              f"needs target_tasks >= 1 "
                              f"(is {out.target_tasks}), target_every >= 1 (is {out.target_every}), "
                              f"target_streak >= 1 (is {out.target_streak}) and "
                              f"0 <= target_from < sft.optim.steps (is {out.target_from}, steps {out.optim.steps})")
        harnesses = (out.harnesses,) if isinstance(out.harnesses, str) else tuple(out.harnesses)
        if not harnesses or len(set(harnesses)) < len(harnesses) or \
                not set(harnesses) <= {"native", "mini_swe_agent"}:
            raise ConfigError(f"sft.harnesses={harnesses!r}: name 'native' and/or 'mini_swe_agent', once each")
        return dataclasses.replace(out, harnesses=harnesses)


@dataclasses.dataclass(frozen=True)
class EvalRolloutConfig:
    """Sampling of every evaluation, declared apart from the training rollouts' (`rollout`)."""
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> EvalRolloutConfig:
        out = _build(cls, values, "eval_rollout")
        if out.temperature < 0:
            raise ConfigError(f"eval_rollout.temperature={out.temperature}: must be >= 0 (0 = greedy)")
        if not 0 < out.top_p <= 1:
            raise ConfigError(f"eval_rollout.top_p={out.top_p}: must be in (0, 1]")
        return out

