"""RL at tiny scale on CPU: does RL improve an SFT policy, and does training the summaries matter?

    python -m composer_jax.experiments.longhorizon [--workdir runs/rl_bench] [--quick] [--hops 4 --sft_hops 4 --filler 6]

1. A 1k BPE trained on expert transcripts, every secret word one token.
2. A copy warm-up (`--copy_warmup` steps of repeated random spans), then SFT of a 2-layer dense
   policy with token shift on scripted note-chain demonstrations (summaries included) of
   `--sft_hops`-note LongHorizon tasks with word secrets; `copy_probe` records how well the SFT
   policy copies each class of secret from its context.
3. From that checkpoint, the same RL budget three ways on `--hops`-note tasks (`--hops` above
   `--sft_hops` asks RL to extend summaries to more fragments than the demonstrations showed):
     trained_summary  summary tokens trained with the episode's advantage
     masked_summary   summary tokens get no gradient
     no_summary       rollout.max_segments = 1: a run ends when its one context is full
   each evaluated on the same held-out validation tasks before and after.
4. Each arm's final policy on tasks of 2-8 notes (pass rate vs transcript length), and the SFT
   and RL policies on BugFix validation tasks.
Writes benchmarks/results/rl_tiny.json (rewritten after every arm).
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib
import sys
import time
from collections import Counter

import numpy as np

from composer_jax.config_loading import apply_override, split_overrides
from composer_jax.experiments.records import RESULTS, write_result
from configs import rl_longhorizon
from configs.tiny import get_config

RESULT = RESULTS / "rl_tiny.json"
from configs.rl_longhorizon import SYSTEM


def bench_config(quick: bool, hops: int = 4, filler_lines: int = 6):
    """The recipe of configs/rl_longhorizon.py at a tier."""
    return rl_longhorizon.get_config(f"hops={hops},filler={filler_lines}" + (",quick" if quick else ""))


def train_tokenizer(c, path: pathlib.Path) -> None:
    from composer_jax.data.tokenizer import Tokenizer
    from composer_jax.harness.protocol import SUMMARIZE_INSTRUCTION, render_conversation
    from composer_jax.rl.envs import local_factory, task_ids
    from environments.experts import run_plan
    from environments.suites.longhorizon import FRAGMENT_WORDS, KEY_WORDS, NOTE_WORDS

    env = local_factory(c.rl)()
    # Every secret word as it appears (in backticks, in quotes) so each is one token.
    texts = [SUMMARIZE_INSTRUCTION, SYSTEM] + ["\n".join(
        [f"`{w}` '{w}'" for w in KEY_WORDS + FRAGMENT_WORDS] + [f"docs/note_{w}.md" for w in NOTE_WORDS])] * 64
    for tid in task_ids(c.rl, "train")[:64]:
        texts.append(render_conversation(run_plan(env, task_id=tid).messages()))
    env.close()
    Tokenizer.train(texts * 4, vocab_size=c.model.vocab_size).save(path)


def mean_target_prob_by_class(log_probs, seqs, class_of, names) -> dict:
    """Mean probability of every trained token (`loss_mask`) of `seqs` under `log_probs(tokens)`
    ([t, vocab] log-probs of the next token), grouped by `class_of(token)`, one of `names`."""
    probs: dict[str, list[float]] = {k: [] for k in names}
    for s in seqs:
        tokens = np.asarray(s.tokens, np.int32)
        logp = np.asarray(log_probs(tokens))
        for i in np.flatnonzero(np.asarray(s.loss_mask)[1:] > 0) + 1:  # token i, predicted at i - 1
            probs[class_of(int(tokens[i]))].append(float(np.exp(logp[i - 1, tokens[i]])))
    return {k: dict(tokens=len(v), mean_p=float(np.mean(v)) if v else None) for k, v in probs.items()}


def copy_probe(c, checkpoints: str, seqs, n: int = 60) -> dict:
    """Mean target probability of the policy on demonstration tokens by class: the secret words
    it must copy from context (key, fragments, note names), digits, and everything else."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from composer_jax.rl.train import load_params
    from environments.suites.longhorizon import FRAGMENT_WORDS, KEY_WORDS, NOTE_WORDS

    run = _engine(c)
    with jax.set_mesh(run.mesh):
        model = nnx.merge(run.graphdef, load_params(c, checkpoints, run.model_cfg, run.mesh, run.tx))
    tok = run.tokenizer
    classes = {name: {ids[0] for w in words if len(ids := tok.encode(w)) == 1}
               for name, words in (("key", KEY_WORDS), ("fragment", FRAGMENT_WORDS), ("note", NOTE_WORDS))}
    classes["digits"] = {i for i in range(tok.vocab_size) if tok.decode([i]).strip().isdigit()}
    return mean_target_prob_by_class(
        lambda tokens: jax.nn.log_softmax(model(jnp.asarray(tokens[None]))[0][0], axis=-1), seqs[-n:],
        lambda t: next((k for k, ids in classes.items() if t in ids), "other"), (*classes, "other"))


