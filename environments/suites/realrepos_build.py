"""Building RealRepos (see realrepos.py for the suite): validate each pinned package's own test
suite, plant bugs in the functions its green tests call, keep those a test catches. Cached per
package under a key of this file and the generator modules, so editing the suite's prompts never
rebuilds; `python -m environments.suites.realrepos` runs it and prints the summary.
"""
from __future__ import annotations

import ast
import collections
import dataclasses
import hashlib
import json
import os
import random
import sys
import time
import zlib

import tqdm

from composer_jax.grading import grader
from composer_jax.grading.task import Task
from composer_jax.sandbox import get_backend
from composer_jax.sandbox import runtime as runtime_lib
from composer_jax.sandbox.base import Limits
from environments.suites import cache, check_runner, mutations, pytest_runner
from environments.suites import realrepos_pins as pins
from environments.suites import realrepos_sources as sources
from environments.suites.base import parse_python

SUITE_NAME = "RealRepos"
MUTANTS_PER_FUNCTION = 6
DOUBLES_PER_PACKAGE = 1.0  # two-bug tasks tried, as a share of a package's single-bug tasks
SLOWDOWN_LIMIT = 3.0  # a mutant run may take this many times the whole pristine suite's CPU time
RUN_TIMEOUT_S = (3.0, 10.0)  # ... within these bounds: a hanging mutant is dropped, not waited for
SUITE_LIMITS = Limits(wall_s=600.0, cpu_s=600, memory_bytes=4 << 30, max_procs=64,
                      max_file_bytes=64 << 20, max_output_bytes=32 << 20)
GENERATOR_MODULES = (mutations, sources, pytest_runner, check_runner)
JUDGE_TRIES = 3  # judge runs of a pristine suite whose channel broke
# A task's grading runs its failing tests' files in the judge within GRADING_LIMITS' wall; files
# that take more than this on the builder (timed alone, summed over a task's files) leave too
# little margin for graders sharing a busy machine (toolz's test_itertoolz.py took 55 s of 60 and
# ran over with three graded at once).
JUDGE_BUDGET_S = grader.GRADING_LIMITS.wall_s / 4
BROKEN = "the submission's process stopped answering"  # grader._result's line for a broken channel


def test_modules(repo: sources.SourceRepo) -> list[str]:
    return [p for p in repo.test_files if p.endswith(".py") and p.rpartition("/")[2].startswith("test")
            and p.rpartition("/")[2] != "__init__.py"]


def _python(repo: sources.SourceRepo) -> str:
    return runtime_lib.build(repo.package.requires).python


def _sandbox_outcomes(repo: sources.SourceRepo, backend) -> dict[str, str]:
    """Node id -> outcome of the whole suite run by pytest in a sandbox with the package's runtime."""
    runtime = runtime_lib.build(repo.package.requires)
    ws = backend.create(repo.files, runtime)
    try:
        argv = [runtime.python, "-m", "pytest", *pytest_runner.PYTEST_ARGS, "--rootdir=/workspace", "-rA",
                "--tb=no", *test_modules(repo)]
        result = backend.run(ws, argv, SUITE_LIMITS)
    finally:
        backend.destroy(ws)
    out = {}
    for line in result.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS") and "::" in rest:
            out.setdefault(rest.split(" - ")[0] if word != "PASSED" else rest, word.lower())
    return out


