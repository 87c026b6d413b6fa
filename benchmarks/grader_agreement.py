"""Do the judge and the previous in-sandbox pytest path agree on honest submissions? Writes JSON.

    python -m benchmarks.grader_agreement --out benchmarks/results/grader_agreement.json

The README's RL results were scored by the previous grader (hidden tests under pytest inside
the sandbox). The judge changes what a cheat can do, and should change nothing else. The policy
checkpoints behind those results are not kept, so this checks the property they rest on: for the
submissions those policies make (a task's reference, its buggy starting point, and other
mutants of the same file: partial and wrong fixes), every graded test gets the same outcome from
both paths.

  submissions            graded submissions per suite
  tests                  graded test outcomes compared
  disagreements          (task, submission, test, judge outcome, old outcome), all of them
  reward_disagreements   submissions whose all-pass reward differs
"""
import argparse
import collections
import json
import re

from benchmarks.common import write_result
from composer_jax.grading import grade
from composer_jax.grading.grader import graded_files, task_runtime
from composer_jax.grading.submission import merge
from composer_jax.sandbox import Limits, get_backend
from environments.suites import longhorizon, make_suite

SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR) (\S+)")


def old_outcomes(task, files, backend) -> dict[str, bool]:
    """Per graded test, passed or not, with the hidden tests run by pytest inside the sandbox."""
    merged, _ = merge(task.files, files)
    ws = backend.create({**merged, **task.hidden_tests}, task_runtime(task))
    try:
        argv = ["python", "-I", "-B", "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-c", "/dev/null",
                "--rootdir=/workspace", "--tb=no", *graded_files(task)]
        res = backend.run(ws, argv, Limits(wall_s=60.0, cpu_s=60, memory_bytes=2 << 30, max_output_bytes=4 << 20))
    finally:
        backend.destroy(ws)
    seen = {m[2]: m[1] == "PASSED" for m in map(SUMMARY.match, res.stdout.splitlines()) if m}
    return {t: seen.get(t, False) for t in task.graded_tests}


def submissions(suite_name: str, suite, ids: list[str]):
    """(task, name, files) triples: the reference, the starting point, and up to two other
    mutants of the same file from other tasks (they are wrong or partial fixes here)."""
    by_file = collections.defaultdict(list)
    tasks = [suite.get(t) for t in ids]
    for t in tasks:
        if suite_name == "BugFix":
            path = next(iter(json.loads(t.metadata["reference_files"])))
            by_file[(t.metadata["source_id"], path)].append(t.files[path])
    for t in tasks:
        reference = json.loads(t.metadata["reference_files"])
        yield t, "reference", {**t.files, **reference}
        yield t, "start", dict(t.files)
        if suite_name == "BugFix":
            path = next(iter(reference))
            others = [s for s in by_file[(t.metadata["source_id"], path)] if s != t.files[path]][:2]
            for i, source in enumerate(others):
                yield t, f"other_mutant_{i}", {**t.files, path: source}
        if suite_name == "LongHorizon":
            text = reference[longhorizon.CONFIG_FILE]
            key = re.search(r"ACCESS_KEY = (.*)", text).group(1)
            yield t, "key_only", {**t.files, longhorizon.CONFIG_FILE: text.replace(text.splitlines()[-1], "FRAGMENTS = ''")}
            yield t, "fragments_only", {**t.files, longhorizon.CONFIG_FILE: text.replace(key, "''")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="")
    ap.add_argument("--tasks", type=int, default=0, help="evenly spaced validation tasks per suite (0: all)")
    args = ap.parse_args()
    backend = get_backend()
    result = {}
    # Validation splits, and BugFix's hand-written packages (pytest suites of several modules),
    # which the split puts in train.
    for label, name in (("BugFix", "BugFix"), ("BugFix repos (train)", "BugFix"), ("Implement", "Implement"),
                        ("LongHorizon", "LongHorizon")):
        suite = make_suite(name)
        ids = suite.task_ids("validation") if "train" not in label else \
            [t for t in suite.task_ids("train") if t.startswith("bugfix/repo-")]
        if args.tasks:
            ids = ids[::max(1, len(ids) // args.tasks)][:args.tasks]
        n_sub = n_tests = 0
        disagree, reward_disagree = [], []
        for task, kind, files in submissions(name, suite, ids):
            new = grade(task, files, backend).tests
            old = old_outcomes(task, files, backend)
            n_sub += 1
            n_tests += len(new)
            disagree += [(task.task_id, kind, t, new[t], old[t]) for t in new if new[t] != old[t]]
            if all(new.values()) != all(old.values()):
                reward_disagree.append((task.task_id, kind))
        result[label] = {"tasks": len(ids), "submissions": n_sub, "tests": n_tests,
                        "disagreements": disagree, "reward_disagreements": reward_disagree}
        print(label, {k: (len(v) if isinstance(v, list) else v) for k, v in result[label].items()}, flush=True)
    write_result(args.out, result)


if __name__ == "__main__":
    main()
