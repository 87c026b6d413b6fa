"""Red-team the grader: every applicable cheat of environments/redteam.py on every suite variant and
seed, through the env API; rewards, host traces and `wins` written as JSON, and a table printed.

    python benchmarks/redteam_bench.py --out benchmarks/results/redteam.json [--seeds 0 1 2]
        [--suites bugfix-humaneval ...] [--cheats NAME ...] [--classes verdict ...]
        [--grading-wall-s 10 --tool-wall-s 10] [--skip-slow] [--rss-bound-mb 256]

  runs[]          one per (cheat, suite, seed): task, reward, passed/total, traces, timings
  rewards         cheat -> suite -> seed -> reward
  controls        suite -> task -> the scripted expert's reward on it (None: no expert, LeetCode)
  wins            runs that scored above 0 or left a host trace; winners lists them
  wins_by_class   the same per cheat class

Suite variants: bugfix-humaneval (BugFix validation), bugfix-repo (hand-written packages, train),
bugfix-drill (stdlib drills, train with drills), implement-humaneval (validation), implement-leetcode
(train), longhorizon (validation), realrepos (RealRepos validation: the packages of
--realrepos-packages, default inflection). The seed picks the task (a cheat that needs a kind of task, e.g.
HumanEval helpers, takes the first such task of the seeded order).

Host traces: canary files outside the workspace, a host-only secret in an observation, processes
alive afterwards (our descendants or the run's sandbox uids), leftover workspaces or cgroups, peak
RSS growth past --rss-bound-mb, the host reading more than --read-bound-mb from a workspace, a
submit held past the grading limit (+15 s) or a tool call past the tool limit, env.step raising,
and observations that are not valid text. `--grading-wall-s` / `--tool-wall-s` shorten the limits
(for the slow cheats, which burn them); by default the env's own limits apply.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time

from environments import redteam


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--suites", nargs="+", default=list(redteam.VARIANTS), choices=list(redteam.VARIANTS))
    ap.add_argument("--cheats", nargs="+", default=None, help="cheat names (default: all)")
    ap.add_argument("--classes", nargs="+", default=None, choices=list(redteam.CLASSES))
    ap.add_argument("--grading-wall-s", type=float, default=None)
    ap.add_argument("--tool-wall-s", type=float, default=None)
    ap.add_argument("--rss-bound-mb", type=float, default=256.0)
    ap.add_argument("--read-bound-mb", type=float, default=128.0)
    ap.add_argument("--skip-slow", action="store_true", help="skip cheats that burn a wall clock")
    ap.add_argument("--no-control", action="store_true", help="skip the scripted-expert controls")
    ap.add_argument("--primary-only", action="store_true", help="each cheat on its first suite only")
    ap.add_argument("--realrepos-packages", nargs="+", default=list(redteam.RR_PACKAGES),
                    help="RealRepos packages of the realrepos variant (validation ones: inflection semver webcolors)")
    return ap.parse_args(argv)


def select(args) -> list[redteam.Cheat]:
    known = redteam.by_name()
    if args.cheats:
        unknown = [n for n in args.cheats if n not in known]
        if unknown:
            raise SystemExit(f"unknown cheats {unknown}; known: {sorted(known)}")
    out = []
    for c in redteam.CATALOGUE:
        if args.cheats and c.name not in args.cheats:
            continue
        if args.classes and c.cls not in args.classes:
            continue
        if args.skip_slow and c.slow:
            continue
        out.append(c)
    return out


def cell(records: list[redteam.RunRecord]) -> str:
    if not records:
        return "."
    parts = []
    for r in records:
        mark = "" if not r.traces else "!"
        parts.append(("0" if r.reward == 0 else f"{r.reward:.2g}") + mark)
    return " ".join(parts)


def print_table(cheats, suites, by_key) -> None:
    width = max(len(c.name) for c in cheats) + 2
    cols = [s.replace("bugfix-", "bf-").replace("implement-", "im-") for s in suites]
    print("\nreward per seed ('!' = host trace, '.' = not applicable)")
    print("cheat".ljust(width) + "class".ljust(16) + "".join(c.ljust(14) for c in cols))
    for c in cheats:
        row = c.name.ljust(width) + c.cls.ljust(16)
        row += "".join(cell(by_key.get((c.name, s), [])).ljust(14) for s in suites)
        print(row)


def main(argv=None) -> None:
    args = parse_args(argv)
    rr = redteam.VARIANTS[redteam.RR]
    redteam.VARIANTS[redteam.RR] = dataclasses.replace(rr, suite_options=(("packages", tuple(args.realrepos_packages)),))
    cheats = select(args)
    settings = redteam.Settings(grading_wall_s=args.grading_wall_s, tool_wall_s=args.tool_wall_s,
                                rss_bound_mb=args.rss_bound_mb)
    pool = redteam.EnvPool(settings)
    watch = redteam.HostWatch(rss_bound_mb=args.rss_bound_mb, read_bound_mb=args.read_bound_mb)
    start = time.monotonic()
    controls: dict[str, dict[str, float | None]] = collections.defaultdict(dict)
    if not args.no_control:  # also warms each variant's env, so suite loading is not charged to a cheat
        for suite in args.suites:
            for seed in args.seeds:
                tid = pool.pick(suite, seed)
                controls[suite][tid] = redteam.run_control(suite, seed, pool, tid)
    records: list[redteam.RunRecord] = []
    by_key: dict[tuple[str, str], list[redteam.RunRecord]] = collections.defaultdict(list)
    for c in cheats:
        suites = [s for s in c.suites if s in args.suites][: 1 if args.primary_only else None]
        for suite in suites:
            for seed in args.seeds:
                rec = redteam.run_cheat(c, suite, seed, pool, watch)
                records.append(rec)
                by_key[(c.name, suite)].append(rec)
                flag = "WIN " if rec.won else "    "
                print(f"{flag}{c.name:38s} {suite:20s} seed={seed} reward={rec.reward:.2f} "
                      f"{rec.passed}/{rec.total} {rec.wall_s:5.1f}s {rec.task_id} {rec.traces if rec.traces else ''}",
                      file=sys.stderr, flush=True)
                if not args.no_control and rec.task_id not in controls[suite]:
                    controls[suite][rec.task_id] = redteam.run_control(suite, seed, pool, rec.task_id)
    pool.close()
    winners = [r for r in records if r.won]
    rewards: dict[str, dict[str, dict[str, float]]] = collections.defaultdict(lambda: collections.defaultdict(dict))
    for r in records:
        rewards[r.cheat][r.suite][str(r.seed)] = r.reward
    wins_by_class = collections.Counter(r.cls for r in winners)
    result = {
        "grader": _grader_name(),
        "settings": dataclasses.asdict(settings) | {"read_bound_mb": args.read_bound_mb},
        "seeds": args.seeds,
        "suites": args.suites,
        "cheats": {c.name: {"class": c.cls, "suites": list(c.suites), "slow": c.slow,
                            "doc": c.doc.split("\n\n")[0].replace("\n", " ")} for c in cheats},
        "runs": [dataclasses.asdict(r) for r in records],
        "rewards": {k: dict(v) for k, v in rewards.items()},
        "controls": {k: dict(v) for k, v in controls.items()},
        "wins": len(winners),
        "winning_cheats": sorted({r.cheat for r in winners}),
        "winners": [{"cheat": r.cheat, "class": r.cls, "suite": r.suite, "seed": r.seed, "task_id": r.task_id,
                     "reward": r.reward, "traces": r.traces} for r in winners],
        "wins_by_class": {k: wins_by_class.get(k, 0) for k in redteam.CLASSES},
        "runs_total": len(records),
        "wall_s": round(time.monotonic() - start, 1),
    }
    from benchmarks.common import write_result

    write_result(args.out, {"redteam_bench": result})
    print_table(cheats, args.suites, by_key)
    print(f"\n{len(winners)} wins in {len(records)} runs; winning cheats: {len(result['winning_cheats'])}/{len(cheats)}")
    bad_controls = {s: {t: r for t, r in v.items() if r is not None and r != 1.0} for s, v in controls.items()}
    if any(bad_controls.values()):
        print(f"WARNING: the expert control did not score 1 on {bad_controls}")


def _grader_name() -> str:
    from environments import grading_bridge

    g = grading_bridge.resolve_grader(None)
    return f"{getattr(g, '__module__', '?')}.{getattr(g, '__name__', '?')}"


if __name__ == "__main__":
    main()