def main(argv=None):
    from composer_jax.rl.train import copy_warmup, run_sft, task_ids

    p = argparse.ArgumentParser()
    p.add_argument("--workdir", default="runs/rl_bench")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default="", help="comma list of ablation arms to run")
    p.add_argument("--sft_from", default="", help="continue SFT from this checkpoints directory")
    p.add_argument("--sft_steps", type=int, default=0)
    p.add_argument("--sft_lr", type=float, default=0.0)
    p.add_argument("--sft_demos", type=int, default=0)
    p.add_argument("--sft_only", action="store_true", help="stop after SFT + its evaluation")
    p.add_argument("--copy_warmup", type=int, default=300, help="induction warm-up steps before SFT (0: none)")
    p.add_argument("--rl_steps", type=int, default=0)
    p.add_argument("--rl_lr", type=float, default=0.0)
    p.add_argument("--rl_groups", type=int, default=0, help="tasks per RL step (x group_size episodes)")
    p.add_argument("--rl_advantage", default="", help="grpo | dr_grpo | rloo (default: the config's)")
    p.add_argument("--hops", type=int, default=4, help="LongHorizon notes after the start note (RL and evaluation)")
    p.add_argument("--sft_hops", type=int, default=4, help="notes in the SFT demonstrations' tasks")
    p.add_argument("--filler", type=int, default=6, help="LongHorizon filler lines per note")
    p.add_argument("--no_sweeps", action="store_true", help="skip the length sweep and the BugFix evaluation")
    p.add_argument("--combine", default="", help="comma list of result JSONs (one arm each, same settings): "
                   "write them as one record instead of running")
    p.add_argument("--final_eval", type=int, default=0, metavar="N",
                   help="also evaluate the SFT policy and every arm's final policy on N validation tasks")
    p.add_argument("--pool", default="", help="comma list of result JSONs of different seeds (with --final_eval): "
                   "pooled pass rates and paired tests, written to --out (default benchmarks/results/rl_tiny_seeds.json)")
    p.add_argument("--notes", default="")
    p.add_argument("--out", default="", help="result path (default benchmarks/results/rl_tiny.json)")
    argv, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    args.overrides = overrides  # recorded with the run (record_seed reads the seed from them)
    if args.pool:
        pooled = pool_seeds(read_records(args.pool.split(","), "--pool"))
        write_result(args.out or str(RESULT.with_name("rl_tiny_seeds.json")), pooled)
        return
    work = pathlib.Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    # Demonstrations (and the tokenizer) from sft_hops-note tasks; RL and evaluation on hops-note
    # tasks: the summaries the SFT policy writes must be improved to carry the extra fragments.
    cs, c = bench_config(args.quick, args.sft_hops, args.filler), bench_config(args.quick, args.hops, args.filler)
    if args.sft_steps:
        cs.sft.optim.steps = c.sft.optim.steps = args.sft_steps
    if args.sft_lr:
        cs.sft.optim.lr = c.sft.optim.lr = args.sft_lr
    if args.sft_demos:
        cs.sft.demos = c.sft.demos = args.sft_demos
    if args.rl_steps:
        c.rl.steps = c.rl.optim.steps = args.rl_steps
    if args.rl_lr:
        c.rl.optim.lr = args.rl_lr
    if args.rl_groups:
        c.rl.groups_per_step = args.rl_groups
    if args.rl_advantage:
        c.rl.advantage = args.rl_advantage
    for item in overrides:
        apply_override(c, item)
    tok_path = work / "tokenizer.json"
    if not tok_path.exists():
        train_tokenizer(cs, tok_path)
    cs.rl.tokenizer = c.rl.tokenizer = str(tok_path)
    t0 = time.perf_counter()
    sft_dir, demos_pkl = work / "sft", work / f"demos_{int(cs.sft.demos)}.pkl"
    sft_out = None
    warmup_out, init_from = None, args.sft_from
    if args.copy_warmup and not args.sft_from:
        init_from = str(work / "copy_warmup" / "checkpoints")
        if not (work / "copy_warmup" / "checkpoints").exists():
            warmup_out = copy_warmup(cs, work / "copy_warmup", args.copy_warmup)[0]
            print("copy warm-up", warmup_out, flush=True)
    sft_record = sft_dir / "sft.json"  # kept beside the checkpoint: later runs reuse both
    if not (sft_dir / "checkpoints").exists():
        sft_out = run_sft(cs, sft_dir, init_from=init_from, demos_cache=demos_pkl)
        sft_out["copy_warmup"] = warmup_out
        sft_record.write_text(json.dumps(sft_out, indent=1))
        print("sft", sft_out, flush=True)
    elif sft_record.exists():
        sft_out = json.loads(sft_record.read_text())
    sft_s = time.perf_counter() - t0
    extra = {}
    if demos_pkl.exists():
        import pickle

        extra["sft_copy_probe"] = copy_probe(cs, str(sft_dir / "checkpoints"), pickle.loads(demos_pkl.read_bytes())[0])
        print("sft copy probe", extra["sft_copy_probe"], flush=True)
    eval_ids = task_ids(c.rl, "validation")[:int(c.rl.eval_tasks)]
    if args.sft_only:
        from composer_jax.rl.learner import evaluate
        from composer_jax.rl.train import build, eval_sampling

        run = build(c, c.rl.optim, init_from=str(sft_dir / "checkpoints"))
        ev = evaluate(run.loop, eval_ids, seed=int(c.seed) + 7_777_777, sampling=eval_sampling(c))
        run.loop.close()
        print("sft eval", {k: v for k, v in ev.items() if not isinstance(v, list)}, flush=True)
        return
    if args.combine:
        combine(args, c, work, eval_ids, args.combine.split(","), sft_out, sft_s, extra)
        return
    arms = {k: v for k, v in ARMS.items() if not args.only or k in args.only.split(",")}
    results = run_arms(c, work, eval_ids, arms,
                       on_arm=lambda res: write_record(args, c, work, eval_ids, res, sft_out, sft_s, extra))
    if args.final_eval:
        extra["final_eval"] = final_eval(c, work, {k: work / k for k in results}, args.final_eval)
    if "trained_summary" in results and not args.quick and not args.no_sweeps:
        print("length sweep", flush=True)
        extra["length_sweep"] = length_sweep(c, work, arms, hops_values=(2, 4, 6, 8), tasks=16)
        print("bugfix", flush=True)
        extra["bugfix"] = suite_eval(c, work, "composer/BugFix-v0", tasks=16)
    write_record(args, c, work, eval_ids, results, sft_out, sft_s, extra)


