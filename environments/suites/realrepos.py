"""RealRepos: bugs planted in real open-source packages, graded by the projects' own test suites.

Build (once, cached; `python -m environments.suites.realrepos` prints the summary; `--export FILE`
/ `--import FILE` carry a build to another machine: realrepos_bundle.py), per pinned package
(realrepos_pins.PACKAGES), SWE-smith style:
1. Fetch its sdist with pip (pin and sha256 checked) and read its code and tests.
2. Validate the suite: run it twice in our sandbox in the pinned runtime, once under the grader's
   judge, and once on the fast path with per-test coverage. A test is kept ("green") only if it
   passes in all four; the others are counted by why (failed or skipped in the sandbox, which
   has no network; flaky, the two sandbox runs differ; not gradable through the judge).
3. Plant bugs: AST mutants (mutations.py, with the real-bug kinds) of the functions the green
   tests call, a few per function; a mutant is kept if at least one green test that calls the
   function fails (FAIL_TO_PASS) and the run finished; tests that never call the function cannot
   change (PASS_TO_PASS). Functions that run while tests are collected are left alone.
4. Two-bug tasks combine kept bugs in different functions of one file, re-run together.
5. Deduplicate by the failing-test set within a package.

An episode's task is the repo without git history, the bug in place, and a CI failure report:
the failing tests and pytest's output for the first of them. The agent can run the visible tests.
On submit, fresh copies of the project's tests run under grader v2: the FAIL_TO_PASS tests plus
the green tests of the same test files (PASS_TO_PASS); all must pass. The split is by package:
a validation package has no task in train.
"""
from __future__ import annotations

import json
import os
import tarfile

from composer_jax.grading.task import Task
from environments.suites import realrepos_pins as pins
from environments.suites import realrepos_sources as sources
from environments.suites.base import TaskSuite, check_split
from environments.suites.realrepos_build import grading_task, load_packages, summary

FAILING_SHOWN = 10  # failing test names listed in a prompt


def _prompt(package: sources.Package, record: dict) -> str:
    failing = record["failing"]
    shown = "\n".join(f"FAILED {n}" for n in failing[:FAILING_SHOWN])
    more = f"\n... and {len(failing) - FAILING_SHOWN} more" if len(failing) > FAILING_SHOWN else ""
    report = record["report"].strip()
    return (f"This is a checkout of {package.name} {package.version} (its source and its own test suite; "
            f"no git history). CI fails on the current code: {len(failing)} test(s) of the project's suite "
            f"fail.\n\n{shown}{more}\n\npytest's report of the first failure:\n\n{report}\n\n"
            "Fix the package's code so that these tests pass without breaking the others. You can run the "
            "project's tests with pytest. When you submit, fresh copies of the project's tests are run against "
            "your code.")


class RealReposSuite(TaskSuite):
    name = "RealRepos"

    def __init__(self, cache_dir: str | None = None, workers: int | None = None, packages: tuple[str, ...] = (),
                 max_bugs: int = 2):
        """`packages`: names of pinned packages to build and serve (default: all of them)."""
        if max_bugs not in (1, 2):
            raise ValueError(f"max_bugs must be 1 or 2, got {max_bugs!r}")
        pinned = {p.name: p for p in pins.PACKAGES}
        unknown = sorted(set(packages) - set(pinned))
        if unknown:
            raise ValueError(f"unknown RealRepos package(s) {unknown}; pinned: {sorted(pinned)}")
        chosen = tuple(pinned[n] for n in packages) if packages else pins.PACKAGES
        self.built = load_packages(chosen, cache_dir, workers)
        self.stats = summary(self.built)
        self._repos, self._records = {}, {}
        self._splits = {"train": [], "validation": []}
        for package in chosen:
            b = self.built["packages"].get(package.label)
            if b is None:
                continue
            self._repos[package.label] = sources.load(package, sources.fetch(package, cache_dir))
            green = set(b["green"])
            for record in b["records"]:
                if record["operator"].count("+") + 1 <= max_bugs:
                    self._records[record["task_id"]] = (package.label, record, green)
                    self._splits[package.split].append(record["task_id"])

    def task_ids(self, split: str) -> list[str]:
        check_split(split)
        return list(self._splits[split])

    def get(self, task_id: str) -> Task:
        entry = self._records.get(task_id)
        if entry is None:
            raise self.unknown(task_id)
        label, record, green = entry
        repo = self._repos[label]
        failing = record["failing"]
        files_of = {n.split("::", 1)[0] for n in failing}
        graded = tuple(failing) + tuple(n for n in sorted(green) if n.split("::", 1)[0] in files_of
                                        and n not in set(failing))
        files = {**repo.files, record["path"]: record["source"]}
        return grading_task(repo, task_id, files, graded, _prompt(repo.package, record), {
            "source_id": label, "operator": record["operator"], "line": str(record["line"]),
            "function": record["function"], "fail_to_pass": json.dumps(failing),
            "reference_files": json.dumps({record["path"]: repo.files[record["path"]]}),
            # the expert reads around the bug, as a developer does from the traceback
            "hint_line": str(record["line"])})


def main(argv=None) -> None:
    import argparse
    parser = argparse.ArgumentParser(description="Build the RealRepos suite (cached) and print its summary.")
    parser.add_argument("--packages", nargs="*", default=[], help="pinned package names (default: all)")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--out", default=None, help="also write the summary JSON here")
    parser.add_argument("--export", metavar="FILE", help="write the built packages and their sdists to this "
                        "tar.gz (for another machine) instead of building")
    parser.add_argument("--import", dest="import_", metavar="FILE", help="unpack a bundle written by --export "
                        "into the cache instead of building")
    args = parser.parse_args(argv)
    if args.export or args.import_:
        from environments.suites import realrepos_bundle
        pinned = {p.name: p for p in pins.PACKAGES}
        unknown = sorted(set(args.packages) - set(pinned))
        if unknown:
            parser.error(f"unknown RealRepos package(s) {unknown}; pinned: {sorted(pinned)}")
        chosen = tuple(pinned[n] for n in args.packages) or pins.PACKAGES
        try:
            if args.export:
                manifest = realrepos_bundle.export_bundle(args.export, chosen)
                print(f"wrote {args.export}: {len(manifest['packages'])} packages, "
                      f"{os.path.getsize(args.export) / 2**20:.1f} MiB")
            else:
                print(json.dumps(realrepos_bundle.import_bundle(args.import_, chosen), indent=1))
        except (OSError, ValueError, tarfile.TarError) as e:
            parser.exit(2, f"RealRepos bundle: {e}\n")
        return
    suite = RealReposSuite(packages=tuple(args.packages), workers=args.workers)
    text = json.dumps(suite.stats, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
