"""Result records: the one schema every experiment writes (and pooling reads), and the JSON
writer the benchmarks share.

An experiment's record (experiments/run.py):
    experiment, command, seeds, config        what ran: the whole config as written, the command line
    tokenizer                                 the tokenizer it used (a path in its workdir)
    stages      {stage: seconds}              tokenizer, each SFT run and arm
    training    {sft run or arm: its result}  SFT: demos, loss; arm: steps, counts, its own
                                              evaluations, the per-step train log
    evaluations {set: {x, tasks, expert_windows, env_id, suite_options,
                       policies: {policy: {pass_rate, ci95, reward, passes, n, passed: [0/1 per
                       episode], summary_len, compaction_error, transcript_tokens, ..., per_seed}}}}
    paired      {set: {"a_vs_b": exact McNemar over the episodes both played}}
    series      {sets, x, expert_windows, tasks_per_point, pass_rate: {policy: [one per set]}, ci95,
                 reward, compaction_error, compaction_tokens, transcript_tokens, resets_per_episode}:
                 the curves of the plot
    horizons, tasks_per_point, pass_rate, compaction_error, summary_tokens
                the curves again at the top level, in issue #26's schema: `horizons` lists each
                set's x (rl_horizon: the window multiple; rl_longhorizon: the chain length), and
                the others {policy: [one per horizon]} (summary_tokens: the tokens of the context
                written at a reset, the summary or the harness's compaction)
A pooled record (experiments/pool.py) has the same keys, `seeds` listing every seed and
`files` the records pooled.
"""
from __future__ import annotations

import json
import os
import pathlib
import platform

import jax

RESULTS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "results"  # the README's figures
SERIES = ("pass_rate", "reward", "compaction_error", "compaction_tokens", "transcript_tokens", "resets_per_episode")


def write_atomic(path: pathlib.Path, obj) -> None:
    """JSON written whole or not at all (a crash never leaves half a file to be read back)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(obj, indent=1, default=str))
    os.replace(tmp, path)


def cpu_model() -> str:
    """The processor's name: XLA compiles for the host's instruction set, so the same seed gives
    bitwise the same run on one machine but may drift on another."""
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


def write_result(path: str, result: dict, quiet: bool = False) -> None:
    result = dict(result, machine=dict(platform=platform.platform(), cpu=cpu_model(), cpus=os.cpu_count(),
                                       backend=jax.default_backend(), devices=jax.device_count()))
    text = json.dumps(result, indent=2, sort_keys=True, default=str)
    if not quiet:
        print(text)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".partial"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)


def train_log(workdir: pathlib.Path) -> list[dict]:
    """An RL run's per-step train metrics (metrics.jsonl), the keys a reader compares."""
    keys = ("step", "reward", "pass_rate", "usable_groups", "segments_per_episode", "summary_len",
            "compaction_error", "curriculum_level", "kl_sampler_learner_k3", "rollout_s", "learn_s", "step_s")
    path = workdir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [{k: r[k] for k in keys if k in r} for r in rows if r.get("kind") == "train"]


def policy_result(ev: dict) -> dict:
    """An evaluation as recorded: the rendered transcript goes to its own file."""
    out = {k: v for k, v in ev.items() if k != "transcript"}
    out.update(passes=int(sum(ev["passed"])), ci95=[ev["ci95_low"], ev["ci95_high"]])
    return out


def paired(evaluations: dict, pairs) -> dict:
    """Exact McNemar for each `a:b` of `pairs` on every set where both policies played."""
    from composer_jax.rl.learner import mcnemar

    out = {}
    for set_name, point in evaluations.items():
        ps = point["policies"]
        tests = {f"{a}_vs_{b}": mcnemar(ps[a]["passed"], ps[b]["passed"])
                 for a, _, b in (pair.partition(":") for pair in pairs) if a in ps and b in ps}
        if tests:
            out[set_name] = tests
    return out


