"""Bug-fix drills: small standard-library functions with one planted bug, for BugFix's train split.

BugFix's tested sources give ~150 training functions: a small policy memorises them instead of
learning the mechanics of a fix (read around the line, copy it, change one token). The standard
library has thousands of small functions but no tests that run in isolation, so a drill's hidden
test checks that the function was restored exactly (its AST equals the original's). That is
strict, not lenient: an equivalent but different fix fails, and no other file can make it pass.
Drills are training data only; validation stays BugFix's tested tasks.

Two sources: top-level functions, and methods of top-level classes (dedented to stand alone;
names not shared with any drilled function). They never share a function, so an RL run can
train on functions its SFT data never showed.

The library is readable in the sandbox, so a drill is canonicalised before it is mutated
(canonical.py): renamed to a fresh name no library file spells, its parameters and locals renamed,
docstrings and comments dropped, re-emitted by `ast.unparse`. Grepping for its name or its
`def` line finds nothing; the hidden test compares with this canonical original. Globals,
attributes and string constants keep their text, and for most drills one of them still points a
grep at the drill's file (benchmarks/drill_lookup_bench.py measures how often).
"""
from __future__ import annotations

import ast
import itertools
import pathlib
import random
import re
import sys
import textwrap
import zlib

from composer_jax.data.corpus import stdlib_root
from environments.suites import cache, canonical, mutations
from environments.suites.base import parse_python

TASK_PREFIX = "bugfix-drill/"
HIDDEN_TEST_FILE = "test_hidden.py"
GRADED_TEST = f"{HIDDEN_TEST_FILE}::test_function_restored"
MIN_LINES, MAX_LINES = 4, 30  # one read around the hinted line shows most of such a function
MUTANTS_PER_FUNCTION = 2
# Without tests or examples, a deleted statement is rarely implied by what is left: such a
# drill would teach guessing, not fixing.
SKIPPED_OPERATORS = {"remove_statement"}
SKIPPED_DIRS = {"test", "tests", "idle_test", "lib2to3", "turtledemo"}  # library_files() skips site-packages
SOURCES = ("functions", "methods")
# A drill's name is "<verb>_<qualifier>_<word>": ordinary-looking, and enough of them that
# drawing one no library file spells, for every function of both sources, stays quick.
VERBS = ("build", "check", "collect", "compute", "convert", "decode", "encode", "expand", "extract", "fetch",
         "find", "gather", "handle", "load", "make", "merge", "normalize", "parse", "prepare", "process",
         "read", "render", "resolve", "scan", "select", "split", "strip", "transform", "update", "validate",
         "write", "apply", "emit", "pack", "unpack", "reduce", "trim", "wrap", "count", "measure")
QUALIFIERS = ("raw", "next", "last", "first", "full", "base", "local", "extra", "inner", "outer", "plain",
              "single", "nested", "partial", "pending", "current", "default", "simple", "short", "long",
              "quick", "safe", "strict", "shared", "common", "initial", "final", "sorted", "cached", "active")


def library_files() -> list[pathlib.Path]:
    """Every Python file of the standard library, tests included: what a grep in the sandbox reads."""
    root = stdlib_root()
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts[:-1])


def _stdlib_files() -> list[pathlib.Path]:
    root = stdlib_root()
    return [p for p in library_files() if not SKIPPED_DIRS & set(p.relative_to(root).parts[:-1])]


def _drillable(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef) and not node.decorator_list and not node.name.startswith("test") \
        and MIN_LINES <= node.end_lineno - node.lineno + 1 <= MAX_LINES


