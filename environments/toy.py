"""composer/Toy-v0: a one-turn env for the RL machinery (fleet, async, schedulers) without a
sandbox or a capable policy. The reward is 1 when the action contains the letter 'a', which a
random tiny policy does about half the time, so every group has reward variance and every step
updates.

    gymnasium.make("composer/Toy-v0", split="train", suite_options={"latency_s": 0.5})

suite_options: tasks (per split), latency_s (sleep per reset and step: a slow sandbox).
"""
from __future__ import annotations

import string
import time
from collections.abc import Mapping
from typing import Any

import gymnasium as gym


class ToySuite:
    name = "Toy"

    def __init__(self, tasks: int):
        self.tasks = tasks

    def task_ids(self, split: str) -> list[str]:
        return [f"toy/{split}-{i}" for i in range(self.tasks)]


class ToyEnv(gym.Env):
    def __init__(self, split: str = "train", max_turns: int = 1, suite_options: Mapping[str, Any] | None = None,
                 reward_mode: str = ""):
        options = dict(suite_options or {})
        unknown = sorted(set(options) - {"tasks", "latency_s"})
        if unknown:
            raise ValueError(f"composer/Toy-v0: unknown suite option(s) {unknown}; allowed: tasks, latency_s")
        self.suite = ToySuite(int(options.get("tasks", 16)))
        self.latency_s = float(options.get("latency_s", 0.0))
        self.split, self.task = split, None
        self.observation_space = self.action_space = gym.spaces.Text(4096, charset=string.printable)

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        super().reset(seed=seed)
        time.sleep(self.latency_s)
        options = dict(options or {})
        self.task = options.get("task_id", self.suite.task_ids(options.get("split", self.split))[0])
        return "Answer with one word.", {"task_id": self.task, "system_prompt": "Reply."}

    def step(self, action: str):
        time.sleep(self.latency_s)
        return "done", float("a" in action), True, False, {"tool": "submit", "task_id": self.task}
