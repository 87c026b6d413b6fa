"""Task-suite build time, task counts, and expert / do-nothing rewards per split; writes JSON.

    python benchmarks/env_bench.py --out benchmarks/results/env_bench.json [--episodes 0]

Per suite:
  build_s            wall seconds to build the suite from a cold cache (a fresh temp dir)
  tasks              task counts per split, plus the build's drop/keep statistics
  expert_reward      mean reward of the scripted expert over the validation tasks evaluated
  null_reward        mean reward of submitting at once over the same tasks
  episode_s          median wall seconds of one expert episode (sandboxed tools + grading)
  episodes           validation tasks evaluated
  splits             one report per split evaluated (below): "validation" for every suite, and
                     "train" for Implement (its LeetCode split, played by the answer key)

A split's report (is every task scoreable: plan 1, null 0?):
  plan               "expert" (environments/experts.py) or "answer_key" (LeetCode ships no
                     solutions: the key returns each hidden case's expected value; a grading
                     check only, never training data; environments/answer_key.py)
  tasks / evaluated  tasks in the split / tasks evaluated (all of them with --episodes 0)
  plan_reward        mean reward of the plan over the tasks it could play
  null_reward        mean reward of submitting at once, over every task evaluated
  plan_ok / null_ok  tasks where the plan scores 1 / the null policy scores 0
  no_plan            tasks the plan cannot play (no answer key fits), with why
  not_scoreable      task id -> a short reason, for every task where the plan is not 1 or the
                     null policy is not 0 (a task in no_plan is not repeated here)
  grading_errors     counts of episodes whose info carried a grading_error, per policy, with
                     up to five examples
  judge_notes        per policy, remote-object uses the judge refused (the "note on" lines of
                     the grading details) -> {"tasks": how many tasks' gradings noted it, "ids":
                     the first 20 of them}. A note on the null policy's grading marks a task
                     the judge cannot grade whatever is submitted (the test's own use of the
                     submission is refused)
  answer_key_models  (answer_key only) how the keys answer: model -> number of test methods
  answer_key_calls   (answer_key only) tasks whose every hidden case calls the solution once (the
                     call-order assumption), tasks not checked, and for the others the calls seen
                     per case when each case gets one answer (2: two or more; the counts of later
                     cases are skewed once one case is out of step)
  episode_s          median wall seconds of one plan episode

RealRepos (bugs in pinned PyPI packages, graded by their own suites) is not rebuilt cold: its
build fetches sdists and runs every mutant (`python -m environments.suites.realrepos`, minutes per
package), so `build_s` is the cached build's own per-package time, and it adds:
  tasks.packages     per package: split, tasks, tests, green tests, tests dropped by why
  tasks.bugs_kept_over_tried   per kind of bug: [kept, tried] before deduplication
  grading_s          p50 / p95 wall seconds of one grading (the null policy's episode: submit only)

`--episodes N` evaluates N evenly spaced tasks per split (0: the whole split). Episodes run on
`--workers` environments at once (grading waits on sandboxes, so this overlaps well).
`--suites` picks the suites (default: all).
"""
import argparse
import collections
import concurrent.futures
import statistics
import tempfile
import time

import gymnasium as gym

import environments  # noqa: F401 - registers the environments
from benchmarks.common import write_result
from environments import answer_key
from environments.experts import answer_key_plan, expert_plan, null_plan, run_plan
from environments.suites import bugfix, implement
from environments.suites.longhorizon import LongHorizonSuite
from environments.suites.realrepos import RealReposSuite

NOTE_PREFIX = "  note on "
EXAMPLES = 5
NOTE_IDS = 20  # task ids listed per judge note


def cold_build_s(build) -> float:
    with tempfile.TemporaryDirectory() as cache_dir:
        start = time.perf_counter()
        build(cache_dir)
        return time.perf_counter() - start


