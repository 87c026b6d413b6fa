"""Scripted experts: solve tasks through the same tool interface a model uses.

An expert knows the answer from the task's metadata (`reference_files`: the fixed/implemented
files; `read_order` for LongHorizon) and acts like a careful agent: read the files it will touch
(or the note chain), make minimal unique `edit_file` edits, optionally run the visible tests,
submit. The recorded (observation, action) turns are demonstrations for SFT.

Coverage: BugFix (every task), Implement's HumanEval split (canonical solutions), LongHorizon
(every task). LeetCode (Implement's train split) ships no reference solutions, so there is no
expert for it: `expert_plan` refuses it.

`answer_key_plan` is not an expert. For a LeetCode task it writes an answer key (see
environments/answer_key.py): a solution.py that returns each hidden case's expected value, built
from the hidden tests. It is an instrument that proves the grading pipeline CAN score 1 on the
task (an ideal cheater holding the answer key must score 1), used by benchmarks/env_bench.py and
tests/test_scoreable.py. It is never SFT or RL data: nothing that collects demonstrations may
call it.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any

from composer_jax.grading.task import Task
from composer_jax.harness.protocol import Message, format_tool_call


HINT_CONTEXT = 3  # lines read either side of a hinted bug line


class NoExpertError(ValueError):
    """The task has no reference solution to demonstrate."""


def minimal_edits(before: str, after: str) -> list[tuple[str, str]]:
    """(old, new) pairs that turn `before` into `after` with edit_file: each `old` is non-empty
    and occurs exactly once in the text at the moment it is applied (hunks bottom-up, widened
    by context lines until unique)."""
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    hunks = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    current, edits = list(a), []
    for _, i1, i2, j1, j2 in reversed(hunks):
        text, context = "".join(current), 0
        while True:
            start, end = max(0, i1 - context), min(len(current), i2 + context)
            old = "".join(current[start:end])
            if (old and text.count(old) == 1) or (start == 0 and end == len(current)):
                break
            context += 1
        edits.append((old, "".join(current[start:i1] + b[j1:j2] + current[i2:end])))
        current = current[:i1] + b[j1:j2] + current[i2:]
    return edits


def _edit_actions(path: str, before: str, after: str) -> list[str]:
    edits = minimal_edits(before, after)
    if any(not old for old, _ in edits):  # empty file: nothing to anchor an edit on
        return [format_tool_call("write_file", path=path, content=after)]
    return [format_tool_call("edit_file", path=path, old=old, new=new) for old, new in edits]


def _read_actions(task: Task, path: str, lines_per_read: int) -> list[str]:
    """Read a file whole, or in line ranges when it is long, so that every fact the expert
    later uses appears in an untruncated observation of its transcript."""
    n = len(task.files.get(path, "").splitlines())
    if n <= lines_per_read:
        return [format_tool_call("read_file", path=path)]
    return [format_tool_call("read_file", path=path, start_line=s, end_line=min(s + lines_per_read - 1, n))
            for s in range(1, n + 1, lines_per_read)]


def expert_plan(task: Task, *, verify: bool = False, lines_per_read: int = 60) -> list[str]:
    """The expert's actions for `task`, in order, ending with submit."""
    if "reference_files" not in task.metadata:
        raise NoExpertError(f"{task.task_id} has no reference solution (LeetCode tasks ship none); "
                            "experts cover BugFix, Implement's HumanEval split and LongHorizon")
    reference = json.loads(task.metadata["reference_files"])
    reads = json.loads(task.metadata.get("read_order", "null")) or sorted(reference)
    if "hint_line" in task.metadata:  # the prompt names the line: read around it, as a person would
        line, (path,) = int(task.metadata["hint_line"]), reads
        actions = [format_tool_call("read_file", path=path, start_line=max(1, line - HINT_CONTEXT),
                                    end_line=line + HINT_CONTEXT)]
    else:
        actions = [a for p in reads for a in _read_actions(task, p, lines_per_read)]
    for path, content in sorted(reference.items()):
        # A new file, or LongHorizon's config to fill in, is written whole, as a person would.
        if path not in task.files or "read_order" in task.metadata:
            actions.append(format_tool_call("write_file", path=path, content=content))
        else:
            actions += _edit_actions(path, task.files[path], content)
    if verify and any(p.startswith("test_") or p.startswith("tests/") for p in task.files):
        actions.append(format_tool_call("run_tests"))
    return actions + [format_tool_call("submit")]


SUBMIT_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini-swe-agent's end of a task


