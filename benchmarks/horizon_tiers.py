"""A horizon recipe's tiers as the scripted expert plays them: how many windows each held-out set
really spans, and whether the expert can pass it at all under the set's caps and budgets.

  python benchmarks/horizon_tiers.py --config configs/rl_horizon.py:mix,mix_filler,code \
      --workdir runs/horizon_tiers_code --out benchmarks/results/horizon_tiers_code.json

The recipe's own tokenizer (the runner's tokenizer stage, cached in --workdir), then per set of
`experiment.evaluations` the expert on its first --tasks held-out tasks: transcript tokens and
windows, resets, the longest summary, how many passed and what was flagged (a cut observation
means a note no longer fits beside the summary after a reset, `tool_output_cut` a note longer than
the tool shows (its middle, key lines with it, replaced by a marker): either way the tier is mis-sized). Run it
before training on a new tier; the runner records the same windows (`expert_windows`) later.
"""
from __future__ import annotations

import argparse
import copy
import pathlib

from benchmarks.common import write_result
from composer_jax.config_loading import load_config
from composer_jax.experiments import run
from composer_jax.experiments.config import ExperimentConfig

TOOL_CUT = "[... truncated "  # composer_jax/harness/tools.py:truncate's marker


def tier_stats(c, set_name: str, ev, tasks: int) -> dict:
    from composer_jax.rl.envs import sample_ids
    from composer_jax.rl.train import demonstrations, load_tokenizer

    cx = copy.deepcopy(c)
    cx.rl = run.eval_set_rl(c, ev)
    cx.rollout.update(ev.rollout)
    episodes = demonstrations(cx, sample_ids(cx.rl, "validation", tasks))
    n, window = len(episodes), int(c.rollout.window)
    tok = load_tokenizer(cx.rl)
    # a note longer than the tool's observation_chars loses its middle (key lines with it)
    cut = sum(any(TOOL_CUT in tok.decode(s.tokens) for s in ep.segments) for ep in episodes)
    tokens = sum(ep.transcript_tokens for ep in episodes) / n
    return dict(set=set_name, x=ev.x, tasks=n, suite_options=dict(cx.rl.suite_options),
                transcript_tokens=tokens, windows=tokens / window,
                resets=sum(len(ep.segments) - 1 for ep in episodes) / n,
                max_summary_tokens=max((k["tokens"] for ep in episodes for k in ep.compactions), default=0),
                summary_budget=int(c.rollout.summary_budget),
                passed=sum(ep.reward == 1.0 for ep in episodes),
                flags=sorted({f for ep in episodes for f in ep.flags} | ({"tool_output_cut"} if cut else set())))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--workdir", required=True, help="where the tokenizer stage is built (and reused)")
    p.add_argument("--tasks", type=int, default=4, help="held-out tasks per set")
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    if args.tasks < 1:
        p.error(f"--tasks={args.tasks} must be >= 1")
    c = load_config(args.config)
    work = pathlib.Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    c.rl.tokenizer = run.tokenizer_stage(c, work)["result"]["path"]
    sets = []
    for name, ev in ExperimentConfig.from_config(c.experiment).evaluations.items():
        sets.append(tier_stats(c, name, ev, args.tasks))
        s = sets[-1]
        print(f"{name}: {s['windows']:.1f} windows ({s['transcript_tokens']:.0f} tokens), {s['resets']:.0f} resets, "
              f"summaries <= {s['max_summary_tokens']} of {s['summary_budget']} tokens, expert passed "
              f"{s['passed']}/{s['tasks']}{', flags ' + ','.join(s['flags']) if s['flags'] else ''}", flush=True)
    write_result(args.out, dict(config=args.config, window=int(c.rollout.window), sets=sets), quiet=True)


if __name__ == "__main__":
    main()
