"""Frozen rollout config, built from the `rollout` block of an ml_collections config and validated."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from composer_jax.errors import ConfigError, reject_unknown_fields


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
    window: int = 2048  # tokens of context a slot may hold (its KV cache region, less slack)
    summarize_at: float = 0.85  # summarise before a turn once context + turn_budget > this x window
    summary_budget: int = 256  # max tokens of one summary
    max_segments: int = 4  # context resets allowed per episode + 1; more -> truncated, flagged
    turn_budget: int = 256  # max new tokens per assistant turn
    slots: int = 8  # episodes decoded together
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    max_turns: int = 30  # assistant turns (tool calls) per episode, summaries not counted
    prefill_buckets: tuple[int, ...] = (64, 256, 1024)  # padded chunk lengths (one compile each)
    # A summary reset rewinds the slot to the end of the prompt (its KV kept) and prefills only
    # the summary; False re-prefills the whole reset prompt (the same tokens, scored again).
    reset_keeps_prompt: bool = True
    # Who writes the context after a reset: "policy" (self-summarisation, trained with the
    # episode) or "harness" (the baseline: lines of the context that look like facts,
    # summarize.harness_summary; no policy tokens).
    compaction: str = "policy"
    # Decode only the running slots, padded to a slot bucket (one more compile per bucket);
    # False decodes every slot each step (worth it only when a step is cheaper than a compile).
    decode_buckets: bool = True
    seed: int = 0  # sampling keys; set per call by the learner and evaluate (composer_jax/seeds.py)

    @classmethod
    def from_config(cls, rollout_config: Mapping[str, Any]) -> RolloutConfig:
        values = dict(rollout_config.items())
        reject_unknown_fields(cls, values, "rollout")
        if "prefill_buckets" in values:
            values["prefill_buckets"] = tuple(values["prefill_buckets"])
        cfg = cls(**values)
        cfg.validate()
        return cfg

    @property
    def max_new_tokens(self) -> int:
        """Static length of one decode call's output buffer."""
        return max(self.turn_budget, self.summary_budget)

    def validate(self) -> None:
        def fail(field: str, why: str):
            raise ConfigError(f"rollout.{field}={getattr(self, field)!r}: {why}")

        for field in ("window", "summary_budget", "max_segments", "turn_budget", "slots", "max_turns"):
            if not isinstance(getattr(self, field), int) or getattr(self, field) < 1:
                fail(field, "must be a positive integer")
        if not isinstance(self.reset_keeps_prompt, bool):
            fail("reset_keeps_prompt", "must be True or False")
        if self.compaction not in ("policy", "harness"):
            fail("compaction", "must be 'policy' or 'harness'")
        if not 0 < self.summarize_at <= 1:
            fail("summarize_at", "must be in (0, 1]")
        if self.temperature < 0:
            fail("temperature", "must be >= 0 (0 = greedy)")
        if not 0 < self.top_p <= 1:
            fail("top_p", "must be in (0, 1]")
        buckets = self.prefill_buckets
        if not buckets or any(not isinstance(b, int) or b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
            fail("prefill_buckets", "must be increasing positive integers")
        if self.turn_budget + self.summary_budget >= self.window:
            fail("window", f"must exceed rollout.turn_budget + rollout.summary_budget "
                           f"({self.turn_budget} + {self.summary_budget}) with room for the prompt")