ARMS = {
    "trained_summary": dict(train_summaries=True),
    "masked_summary": dict(train_summaries=False),
    # One context, all of it usable: the run ends when the window is full (no reset).
    "no_summary": dict(train_summaries=True, rollout=dict(max_segments=1, summarize_at=1.0)),
}


def arm_config(c, work: pathlib.Path, arm: dict):
    ca = copy.deepcopy(c)
    ca.rl.init_from = str(work / "sft" / "checkpoints")
    ca.rl.train_summaries = arm["train_summaries"]
    ca.rollout.update(arm.get("rollout", {}))
    return ca


def run_arms(c, work: pathlib.Path, eval_ids: list[str], arms=ARMS, on_arm=None, log=print) -> dict:
    """The same RL budget from the SFT checkpoint once per arm; evaluations before and after."""
    from composer_jax.rl.train import run_rl

    results = {}
    for name, arm in arms.items():
        ca = arm_config(c, work, arm)
        t = time.perf_counter()
        out = run_rl(ca, work / name, eval_ids=eval_ids, log=log)
        evals = out["evals"]
        results[name] = dict(before=evals[min(evals)], after=evals[max(evals)], wall_s=time.perf_counter() - t,
                             steps=int(ca.rl.steps), counts=out["counts"], train_log=train_log(work / name))
        log(f"{name}: {results[name]['before']['pass_rate']} -> {results[name]['after']['pass_rate']}")
        if on_arm:
            on_arm(results)
    return results


