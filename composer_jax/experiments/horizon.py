"""Pass rate against horizon: self-summarisation trained in RL vs its baselines, 1x-100x the window.

    python -m composer_jax.experiments.horizon --config configs/rl_horizon.py --workdir runs/horizon

1. A 1k BPE on the suite's expert transcripts (every secret word, path and register one token).
2. SFT (copy drills, then the imperfect demonstrator's runs) on the config's tier.
3. The same RL budget from that checkpoint per trained arm, with the config's length curriculum:
     trained   summary tokens trained with the episode's advantage
     masked    summary tokens get no gradient
     harness   the harness writes every summary (rollout.compaction="harness"), in its SFT
               demonstrations too; RL trains the actions
4. Every policy on the same held-out tasks of each horizon (HORIZONS in the config: window
   multiple -> (notes, filler lines)), same sampling seeds, so each pair of policies is compared
   episode by episode (McNemar); evaluation-only arms:
     none      the trained policy without resets (one context; truncated when full)
     sft       the SFT policy, before RL, writing its own summaries
   Per arm and horizon: pass rate (Wilson 95%), compaction error (facts the env said later turns
   need that a summary dropped), summary tokens, transcript tokens and resets.
Writes --out (default benchmarks/results/horizon.json) after every point, its plot beside it
(horizon.png), and the trained policy's longest solved held-out episode segment by segment
(horizon_transcript.md).
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib
import sys
import time

from composer_jax.config_loading import apply_override, load_config, split_overrides
from composer_jax.experiments.records import RESULTS, write_result

# name -> how it trains; `sft`: the SFT run it starts from (the harness arm's demonstrations are
# played under harness compaction, so its policy learns to act on the context it will get).
TRAINED_ARMS = {"trained": dict(train_summaries=True, sft="sft"), "masked": dict(train_summaries=False, sft="sft"),
                "harness": dict(train_summaries=True, sft="sft_harness", rollout=dict(compaction="harness"))}
# evaluation arm -> (the policy's checkpoint: an RL arm or "sft", rollout overrides)
EVAL_ARMS = {"trained": ("trained", {}), "masked": ("masked", {}), "harness": ("harness", {"compaction": "harness"}),
             "none": ("trained", {"max_segments": 1, "summarize_at": 1.0}), "sft": ("sft", {})}


def train_tokenizer(c, path: pathlib.Path) -> None:
    from composer_jax.data.tokenizer import Tokenizer
    from composer_jax.rl.envs import agent_texts

    Tokenizer.train(agent_texts(c.rl, 64) * 4, vocab_size=int(c.model.vocab_size)).save(path)


def measured_windows(c, hops_filler: tuple[int, int], tasks: int = 2) -> float:
    """Transcript tokens of the scripted expert on a tier, in windows (the tier's real multiple)."""
    from composer_jax.rl.train import demonstrations, task_ids

    ct = tier_config(c, hops_filler)
    episodes = demonstrations(ct, task_ids(ct.rl, "validation")[:tasks])
    return sum(ep.transcript_tokens for ep in episodes) / len(episodes) / int(c.rollout.window)


def tier_config(c, hops_filler: tuple[int, int]):
    """`c` at a horizon's tier (validation tasks of that length; the expert drops no key)."""
    from configs.rl_horizon import tier
    ct = tier(copy.deepcopy(c), *hops_filler)
    ct.rl.suite_options.expert_drop_key = 0.0
    return ct


def train_arms(c, work: pathlib.Path, arms: list[str], log=print) -> dict:
    """Each SFT run the arms need, then each RL arm of `arms` from its SFT checkpoint; a finished
    run (its sft.json or summary.json there) is reused."""
    from composer_jax.rl.train import run_rl, run_sft

    out = {}
    for sft in dict.fromkeys(["sft", *(TRAINED_ARMS[a]["sft"] for a in arms)]):
        record = work / sft / "sft.json"
        if not record.exists():
            cs = copy.deepcopy(c)
            if sft == "sft_harness":
                cs.rollout.compaction = "harness"
            record.parent.mkdir(parents=True, exist_ok=True)
            result = run_sft(cs, work / sft, demos_cache=work / f"demos_{sft}.pkl", log=log)
            record.write_text(json.dumps(result, indent=1, default=float))
        out[sft] = json.loads(record.read_text())
    for name in arms:
        done = work / name / "summary.json"
        if not done.exists():
            ca = copy.deepcopy(c)
            arm = TRAINED_ARMS[name]
            ca.rl.init_from, ca.rl.train_summaries = str(work / arm["sft"] / "checkpoints"), arm["train_summaries"]
            ca.rollout.update(arm.get("rollout", {}))
            t = time.perf_counter()
            result = run_rl(ca, work / name, log=lambda line, n=name: log(f"[{n}] {line}"))
            done.write_text(json.dumps(dict(metrics=result["metrics"], counts=result["counts"],
                                            wall_s=time.perf_counter() - t), indent=1, default=float))
        out[name] = json.loads(done.read_text())
    return out


def evaluate_horizons(c, work: pathlib.Path, arms: list[str], horizons: dict[int, tuple[int, int]], tasks: dict[int, int],
                      on_point=None, log=print) -> dict:
    """Each arm's policy on the same held-out tasks of every horizon, with per-episode outcomes."""
    from composer_jax.experiments.longhorizon import _engine, _policy_loop
    from composer_jax.rl.learner import evaluate
    from composer_jax.rl.train import eval_sampling, seeds, task_ids

    run, points = _engine(c), {}
    for mult, (hops, filler) in horizons.items():
        ct = tier_config(c, (hops, filler))
        ids = task_ids(ct.rl, "validation")[:tasks[mult]]
        for name in arms:
            cached = work / "evals" / f"{name}_{mult}x_{len(ids)}.json"  # a rerun resumes here
            if cached.exists():
                points.setdefault(mult, {})[name] = json.loads(cached.read_text())
                continue
            policy, overrides = EVAL_ARMS[name]
            rollout = {"max_turns": ct.rollout.max_turns, "max_segments": ct.rollout.max_segments, **overrides}
            t = time.perf_counter()
            loop = _policy_loop(run, str(work / policy / "checkpoints"), ct.rl, rollout)
            try:
                ev = evaluate(loop, ids, seed=seeds(c).eval, outcomes=True, sampling=eval_sampling(c))
            finally:
                loop.close()
            ev["wall_s"] = time.perf_counter() - t
            points.setdefault(mult, {})[name] = ev
            cached.parent.mkdir(exist_ok=True)
            partial = cached.with_suffix(".partial")
            partial.write_text(json.dumps(ev, default=float))
            partial.replace(cached)
            log(f"{mult}x ({hops} notes) {name}: pass {ev['pass_rate']:.3f} [{ev['ci95_low']:.2f}, "
                f"{ev['ci95_high']:.2f}] compaction_error {ev.get('compaction_error', float('nan')):.3f} "
                f"transcript {ev['transcript_tokens']:.0f} tokens, {ev['wall_s']:.0f} s")
            if on_point:
                on_point(points)
    return points


def record(c, horizons, tasks, windows, trained, points) -> dict:
    """The result schema of issue #26: per arm one value per horizon (None where not run)."""
    from composer_jax.rl.learner import mcnemar

    mults = list(horizons)
    arms = sorted({a for p in points.values() for a in p}, key=list(EVAL_ARMS).index)

    def series(key):
        return {a: [points.get(m, {}).get(a, {}).get(key) for m in mults] for a in arms}

    paired = {}
    for m, p in points.items():
        if "trained" in p:
            paired[str(m)] = {f"trained_vs_{a}": mcnemar(p["trained"]["passed"], p[a]["passed"])
                              for a in p if a != "trained"}
    return dict(
        horizons=mults, hops=[horizons[m][0] for m in mults], filler_lines=[horizons[m][1] for m in mults],
        measured_windows=[windows.get(m) for m in mults],
        tasks_per_point=[tasks[m] for m in mults], seeds=[int(c.seed)], window=int(c.rollout.window),
        pass_rate=series("pass_rate"), ci95={a: [[lo, hi] if lo is not None else None for lo, hi in zip(
            series("ci95_low")[a], series("ci95_high")[a])] for a in arms},
        passes={a: [None if x is None else int(sum(x)) for x in series("passed")[a]] for a in arms},
        compaction_error=series("compaction_error"), summary_tokens=series("compaction_tokens"),
        transcript_tokens=series("transcript_tokens"), resets=series("resets_per_episode"),
        reward=series("reward"), paired=paired,
        training=dict(trained), config=dict(
            rl=c.rl.to_dict(), rollout=c.rollout.to_dict(), sft=c.sft.to_dict(), model=c.model.to_dict()))


def plot(rec: dict, path: pathlib.Path) -> None:
    """Per arm against the measured transcript length in windows: pass rate (95% Wilson band),
    mean reward (the share of hidden tests passed) and compaction error."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [w or m for w, m in zip(rec["measured_windows"], rec["horizons"])]
    panels = (("pass_rate", "held-out pass rate"), ("reward", "mean reward (hidden tests passed)"),
              ("compaction_error", "compaction error (facts dropped)"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, (key, label) in zip(axes, panels):
        for i, (arm, values) in enumerate(rec[key].items()):
            keep = [j for j, v in enumerate(values) if v is not None]
            if not keep:
                continue
            ax.plot([x[j] for j in keep], [values[j] for j in keep], marker="o", label=arm, color=f"C{i}")
            if key == "pass_rate":
                ax.fill_between([x[j] for j in keep], [rec["ci95"][arm][j][0] for j in keep],
                                [rec["ci95"][arm][j][1] for j in keep], alpha=0.1, color=f"C{i}")
        ax.set(xscale="log", xlabel=f"transcript length (windows of {rec['window']} tokens)", ylabel=label,
               ylim=(-0.02, 1.02))
    axes[0].legend()
    fig.suptitle("LongHorizon registers tier: trained self-summaries vs baselines, by horizon")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def longest_solved(points: dict) -> tuple[int, str] | None:
    """The transcript of the trained policy's episode at the longest horizon it solved one."""
    for m in sorted(points, reverse=True):
        ev = points[m].get("trained")
        if ev and any(ev["passed"]) and ev.get("transcript"):
            return m, ev["transcript"]
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/rl_horizon.py")
    p.add_argument("--workdir", default="runs/horizon")
    p.add_argument("--arms", default=",".join(EVAL_ARMS), help=f"comma list of {tuple(EVAL_ARMS)}")
    p.add_argument("--horizons", default="", help="comma list of window multiples (default: the config's HORIZONS)")
    p.add_argument("--tasks", type=int, default=16, help="held-out tasks per point")
    p.add_argument("--long_tasks", type=int, default=4, help="tasks per point at 30x and beyond")
    p.add_argument("--out", default="", help="result path (default benchmarks/results/horizon.json)")
    argv, overrides = split_overrides(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(argv)
    from configs.rl_horizon import HORIZONS

    c = load_config(args.config)
    for item in overrides:
        apply_override(c, item)
    arms = [a for a in args.arms.split(",") if a]
    if unknown := sorted(set(arms) - set(EVAL_ARMS)):
        p.error(f"--arms: unknown {unknown}; choose from {tuple(EVAL_ARMS)}")
    wanted = [m for m in args.horizons.split(",") if m] if args.horizons else list(map(str, HORIZONS))
    if bad := [m for m in wanted if not m.isdigit() or int(m) not in HORIZONS]:
        p.error(f"--horizons: {bad} not among the config's HORIZONS {sorted(HORIZONS)}")
    horizons = {int(m): HORIZONS[int(m)] for m in wanted}
    tasks = {m: args.long_tasks if m >= 30 else args.tasks for m in horizons}
    work = pathlib.Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out = args.out or str(RESULTS / "horizon.json")
    tok = work / "tokenizer.json"
    if not tok.exists():
        train_tokenizer(c, tok)
    c.rl.tokenizer = str(tok)
    known = work / "windows.json"  # the expert's transcript length per (notes, filler): measured once
    measured = json.loads(known.read_text()) if known.exists() else {}
    for h in horizons.values():
        if f"{h[0]}-{h[1]}" not in measured:
            measured[f"{h[0]}-{h[1]}"] = measured_windows(c, h)
    known.write_text(json.dumps(measured))
    windows = {m: measured[f"{h[0]}-{h[1]}"] for m, h in horizons.items()}
    print("measured windows per tier:", windows, flush=True)
    trained = train_arms(c, work, list(dict.fromkeys(EVAL_ARMS[a][0] for a in arms if EVAL_ARMS[a][0] in TRAINED_ARMS)))

    def save(points):
        rec = record(c, horizons, tasks, windows, trained, points)
        write_result(out, rec)
        plot(rec, pathlib.Path(out).with_suffix(".png"))
        if shown := longest_solved(points):
            pathlib.Path(out).with_name(pathlib.Path(out).stem + "_transcript.md").write_text(
                f"# The trained policy on a held-out {shown[0]}x-window task (configs/rl_horizon.py)\n\n{shown[1]}\n")

    save(evaluate_horizons(c, work, arms, horizons, tasks, on_point=save))


if __name__ == "__main__":
    main()
