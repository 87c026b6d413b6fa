"""What every task suite offers the environment, and the fixed train/validation split."""
from __future__ import annotations

import abc
import hashlib

from composer_jax.grading.task import Task
from composer_jax.pyparse import parse_python  # noqa: F401 - the suites' parser, re-exported

SPLITS = ("train", "validation")


def split_of(source_id: str, validation_percent: int = 10) -> str:
    """Deterministic split by the ORIGIN of a task, so every task made from one source problem
    lands on the same side and validation problems never leak into training."""
    bucket = int(hashlib.sha256(source_id.encode()).hexdigest(), 16) % 100
    return "validation" if bucket < validation_percent else "train"


def check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")


class UnknownTaskError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class TaskSuite(abc.ABC):
    name: str

    @abc.abstractmethod
    def task_ids(self, split: str) -> list[str]:
        """All task ids of a split, in a fixed order."""

    @abc.abstractmethod
    def get(self, task_id: str) -> Task:
        """The task; raises UnknownTaskError naming the suite when the id is not one of ours."""

    def scripted_policy(self, env):
        """The scripted expert that plays this suite's tasks through the agent loop (the SFT
        demonstrations): the task's expert plan, unless the suite needs a policy that reads its
        own context (LongHorizon)."""
        from environments.scripted import ExpertPolicy
        return ExpertPolicy(env)

    def summary_rubric(self, task: Task) -> list | None:
        """Rubric items (rl/judge.py RubricItem) a judge scores this task's summaries against
        (rl.reward_judge > 0), or None: the suite has no summary rubric."""
        return None

    def carry_facts(self, task: Task, reads) -> list[list[str]] | None:
        """What later turns still need after the agent has read the files `reads`, each fact the
        words a summary line must hold together; the agent loop counts those a summary dropped
        (the compaction error). None: the suite cannot tell."""
        return None

    def sample_ids(self, split: str, n: int) -> list[str]:
        """`n` tasks of `split` that stand for all of it (0 or more than there are: every task):
        evenly spaced, since a suite's ids come grouped by their source (the first n would cover
        a few source functions or packages only). SFT demonstrations, RL's own evaluations and
        the experiments' held-out sets all draw tasks here."""
        ids = self.task_ids(split)
        if not n or n >= len(ids):
            return ids
        return [ids[i * len(ids) // n] for i in range(n)]

    def tokenizer_texts(self, env, tasks: int) -> list[str]:
        """Text of this suite's episodes for a tokenizer's corpus (data.tokenizer_agent_tasks):
        the expert's transcripts of `tasks` train tasks spread over the split (`sample_ids`: the
        first ones would be one package's), played in `env` and rendered as the policy reads them."""
        from composer_jax.harness.protocol import render_conversation
        from environments.experts import run_plan
        return [render_conversation(run_plan(env, task_id=t).messages()) for t in self.sample_ids("train", tasks)]

    def unknown(self, task_id: str) -> UnknownTaskError:
        sample = ", ".join(self.task_ids("validation")[:3])
        return UnknownTaskError(f"{self.name} has no task {task_id!r} (ids look like: {sample})")