def _engine(c, init_from: str = ""):
    """A rollout engine (params: a fresh init, or those under `init_from`) without a train state:
    evaluations swap params in and never update them, and an optimiser's moments are twice the
    params (for Qwen-0.5B, 4 GB that got a CPU evaluation OOM-killed)."""
    import dataclasses

    from composer_jax.rl.train import build

    run = build(c, None, init_from=init_from)
    run.loop.close()
    return dataclasses.replace(run, loop=None)


def _policy_loop(run, checkpoints: str, env_cfg, rollout_overrides: dict | None = None):
    """An agent loop over env_cfg's validation split, the engine running the params under
    `checkpoints` (same shapes: the engine's compiled programs are reused)."""
    import dataclasses

    import jax

    from composer_jax.rl.agent import AgentLoop
    from composer_jax.rl.envs import local_factory
    from composer_jax.rl.train import load_params

    with jax.set_mesh(run.mesh):
        run.engine.set_params(load_params(run.config, checkpoints, run.model_cfg, run.mesh, run.tx))
    rollout = dataclasses.replace(run.engine.rollout, **(rollout_overrides or {}))
    return AgentLoop(run.engine, run.tokenizer, rollout, local_factory(env_cfg, "validation"))


def length_sweep(c, work: pathlib.Path, arms=ARMS, hops_values=(1, 2, 3), tasks: int = 8) -> dict:
    """Each arm's final policy on validation tasks of growing length (more notes to follow):
    pass rate against transcript length in windows."""
    from composer_jax.rl.learner import evaluate
    from composer_jax.rl.train import eval_sampling
    from environments.suites.longhorizon import task_id

    c = copy.deepcopy(c)
    c.rl.env_max_turns = c.rollout.max_turns = max(hops_values) + 6  # room for the longest chain
    c.rollout.max_segments = max(hops_values) + 4
    opts = c.rl.suite_options
    run, out = _engine(c), {}
    for name, arm in arms.items():
        loop = _policy_loop(run, str(work / name / "checkpoints"), c.rl, arm.get("rollout"))
        points = []
        for hops in hops_values:
            ids = [task_id("validation", hops, int(opts["filler_lines"]), i, opts.get("secrets", "hex"))
                   for i in range(tasks)]
            ev = evaluate(loop, ids, seed=int(c.seed) + 9_999, sampling=eval_sampling(c))
            points.append(dict(hops=hops, pass_rate=ev["pass_rate"], ci95=[ev["ci95_low"], ev["ci95_high"]],
                               reward=ev["reward"], transcript_tokens=ev["transcript_tokens"],
                               transcript_windows=ev["transcript_tokens"] / int(c.rollout.window),
                               segments_per_episode=ev["segments_per_episode"], summary_len=ev["summary_len"],
                               n=ev["n"]))
        loop.close()
        out[name] = points
    return out


