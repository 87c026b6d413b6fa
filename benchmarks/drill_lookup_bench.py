"""How many bug-fix drills a grep of what a sandbox can read still finds; writes JSON.

    python benchmarks/drill_lookup_bench.py --out benchmarks/results/drill_lookup.json

A sandbox reads the standard library and its runtime's site-packages (sandbox/runtime.py; the
largest runtime, with every drills.SANDBOX_PACKAGES entry, is built and its .py files indexed):
nothing else of the host's Python. `old` drills come from the standard library
(drills.ORIGINS["stdlib"], the former pool), `new` ones from the project's dependencies that no
sandbox holds (the pool BugFix uses). Both are measured as handed out: canonical (renamed,
docstrings and comments dropped, re-emitted by ast.unparse). A drill's *home* is a sandbox file
that holds its original: its own file, or any file defining a function equal to it up to the
names of its locals (both canonicalised alike). For every drilled function of both sources:
  original_in_view   fraction with a home: what a body-shape or bytecode lookup needs,
  any_line           fraction with a line (stripped, >= 20 characters, so never a bare `else:`)
                     that occurs verbatim in some sandbox file,
  def_line           fraction whose `def` line occurs verbatim,
  line_leads_home    fraction with such a line held by at most RARE sandbox files, one of them a
                     home: a grep for it points at the file to copy from,
  string_leads_home  the same for a string constant of >= 8 characters (a string constant of
                     the file; a grep for its text finds at least those files),
  name_leads_home    the same for a name the code spells (globals and attributes keep theirs),
  any_leads_home     fraction for which any of the three does,
  any_rare_hit       fraction with a line, string or name held by 1..RARE sandbox files at all,
                     home or not: where there is no home, every such lead is a coincidence.
Lines that only coincide (a renamed `if options is not None:` found in an unrelated file) count
for any_line, not for the *_leads_home numbers.
"""
import argparse
import ast
import collections
import pathlib
import re
import textwrap

from benchmarks.common import write_result
from composer_jax.sandbox import runtime
from environments.suites import canonical, drills

MIN_LINE = 20
MIN_STRING = 8
RARE = 3
MAX_COPY_LINES = 100  # longer definitions are no copy of a drill (<= drills.MAX_LINES lines)
VARIANTS = {"old": "stdlib", "new": "packages"}


def sandbox_files() -> list[pathlib.Path]:
    """What a sandbox can read of Python: the standard library and the largest runtime's site-packages."""
    prefix = pathlib.Path(runtime.build(drills.SANDBOX_PACKAGES).prefix)
    return drills.stdlib_files() + sorted(p for d in prefix.glob("lib/python3*/site-packages") for p in d.rglob("*.py"))


def _strings(tree: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _defined(tree: ast.Module, lines: list[str]):
    """(code, is method) of each top-level function and top-level class method, dedented."""
    for node in tree.body:
        found = [(node, False)] if isinstance(node, ast.FunctionDef) else \
            [(n, True) for n in node.body if isinstance(n, ast.FunctionDef)] if isinstance(node, ast.ClassDef) else []
        for fn, method in found:
            if fn.end_lineno - fn.lineno < MAX_COPY_LINES:
                yield textwrap.dedent("".join(lines[fn.lineno - 1:fn.end_lineno])), method


def library_index(paths, copies: set[str] = frozenset()) -> dict[str, dict[str, list[int]]]:
    """For stripped lines, words and string constants: the first RARE + 1 files holding each; for
    `copies` (drills.copy_key values), every file defining such a function."""
    index = {kind: collections.defaultdict(list) for kind in ("lines", "words", "strings", "copies")}
    for i, path in enumerate(paths):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):  # lib2to3 test data is Python 2
            tree = ast.Module(body=[], type_ignores=[])
        keys = {"lines": {line.strip() for line in text.splitlines()}, "words": set(re.findall(r"\w+", text)),
                "strings": _strings(tree)}
        for kind, found in keys.items():
            for key in found:
                if len(index[kind][key]) <= RARE:
                    index[kind][key].append(i)
        if copies:
            lines = text.splitlines(keepends=True)
            for key in {drills.copy_key(code, method) for code, method in _defined(tree, lines)} & copies:
                index["copies"][key].append(i)
    return index


def lookups(code: str, homes: set[int], index: dict[str, dict[str, list[int]]]) -> dict[str, bool]:
    """Which greps of the sandbox's files find this drill's code (`homes`: the indices of the files
    that hold its original)."""
    lines = [line.strip() for line in code.splitlines() if len(line.strip()) >= MIN_LINE]
    tree = ast.parse(code)
    keys = {"lines": lines, "strings": [s for s in _strings(tree) if len(s) >= MIN_STRING],
            "words": canonical.identifiers(tree)}

    def rare(kind):
        return [index[kind][k] for k in keys[kind] if 0 < len(index[kind].get(k, ())) <= RARE]

    found = {"original_in_view": bool(homes), "any_line": any(line in index["lines"] for line in lines),
             "def_line": code.splitlines()[0].strip() in index["lines"]}
    for name, kind in (("line", "lines"), ("string", "strings"), ("name", "words")):
        found[f"{name}_leads_home"] = any(homes & set(files) for files in rare(kind))
    found["any_leads_home"] = any(found[f"{kind}_leads_home"] for kind in ("line", "string", "name"))
    found["any_rare_hit"] = any(rare(kind) for kind in keys)
    return found


def summary(drilled: list[tuple[str, set[int]]], index: dict[str, dict[str, list[int]]]) -> dict[str, float]:
    found = [lookups(code, homes, index) for code, homes in drilled]
    return {key: round(sum(f[key] for f in found) / len(found), 4) for key in found[0]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)

    pools = {v: {s: list({r["function"]: r for r in drills.load_records(source=s, origin=o)}.values())
                 for s in drills.SOURCES} for v, o in VARIANTS.items()}
    library = {v: {d[1]: d for defs in drills.originals(o).values() for d in defs} for v, o in VARIANTS.items()}
    wanted = {v: {s: [drills.copy_key(library[v][r["origin"]][4], s == "methods") for r in records]
                  for s, records in by_source.items()} for v, by_source in pools.items()}
    files = sandbox_files()
    index = library_index(files, {k for by_source in wanted.values() for keys in by_source.values() for k in keys} - {None})
    position = {path.resolve(): i for i, path in enumerate(files)}
    result = {s: {} for s in (*drills.SOURCES, "all")}
    for variant, by_source in pools.items():
        every = []
        for source, records in by_source.items():
            drilled = []
            for r, key in zip(records, wanted[variant][source]):
                own = position.get(library[variant][r["origin"]][3].resolve())
                drilled.append((r["original"], set(index["copies"].get(key, ())) | ({own} - {None})))
            result[source][variant] = summary(drilled, index)
            result[source].setdefault("drills", {})[variant] = len(records)
            every += drilled
        result["all"][variant] = summary(every, index)
        result["all"].setdefault("drills", {})[variant] = len(every)
    write_result(args.out, {"drill_lookup_bench": dict(
        result, sandbox_files=len(files), stdlib_files=len(drills.stdlib_files()), min_line=MIN_LINE,
        min_string=MIN_STRING, rare=RARE, distributions=drills.distributions(),
        sandbox_distributions={k: d.version for k, d in sorted(drills.runtime_distributions().items())})})


if __name__ == "__main__":
    main()