def shell_plan(task: Task, lines_per_read: int = 60) -> list[tuple[str, str]]:
    """The same expert through a bash-only harness (mini-swe-agent): (thought, command) turns
    that read the code with `nl -ba FILE | sed -n 'A,Bp'` (the harness's own advice), make each
    minimal edit with a Python one-shot (`str.replace` of the exact old text, so quoting never
    breaks the command), then end with the harness's submit command."""
    if "reference_files" not in task.metadata:
        raise NoExpertError(f"{task.task_id} has no reference solution to demonstrate")
    reference = json.loads(task.metadata["reference_files"])
    turns = []
    for path in sorted(reference):
        n = len(task.files.get(path, "").splitlines())
        if "hint_line" in task.metadata:
            line = int(task.metadata["hint_line"])
            ranges = [(max(1, line - HINT_CONTEXT), line + HINT_CONTEXT)]
        else:
            ranges = [(s, min(s + lines_per_read - 1, n)) for s in range(1, n + 1, lines_per_read)]
        turns += [(f"Let me read lines {a}-{b} of {path}.", f"nl -ba {path} | sed -n '{a},{b}p'") for a, b in ranges]
        before = task.files.get(path)
        edits = minimal_edits(before, reference[path]) if before is not None else []
        if before is None or any(not old for old, _ in edits):
            turns.append((f"Writing {path}.", f"python3 - <<'EOF'\nimport pathlib\n"
                          f"pathlib.Path({path!r}).write_text({reference[path]!r})\nEOF"))
            continue
        for old, new in edits:
            turns.append((f"Fixing {path}: {old.strip()!r} should be {new.strip()!r}.",
                          f"python3 - <<'EOF'\nimport pathlib\np = pathlib.Path({path!r})\n"
                          f"p.write_text(p.read_text().replace({old!r}, {new!r}, 1))\nEOF"))
    return turns + [("The fix is in place; submitting.", SUBMIT_COMMAND)]


def answer_key_plan(task: Task, key=None) -> list[str]:
    """Write the task's answer key and submit: a grading check, NEVER a demonstration (see the
    module docstring). `key`: an `answer_key.AnswerKey` already built for the task (building
    one runs the hidden tests on the host, a fraction of a second); raises `answer_key.KeyUnfit`
    when the task does not fit the answer-key scheme."""
    from environments import answer_key

    if not task.task_id.startswith("implement/leetcode-"):
        raise answer_key.KeyUnfit(f"{task.task_id}: answer keys are for LeetCode tasks; the others have experts")
    key = key if key is not None else answer_key.answer_key(task)
    if key.task_id != task.task_id:
        raise ValueError(f"the answer key is for {key.task_id}, not {task.task_id}")
    if key.files is None:
        raise answer_key.KeyUnfit(f"{task.task_id}: {key.reason}")
    return [format_tool_call("write_file", path=p, content=c) for p, c in sorted(key.files.items())] + \
        [format_tool_call("submit")]


def null_plan(task: Task) -> list[str]:
    """The do-nothing baseline: submit at once."""
    return [format_tool_call("submit")]


@dataclasses.dataclass
class Transcript:
    task_id: str
    prompt: str
    system_prompt: str
    turns: list[tuple[str, str]]  # (observation before the action, action)
    final_observation: str
    reward: float
    info: dict[str, Any]

    def messages(self) -> list[Message]:
        """The episode as chat messages (system, task, then assistant/tool turns), for SFT."""
        out = [Message("system", self.system_prompt), Message("user", self.prompt)]
        observations = [obs for obs, _ in self.turns[1:]] + [self.final_observation]
        for (_, action), observation in zip(self.turns, observations, strict=True):
            out += [Message("assistant", action), Message("tool", observation)]
        return out[:-1]  # what follows submit is not part of the conversation


def run_plan(env, plan_fn=expert_plan, *, task_id: str | None = None, seed: int | None = None,
             split: str | None = None, **plan_kwargs) -> Transcript:
    """Play a scripted plan in `env` (a CodingEnv, possibly wrapped) and record the turns."""
    options = {"task_id": task_id} if task_id else ({"split": split} if split else {})
    observation, info = env.reset(seed=seed, options=options)
    task = env.unwrapped.task
    plan = plan_fn(task, **plan_kwargs)
    turns, reward, step_info = [], 0.0, info
    for action in plan:
        turns.append((observation, action))
        observation, reward, terminated, truncated, step_info = env.step(action)
        if terminated or truncated:
            break
    return Transcript(task.task_id, task.prompt, info["system_prompt"], turns, observation, reward, step_info)