def series(evaluations: dict, policies) -> dict:
    """Per policy one value per set (None where it did not play): the plot's curves."""
    sets = list(evaluations)
    out = dict(sets=sets, x=[evaluations[s]["x"] for s in sets],
               expert_windows=[evaluations[s].get("expert_windows") for s in sets],
               tasks_per_point=[evaluations[s]["tasks"] for s in sets])
    for key in SERIES:
        out[key] = {p: [evaluations[s]["policies"].get(p, {}).get(key) for s in sets] for p in policies}
    out["ci95"] = {p: [evaluations[s]["policies"].get(p, {}).get("ci95") for s in sets] for p in policies}
    return out


def flat(s: dict) -> dict:
    """The series' curves at the record's top level (issue #26's `horizon.json` keys)."""
    return dict(horizons=s["x"], tasks_per_point=s["tasks_per_point"], pass_rate=s["pass_rate"],
                compaction_error=s["compaction_error"], summary_tokens=s["compaction_tokens"])


def experiment_record(c, exp, command: list[str], stages: dict, points: dict, tokenizer: str = "") -> dict:
    """`c` is the recipe as written, so two seeds' records (two workdirs) pool; `tokenizer` is the
    one this run used."""
    evaluations = {s: dict(point, policies={p: policy_result(ev) for p, ev in point["policies"].items()})
                   for s, point in points.items()}
    curves = series(evaluations, list(exp.policies))
    return dict(
        experiment=str(c.name), command=" ".join(command), seeds=[int(c.seed)], config=c.to_dict(), tokenizer=tokenizer,
        stages={name: done["seconds"] for name, done in stages.items()},
        training={name: done["result"] for name, done in stages.items() if name != "tokenizer"},
        evaluations=evaluations, paired=paired(evaluations, exp.pairs), series=curves, **flat(curves))


def summary(rec: dict) -> dict:
    """The headline numbers: pass rates per set and policy, and the paired tests."""
    return dict(experiment=rec["experiment"], seeds=rec["seeds"],
                pass_rate={s: {p: f"{v['passes']}/{v['n']} = {v['pass_rate']:.3f}" for p, v in point["policies"].items()}
                           for s, point in rec["evaluations"].items()},
                paired={s: {k: f"{t['only_a']}/{t['only_b']} p={t['p_value']:.2g}" for k, t in tests.items()}
                        for s, tests in rec["paired"].items()})


def write_extras(out: str, rec: dict, points: dict, exp) -> None:
    """Beside the record: the plot (pass rate, reward and compaction error by set) and the
    headline policy's episode at the longest set it solved one, segment by segment."""
    if not out:
        return
    path = pathlib.Path(out)
    if len(rec["evaluations"]) > 1:
        plot(rec["series"], path.with_suffix(".png"), rec["experiment"])
    headline = exp.pairs[0].partition(":")[0] if exp.pairs else next(iter(exp.policies))
    for set_name in reversed(list(points)):
        ev = points[set_name]["policies"].get(headline)
        if ev and any(ev["passed"]) and ev.get("transcript"):
            path.with_name(path.stem + "_transcript.md").write_text(
                f"# {headline} on a held-out task of `{set_name}` ({rec['experiment']})\n\n{ev['transcript']}\n")
            return


def plot(s: dict, path: pathlib.Path, title: str) -> None:
    """Per policy against the sets (at the expert's measured horizon when every set has one):
    pass rate with its 95% Wilson band, mean reward and compaction error."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = all(w for w in s["expert_windows"])
    x = s["expert_windows"] if measured else list(range(len(s["sets"])))
    panels = (("pass_rate", "held-out pass rate"), ("reward", "mean reward"),
              ("compaction_error", "compaction error (facts a summary dropped)"))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, (key, label) in zip(axes, panels):
        for i, (policy, values) in enumerate(s[key].items()):
            keep = [j for j, v in enumerate(values) if v is not None]
            if not keep:
                continue
            ax.plot([x[j] for j in keep], [values[j] for j in keep], marker="o", label=policy, color=f"C{i}")
            if key == "pass_rate":
                ax.fill_between([x[j] for j in keep], [s["ci95"][policy][j][0] for j in keep],
                                [s["ci95"][policy][j][1] for j in keep], alpha=0.1, color=f"C{i}")
        if measured:
            ax.set(xscale="log", xlabel="the expert's transcript length (windows)")
        else:
            ax.set_xticks(x, s["sets"], rotation=30)
        ax.set(ylabel=label, ylim=(-0.02, 1.02))
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
