"""BugFix: real code with one or two planted bugs; the agent must make the hidden tests pass.

Build (cached on disk): for each source repo (HumanEval problems, hand-written packages) check
that the original passes its hidden tests, enumerate AST mutants of its code, and keep a
mutant only if it fails at least one hidden test (without hanging). All checks run through
`check_runner` in forked workers, so a full build takes seconds, not minutes.
"""
from __future__ import annotations

import ast
import json
import zlib

from composer_jax.grading.task import Task
from environments.suites import cache, check_runner, mutations, sources
from environments.suites import drills as drill_tasks
from environments.suites.base import TaskSuite, check_split, parse_python, split_of
from environments.suites.check_runner import Check

DOUBLE_MUTANTS_PER_FILE = 8
# A mutant may take this many times the original's test time before it counts as hanging;
# hanging mutants are dropped (they would make every grading of the task slow).
SLOWDOWN_LIMIT = 10.0
MIN_TIMEOUT_S = 0.05
GENERATOR_MODULES = (mutations, sources, check_runner)


class BrokenSourceRepoError(RuntimeError):
    """A hand-written source repo fails its own tests before any mutation."""


def _all_sources() -> list[sources.SourceRepo]:
    problems = sources.humaneval_problems().values()
    return [sources.humaneval_repo(p) for p in problems] + [
        sources.handwritten_repo(n) for n in sources.handwritten_repo_names()
    ]


def _original_checks(repos: list[sources.SourceRepo]) -> list[Check]:
    return [Check(r.source_id, {**r.files, **r.hidden_tests}, r.hidden_calls + r.visible_calls) for r in repos]


def _mutant_candidates(repo: sources.SourceRepo) -> list[tuple[str, mutations.Mutant]]:
    out = []
    for path in repo.mutable_files:
        singles = mutations.mutants(repo.files[path])
        seed = zlib.crc32(f"{repo.source_id}/{path}".encode())
        doubles = mutations.double_mutants(repo.files[path], singles, DOUBLE_MUTANTS_PER_FILE, seed)
        out += [(path, m) for m in singles + doubles]
    return out


def build_records(workers: int | None = None) -> dict:
    """Validated mutants of every source, plus counts of what was dropped and why."""
    repos = _all_sources()
    originals = check_runner.run_checks(_original_checks(repos), workers)
    kept_repos, dropped_sources, visible_broken = [], [], []
    for repo in repos:
        result = originals[repo.source_id]
        hidden_failed = [t for t in result.failed if t in {c.node_id for c in repo.hidden_calls}]
        if result.status != "ok" or hidden_failed:
            if repo.source_id.startswith("repo-"):
                raise BrokenSourceRepoError(
                    f"source repo {repo.source_id} fails its own tests before mutation "
                    f"({result.status}: {hidden_failed}); fix environments/suites/repos_data/"
                )
            dropped_sources.append(repo.source_id)
            continue
        if any(c.node_id in result.failed for c in repo.visible_calls):
            visible_broken.append(repo.source_id)  # e.g. a docstring example that is not exact
        kept_repos.append(repo)

    candidates, checks = {}, []
    for repo in kept_repos:
        timeout = min(check_runner.CHECK_TIMEOUT_S,
                      max(MIN_TIMEOUT_S, SLOWDOWN_LIMIT * originals[repo.source_id].seconds))
        for i, (path, mutant) in enumerate(_mutant_candidates(repo)):
            key = f"{repo.source_id}#{i}"
            candidates[key] = (repo, path, mutant)
            files = {**repo.files, path: mutant.source, **repo.hidden_tests}
            checks.append(Check(key, files, repo.hidden_calls, timeout))
    results = check_runner.run_checks(checks, workers)

    records, outcome_counts = [], {"kept": 0, "survived": 0, "timeout_or_crash": 0}
    for key, (repo, path, mutant) in candidates.items():
        result = results[key]
        if result.status != "ok":
            outcome_counts["timeout_or_crash"] += 1
        elif not result.failed:
            outcome_counts["survived"] += 1  # equivalent or untested mutant
        else:
            outcome_counts["kept"] += 1
            records.append({
                "task_id": f"bugfix/{repo.source_id}/{mutant.operator}-{key.split('#')[1]}",
                "source_id": repo.source_id, "path": path, "operator": mutant.operator,
                "line": mutant.line, "source": mutant.source, "failing": list(result.failed),
            })
    return {"records": records, "dropped_sources": dropped_sources, "visible_broken": visible_broken,
            "outcomes": outcome_counts}