def suite_eval(c, work: pathlib.Path, env_id: str, tasks: int = 16) -> dict:
    """The SFT policy and the trained-summary RL policy on another suite's validation tasks."""
    from composer_jax.rl.learner import evaluate
    from composer_jax.rl.train import eval_sampling, task_ids

    env_cfg = copy.deepcopy(c.rl)
    env_cfg.env_id, env_cfg.suite_options = env_id, {}
    ids = task_ids(env_cfg, "validation")
    ids = ids[::max(len(ids) // tasks, 1)][:tasks]  # evenly spaced: every source package
    run, out = _engine(c), dict(env=env_id, tasks=len(ids))
    for label, ckpt in (("before", work / "sft" / "checkpoints"), ("after", work / "trained_summary" / "checkpoints")):
        loop = _policy_loop(run, str(ckpt), env_cfg)
        ev = evaluate(loop, ids, seed=int(c.seed) + 5_555, sampling=eval_sampling(c))
        loop.close()
        out[label] = {k: v for k, v in ev.items() if not isinstance(v, list)}
    return out


def train_log(workdir: pathlib.Path) -> list[dict]:
    keys = ("step", "reward", "pass_rate", "usable_groups", "segments_per_episode", "summary_len", "rollout_s",
            "learn_s", "step_s")
    path = workdir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [{k: r[k] for k in keys if k in r} for r in rows if r.get("kind") == "train"]


def final_eval(c, work: pathlib.Path, arm_dirs: dict[str, pathlib.Path], tasks: int,
               known: dict | None = None) -> dict:
    """The SFT policy and each arm's final policy on the first `tasks` validation tasks (the RL
    runs' own evaluation uses 32: too few to separate policies a few points apart), with each
    episode's outcome for paired comparisons. `known`: evaluations of the same policies already
    made (same seed and tasks, with outcomes), reused as they are."""
    from composer_jax.rl.train import task_ids

    ids = task_ids(c.rl, "validation")[:tasks]
    run, out = _engine(c), dict(tasks=len(ids))
    sft_ckpt = work / "sft" / "checkpoints"
    policies = [("sft", sft_ckpt, None)]
    for arm, d in arm_dirs.items():
        if ARMS[arm].get("rollout"):  # the SFT policy under this arm's rollout settings: its own "before"
            policies.append((f"sft/{arm}", sft_ckpt, ARMS[arm]["rollout"]))
        policies.append((arm, d / "checkpoints", ARMS[arm].get("rollout")))
    for name, ckpt, rollout in policies:
        if (done := (known or {}).get(name)) and done["tasks"] == len(ids) and "passed" in done:
            out[name] = done
            print(f"final eval {name}: pass {done['pass_rate']:.3f} (from {done['from_file']})", flush=True)
            continue
        out[name] = eval_policy(run, name, ckpt, c, ids, rollout)
    return out


def eval_policy(run, name: str, checkpoints, c, ids: list[str], rollout: dict | None = None) -> dict:
    """The params under `checkpoints` on `ids` (the final-evaluation seed), with each episode's
    outcome and the wall time; printed."""
    from composer_jax.rl.learner import evaluate
    from composer_jax.rl.train import eval_sampling

    t = time.perf_counter()
    loop = _policy_loop(run, str(checkpoints), c.rl, rollout)
    ev = evaluate(loop, ids, seed=int(c.seed) + 3_333, outcomes=True, sampling=eval_sampling(c))
    loop.close()
    print(f"final eval {name}: pass {ev['pass_rate']:.3f} [{ev['ci95_low']:.3f}, {ev['ci95_high']:.3f}] "
          f"reward {ev['reward']:.3f} n={ev['n']}", flush=True)
    return ev | dict(wall_s=time.perf_counter() - t)


def read_records(paths: list[str], flag: str) -> dict[str, dict]:
    """Result JSONs by path; a missing or unreadable file stops with its name."""
    records = {}
    for path in paths:
        try:
            records[path] = json.loads(pathlib.Path(path).read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise SystemExit(f"{flag}: cannot read result file {path}: {e}") from e
    return records


def record_seed(rec: dict) -> int:
    """The run's `seed` (records written before the field existed name it only in their
    overrides: `set`, as the flag was then called, or `overrides`)."""
    if "seed" in rec:
        return int(rec["seed"])
    overrides = rec["argv"].get("overrides", rec["argv"].get("set", []))
    given = [item.partition("=")[2] for item in overrides if item.startswith("seed=")]
    return int(given[-1]) if given else int(get_config("test").seed)


def check_combinable(records: dict[str, dict], seed: int | None, flag: str = "--combine") -> None:
    """Arms may be joined only when their budgets and evaluation are the same: equal
    episodes/step, eval tasks, lr and negative_weight, and (unless `seed` is None, as when
    pooling seeds) the seed this process evaluates with (the seed picks the tasks each run
    sampled and its evaluation's samples)."""
    settings = None
    for path, rec in records.items():
        rl = rec["config"]["rl"]
        same = (rec["episodes_per_step"], rec["eval_tasks"], rl["optim"]["lr"], rl["negative_weight"])
        if settings not in (None, same):
            raise SystemExit(f"{flag}: {path} ran with (episodes/step, eval tasks, lr, negative_weight) "
                             f"= {same}, the first file with {settings}")
        settings = same
        if seed is not None and record_seed(rec) != seed:
            raise SystemExit(f"{flag}: {path} ran with seed {record_seed(rec)}, this process has seed "
                             f"{seed} (pass --config.seed={record_seed(rec)})")


def combine(args, c, work, eval_ids, paths: list[str], sft_out, sft_s, extra) -> None:
    """One record from arms run as separate `--only` processes (side by side, or resumed to more
    steps: an arm's later file continues its earlier one). Every file must share the settings
    that make the budgets equal, and every arm must end at the same step."""
    records = read_records(paths, "--combine")
    check_combinable(records, int(c.seed))
    results, arm_dirs = {}, {}
    for rec in records.values():
        rl = rec["config"]["rl"]
        c.rl.groups_per_step, c.rl.optim.lr, c.rl.negative_weight = (
            rl["groups_per_step"], rl["optim"]["lr"], rl["negative_weight"])
        for arm, v in rec["ablation"].items():
            earlier = results.get(arm)
            results[arm] = {k: v[k] for k in ("before", "after", "wall_s", "steps", "counts", "train_log")}
            if earlier:  # a resumed run: its own first evaluation is the earlier file's last
                results[arm]["before"] = earlier["before"]
                results[arm]["wall_s"] += earlier["wall_s"]
                results[arm]["counts"] = dict(Counter(earlier["counts"]) + Counter(v["counts"]))
            arm_dirs[arm] = pathlib.Path(rec["argv"]["workdir"]) / arm
    steps = {arm: r["steps"] for arm, r in results.items()}
    if len(set(steps.values())) != 1:
        raise SystemExit(f"--combine: the arms ended at different steps {steps}: not the same budget")
    c.rl.steps = next(iter(steps.values()))
    extra = dict(extra, combined_from=paths)
    if args.final_eval:
        extra["final_eval"] = final_eval(c, work, arm_dirs, args.final_eval, known_final_evals(records))
    write_record(args, c, work, eval_ids, results, sft_out, sft_s, extra)


def known_final_evals(records: dict[str, dict]) -> dict:
    """Each policy's `--final_eval` result from the files, when the file holds that policy's
    final checkpoint: an arm resumed in a later file drops the earlier file's evaluation."""
    known = {}
    for path, rec in records.items():
        fe = rec.get("final_eval") or {}
        for arm in rec["ablation"]:
            known.pop(arm, None)
        known.update({name: dict(v, tasks=fe["tasks"], from_file=path) for name, v in fe.items() if name != "tasks"})
    return known


def paired_comparisons(fe: dict) -> dict:
    """McNemar on the final evaluation's shared episodes: each arm against the SFT policy (under
    the arm's rollout settings) and trained against masked summaries."""
    from composer_jax.rl.learner import mcnemar

    passed = {name: v["passed"] for name, v in fe.items() if name != "tasks" and "passed" in v}
    pairs = {f"{arm}_vs_sft": (arm, f"sft/{arm}" if f"sft/{arm}" in passed else "sft")
             for arm in ARMS if arm in passed}
    pairs["trained_vs_masked"] = ("trained_summary", "masked_summary")
    return {label: mcnemar(passed[a], passed[b]) for label, (a, b) in pairs.items() if a in passed and b in passed}


def pool_seeds(records: dict[str, dict]) -> dict:
    """Records of several seeds (same tasks, budget and settings) pooled: per policy the passes
    over all episodes, and McNemar over the (task, seed) pairs."""
    from composer_jax.rl.learner import wilson

    check_combinable(records, seed=None, flag="--pool")
    seeds = [record_seed(r) for r in records.values()]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"--pool: seeds {seeds} repeat: the same episodes would count twice")
    fes = {path: rec["final_eval"] for path, rec in records.items()}
    missing = [path for path, fe in fes.items() if "passed" not in fe.get("sft", {})]
    if missing:
        raise SystemExit(f"--pool: {missing} hold no per-episode outcomes; rerun them with --combine "
                         "... --final_eval N")
    names = sorted(set.intersection(*(set(fe) - {"tasks"} for fe in fes.values())))
    pooled = {name: sum((fe[name]["passed"] for fe in fes.values()), []) for name in names}
    out = dict(files=list(records), seeds=seeds, tasks=[fe["tasks"] for fe in fes.values()])
    for name, passed in pooled.items():
        rate = float(np.mean(passed))
        out[name] = dict(passes=int(sum(passed)), n=len(passed), pass_rate=rate, ci95=list(wilson(rate, len(passed))))
    out["paired"] = paired_comparisons({name: dict(passed=p) for name, p in pooled.items()})
    return out


def write_record(args, c, work, eval_ids, results, sft_out, sft_s, extra=None):
    """The JSON so far (rewritten after every arm, so a cut-short run still leaves its numbers)."""
    main_arm = results.get("trained_summary")
    record = dict(
        config=dict(model=c.model.to_dict(), rollout=c.rollout.to_dict(), rl=c.rl.to_dict(), sft=c.sft.to_dict()),
        seed=int(c.seed), sft=sft_out, sft_wall_s=sft_s,
        eval_tasks=len(eval_ids), eval_split="validation", env=c.rl.env_id,
        suite_options=dict(c.rl.suite_options), rl_steps=int(c.rl.steps),
        episodes_per_step=int(c.rl.groups_per_step) * int(c.rl.group_size),
    )
    if main_arm:
        b, a = main_arm["before"], main_arm["after"]
        record.update(before_rl_pass_rate=b["pass_rate"], before_rl_ci95=[b["ci95_low"], b["ci95_high"]],
                      after_rl_pass_rate=a["pass_rate"], after_rl_ci95=[a["ci95_low"], a["ci95_high"]],
                      rl_wall_s=main_arm["wall_s"])
    record["ablation"] = {k: dict(pass_rate=v["after"]["pass_rate"], ci95=[v["after"]["ci95_low"], v["after"]["ci95_high"]],
                                  before_pass_rate=v["before"]["pass_rate"], summary_len=v["after"]["summary_len"],
                                  segments_per_episode=v["after"]["segments_per_episode"],
                                  before_summary_len=v["before"]["summary_len"], before_ci95=[v["before"]["ci95_low"], v["before"]["ci95_high"]],
                                  wall_s=v["wall_s"], steps=v["steps"], counts=v["counts"], train_log=v["train_log"],
                                  before=v["before"], after=v["after"]) for k, v in results.items()}
    record.update(extra or {})
    if fe := record.get("final_eval"):  # the larger evaluation is the headline; the runs' own stay
        ci = lambda e: [e["ci95_low"], e["ci95_high"]]
        if "trained_summary" in fe:
            record.update(before_rl_pass_rate=fe["sft"]["pass_rate"], before_rl_ci95=ci(fe["sft"]),
                          before_rl_reward=fe["sft"]["reward"], after_rl_pass_rate=fe["trained_summary"]["pass_rate"],
                          after_rl_ci95=ci(fe["trained_summary"]), after_rl_reward=fe["trained_summary"]["reward"],
                          headline_eval_tasks=fe["tasks"])
        record["paired"] = paired_comparisons(fe)
        for arm, a in record["ablation"].items():
            before = fe.get(f"sft/{arm}", fe["sft"])
            a.update(run_eval_pass_rate=a["pass_rate"], pass_rate=fe[arm]["pass_rate"], ci95=ci(fe[arm]),
                     reward=fe[arm]["reward"], summary_len=fe[arm]["summary_len"],
                     segments_per_episode=fe[arm]["segments_per_episode"], before_pass_rate=before["pass_rate"],
                     before_ci95=ci(before), before_reward=before["reward"], eval_tasks=fe["tasks"])
    record["notes"] = args.notes
    record["quick"] = bool(args.quick)
    record["argv"] = vars(args)
    record["arms_done"] = list(results)
    write_result(args.out or (str(work / "rl_tiny.json") if args.quick else str(RESULT)), record)




if __name__ == "__main__":
    np.set_printoptions(precision=4)
    main()
