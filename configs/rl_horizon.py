"""Self-summarisation far beyond the window: LongHorizon's registers tier from 1x to 100x the
context, at tiny scale on CPU (docs/results/horizon.md; runner composer_jax/experiments/horizon.py).

  python -m composer_jax.experiments.horizon --config configs/rl_horizon.py --workdir runs/horizon
  (another seed: --config.seed=N --workdir runs/horizon_seedN; each workdir trains its own SFT policy)

Variants (`configs/rl_horizon.py:ARG`, ARG a comma list): `quick` (minutes: the tests),
`hops=N` (the tier of the SFT demonstrations; default 4), `drop_key=F` (how often the
demonstrator's summaries drop the key; default 0.1). Run 1 of docs/results/horizon.md was
`:hops=6,drop_key=0.25` (its demonstrator passed 19% of its runs; the SFT policy too few).

The task: follow a chain of notes, each setting one of 2 registers (later notes overwrite earlier ones), and write the access key (first note) and
both registers' last values. The state a summary must carry stays 4 facts however long the
chain, so longer tiers need the summary to compress (drop superseded values), not to grow.
"""
import ml_collections

from configs import parse_variant
from configs.rl_longhorizon import SYSTEM
from configs.rl_longhorizon import get_config as longhorizon

# Window multiple -> (notes after the start note, filler lines per note). A note of 8 filler
# lines fills most of a 512-token segment: ~0.65 windows a note, measured on the expert's
# transcripts (the runner records each tier's real multiple). 1x: 2 notes without filler
# (1.4 windows with the summaries, which start at half the window).
HORIZONS = {1: (2, 0), 3: (3, 8), 10: (14, 8), 30: (48, 8), 100: (162, 8)}
CURRICULUM = ({"hops": 2}, {"hops": 4}, {"hops": 8})  # RL's length curriculum, shortest first


def tier(c: ml_collections.ConfigDict, hops: int, filler: int | None = None) -> ml_collections.ConfigDict:
    """`c` at a tier of `hops` notes: the turn and segment caps follow the longest chain it
    trains or evaluates on (a read per note, the start note, a write and a submit; a reset per
    note at most)."""
    c.rl.suite_options.hops = hops
    if filler is not None:
        c.rl.suite_options.filler_lines = filler
    longest = max([hops, *(t.get("hops", 0) for t in c.rl.curriculum)])
    c.rl.env_max_turns = c.rollout.max_turns = longest + 4
    c.rollout.max_segments = longest + 4
    return c


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    v = parse_variant(arg, dict(quick=False, hops=4, drop_key=0.1), "configs/rl_horizon.py")
    if not 0 <= v["drop_key"] <= 1:
        raise ValueError(f"configs/rl_horizon.py: drop_key={v['drop_key']} must be in [0, 1]")
    c = longhorizon("quick" if v["quick"] else None)
    c.name = f"rl_horizon{'_' + arg.replace(',', '_').replace('=', '') if arg else ''}"
    c.rl.update(system_prompt=SYSTEM, reward_mode="fraction", negative_weight=0.0,
                suite_options=dict(hops=v["hops"], filler_lines=8, secrets="words", carry="registers",
                                   registers=2, expert_drop_key=v["drop_key"]),
                curriculum=CURRICULUM if not v["quick"] else ({"hops": 2}, {"hops": 3}), curriculum_promote_at=0.6,
                steps=2 if v["quick"] else 12, groups_per_step=2 if v["quick"] else 8, group_size=6,
                eval_tasks=0, checkpoint_every=6)
    c.rl.optim.update(lr=3e-4, steps=c.rl.steps)
    # The pipeline's SFT recipe: copy drills, then an imperfect demonstrator (it drops the key
    # from 1 summary in 4) whose failures are cloned too, so RL has a summary habit to fix.
    c.sft.update(demos=32 if v["quick"] else 256, batch_rows=8, successful_only=False,
                 copy_warmup=20 if v["quick"] else 300)
    c.sft.optim.update(steps=20 if v["quick"] else 400, lr=3e-3, warmup_steps=10 if v["quick"] else 50,
                       min_lr_ratio=0.1)
    c.rollout.update(window=512, summarize_at=0.5, summary_budget=64, turn_budget=72, slots=24,
                     prefill_buckets=(64, 256), temperature=1.0)
    return tier(c, v["hops"])