def _generator_key() -> str:
    code = cache.file_bytes(*(m.__file__ for m in GENERATOR_MODULES), __file__)
    data = cache.file_bytes(sources.humaneval_data_file(), *sources.handwritten_data_files())
    return cache.fingerprint(code + data)


def load_records(cache_dir: str | None = None, workers: int | None = None) -> dict:
    return cache.cached_json("bugfix", _generator_key(), lambda: build_records(workers), cache_dir)


def _function_at(source: str, line: int) -> str:
    """Qualified name of the innermost function containing `line`."""
    best, stack = "the code", [(parse_python(source), "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if isinstance(child, ast.ClassDef):
                    stack.append((child, name + "."))
                elif child.lineno <= line <= child.end_lineno:
                    best = name
                    stack.append((child, name + "."))
    return best


def _bugs(record: dict) -> int:
    """Planted bugs in a record: a double mutant's operator is "a+b"."""
    return record["operator"].count("+") + 1


def _prompt(repo: sources.SourceRepo, path: str, function: str, has_examples: bool, bugs: int) -> str:
    fix = "Find and fix the bug" if bugs == 1 else f"There are {bugs} bugs in {path}; find and fix them"
    if repo.source_id.startswith("humaneval-"):
        examples = (f" `{sources.VISIBLE_TEST_FILE}` runs the docstring examples." if has_examples else "")
        return (f"The function `{function}` in `{path}` does not do what its docstring says. "
                f"{fix}.{examples} Hidden tests will check `{function}` against its docstring when "
                "you submit.")
    return (f"Users report that `{function}` in `{path}` misbehaves. {fix}; the package's hidden "
            "test suite is run when you submit, so do not break anything else.")


class BugFixSuite(TaskSuite):
    name = "BugFix"

    def __init__(self, cache_dir: str | None = None, workers: int | None = None,
                 validation_percent: int = 10, max_bugs: int = 2, hint_line: bool = False, drills: int = 0,
                 drill_source: str = "functions"):
        """`max_bugs=1` keeps single-bug tasks only; `hint_line` names the (first) bug's line in
        the prompt, as a traceback or a blame would: an easier tier for policies too small to
        localise a bug by reading the code (the bug's kind and its fix are still theirs to find).
        `drills`: that many drills (see drills.py: functions of the project's dependencies that
        no sandbox holds) from `drill_source` ("functions" or "methods"), evenly spaced over all
        of them, join the train split (never validation); `stats["drills"]` says where from."""
        if max_bugs not in (1, 2):
            raise ValueError(f"max_bugs must be 1 or 2, got {max_bugs!r}")
        if not isinstance(drills, int) or drills < 0:
            raise ValueError(f"drills must be a non-negative int, got {drills!r}")
        if drill_source not in drill_tasks.SOURCES:
            raise ValueError(f"drill_source={drill_source!r}: use one of {drill_tasks.SOURCES}")
        self.hint_line = bool(hint_line)
        built = load_records(cache_dir, workers)
        self.stats = {k: len(v) if isinstance(v, list) else v for k, v in built.items() if k != "records"}
        self._records = {r["task_id"]: r for r in built["records"]
                         if _bugs(r) <= max_bugs}
        self._visible_broken = set(built["visible_broken"])
        self._repos = {r.source_id: r for r in _all_sources()}
        self._splits = {s: [] for s in ("train", "validation")}
        for task_id, record in self._records.items():
            self._splits[split_of(record["source_id"], validation_percent)].append(task_id)
        self._drills = {}
        if drills:
            drawn = drill_tasks.load_pool(cache_dir, drill_source)
            pool = drawn["records"]
            if drills > len(pool):
                raise ValueError(f"drills={drills}, but the drill pool's {drill_source} give {len(pool)} "
                                 f"(from {', '.join(drawn['distributions'])})")
            self.stats["drills"] = {"source": drill_source, "pool": len(pool), "drawn": drills,
                                    "distributions": drawn["distributions"]}
            self._drills = {r["task_id"]: r for r in (pool[i * len(pool) // drills] for i in range(drills))}
            self._splits["train"] += list(self._drills)

    def task_ids(self, split: str) -> list[str]:
        check_split(split)
        return list(self._splits[split])

    def get(self, task_id: str) -> Task:
        if task_id in self._drills:
            return self._drill_task(self._drills[task_id])
        record = self._records.get(task_id)
        if record is None:
            raise self.unknown(task_id)
        repo, path = self._repos[record["source_id"]], record["path"]
        files = {**repo.files, path: record["source"]}
        has_examples = bool(repo.visible_calls) and record["source_id"] not in self._visible_broken
        if repo.visible_calls and not has_examples:
            files.pop(sources.VISIBLE_TEST_FILE, None)
        prompt, hint = self._hinted(_prompt(repo, path, _function_at(repo.files[path], record["line"]),
                                            has_examples, bugs=_bugs(record)), record["line"], path)
        return Task(
            task_id=task_id,
            suite=self.name,
            prompt=prompt,
            files=files,
            hidden_tests=dict(repo.hidden_tests),
            graded_tests=tuple(c.node_id for c in repo.hidden_calls),
            metadata={
                "source_id": record["source_id"],
                "operator": record["operator"],
                "line": str(record["line"]),
                "fail_to_pass": json.dumps(record["failing"]),
                "reference_files": json.dumps({path: repo.files[path]}),
                **hint,
            },
        )

    def tokenizer_texts(self, env, tasks: int) -> list[str]:
        """What the policy reads and writes, without playing an episode: the first `tasks` train
        tasks' prompts, their files as read_file numbers them and the expert's tool calls. Drills
        are left out, so a run with drills and one without share their tokenizer."""
        from composer_jax.harness.tools import numbered_lines
        from environments.experts import expert_plan

        texts = []
        for task_id in [t for t in self.task_ids("train") if t not in self._drills][:tasks]:
            task = self.get(task_id)
            numbered = [numbered_lines(text.splitlines()) for text in task.files.values()]
            texts.append("\n".join([task.prompt, *numbered, *expert_plan(task)]))
        return texts

    def _hinted(self, prompt: str, line: int, path: str) -> tuple[str, dict]:
        """The prompt, with the bug's line named when `hint_line`; the metadata that goes with it."""
        if not self.hint_line:
            return prompt, {}
        return prompt + f" The bug is at or next to line {line} of `{path}`.", {"hint_line": str(line)}

    def _drill_task(self, record: dict) -> Task:
        path = record["function"] + ".py"
        prompt, hint = self._hinted(drill_tasks.prompt(record["function"], path), record["line"], path)
        return Task(
            task_id=record["task_id"], suite=self.name, prompt=prompt, files={path: record["source"]},
            hidden_tests={drill_tasks.HIDDEN_TEST_FILE: drill_tasks.hidden_test(path, record["original"])},
            graded_tests=(drill_tasks.GRADED_TEST,), observed_files=(path,),
            metadata={"source_id": "package-drill", "operator": record["operator"], "line": str(record["line"]),
                      "origin": record["origin"], "reference_files": json.dumps({path: record["original"]}), **hint},
        )
