"""RL on BugFix at tiny scale on CPU: does RL improve an SFT policy at fixing real code?

    python -m composer_jax.experiments.bugfix [--workdir runs/rl_bugfix] [--quick] [--config.seed=1]
    python -m composer_jax.experiments.bugfix --drills 3000 --config.sft.demos=4096 --config.sft.optim.steps=1000 \
        --out benchmarks/results/rl_bugfix_drills.json    # SFT on function drills, RL on the same
    python -m composer_jax.experiments.bugfix --drills 3000 --config.sft.demos=4096 --config.sft.optim.steps=1000 \
        --rl_drill_source methods --out benchmarks/results/rl_bugfix_methods.json  # RL on unseen functions
    python -m composer_jax.experiments.bugfix --eval sft=runs/rl_bugfix/sft/checkpoints \
        rl=runs/rl_bugfix/rl/checkpoints --config.rl.tokenizer=runs/rl_bugfix/tokenizer.json \
        --config.eval_rollout.temperature=0.0 --out greedy.json    # paired evaluation, greedy decoding

The tier: single-bug BugFix tasks (HumanEval functions and the hand-written packages, one AST
mutant each) whose prompt names the bug's line, as a traceback would (`hint_line`). On plain
BugFix the 2-layer policy of experiments.longhorizon passes 0/16 before and after RL: it cannot localise a bug
by reading a whole file. With the line named, the bug's kind and its fix are still the policy's
to find, on validation functions it has never seen (the split is by source function).

1. A 2k BPE trained on the train tasks' prompts, numbered files and expert actions.
2. The copy warm-up of experiments.longhorizon, then SFT on `sft.demos` expert demonstrations spread over the
   train split (read the lines around the hint, one `edit_file`, submit). `--drills N` adds N
   drills (functions of the project's dependencies that no sandbox holds) to the train split
   (environments/suites/drills.py): with only the tested tasks' ~150 functions the policy
   memorises them and fixes almost nothing unseen.
3. RL from that checkpoint: positive-only GRPO (experiments.longhorizon's recipe), `rl.steps` steps of
   groups_per_step x group_size episodes, graded by the hidden tests in the sandbox.
   `--rl_drill_source methods` swaps the drills for as many drills on class methods, functions
   SFT never showed: RL then practises on code it cannot have memorised, as validation is.
4. The SFT and RL policies on every validation task, with each episode's outcome: pass rates with
   Wilson intervals, exact McNemar, and pass rates by bug kind.
Writes benchmarks/results/rl_bugfix_tiny.json (or --out).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from collections import defaultdict

from composer_jax.experiments import longhorizon
from composer_jax.experiments.records import RESULTS, write_result
from configs import rl_bugfix
from configs.rl_bugfix import SYSTEM

RESULT = RESULTS / "rl_bugfix_tiny.json"


def bench_config(quick: bool):
    """The recipe of configs/rl_bugfix.py."""
    return rl_bugfix.get_config("quick" if quick else None)


def train_tokenizer(c, path: pathlib.Path) -> None:
    """BPE on what the policy will read and write: prompts, files as read_file numbers them, and
    the expert's tool calls (no episodes are run: the texts come from the tasks)."""
    from composer_jax.data.tokenizer import Tokenizer
    from composer_jax.harness.protocol import SUMMARIZE_INSTRUCTION
    from composer_jax.harness.tools import numbered_lines
    from environments.experts import expert_plan
    from environments.suites import make_suite
    from environments.suites.drills import TASK_PREFIX

    suite = make_suite("BugFix", **dict(c.rl.suite_options))
    texts = [SUMMARIZE_INSTRUCTION, SYSTEM]
    # Drills left out: the tokenizer (and the warm-up trained on it) is the same with or without
    # them, so runs with and without drills differ only in their SFT and RL data.
    for tid in (t for t in suite.task_ids("train") if not t.startswith(TASK_PREFIX)):
        task = suite.get(tid)
        numbered = [numbered_lines(text.splitlines()) for text in task.files.values()]
        texts.append("\n".join([task.prompt, *numbered, *expert_plan(task)]))
    Tokenizer.train(texts, vocab_size=c.model.vocab_size).save(path)