def evenly_spaced(ids: list[str], n: int) -> list[str]:
    """n evenly spaced ids (all of them when n is 0)."""
    return ids if not n else ids[:: max(1, len(ids) // n)][:n]


def _notes(details: str) -> set[str]:
    """The judge's notes in a grading's details, without the node ids they are on."""
    return {line.partition(": ")[2] for line in details.splitlines() if line.startswith(NOTE_PREFIX)}


def _outcome(transcript) -> dict:
    info = transcript.info
    details = info.get("grading_details", "")
    failing = [line.strip() for line in details.splitlines() if line.startswith(("  test", "  tests/"))]
    return {"reward": transcript.reward, "passed": info.get("passed"), "total": info.get("total"),
            "error": info.get("grading_error"), "notes": sorted(_notes(details)), "failing": failing[:1]}


def _reason(who: str, o: dict) -> str:
    parts = [f"{who} {o['reward']:.3f} ({o['passed']}/{o['total']} passed)"]
    if o["error"]:
        parts.append(f"error: {o['error']}")
    parts += [f"note: {n}" for n in o["notes"][:2]]
    if o["failing"] and not o["error"]:
        parts.append(o["failing"][0])
    return "; ".join(parts)[:400]


def _percentiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"p50": xs[len(xs) // 2], "p95": xs[min(len(xs) - 1, int(0.95 * len(xs)))]} if xs else {}


def _play(env_id: str, split: str, ids: list[str], plan_fn, keys: dict) -> dict:
    env = gym.make(env_id, split=split)
    out = {}
    try:
        for task_id in ids:
            plan = None
            if task_id not in keys or keys[task_id].files:
                kwargs = {"key": keys[task_id]} if task_id in keys else {}
                start = time.perf_counter()
                plan = _outcome(run_plan(env, plan_fn, task_id=task_id, **kwargs))
                plan["seconds"] = time.perf_counter() - start
            start = time.perf_counter()
            null = _outcome(run_plan(env, null_plan, task_id=task_id))
            null["seconds"] = time.perf_counter() - start
            out[task_id] = {"plan": plan, "null": null}
    finally:
        env.close()
    return out


def sweep(suite_name: str, suite, split: str, n: int, workers: int) -> dict:
    """Play the split's plan (expert, or for LeetCode the answer key) and the null policy."""
    all_ids = suite.task_ids(split)
    ids = evenly_spaced(all_ids, n)
    leetcode = [i for i in ids if i.startswith("implement/leetcode-")]
    keys = answer_key.answer_keys([suite.get(i) for i in leetcode]) if leetcode else {}
    plan_fn = answer_key_plan if keys else expert_plan
    shards = [ids[i::workers] for i in range(workers)]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for part in pool.map(lambda s: _play(f"composer/{suite_name}-v0", split, s, plan_fn, keys), shards):
            results.update(part)
    results = {i: results[i] for i in ids}
    played = {i: r["plan"] for i, r in results.items() if r["plan"] is not None}
    report = {
        "plan": "answer_key" if keys else "expert", "tasks": len(all_ids), "evaluated": len(ids),
        "plan_reward": statistics.fmean(o["reward"] for o in played.values()) if played else None,
        "null_reward": statistics.fmean(r["null"]["reward"] for r in results.values()),
        "plan_ok": sum(o["reward"] == 1.0 for o in played.values()),
        "null_ok": sum(r["null"]["reward"] == 0.0 for r in results.values()),
        "no_plan": {i: k.reason[:400] for i, k in keys.items() if not k.files},
        "not_scoreable": {}, "grading_errors": {}, "judge_notes": {},
        "episode_s": statistics.median(o["seconds"] for o in played.values()) if played else None,
        "grading_s": _percentiles([r["null"]["seconds"] for r in results.values()]),
    }
    for task_id, r in results.items():
        why = []
        if r["plan"] is not None and r["plan"]["reward"] != 1.0:
            why.append(_reason(report["plan"], r["plan"]))
        if r["null"]["reward"] != 0.0:
            why.append(_reason("null", r["null"]))
        if why:
            report["not_scoreable"][task_id] = " | ".join(why)
    for who in ("plan", "null"):
        outcomes = {i: r[who] for i, r in results.items() if r[who] is not None}
        errors = {i: o["error"] for i, o in outcomes.items() if o["error"]}
        report["grading_errors"][who] = {"count": len(errors),
                                         "examples": {i: e[:300] for i, e in list(errors.items())[:EXAMPLES]}}
        noted = collections.defaultdict(list)
        for i, o in outcomes.items():
            for note in o["notes"]:
                noted[note].append(i)
        report["judge_notes"][who] = {note: {"tasks": len(where), "ids": where[:NOTE_IDS]}
                                      for note, where in sorted(noted.items(), key=lambda kv: -len(kv[1]))}
    if keys:
        models = collections.Counter(m.split(":")[0] for k in keys.values() for m in k.models.values() if k.files)
        report["answer_key_models"] = dict(models.most_common())
        report["answer_key_calls"] = {
            "one_call_per_case": sum(k.calls == (1,) for k in keys.values()),
            "not_checked": sorted(i for i, k in keys.items() if not k.calls),  # the hidden test does not parse
            "other": {i: " ".join(map(str, k.calls)) for i, k in keys.items() if k.calls and k.calls != (1,)}}
    return report


SUITES = {  # name -> (the suite, a cold build's seconds or None: generated on demand or built apart)
    "BugFix": (bugfix.BugFixSuite, lambda: cold_build_s(lambda d: bugfix.BugFixSuite(cache_dir=d))),
    "Implement": (implement.ImplementSuite, lambda: cold_build_s(lambda d: implement.ImplementSuite(cache_dir=d))),
    "LongHorizon": (LongHorizonSuite, None),
    "RealRepos": (RealReposSuite, None),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--episodes", type=int, default=20, help="tasks per split; 0: every task")
    ap.add_argument("--workers", type=int, default=3, help="environments played at once")
    ap.add_argument("--suites", nargs="+", default=list(SUITES), choices=list(SUITES))
    ap.add_argument("--train-episodes", type=int, default=20,
                    help="RealRepos train tasks evaluated too (evenly spaced; its split is by package)")
    args = ap.parse_args()
    result, suites = {}, {}
    for name in args.suites:
        make, cold = SUITES[name]
        result[name] = {"build_s": cold() if cold else 0.0}
        suites[name] = make()
    if "RealRepos" in suites:
        result["RealRepos"]["build_s"] = {label: b["build_seconds"]
                                          for label, b in suites["RealRepos"].built["packages"].items()}
    for name, suite in suites.items():
        result[name]["tasks"] = {"train": len(suite.task_ids("train")), "validation": len(suite.task_ids("validation")),
                                 **getattr(suite, "stats", {})}
        splits = {"validation": sweep(name, suite, "validation", args.episodes, args.workers)}
        if name == "Implement":  # LeetCode: no experts, so the answer key shows it can score 1
            splits["train"] = sweep(name, suite, "train", args.episodes, args.workers)
        if name == "RealRepos" and args.train_episodes:
            splits["train"] = sweep(name, suite, "train", args.train_episodes, args.workers)
        val = splits["validation"]
        result[name].update(episodes=val["evaluated"], expert_reward=val["plan_reward"],
                            null_reward=val["null_reward"], episode_s=val["episode_s"], splits=splits)
        print(f"{name}: " + ", ".join(f"{s} plan {r['plan_ok']}/{r['evaluated'] - len(r['no_plan'])} null "
                                      f"{r['null_ok']}/{r['evaluated']}" for s, r in splits.items()), flush=True)
    write_result(args.out, {"env_bench": result})


if __name__ == "__main__":
    main()