def _definitions(path: pathlib.Path) -> dict[str, list[tuple[str, str]]]:
    """(name, code) of the file's drillable definitions by source: top-level functions, and
    top-level classes' methods (dedented)."""
    out = {source: [] for source in SOURCES}
    try:
        text = path.read_text(encoding="utf-8")
        tree = parse_python(text)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return out
    lines = text.splitlines(keepends=True)
    out["functions"] = [(n.name, "".join(lines[n.lineno - 1:n.end_lineno])) for n in tree.body if _drillable(n)]
    for n in (n for cls in tree.body if isinstance(cls, ast.ClassDef) for n in cls.body):
        if _drillable(n) and not n.name.startswith("__"):
            code = textwrap.dedent("".join(lines[n.lineno - 1:n.end_lineno]))
            if code.startswith("def "):  # a string literal at column 0 leaves it indented
                out["methods"].append((n.name, code))
    return out


def originals() -> dict[str, list[tuple[str, pathlib.Path, str]]]:
    """(name, file, code) of each source's uniquely named definitions: the first definition of each
    name, in path order; methods skip every name a function drill may use."""
    files = {path: _definitions(path) for path in _stdlib_files()}
    seen = set(sys.stdlib_module_names)
    out = {}
    for source in SOURCES:  # functions first: every function name is seen before any method
        out[source] = []
        for path, defs in files.items():
            for name, code in defs[source]:
                if name not in seen:
                    seen.add(name)
                    out[source].append((name, path, code))
    return out


def _drill_names(names: list[str]) -> dict[str, str]:
    """A fresh name for each library name, seeded by it: a word no library file spells (so no
    grep finds it and it captures no name a drill keeps), distinct across both sources."""
    taken = {word for path in library_files()
             for word in re.findall(r"\w+", path.read_text(encoding="utf-8", errors="replace"))}
    out = {}
    for name in names:
        rng = random.Random(zlib.crc32(name.encode()))
        drawn = ("_".join(map(rng.choice, (VERBS, QUALIFIERS, canonical.WORDS))) for _ in itertools.count())
        out[name] = next(n for n in drawn if n not in taken)
        taken.add(out[name])
    return out


def build_records(source: str = "functions") -> list[dict]:
    """Up to MUTANTS_PER_FUNCTION single mutants of the canonical form of each uniquely named
    function of `source` (`function` is the drill's name, `stdlib_function` the library's)."""
    pool = originals()
    names = _drill_names([name for defs in pool.values() for name, _, _ in defs])
    records = []
    for name, _, code in pool[source]:
        original = canonical.rename(code, names[name], seed=name, method=source == "methods")
        if original is None:  # it reads its locals by name: renaming would change what it does
            continue
        candidates = [m for m in mutations.mutants(original) if m.operator not in SKIPPED_OPERATORS]
        if not candidates:
            continue
        picks = random.Random(zlib.crc32(name.encode())).sample(
            range(len(candidates)), min(MUTANTS_PER_FUNCTION, len(candidates)))
        for i in sorted(picks):
            m = candidates[i]
            records.append({"task_id": f"{TASK_PREFIX}{names[name]}/{m.operator}-{i}", "function": names[name],
                            "stdlib_function": name, "operator": m.operator, "line": m.line,
                            "original": original, "source": m.source})
    return records


def load_records(cache_dir: str | None = None, source: str = "functions") -> list[dict]:
    key = cache.fingerprint([sys.version, str(stdlib_root()),
                             *cache.file_bytes(canonical.__file__, mutations.__file__, __file__)])
    return cache.cached_json(f"bugfix-drills-{source}", key, lambda: build_records(source), cache_dir)


def hidden_test(path: str, original: str) -> str:
    return (
        "import ast\nimport pathlib\n\n"
        f"ORIGINAL = {ast.dump(parse_python(original))!r}\n\n\n"
        "def test_function_restored():\n"
        f"    tree = ast.parse(pathlib.Path(__file__).with_name({path!r}).read_text())\n"
        "    assert ast.dump(tree) == ORIGINAL\n"
    )


def prompt(function: str, path: str) -> str:
    return (f"The function `{function}` in `{path}` has a bug. Find and fix the bug. Hidden tests will "
            f"check `{function}` when you submit.")