def spread(ids: list[str], n: int) -> list[str]:
    """`n` ids evenly spaced over `ids` (task ids are grouped by source: the first n would cover
    only a few functions)."""
    if n >= len(ids):
        return list(ids)
    return [ids[i * len(ids) // n] for i in range(n)]


def bug_kind(task_id: str) -> str:
    """bugfix/<source>/<operator>-<n> -> operator."""
    return task_id.rsplit("/", 1)[1].rsplit("-", 1)[0]


def by_kind(ids: list[str], passed: list[int]) -> dict[str, dict]:
    tally = defaultdict(lambda: [0, 0])
    for tid, ok in zip(ids, passed, strict=True):
        tally[bug_kind(tid)][0] += int(ok)
        tally[bug_kind(tid)][1] += 1
    return {k: dict(passed=p, tasks=n, pass_rate=p / n) for k, (p, n) in sorted(tally.items())}


def final_eval(c, policies: dict[str, pathlib.Path], ids: list[str]) -> dict:
    run, out = longhorizon._engine(c, init_from=str(next(iter(policies.values())))), {}
    for name, ckpt in policies.items():
        ev = longhorizon.eval_policy(run, name, ckpt, c, ids)
        out[name] = ev | dict(by_kind=by_kind(ids, ev["passed"]))
    return out


def eval_base(c, tasks: int, out: str, argv: list[str]) -> None:
    """A pretrained base as it is, before SFT: does it follow the tool protocol at all?"""
    from composer_jax.rl.train import task_ids

    if not c.rl.init_from:
        raise SystemExit("--eval_base: the config has no rl.init_from to evaluate")
    ids = spread(task_ids(c.rl, "validation"), tasks)
    t = time.perf_counter()
    fe = final_eval(c, {"base": pathlib.Path(c.rl.init_from)}, ids)["base"]
    write_result(out, dict(bench="rl_bugfix_eval_base", config=str(c.name), argv=argv, seed=int(c.seed),
                           suite_options=dict(c.rl.suite_options), validation_tasks=len(ids),
                           pass_rate=fe["pass_rate"], eval=fe, wall_s=time.perf_counter() - t))


def eval_checkpoints(c, items: list[str], tasks: int, out: str, argv: list[str]) -> None:
    """Only evaluate NAME=CHECKPOINTS_DIR policies on the same validation episodes, each paired
    with the first (e.g. greedy decoding of SFT and RL policies: `--config.eval_rollout.temperature=0.0`)."""
    from composer_jax.rl.learner import mcnemar
    from composer_jax.rl.train import task_ids

    if not pathlib.Path(c.rl.tokenizer).is_file():
        raise SystemExit(f"--eval: rl.tokenizer={c.rl.tokenizer!r} is not a file; pass the policies' own, "
                         "e.g. --config.rl.tokenizer=WORKDIR/tokenizer.json")
    policies = {}
    for item in items:
        name, sep, directory = item.partition("=")
        if not sep or not name or not pathlib.Path(directory).is_dir() or name in policies:
            raise SystemExit(f"--eval {item!r}: expected a new NAME=CHECKPOINTS_DIR with an existing directory")
        policies[name] = pathlib.Path(directory)
    all_val = task_ids(c.rl, "validation")
    ids = spread(all_val, tasks or len(all_val))
    t = time.perf_counter()
    fe = final_eval(c, policies, ids)
    first = fe[next(iter(policies))]["passed"]
    write_result(out, dict(bench="rl_bugfix_eval", config=str(c.name), argv=argv, seed=int(c.seed),
                           suite_options=dict(c.rl.suite_options), temperature=float(c.eval_rollout.temperature),
                           validation_tasks=len(ids), policies={k: str(v) for k, v in policies.items()},
                           pass_rates={k: v["pass_rate"] for k, v in fe.items()},
                           paired_vs_first={k: mcnemar(v["passed"], first) for k, v in fe.items()},
                           final_eval=fe, wall_s=time.perf_counter() - t))


def pool_seeds(records: dict[str, dict]) -> dict:
    """Runs of several seeds with the same tier, budget and evaluation tasks pooled: each policy's
    passes over all episodes, and McNemar RL vs SFT over the (task, seed) pairs."""
    from composer_jax.rl.learner import mcnemar, wilson

    def setting(rec):
        rl = rec["rl"]
        # Records before RL had its own suite options ran RL on SFT's
        return (rec["suite_options"], rl.get("suite_options", rec["suite_options"]), rec["validation_tasks"],
                rl["steps"], rl["episodes_per_step"], rl["lr"], rl["negative_weight"])

    for path, rec in records.items():
        if not {"rl", "final_eval", "suite_options", "seed"} <= set(rec):
            raise SystemExit(f"--pool: {path} is not an experiments.bugfix result (no rl/final_eval/suite_options/seed)")
    first_path, first = next(iter(records.items()))
    for path, rec in records.items():
        if setting(rec) != setting(first):
            raise SystemExit(f"--pool: {path} ran with (SFT and RL suite options, validation tasks, steps, episodes/step, "
                             f"lr, negative_weight) = {setting(rec)}, {first_path} with {setting(first)}")
    seeds = [int(r["seed"]) for r in records.values()]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"--pool: seeds {seeds} repeat: the same episodes would count twice")
    out = dict(bench="rl_bugfix_pooled", files=list(records), seeds=seeds,
               per_seed=[dict(seed=int(r["seed"]), before=r["before_rl_pass_rate"], after=r["after_rl_pass_rate"],
                              paired=r["paired_rl_vs_sft"]) for r in records.values()])
    passed = {name: sum((r["final_eval"][name]["passed"] for r in records.values()), []) for name in ("sft", "rl")}
    for name, p in passed.items():
        rate = sum(p) / len(p)
        out[name] = dict(passes=sum(p), n=len(p), pass_rate=rate, ci95=list(wilson(rate, len(p))))
    out["paired_rl_vs_sft"] = mcnemar(passed["rl"], passed["sft"])
    return out


def main(argv=None):
    from composer_jax.config_loading import apply_override, load_config, split_overrides

    p = argparse.ArgumentParser()
    p.add_argument("--workdir", default="runs/rl_bugfix")
    p.add_argument("--config", default="", help="e.g. configs/qwen_coder_0p5b.py:bugfix: a pretrained base "
                   "(its own tokenizer, no warm-up; SFT starts from rl.init_from). Default: the tiny policy")
    p.add_argument("--quick", action="store_true")
    # 300 steps (experiments.longhorizon's) left copying at loss 4.6 on a 2k vocabulary; 1,500 reach 1e-4
    p.add_argument("--copy_warmup", type=int, default=1500, help="induction warm-up steps before SFT (0: none)")
    p.add_argument("--final_eval", type=int, default=0, metavar="N",
                   help="validation tasks for the final comparison (default: all of them)")
    p.add_argument("--drills", type=int, default=0, metavar="N",
                   help="add N drills (environments/suites/drills.py) to the train split")
    p.add_argument("--rl_drill_source", choices=("functions", "methods"), default="functions",
                   help="where RL's drills come from (SFT's are always functions); needs --drills")
    p.add_argument("--eval_base", type=int, default=0, metavar="N",
                   help="only evaluate the config's rl.init_from policy (no SFT, no RL) on N validation tasks")
    p.add_argument("--eval", nargs="+", default=[], metavar="NAME=CHECKPOINTS_DIR",
                   help="only evaluate these policies on --final_eval validation tasks (paired with the first)")
    p.add_argument("--pool", nargs="+", default=[], metavar="RESULT_JSON",
                   help="pool finished runs of different seeds into --out (nothing is trained)")
    p.add_argument("--out", default=str(RESULT))
    argv = sys.argv[1:] if argv is None else list(argv)  # recorded whole in the results
    rest, overrides = split_overrides(argv)
    args = p.parse_args(rest)
    if args.drills < 0:
        p.error(f"--drills must be >= 0, got {args.drills}")
    if args.rl_drill_source != "functions" and not args.drills:
        p.error("--rl_drill_source needs --drills N (how many drills RL adds)")
    if args.pool:
        write_result(args.out, pool_seeds(longhorizon.read_records(args.pool, "--pool")))
        return
    c = load_config(args.config) if args.config else bench_config(args.quick)
    if args.drills:
        c.rl.suite_options = dict(c.rl.suite_options, drills=args.drills)
    for item in overrides:
        apply_override(c, item)
    if args.eval_base:
        eval_base(c, args.eval_base, args.out, argv)
        return
    if args.eval:
        eval_checkpoints(c, args.eval, args.final_eval, args.out, argv)
        return
    rl_suite = dict(c.rl.suite_options, drill_source="methods") if args.rl_drill_source == "methods" else None
    run_bench(c, pathlib.Path(args.workdir), copy_warmup=0 if args.config else args.copy_warmup,
              final_eval_tasks=args.final_eval, out=args.out, argv=argv, rl_suite_options=rl_suite)


def run_bench(c, work: pathlib.Path, *, copy_warmup: int, final_eval_tasks: int, out: str, argv: list[str],
              rl_suite_options: dict | None = None) -> dict:
    """Tokenizer (unless the config names one), warm-up, SFT from the warm-up or rl.init_from,
    RL (on `rl_suite_options` if given, else SFT's suite options), and the paired final
    evaluation; returns the record written to `out`."""
    from composer_jax.rl.learner import mcnemar
    from composer_jax.rl.train import copy_warmup as copy_warmup_steps
    from composer_jax.rl.train import run_rl, run_sft, task_ids

    c.rl.optim.steps = c.rl.steps
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not c.rl.tokenizer:
        c.rl.tokenizer = str(work / "tokenizer.json")
        if not pathlib.Path(c.rl.tokenizer).exists():
            train_tokenizer(c, pathlib.Path(c.rl.tokenizer))
    init_from, warmup = c.rl.init_from, None
    if copy_warmup:
        init_from = str(work / "copy_warmup" / "checkpoints")
        if not pathlib.Path(init_from).exists():
            warmup = copy_warmup_steps(c, work / "copy_warmup", copy_warmup)[0]
            print("copy warm-up", warmup, flush=True)
    sft_dir, sft_record = work / "sft", work / "sft" / "sft.json"
    if not (sft_dir / "checkpoints").exists():
        demo_ids = spread(task_ids(c.rl, "train"), int(c.sft.demos))
        sft_out = run_sft(c, sft_dir, ids=demo_ids, init_from=init_from,
                          demos_cache=work / f"demos_{int(c.sft.demos)}.pkl")
        sft_out["copy_warmup"] = warmup
        sft_record.write_text(json.dumps(sft_out, indent=1))
        print("sft", sft_out, flush=True)
    sft_out = json.loads(sft_record.read_text())
    sft_s = time.perf_counter() - t0

    sft_suite_options = dict(c.rl.suite_options)
    train_tasks = rl_train_tasks = len(task_ids(c.rl, "train"))
    if rl_suite_options is not None:
        c.rl.suite_options = dict(rl_suite_options)  # validation does not depend on drills
        rl_train_tasks = len(task_ids(c.rl, "train"))
    all_val = task_ids(c.rl, "validation")
    c.rl.init_from = str(sft_dir / "checkpoints")
    t1 = time.perf_counter()
    rl_out = run_rl(c, work / "rl", eval_ids=spread(all_val, int(c.rl.eval_tasks)))
    del rl_out["state"]  # params and optimiser moments: the final evaluation reads the checkpoints
    rl_s = time.perf_counter() - t1

    ids = spread(all_val, final_eval_tasks or len(all_val))
    fe = final_eval(c, {"sft": sft_dir / "checkpoints", "rl": work / "rl" / "checkpoints"}, ids)
    evals = rl_out["evals"]
    record = dict(
        bench="rl_bugfix", config=str(c.name), argv=argv, seed=int(c.seed),
        suite="composer/BugFix-v0", suite_options=sft_suite_options,
        train_tasks=train_tasks, validation_tasks=len(ids),
        before_rl_pass_rate=fe["sft"]["pass_rate"], after_rl_pass_rate=fe["rl"]["pass_rate"],
        paired_rl_vs_sft=mcnemar(fe["rl"]["passed"], fe["sft"]["passed"]),
        final_eval=fe, sft=sft_out, sft_wall_s=sft_s,
        rl=dict(suite_options=dict(c.rl.suite_options), train_tasks=rl_train_tasks,
                steps=int(c.rl.steps), episodes_per_step=int(c.rl.groups_per_step) * int(c.rl.group_size),
                lr=float(c.rl.optim.lr), negative_weight=float(c.rl.negative_weight), wall_s=rl_s,
                counts=rl_out["counts"], eval_tasks=int(c.rl.eval_tasks),
                eval_before=evals[min(evals)], eval_after=evals[max(evals)],
                train_log=longhorizon.train_log(work / "rl")),
    )
    write_result(out, record)
    print(json.dumps({k: record[k] for k in ("before_rl_pass_rate", "after_rl_pass_rate", "paired_rl_vs_sft")}),
          flush=True)
    return record


if __name__ == "__main__":
    main()