def _judge_outcomes(repo: sources.SourceRepo, nodes: list[str], backend) -> tuple[dict[str, bool], list[str],
                                                                                  dict[str, float], str]:
    """(node id -> passed under the judge, test files the judge cannot collect, wall seconds per
    file, the grader's errors). A task grades one file or several together, so each file is
    graded alone (timed) and the quick ones again all together; a test counts as passing if it
    passes both ways. A module that cannot be collected (it reads a module's `__file__`, say)
    either way is left out whole."""
    by_file = collections.defaultdict(list)
    for n in nodes:
        by_file[n.split("::", 1)[0]].append(n)
    alone, uncollectable, seconds, errors = {}, [], {}, []
    for path, kept in sorted(by_file.items()):
        start = time.perf_counter()
        result = _judged(grading_task(repo, "validate", repo.files, tuple(kept)), repo, backend)
        seconds[path] = round(time.perf_counter() - start, 2)
        if f"could not be collected: {path}" in result.error:
            uncollectable.append(path)
        elif result.error:
            errors.append(result.error)
        else:
            alone.update(result.tests)
    slow = {p for p, t in seconds.items() if t > JUDGE_BUDGET_S}  # dropped by the caller, not graded here
    together = {}
    while not errors:
        kept = tuple(n for p, ns in sorted(by_file.items()) if p not in uncollectable and p not in slow for n in ns)
        if not kept:
            break
        task = grading_task(repo, "validate", repo.files, kept)
        result = _judged(task, repo, backend)
        bad = sorted({f for f in grader.graded_files(task) if f"could not be collected: {f}" in result.error})
        if not bad:
            errors += [result.error] if result.error else []
            together = result.tests
            break
        uncollectable += bad
    tests = {n: passed and (n.split("::", 1)[0] in slow or together.get(n, False)) for n, passed in alone.items()}
    return tests, sorted(uncollectable), seconds, "; ".join(errors)


def _judged(task: Task, repo: sources.SourceRepo, backend, tries: int = JUDGE_TRIES):
    """Pristine tests under the judge. A run whose channel to the package broke (every
    test after the break fails) is run again, and the try with the most passes is kept: one
    build counted 160 of boltons' tests green where its other runs count 325."""
    best = None
    for _ in range(tries):
        result = grader.grade(task, repo.files, backend, grader.GradeConfig(limits=SUITE_LIMITS))
        if best is None or result.passed > best.passed:
            best = result
        broke = [line for line in result.details.splitlines() if BROKEN in line]
        if not broke:
            break
        print(f"RealRepos: {repo.package.label}: the judge's channel broke on the pristine code ({broke[0]}); "
              "judging again", file=sys.stderr)
    return best


def validate(repo: sources.SourceRepo, backend, workers: int | None) -> dict:
    """The green tests, each with the repo functions it calls, and counts of the tests dropped."""
    fast = pytest_runner.run_all(repo.files, [pytest_runner.Run(
        "pristine", {}, tuple(test_modules(repo)), SUITE_LIMITS.cpu_s, coverage=True)], _python(repo), 1)["pristine"]
    if fast.status != "ok":
        raise sources.SourceError(f"{repo.package.label}: its test suite did not finish ({fast.status})")
    first, second = _sandbox_outcomes(repo, backend), _sandbox_outcomes(repo, backend)
    passed = [n for n, o in fast.outcomes.items() if o == "passed"]
    judged, uncollectable, judge_seconds, error = _judge_outcomes(repo, passed, backend)
    if error:
        raise sources.SourceError(f"{repo.package.label}: the grader cannot run its suite: {error[:300]}")
    dropped = collections.Counter()
    green = []
    for node, outcome in fast.outcomes.items():
        a, b = first.get(node), second.get(node)
        if a != b:
            dropped["flaky"] += 1
        elif outcome != "passed" or a != "passed":
            dropped["failed_or_skipped"] += 1
        elif node.split("::", 1)[0] in uncollectable:
            dropped["module_not_collectable"] += 1
        elif not judged.get(node):
            dropped["not_gradable"] += 1
        elif judge_seconds[node.split("::", 1)[0]] > JUDGE_BUDGET_S:
            dropped["judge_too_slow"] += 1
        else:
            green.append(node)
    if not green:
        raise sources.SourceError(f"{repo.package.label}: no test of its suite passes in the sandbox and the judge")
    code = set(repo.files) - set(repo.test_files)
    covered = {n: [tuple(f) for f in fast.coverage.get(n, []) if f[0] in code] for n in green}
    return {"green": green, "covered": covered, "collection": [tuple(f) for f in fast.collection],
            "dropped": dict(dropped), "tests": len(fast.outcomes), "cpu_seconds": fast.seconds,
            "judge_seconds": judge_seconds}


