"""Is a RealRepos build reproducible on a busy machine? Rebuilds pinned packages into a fresh cache
(the sdists copied, nothing fetched) while `--busy` processes spin on the CPU, and compares each
package with the build already in the main cache: tasks by id, their failing tests, green tests.

    python -m environments.suites.realrepos --workers 2        # the reference build, quiet machine
    python benchmarks/realrepos_rebuild_bench.py --packages inflection webcolors xmltodict --busy 4 \
        --out benchmarks/results/realrepos_rebuild_busy.json

Per package: tasks in each build, ids in both, ids only in one, ids in both whose failing tests
differ, green tests in each, build seconds, and the load average seen during the rebuild.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time

from benchmarks.common import write_result
from environments.suites import cache
from environments.suites import realrepos_build as build
from environments.suites import realrepos_pins as pins
from environments.suites import realrepos_sources as sources


def _spin() -> None:
    while True:
        pass


def compare(reference: dict, rebuilt: dict) -> dict:
    ref = {r["task_id"]: r["failing"] for r in reference["records"]}
    new = {r["task_id"]: r["failing"] for r in rebuilt["records"]}
    both = ref.keys() & new.keys()
    return {"tasks": [len(ref), len(new)], "same_ids": len(both), "only_reference": sorted(ref.keys() - new.keys()),
            "only_rebuilt": sorted(new.keys() - ref.keys()),
            "failing_differs": sorted(t for t in both if ref[t] != new[t]),
            "green_tests": [len(reference["green"]), len(rebuilt["green"])],
            "identical": ref == new and reference["green"] == rebuilt["green"],
            "build_seconds": [reference["build_seconds"], rebuilt["build_seconds"]]}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--packages", nargs="+", required=True, help="pinned package names")
    parser.add_argument("--busy", type=int, default=0, help="processes spinning on the CPU during the rebuild")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    pinned = {p.name: p for p in pins.PACKAGES}
    unknown = sorted(set(args.packages) - set(pinned))
    if unknown:
        parser.error(f"unknown package(s) {unknown}; pinned: {sorted(pinned)}")
    chosen = tuple(pinned[n] for n in args.packages)
    main_cache = cache.default_cache_dir()
    reference = {}
    for p in chosen:
        path = os.path.join(main_cache, "suites", f"realrepos-{p.label}-{build._package_key(p)}.json")
        if not os.path.exists(path):
            parser.error(f"no reference build of {p.label} in {main_cache} (run the suite's build first)")
        with open(path, encoding="utf-8") as f:
            reference[p.label] = json.load(f)

    fresh = tempfile.mkdtemp(prefix="realrepos-rebuild-")
    shutil.copytree(sources.sdist_dir(main_cache), sources.sdist_dir(fresh))
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for s in spinners:
        s.start()
    loads = []
    try:
        rebuilt = {}
        for p in chosen:
            loads.append(os.getloadavg()[0])
            rebuilt[p.label] = build.load_packages((p,), fresh, args.workers)["packages"].get(p.label)
            loads.append(os.getloadavg()[0])
    finally:
        for s in spinners:
            s.terminate()
        shutil.rmtree(fresh, ignore_errors=True)
    out = {"command": " ".join(["python", "benchmarks/realrepos_rebuild_bench.py", *(argv or sys.argv[1:])]),
           "busy_processes": args.busy, "cpus": os.cpu_count(), "load_average_1min": [round(x, 1) for x in loads],
           "date": time.strftime("%Y-%m-%d"),
           "packages": {label: (compare(reference[label], b) if b else {"skipped": True})
                        for label, b in rebuilt.items()}}
    out["identical"] = all(p.get("identical") for p in out["packages"].values())
    write_result(args.out, out)
    return out


if __name__ == "__main__":
    main()
