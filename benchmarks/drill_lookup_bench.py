"""How many bug-fix drills a grep of the standard library still finds; writes JSON.

    python benchmarks/drill_lookup_bench.py --out benchmarks/results/drill_lookup.json

A drill's original is a standard-library function, and the library is readable in the sandbox:
drills.py hands out its canonical form (canonical.py: renamed, docstrings and comments dropped,
re-emitted by ast.unparse) so the fix cannot be copied back. For every drilled function of both
sources, `new` (the canonical original) and `old` (the library's own text of it) report
  any_line           fraction with a line (stripped, >= 20 characters, so never a bare `else:`)
                     that occurs verbatim in some library file,
  def_line           fraction whose `def` line occurs verbatim,
  line_leads_home    fraction with such a line held by at most RARE library files, one of them
                     the drill's own: a grep for it points at the file to copy from,
  string_leads_home  the same for a string constant of >= 8 characters (a string constant of
                     the library file; a grep for its text finds at least those files),
  name_leads_home    the same for a name the code spells (globals and attributes keep theirs),
  any_leads_home     fraction for which any of the three does.
Lines that only coincide (a renamed `if options is not None:` found in an unrelated file) count
for any_line, not for the *_leads_home numbers.
"""
import argparse
import ast
import collections
import re

from benchmarks.common import write_result
from environments.suites import canonical, drills

MIN_LINE = 20
MIN_STRING = 8
RARE = 3


def _strings(tree: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def library_index(paths) -> dict[str, dict[str, list[int]]]:
    """For stripped lines, words and string constants: the first RARE + 1 library files holding each."""
    index = {kind: collections.defaultdict(list) for kind in ("lines", "words", "strings")}
    for i, path in enumerate(paths):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            strings = _strings(ast.parse(text))
        except (SyntaxError, ValueError):  # lib2to3 test data is Python 2
            strings = set()
        keys = {"lines": {line.strip() for line in text.splitlines()}, "words": set(re.findall(r"\w+", text)),
                "strings": strings}
        for kind, found in keys.items():
            for key in found:
                if len(index[kind][key]) <= RARE:
                    index[kind][key].append(i)
    return index


def lookups(code: str, home: int, index: dict[str, dict[str, list[int]]]) -> dict[str, bool]:
    """Which greps of the library find this drill's code (`home`: the index of its own file)."""
    lines = [line.strip() for line in code.splitlines() if len(line.strip()) >= MIN_LINE]
    tree = ast.parse(code)

    def leads_home(kind, keys):
        return any(home in index[kind].get(k, ()) and len(index[kind][k]) <= RARE for k in keys)

    found = {"any_line": any(line in index["lines"] for line in lines),
             "def_line": code.splitlines()[0].strip() in index["lines"],
             "line_leads_home": leads_home("lines", lines),
             "string_leads_home": leads_home("strings", [s for s in _strings(tree) if len(s) >= MIN_STRING]),
             "name_leads_home": leads_home("words", canonical.identifiers(tree))}
    found["any_leads_home"] = any(found[f"{kind}_leads_home"] for kind in ("line", "string", "name"))
    return found


def summary(drilled: list[tuple[str, int]], index: dict[str, dict[str, list[int]]]) -> dict[str, float]:
    found = [lookups(code, home, index) for code, home in drilled]
    return {key: round(sum(f[key] for f in found) / len(found), 4) for key in found[0]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)

    files = drills.library_files()
    index = library_index(files)
    home = {path: i for i, path in enumerate(files)}
    library = {name: (code, home[path]) for pool in drills.originals().values() for name, path, code in pool}
    result, every = {}, {"old": [], "new": []}
    for source in drills.SOURCES:
        records = list({r["function"]: r for r in drills.load_records(source=source)}.values())
        drilled = {"old": [library[r["stdlib_function"]] for r in records],
                   "new": [(r["original"], library[r["stdlib_function"]][1]) for r in records]}
        result[source] = {"drills": len(records), **{v: summary(d, index) for v, d in drilled.items()}}
        for variant, d in drilled.items():
            every[variant] += d
    result["all"] = {"drills": len(every["new"]), **{v: summary(d, index) for v, d in every.items()}}
    write_result(args.out, {"drill_lookup_bench": dict(result, library_files=len(files), min_line=MIN_LINE,
                                                       min_string=MIN_STRING, rare=RARE)})


if __name__ == "__main__":
    main()