def _functions(source: str) -> list[tuple[int, int, int, str]]:
    """(code object's first line, first body line, last line, qualified name) of every function;
    a decorated function's code starts at its first decorator."""
    out, stack = [], [(parse_python(source), "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((first, child.body[0].lineno, child.end_lineno, prefix + child.name))
                stack.append((child, prefix + child.name + "."))
            elif isinstance(child, ast.ClassDef):
                stack.append((child, prefix + child.name + "."))
    return out


def _innermost(functions, line: int):
    inside = [f for f in functions if f[0] <= line <= f[2]]
    return min(inside, key=lambda f: f[2] - f[0]) if inside else None


def _function_mutants(source: str, first: int, end: int) -> list[mutations.Mutant]:
    """Mutants of the function on lines [first, end] of `source`: the function alone is mutated
    and re-parsed (under `if 1:` when it is indented), not the whole file, which keeps large
    modules fast; edits and lines are mapped back to the file."""
    lines = source.encode("utf-8").splitlines(keepends=True)
    indented = lines[first - 1][:1] in (b" ", b"\t")
    prefix = b"if 1:\n" if indented else b""
    shift = sum(len(x) for x in lines[: first - 1]) - len(prefix)
    try:
        found = mutations.mutants((prefix + b"".join(lines[first - 1:end])).decode("utf-8"), real_bugs=True)
    except SyntaxError:  # e.g. a nested function's `nonlocal` without its enclosing function
        return []
    out = []
    for m in found:
        edits = tuple(mutations.Edit(e.start + shift, e.end + shift, e.replacement) for e in m.edits)
        out.append(mutations.Mutant(m.operator, m.line - len(prefix.splitlines()) + first - 1,
                                    mutations.apply_edits(source, edits), edits))
    return out


def _candidates(repo: sources.SourceRepo, valid: dict, seed: int) -> list[dict]:
    """A few mutants per covered function, spread over the kinds of bug."""
    callers = collections.defaultdict(set)
    for node, functions in valid["covered"].items():
        for f in functions:
            callers[f].add(node)
    collected = set(valid["collection"])
    out = []
    for path in sorted(set(repo.files) - set(repo.test_files)):
        functions = _functions(repo.files[path])
        by_function = collections.defaultdict(dict)
        for fn in functions:
            if (path, fn[0]) not in callers or (path, fn[0]) in collected:
                continue
            for m in _function_mutants(repo.files[path], fn[0], fn[2]):
                # only the innermost function's mutants: a nested function has its own callers
                if _innermost(functions, m.line) == fn:
                    by_function[fn].setdefault(m.source, m)
        rng = random.Random(seed ^ zlib.crc32(path.encode()))
        for fn, found in sorted(by_function.items()):
            found = list(found.values())
            rng.shuffle(found)
            by_kind = collections.defaultdict(list)
            for m in found:
                by_kind[m.operator].append(m)
            picked = []
            while len(picked) < MUTANTS_PER_FUNCTION and any(by_kind.values()):
                for kind in sorted(by_kind, key=lambda k: rng.random()):
                    if by_kind[kind] and len(picked) < MUTANTS_PER_FUNCTION:
                        picked.append(by_kind[kind].pop())
            for m in picked:
                out.append({"path": path, "function": fn[3], "first_line": fn[0], "operator": m.operator,
                            "line": m.line, "source": m.source, "edits": m.edits,
                            "tests": sorted(callers[(path, fn[0])])})
    return out


def _kept(candidates: list[dict], repo, valid: dict, workers, desc: str) -> list[dict]:
    timeout = min(RUN_TIMEOUT_S[1], max(RUN_TIMEOUT_S[0], SLOWDOWN_LIMIT * valid["cpu_seconds"]))
    runs = [pytest_runner.Run(str(i), {c["path"]: c["source"]}, tuple(c["tests"]), timeout)
            for i, c in enumerate(candidates)]
    with tqdm.tqdm(total=len(runs), desc=desc, unit="mutant", leave=False, file=sys.stderr) as bar:
        results = pytest_runner.run_all(repo.files, runs, _python(repo), workers, progress=bar.update)
    kept = []
    for i, c in enumerate(candidates):
        r = results[str(i)]
        c["status"] = r.status
        if r.status != "ok":
            continue
        failing = sorted(n for n in c["tests"] if r.outcomes.get(n) != "passed")
        if failing:
            kept.append({**c, "failing": failing, "reports": {n: r.reports.get(n, "") for n in failing[:1]}})
    return kept


def _digest(*texts: str) -> str:
    return hashlib.sha256("\0".join(texts).encode("utf-8")).hexdigest()[:12]


def _doubles(singles: list[dict], limit: int, seed: int) -> list[dict]:
    """Pairs of kept bugs in different functions of one file, their edits applied together. The
    first `limit` pairs by a hash of the two bugs: a single lost or gained (a mutant near its time
    limit on a loaded machine) changes only the pairs that hold it, not every pair drawn after it."""
    by_path = collections.defaultdict(list)
    for s in singles:
        by_path[s["path"]].append(s)
    pairs = [(a, b) for group in by_path.values() for i, a in enumerate(group) for b in group[i + 1:]
             if a["function"] != b["function"]]
    pairs.sort(key=lambda p: _digest(str(seed), *sorted((p[0]["source"], p[1]["source"]))))
    out = []
    for a, b in pairs[:limit]:
        original = a["original"]
        text = mutations.apply_edits(original, tuple(a["edits"]) + tuple(b["edits"]))
        try:
            parse_python(text)
        except SyntaxError:
            continue
        out.append({"path": a["path"], "function": f"{a['function']}, {b['function']}",
                    "operator": f"{a['operator']}+{b['operator']}", "line": min(a["line"], b["line"]),
                    "source": text, "tests": sorted(set(a["tests"]) | set(b["tests"]))})
    return out


def task_id(package: sources.Package, operator: str, source: str) -> str:
    """Named by the buggy file's text, not its place in the list: a task keeps its id whichever
    other bugs a rebuild keeps."""
    return f"realrepos/{package.name}/{operator}-{_digest(source)}"


def build_package(package: sources.Package, cache_dir: str | None, workers: int | None, backend,
                  pip_args: tuple[str, ...] = ()) -> dict:
    start = time.perf_counter()
    repo = sources.load(package, sources.fetch(package, cache_dir, pip_args))
    valid = validate(repo, backend, workers)
    seed = zlib.crc32(package.label.encode())
    candidates = _candidates(repo, valid, seed)
    singles = _kept(candidates, repo, valid, workers, f"{package.name} bugs")
    for s in singles:
        s["original"] = repo.files[s["path"]]
    tried = collections.Counter(c["operator"] for c in candidates)
    kept_kinds = collections.Counter(s["operator"] for s in singles)
    pairs = _doubles(singles, int(DOUBLES_PER_PACKAGE * len(singles)), seed)
    doubles = _kept(pairs, repo, valid, workers, f"{package.name} two-bug")
    records, seen, slow = [], set(), 0
    for r in singles + doubles:
        key = frozenset(r["failing"])
        if key in seen:
            continue
        seen.add(key)
        if sum(valid["judge_seconds"][f] for f in {n.split("::", 1)[0] for n in key}) > JUDGE_BUDGET_S:
            slow += 1  # its files, graded together, would leave the grading wall too little margin
            continue
        records.append({"task_id": task_id(package, r["operator"], r["source"]),
                        "path": r["path"], "function": r["function"], "operator": r["operator"],
                        "line": r["line"], "source": r["source"], "failing": r["failing"],
                        "report": next(iter(r["reports"].values()), "")})
    return {"package": package.label, "records": records, "green": valid["green"],
            "tests": valid["tests"], "dropped_tests": valid["dropped"], "suite_cpu_seconds": valid["cpu_seconds"],
            "judge_seconds": valid["judge_seconds"],
            "bugs_tried": dict(tried), "bugs_kept": dict(kept_kinds), "doubles_tried": len(pairs),
            "doubles_kept": len(doubles), "duplicates": len(singles) + len(doubles) - len(records) - slow,
            "too_slow_to_grade": slow,
            "build_seconds": round(time.perf_counter() - start, 1)}


def _package_key(package: sources.Package) -> str:
    """The generator code and the package's pin, bar its split (which side a package is on does
    not change its build)."""
    judge = [os.path.join(grader.REMOTE_DIR, f) for f in ("judge.py", "serve.py", "codec.py")]
    code = cache.file_bytes(*(m.__file__ for m in GENERATOR_MODULES), grader.__file__, *judge, __file__)
    pin = {k: v for k, v in dataclasses.asdict(package).items() if k != "split"}
    return cache.fingerprint(code + [json.dumps(pin, sort_keys=True)])


def load_packages(packages=pins.PACKAGES, cache_dir: str | None = None, workers: int | None = None,
                  backend_name: str = "auto", pip_args: tuple[str, ...] = ()) -> dict:
    """Each package's build, cached per package (a rebuild redoes only what changed); packages
    that cannot be used are skipped with the reason. Raises if none is left."""
    built, skipped = {}, {}
    backend = None
    for package in packages:
        try:
            def build(p=package):
                nonlocal backend
                backend = backend or get_backend(backend_name)
                return build_package(p, cache_dir, workers, backend, pip_args)
            built[package.label] = cache.cached_json(f"realrepos-{package.label}", _package_key(package), build,
                                                     cache_dir)
        except sources.SourceError as e:
            skipped[package.label] = str(e)
            print(f"RealRepos: skipped {package.label}: {e}", file=sys.stderr)
    if not built:
        raise sources.SourceError("RealRepos: no package could be built:\n" + "\n".join(skipped.values()))
    return {"packages": built, "skipped": skipped}


def summary(built: dict) -> dict:
    """The build summary: tasks per package and split, tests kept and dropped, bugs kept / tried."""
    tried, kept = collections.Counter(), collections.Counter()
    per_package = {}
    splits = {p.label: p.split for p in pins.PACKAGES}
    for label, b in built["packages"].items():
        tried.update(b["bugs_tried"])
        kept.update(b["bugs_kept"])
        per_package[label] = {"split": splits.get(label, "train"), "tasks": len(b["records"]), "tests": b["tests"],
                              "green_tests": len(b["green"]), "dropped_tests": b["dropped_tests"],
                              "two_bug_tasks": sum("+" in r["operator"] for r in b["records"]),
                              "tasks_too_slow_to_grade": b["too_slow_to_grade"],
                              "slowest_judged_file_s": max(b["judge_seconds"].values())}
    return {"tasks": sum(p["tasks"] for p in per_package.values()),
            "tasks_by_split": {s: sum(p["tasks"] for p in per_package.values() if p["split"] == s)
                               for s in ("train", "validation")},
            "packages": per_package, "skipped": built["skipped"],
            "bugs_kept_over_tried": {k: [kept.get(k, 0), tried[k]] for k in sorted(tried)}}


def grading_task(repo: sources.SourceRepo, task_id: str, files: dict, graded: tuple[str, ...], prompt: str = "",
                  metadata: dict | None = None) -> Task:
    return Task(task_id=task_id, suite=SUITE_NAME, prompt=prompt, files=files,
                hidden_tests={p: repo.files[p] for p in repo.test_files}, graded_tests=graded,
                requirements=repo.package.requires, metadata=metadata or {})


