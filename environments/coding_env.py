"""The Gymnasium coding environment: one task per episode, one tool call per step.

    env = gymnasium.make("composer/BugFix-v0", split="validation", max_turns=30)
    prompt, info = env.reset(seed=0)                    # info["system_prompt"] lists the tools
    obs, reward, terminated, truncated, info = env.step(format_tool_call("read_file", path="x.py"))

Actions are the model's assistant turns as text; observations are tool results as text. The
reward is 0 until `submit`, which grades the workspace in a fresh sandbox with hidden tests and
terminates. Running out of turns truncates (reward 0 unless `grade_on_truncation`).
"""
from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from typing import Any

import gymnasium as gym

from composer_jax.harness.protocol import parse_tool_call
from composer_jax.harness.tool_specs import TOOL_SPECS, system_prompt
from composer_jax.harness.tools import Toolbox, ToolConfig, observe, utf8_text
from composer_jax.sandbox import files
from composer_jax.sandbox.base import SandboxBackend
from environments import grading_bridge
from environments.suites import SPLITS, make_suite

MAX_TEXT_LENGTH = 1 << 20
# Every printable character of the Basic Multilingual Plane plus tab/newline/CR: observations
# quote source files, which are not ASCII-only.
TEXT_CHARSET = "\t\n\r" + "".join(
    chr(c) for c in range(0x20, 0xFFFE) if not 0x7F <= c < 0xA0 and not 0xD800 <= c < 0xE000
)
RESET_OPTIONS = ("task_id", "split", "task_index")
DEFAULT_TOOL_CONFIG = ToolConfig()
# LongHorizon withholds grep and run: a single `grep -r Fragment` would replace the reads the
# diagnostic is about.
DEFAULT_TOOLS = {
    "LongHorizon": ("list_dir", "read_file", "edit_file", "write_file", "run_tests", "submit"),
}
COMMAND_TOOLS = ("run", "run_tests")  # the tools that can grow the workspace past its quota


def text_space() -> gym.spaces.Text:
    return gym.spaces.Text(max_length=MAX_TEXT_LENGTH, min_length=0, charset=TEXT_CHARSET)


class CodingEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(
        self,
        suite: str = "BugFix",
        split: str = "train",
        max_turns: int = 30,
        backend: str | SandboxBackend | None = "auto",
        grader: grading_bridge.Grader | None = None,
        reward_mode: str = "all_pass",
        tools: Iterable[str] | None = None,
        tool_config: ToolConfig = DEFAULT_TOOL_CONFIG,
        grade_on_truncation: bool = False,
        suite_options: Mapping[str, Any] | None = None,
        quota: files.Quota = files.DEFAULT_QUOTA,
    ):
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {max_turns}")
        self.tools = tuple(tools) if tools is not None else DEFAULT_TOOLS.get(suite, tuple(TOOL_SPECS))
        unknown_tools = [t for t in self.tools if t not in TOOL_SPECS]
        if unknown_tools or "submit" not in self.tools:
            raise ValueError(f"tools must be names from {tuple(TOOL_SPECS)} and include 'submit'; "
                             f"unknown: {unknown_tools}")
        self.suite = make_suite(suite, **dict(suite_options or {}))
        self.split, self.max_turns = split, max_turns
        self.backend = grading_bridge.resolve_backend(backend)
        self.grader = grading_bridge.resolve_grader(grader)
        self.grade_config = grading_bridge.grade_config(reward_mode)
        self.tool_config, self.grade_on_truncation = tool_config, grade_on_truncation
        self.quota = quota
        self.observation_space = text_space()
        self.action_space = text_space()
        self.task = None
        self._workspace = self._toolbox = None
        self._turn, self._reads = 0, []

    # Episode ------------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        super().reset(seed=seed)
        self.task = self._choose_task(dict(options or {}))
        self._release_workspace()
        self._workspace = self.backend.create(self.task.files, grading_bridge.task_runtime(self.task))
        # Without `run`, run_tests must not run the agent's code either (Toolbox's pristine mode).
        pristine = None if "run" in self.tools else self.task.files
        self._toolbox = Toolbox(self.backend, self._workspace, self.tool_config, pristine=pristine,
                                quota=self.quota)
        self._turn, self._reads = 0, []
        return utf8_text(self.task.prompt), {
            "task_id": self.task.task_id, "suite": self.task.suite, "turn": 0,
            "max_turns": self.max_turns, "system_prompt": system_prompt(self.tools),
        }

    def step(self, action: str):
        if self._toolbox is None:
            raise RuntimeError("the episode is over (or never started); call reset() first")
        self._turn += 1
        info: dict[str, Any] = {"task_id": self.task.task_id, "turn": self._turn}
        call = parse_tool_call(action, {name: TOOL_SPECS[name] for name in self.tools})
        reward, terminated = 0.0, False
        if not hasattr(call, "arguments"):
            observation = call.observation()
            info["tool_error"] = call.kind
        elif call.name == "submit":
            info["tool"] = "submit"
            reward, observation = self._grade(info)
            terminated = True
        else:
            result = observe(self._toolbox, call)
            observation, info["tool"] = result.text, call.name
            if not result.ok:
                info["tool_error"] = "tool_failed"
            elif call.name == "read_file":
                self._reads.append(posixpath.normpath(str(call.arguments.get("path", ""))))
            if call.name in COMMAND_TOOLS and (over := self._over_quota()):
                observation += f"\n[{over}: submit scores 0 unless you delete files]"
                info["quota"] = over
        if (facts := self.suite.carry_facts(self.task, self._reads)) is not None:
            info["carry_facts"] = facts
        truncated = not terminated and self._turn >= self.max_turns
        if truncated:
            observation += f"\n[turn limit of {self.max_turns} reached]"
            if self.grade_on_truncation:
                reward, _ = self._grade(info)
        if terminated or truncated:
            self._release_workspace()
        # The last line of defence: a lone surrogate must never reach a tokenizer.
        return utf8_text(observation), reward, terminated, truncated, info

    def shell(self, cmd: str) -> tuple[str, int]:
        """(output, exit code) of a shell command run like the `run` tool, in the episode's
        sandboxed workspace: how a third-party harness (composer_jax/harness/mini_swe_agent.py)
        acts in this env. Counts a turn; grading is still `submit`'s, outside the sandbox."""
        if self._toolbox is None:
            raise RuntimeError("the episode is over (or never started); call reset() first")
        self._turn += 1
        r = self._toolbox.shell(cmd)
        output = r.stdout + r.stderr + ("\n[timed out]" if r.timed_out else "")
        if over := self._over_quota():
            output += f"\n[{over}: submit scores 0 unless you delete files]"
        return output, r.returncode

    def close(self):
        self._release_workspace()
        super().close()

    # Helpers ------------------------------------------------------------------------------------

    def _choose_task(self, options: dict[str, Any]):
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; allowed: {RESET_OPTIONS}")
        if "task_id" in options:
            return self.suite.get(options["task_id"])
        split = options.get("split", self.split)
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        ids = self.suite.task_ids(split)
        if not ids:
            raise ValueError(f"{self.suite.name} has no {split} tasks")
        index = options.get("task_index")
        if index is None:
            index = int(self.np_random.integers(len(ids)))
        elif isinstance(index, bool) or not isinstance(index, int):  # bool is an int subclass
            raise ValueError(f"task_index must be an int, got {type(index).__name__} {index!r}")
        elif not 0 <= index < len(ids):
            raise ValueError(f"task_index {index!r} is out of range: {self.suite.name} {split} "
                             f"has {len(ids)} tasks (0..{len(ids) - 1})")
        return self.suite.get(ids[index])

    def _grade(self, info: dict[str, Any]) -> tuple[float, str]:
        """Grade the workspace; a grader failure scores 0 and is reported, never raised. A
        workspace over quota scores 0 before any of it is read to the host."""
        over = self._over_quota()
        if over:
            result = grading_bridge.failed_grade(self.task, over)
            info["grading_error"] = over
        else:
            try:
                submitted = self.backend.read_files(self._workspace)
                result = self.grader(self.task, submitted, self.backend, self.grade_config)
            except Exception as e:  # noqa: BLE001 - one broken grading must not kill a rollout worker
                result = grading_bridge.failed_grade(self.task, f"grading failed: {type(e).__name__}: {e}")
                info["grading_error"] = f"{type(e).__name__}: {e}"
        if result.error:
            info["grading_error"] = result.error
        info.update(tests=dict(result.tests), passed=result.passed, total=result.total,
                    grading_details=result.details)
        not_graded = f" Not graded: {over}." if over else ""
        return result.reward, f"Submitted. {result.passed}/{result.total} hidden tests passed.{not_graded}"

    def _over_quota(self) -> str | None:
        """Why the workspace is over its quota, or None (cheap: the walk stops at the cap)."""
        exceeded = files.workspace_usage(self._workspace.path, self.quota).exceeded
        return exceeded and f"workspace over quota: {exceeded}"

    def _release_workspace(self):
        if self._workspace is not None:
            self.backend.destroy(self._workspace)
        self._workspace = self._toolbox = None
