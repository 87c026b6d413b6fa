"""The pipeline's final report: a metrics table per stage, PNG plots and a JSON summary."""
from __future__ import annotations

import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from composer_jax.train.metrics import read_jsonl  # noqa: E402


def _series(records: list[dict], kind: str, key: str) -> tuple[list[int], list[float]]:
    points = [(r["step"], r[key]) for r in records if r.get("kind") == kind and key in r]
    return [p[0] for p in points], [p[1] for p in points]


def _plot(path: pathlib.Path, title: str, ylabel: str, lines: dict[str, tuple[list, list]],
          xlabel: str = "step") -> str | None:
    lines = {k: v for k, v in lines.items() if v[0]}
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for label, (x, y) in lines.items():
        ax.plot(x, y, marker="o" if len(x) < 30 else None, label=label)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def _pass_rates(path: pathlib.Path, evals: dict[str, dict]) -> str | None:
    if not evals:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = list(evals)
    rates = [evals[n]["pass_rate"] for n in names]
    errors = [[r - evals[n]["ci95_low"] for n, r in zip(names, rates)],
              [evals[n]["ci95_high"] - r for n, r in zip(names, rates)]]
    ax.bar(names, rates, yerr=errors, capsize=4)
    ax.set(title="held-out pass rate per suite (95% CI)", ylabel="pass rate", ylim=(0, 1))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def scalar_metrics(record: dict) -> dict[str, float]:
    """The stage's top-level numbers (nested evaluations are plotted, not tabled)."""
    metrics = record.get("metrics", {})
    flat = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    for key in ("final",):
        flat.update({f"{key}.{k}": v for k, v in metrics.get(key, {}).items() if isinstance(v, (int, float))})
    return flat


def rl_gain(records: dict[str, dict]) -> dict | None:
    """The RL stage's paired result: its first evaluation (the SFT policy, before any update)
    against its last, on the same held-out episodes (same tasks, same sampling seed), with
    the exact McNemar p-value."""
    from composer_jax.rl.learner import mcnemar

    evals = records.get("rl", {}).get("metrics", {}).get("evals", {})
    steps = sorted(evals, key=int)
    if len(steps) < 2 or "passed" not in evals[steps[0]] or "passed" not in evals[steps[-1]]:
        return None
    before, after = evals[steps[0]], evals[steps[-1]]
    test = mcnemar(after["passed"], before["passed"])
    return dict(before_pass_rate=before["pass_rate"], after_pass_rate=after["pass_rate"], tasks=before["n"],
                after_step=int(steps[-1]), mcnemar_p=test["p_value"], only_after=test["only_a"],
                only_before=test["only_b"])


def held_out_transcript(records: dict[str, dict]) -> str:
    """The RL stage's last evaluation's rendered episode (rl/learner.py evaluate)."""
    evals = records.get("rl", {}).get("metrics", {}).get("evals", {})
    return evals[max(evals, key=int)].get("transcript", "") if evals else ""


def write_report(workdir: pathlib.Path, records: dict[str, dict]) -> pathlib.Path:
    out = workdir / "report"
    out.mkdir(parents=True, exist_ok=True)
    midtrain = read_jsonl(workdir / "midtrain" / "metrics.jsonl")
    rl = read_jsonl(workdir / "rl" / "metrics.jsonl")
    plots = [
        _plot(out / "loss_curve.png", "mid-training loss", "nats/token",
              {"train": _series(midtrain, "train", "ce"), "validation": _series(midtrain, "eval", "loss")}),
        _plot(out / "reward_curve.png", "RL reward", "mean reward",
              {"train reward": _series(rl, "train", "reward"), "held-out pass rate": _series(rl, "eval", "pass_rate")}),
        _plot(out / "segments_per_episode.png", "context segments per episode", "segments",
              {"train": _series(rl, "train", "segments_per_episode")}),
        _pass_rates(out / "pass_rate_per_suite.png", records.get("eval", {}).get("metrics", {})),
    ]
    rows = ["| stage | seconds | metrics |", "|---|---|---|"]
    for name, record in records.items():
        shown = ", ".join(f"{k} {v:.4g}" for k, v in sorted(scalar_metrics(record).items())[:12])
        rows.append(f"| {name} | {record.get('seconds', 0):.0f} | {shown} |")
    evals = records.get("eval", {}).get("metrics", {})
    if evals:
        rows += ["", "| suite | tasks | pass rate | 95% CI |", "|---|---|---|---|"]
        rows += [f"| {s} | {e['tasks']} | {e['pass_rate']:.3f} | [{e['ci95_low']:.3f}, {e['ci95_high']:.3f}] |"
                 for s, e in evals.items()]
    gain = rl_gain(records)
    if gain:
        rows += ["", f"RL on {gain['tasks']} held-out episodes (paired: same tasks and samples): pass rate "
                 f"{gain['before_pass_rate']:.3f} before (the SFT policy) -> {gain['after_pass_rate']:.3f} after "
                 f"{gain['after_step']} steps; passed only after {gain['only_after']}, only before "
                 f"{gain['only_before']}, McNemar p = {gain['mcnemar_p']:.3g}"]
    transcript = held_out_transcript(records)
    if transcript:
        (out / "transcript.md").write_text(
            "# One held-out episode of the final policy\n\nEach segment is one context window; a later "
            "segment starts from the summary the policy wrote before the reset.\n\n```\n" + transcript + "\n```\n")
        rows += ["", "One held-out episode of the final policy, segment by segment, with the summaries it "
                 "carried across resets: [transcript.md](transcript.md)"]
    images = "\n".join(f"![{p}]({p})" for p in plots if p)
    (out / "report.md").write_text("# Pipeline report\n\n" + "\n".join(rows) + "\n\n" + images + "\n")
    summary = dict(stages={n: dict(seconds=r.get("seconds"), metrics=r.get("metrics")) for n, r in records.items()},
                   rl=gain, plots=[p for p in plots if p])
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    return out
