"""Scripted policies for the agent loop's teacher-forced mode (SFT data with summaries, tests).
Each suite names its own (`TaskSuite.scripted_policy`): the trainer never picks one by env id.

  * `ExpertPolicy`: plays `environments.experts.expert_plan` in order; its summaries only
    count progress (the plan, not the context, carries what it needs).
  * `NoteChainPolicy`: solves LongHorizon from what is in its context alone: it follows the
    note chain, and when asked to summarise writes down the key, the fragments (or each
    register's latest value, or with carry="code" its latest handler function and the module
    defining it: a bounded state however long the chain) and the next note. With
    `carry_facts=False` its summaries keep only the next note, so the facts are lost at a
    reset: the diagnostic's negative control. With `drop_key=q` each summary leaves the access
    key out with probability q (seeded by the task): an imperfect demonstrator.
"""
from __future__ import annotations

import random
import re

from composer_jax.harness import special_tokens as st
from composer_jax.harness.protocol import format_tool_call
from environments.experts import expert_plan
from environments.suites.longhorizon import wire

KEY = re.compile(r"The access key is `([^`]+)`")
FRAGMENT = re.compile(r"Fragment (\d+) of (\d+): `([a-z]+|\?)`")  # "?": position only
REGISTER = re.compile(r"Note (\d+) of (\d+): set `([a-z]+)` to `([a-z]+)`")  # carry="registers"
# carry="code": a module's handler line, and a summary's line for it (which names the module).
# The summary spells the handler as the module (`def beige`) and app.py (`import beige`) do, after
# a space: in backticks BPE gives it another token, and SFT then learns a word-to-word mapping,
# not a copy (run 7: 0 of 6 sampled writes named a handler right, 0 held-out passes).
HANDLER = re.compile(r"def ([a-z]+)\(x\):.*# Note (\d+) of (\d+): handles `([a-z]+)`")
HANDLED = re.compile(r"Note (\d+) of (\d+): `([a-z]+)` is ([a-z]+) in (\S+\.py)")
NEXT = re.compile(r"Next note: (\S+\.(?:md|py))")
START = re.compile(r"Start by reading (\S+\.(?:md|py))")  # the task prompt names the chain's start
LAST = "This is the last note."
WRITTEN = re.compile(r"(config|app)\.py is written\.|Wrote (config|app)\.py|\"name\": \"write_file\"")


class ExpertPolicy:
    def __init__(self, env):
        self.plan = expert_plan(env.unwrapped.task)
        self.done = 0

    def act(self, context: str) -> str:
        action = self.plan[min(self.done, len(self.plan) - 1)]
        self.done += 1
        return action

    def summarize(self, context: str) -> str:
        return f"Progress: {self.done} of {len(self.plan)} planned actions done."


class NoteChainPolicy:
    def __init__(self, env=None, carry_facts: bool = True, drop_key: float = 0.0):
        self.carry_facts, self.drop_key = carry_facts, drop_key
        task = getattr(getattr(env, "unwrapped", None), "task", None)
        self.rng = random.Random(task.task_id if task is not None else 0)

    @staticmethod
    def facts(context: str) -> dict:
        """Key, fragments and the pointer after the furthest note, from tool results and summaries."""
        key = KEY.search(context)
        fragments = {int(i): (int(n), text) for i, n, text in FRAGMENT.findall(context) if text != "?"}
        registers = {}  # name -> (note index, of, value): the latest note that set it
        for i, n, name, value in REGISTER.findall(context):
            if int(i) > registers.get(name, (0,))[0]:
                registers[name] = (int(i), int(n), value)
        handlers = {}  # carry="code": name -> (note index, of, function, module)
        pointer, furthest = None, -1
        blocks = re.split(re.escape(st.TOOL_RESULT) + "|" + re.escape(st.SUMMARY_OPEN), context)[1:]
        for block in blocks:
            found = ([(int(i), int(n), name, fn, path) for i, n, name, fn, path in HANDLED.findall(block)]
                     + [(int(i), int(n), name, fn, pointer) for fn, i, n, name in HANDLER.findall(block)])
            for i, n, name, fn, path in found:  # a module read is the one the last pointer named
                if i > handlers.get(name, (0,))[0]:
                    handlers[name] = (i, n, fn, path)
            indices = ([int(i) for i, _, _ in FRAGMENT.findall(block)] + [int(m[0]) for m in REGISTER.findall(block)]
                       + [i for i, *_ in found] or ([0] if KEY.search(block) else []))
            # a harness-written summary may keep several pointers: the newest (in context order) counts
            nxt = NEXT.findall(block)[-1:]
            at_end = LAST in block and block.rfind(LAST) > block.rfind("Next note: ")
            if indices and max(indices) > furthest and (nxt or at_end):
                furthest, pointer = max(indices), (LAST if at_end else nxt[0])
        return dict(key=key.group(1) if key else None, fragments=fragments, registers=registers, handlers=handlers,
                    pointer=pointer, furthest=furthest, written=bool(WRITTEN.search(context)))

    def act(self, context: str) -> str:
        f = self.facts(context)
        if f["pointer"] is None:
            start = START.search(context)
            return format_tool_call("read_file", path=start.group(1) if start else "docs/start.md")
        if f["pointer"] != LAST:
            return format_tool_call("read_file", path=f["pointer"])
        if not f["written"] and f["handlers"]:
            content = f"ACCESS_KEY = {f['key'] or ''!r}\n" + "".join(
                wire(name, path, fn) for name, (_, _, fn, path) in sorted(f["handlers"].items()))
            return format_tool_call("write_file", path="app.py", content=content)
        if not f["written"]:
            content = f"ACCESS_KEY = {f['key'] or ''!r}\n"
            if f["registers"]:
                content += "".join(f"{name.upper()} = {v!r}\n" for name, (_, _, v) in sorted(f["registers"].items()))
            else:
                content += f"FRAGMENTS = {'-'.join(text for _, (_, text) in sorted(f['fragments'].items()))!r}\n"
            return format_tool_call("write_file", path="config.py", content=content)
        return format_tool_call("submit")

    def summarize(self, context: str) -> str:
        f = self.facts(context)
        lines = []
        if self.carry_facts:
            if f["key"] and not (self.drop_key and self.rng.random() < self.drop_key):
                lines.append(f"The access key is `{f['key']}`.")
            lines += [f"Fragment {i} of {n}: `{text}`" for i, (n, text) in sorted(f["fragments"].items())]
            lines += [f"Note {i} of {n}: set `{name}` to `{v}`."
                      for name, (i, n, v) in sorted(f["registers"].items(), key=lambda kv: kv[1])]
            lines += [f"Note {i} of {n}: `{name}` is {fn} in {path}."
                      for name, (i, n, fn, path) in sorted(f["handlers"].items(), key=lambda kv: kv[1])]
        elif f["furthest"] >= 0:  # keep the position in the chain but forget what was found
            lines.append(f"Fragment {f['furthest']} of 0: `?`")
        if f["pointer"] is not None:
            lines.append(f"Next note: {f['pointer']}" if f["pointer"] != LAST else LAST)
        if f["written"]:
            lines.append(f"{'app' if f['handlers'] else 'config'}.py is written.")
        return "\n".join(lines)
