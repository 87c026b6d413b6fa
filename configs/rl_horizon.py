"""Self-summarisation far beyond the window: LongHorizon's registers tier from 1x to 100x the
context, at tiny scale on CPU (docs/results/horizon.md), run by composer_jax/experiments/run.py.

  python -m composer_jax.experiments.run --config configs/rl_horizon.py:mix,mix_filler,drop_key=0.05,greedy,long_tasks=16 \
      --workdir runs/h8 --out benchmarks/results/horizon_run5.json
  (run 5, the README's; seeds 1, 2: --config.seed=N --workdir runs/h8sN --out .../horizon_run5_seedN.json;
   pooled into benchmarks/results/horizon.json by python -m composer_jax.experiments.pool)

1. A 1k BPE on the suite's expert transcripts (every secret word, path and register one token).
2. SFT (copy drills, then the imperfect demonstrator's runs) on the 4-note tier, up to a target
   reward on held-back tasks (so RL has room to improve); a second SFT run
   whose demonstrations play under harness compaction, for the harness arm.
3. The same RL budget from SFT per arm, with a length curriculum (2, 4, then 8 notes):
     trained   summary tokens trained with the episode's advantage
     masked    summary tokens get no gradient
     harness   the harness writes every summary (rollout.compaction="harness"); RL trains the actions
4. Every policy on the same held-out tasks of each horizon (HORIZONS: window multiple -> (notes,
   filler lines)), same sampling keys, so each pair is compared episode by episode; two more
   policies: none (the trained policy without resets: truncated when its window is full) and
   sft (before RL). Per policy and horizon: pass rate (Wilson 95%), compaction error (facts the
   env said later turns need that a summary dropped), summary tokens, transcript tokens, resets.
Variants (`:ARG`, a comma list):
  trained / masked / harness  train that arm alone (side by side in one workdir)
  hops=N          the SFT tier (default 4)
  drop_key=F      how often the demonstrator's summaries drop the key (default 0.1)
  sft_target=F    SFT stops at the first check (every 10 steps from 250) whose reward on held-back
                  train tasks reaches F (default 0.57, the pipeline's); 0 trains every step
  sft_streak=N    ... N checks in a row (default 2: one noisy check stopped run 4's seed 1)
  sft_pass=F      ... and whose held-back pass rate reaches F too (run 5's seed 1 met the reward
                  target at a pass rate of 0.06: the fraction reward credits registers without the key)
  mix             SFT and RL tiers mix chain lengths; mix_filler (with mix): 1 task in 4 unpadded
  code            the tier whose notes are Python modules: app.py calls each register's handler
  greedy, no_harness, long_tasks=N   greedy evaluation; skip the harness arm; tasks at 30x, 100x
  quick           minutes: the tests
Runs of docs/results/horizon.md: run 1 `:hops=6,drop_key=0.25,sft_target=0`, run 2
`:sft_target=0`, run 3 `:mix,drop_key=0.02,greedy,no_harness,long_tasks=16,sft_target=0` (runs
1-3 predate the SFT target), run 4 `:mix,mix_filler,drop_key=0.05,greedy,no_harness,long_tasks=16,sft_streak=1`,
run 5 `:mix,mix_filler,drop_key=0.05,greedy,long_tasks=16` (every arm), run 6 (seed 1) run 5's
with `no_harness,sft_pass=0.5`; the code tier, runs 7 and 8:
`:mix,mix_filler,code,drop_key=0.05,greedy,no_harness,long_tasks=16,sft_target=0` (run 7 before
the demonstrator's summaries named handlers as app.py imports them; run 8's seeds 1, 2:
--config.seed=N, pooled into benchmarks/results/horizon_code.json), run 9 the same with
`sft_pass=0.5` for `sft_target=0`.

Variant `qwen` (issue #26's GPU curve): the registers tier on the imported Qwen2.5-Coder-0.5B-Instruct
at window 4,096 (notes of 84 filler lines: the most the tool shows uncut; the expert's transcripts
span 1.1 / 3.1 / 9.9 windows at 1x / 3x / 10x, benchmarks/results/horizon_tiers_qwen.json), cut to
one 15-minute GPU lease: 256 demonstrations, 32 SFT steps, 4 RL steps of the trained arm, then
trained, SFT, none and harness (the SFT policy under harness compaction) greedy on 16 held-out
tasks per horizon, paired; the record is rewritten after every evaluation, so a lease that ends
early keeps the horizons it reached. On the GPU, after `python -m composer_jax.checkpoints.qwen_setup
--gguf FILE` (the GGUF carried over in pieces, docs/results/rl_bugfix.md):
  python -m composer_jax.experiments.run --config configs/rl_horizon.py:qwen --workdir $OUT/w \
      --out $OUT/horizon_qwen.json
(end to end at toy size, on a tiny imported GGUF: tests/test_checkpoints_gguf.py).

The task: follow a chain of notes, each setting one of 2 registers (later notes overwrite
earlier ones), and write the access key (first note) and both registers' last values. The state
a summary must carry stays 4 facts however long the chain, so longer tiers need the summary to
compress (drop superseded values), not to grow.
"""
import copy

import ml_collections

from configs import parse_variant, qwen_coder_0p5b
from configs.rl_longhorizon import SYSTEM
from configs.rl_longhorizon import get_config as longhorizon

# Window multiple -> (notes after the start note, filler lines per note). A note of 8 filler
# lines fills most of a 512-token segment: ~0.65 windows a note, measured on the expert's
# transcripts (the runner records each tier's real multiple). 1x: 2 notes without filler
# (1.4 windows with the summaries, which start at half the window).
HORIZONS = {1: (2, 0), 3: (3, 8), 10: (14, 8), 30: (48, 8), 100: (162, 8)}
CURRICULUM = ({"hops": 2}, {"hops": 4}, {"hops": 8})  # RL's length curriculum, shortest first
# `:mix`: SFT's demonstrations and every RL tier mix chain lengths, so no length is the one
# after which the policy stops (run 2's policies stop after about as many notes as they trained on)
MIX_SFT = (2, 4, 8, 16)
MIX_CURRICULUM = ({"hops_mix": (2, 4, 8)}, {"hops_mix": (4, 8, 16)})
# `:mix_filler`: 1 task in 4 has unpadded notes, so acting right after a tool result (no reset
# between) is demonstrated and trained: the 1x tier (2 unpadded notes), 0/16 for every run-3 policy
FILLER_MIX = (8, 8, 8, 0)
CODE_FILLER = 4  # `:code`: filler functions per module (see get_config)
# `:qwen`: the imported Qwen2.5-Coder-0.5B at window 4,096, 8x the tiny window. A note of 84 filler
# lines is ~1.5k Qwen tokens, the longest the tool shows whole (observation_chars 8,000: at 96 lines
# it cut the middle, key lines with it, and the expert failed). Each set's real multiple under
# Qwen's tokenizer: benchmarks/results/horizon_tiers_qwen.json.
QWEN_FILLER = 84
QWEN_HORIZONS = {1: (2, QWEN_FILLER), 3: (7, QWEN_FILLER), 10: (25, QWEN_FILLER)}


def tier(c: ml_collections.ConfigDict, hops: int, filler: int | None = None) -> ml_collections.ConfigDict:
    """`c` at a tier of `hops` notes: the turn and segment caps follow the longest chain it
    trains or evaluates on (a read per note, the start note, a write and a submit; a reset per
    note at most)."""
    c.rl.suite_options.hops = hops
    if filler is not None:
        c.rl.suite_options.filler_lines = filler
    longest = max([hops, *c.rl.suite_options.get("hops_mix", ()),
                   *(h for t in c.rl.curriculum for h in (t.get("hops", 0), *t.get("hops_mix", ())))])
    c.rl.env_max_turns = c.rollout.max_turns = longest + 4
    c.rollout.max_segments = longest + 4
    return c


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    v = parse_variant(arg, dict(quick=False, hops=4, drop_key=0.1, trained=False, masked=False, harness=False,
                                     greedy=False, long_tasks=4, no_harness=False, mix=False,
                                     mix_filler=False, code=False, sft_target=0.57, sft_streak=2, sft_pass=0.0,
                                     qwen=False),
                      "configs/rl_horizon.py")
    if not 0 <= v["drop_key"] <= 1:
        raise ValueError(f"configs/rl_horizon.py: drop_key={v['drop_key']} must be in [0, 1]")
    only = [a for a in ("trained", "masked", "harness") if v[a]]
    if len(only) > 1:
        raise ValueError(f"configs/rl_horizon.py: {only}: name one arm to train alone")
    quick = v["quick"]
    c = longhorizon("quick" if quick else None)
    c.name = f"rl_horizon{'_' + arg.replace(',', '_').replace('=', '') if arg else ''}"
    c.rl.update(system_prompt=SYSTEM, reward_mode="fraction", negative_weight=0.0,
                suite_options=dict(hops=v["hops"], filler_lines=8, secrets="words", carry="registers",
                                   registers=2, expert_drop_key=v["drop_key"]),
                curriculum=CURRICULUM if not quick else ({"hops": 2}, {"hops": 3}), curriculum_promote_at=0.6,
                steps=2 if quick else 12, groups_per_step=2 if quick else 8, group_size=6,
                eval_tasks=0, checkpoint_every=6)
    c.rl.optim.update(lr=3e-4, steps=c.rl.steps)
    # The pipeline's SFT recipe: copy drills, then an imperfect demonstrator (it drops the key
    # from 1 summary in 4) whose failures are cloned too, so RL has a summary habit to fix.
    c.sft.update(demos=32 if quick else 256, batch_rows=8, successful_only=False,
                 copy_warmup=20 if quick else 300)
    c.sft.optim.update(steps=20 if quick else 400, lr=3e-3, warmup_steps=10 if quick else 50,
                       min_lr_ratio=0.1)
    if not quick:  # SFT stops at this held-back reward (checked every 10 steps from 250), reached
        c.sft.update(target_reward=v["sft_target"], target_streak=v["sft_streak"])  # sft_streak checks in a row
        if v["sft_pass"]:  # set only when asked: a field in the sft block is part of the SFT stage's identity
            c.sft.target_pass = v["sft_pass"]
    c.rollout.update(window=512, summarize_at=0.5, summary_budget=64, turn_budget=72, slots=24,
                     prefill_buckets=(64, 256), temperature=1.0)
    if v["mix"]:
        if quick:
            raise ValueError("configs/rl_horizon.py: quick and mix together")
        c.rl.suite_options.hops_mix = MIX_SFT
        c.rl.curriculum = MIX_CURRICULUM
        c.sft.optim.steps = 800  # the mix has 1.5x the sequences; at 400 steps (loss 0.068) summaries miscopy the key
    if v["mix_filler"]:
        if not v["mix"]:
            raise ValueError("configs/rl_horizon.py: mix_filler needs mix")
        c.rl.suite_options.filler_mix = FILLER_MIX
    if v["code"]:  # the same chains as Python modules: carry each register's handler and its module
        # A code line is ~14 tokens (prose ~12) and a summary's handler line ~22 (a register's ~17):
        # at 8 filler lines a module read after a reset no longer fits beside the summary (the
        # observation is cut and the chain lost); at 4, and with summaries of up to 80 tokens, it does.
        c.rl.suite_options.update(carry="code", filler_lines=CODE_FILLER)
        if v["mix_filler"]:
            c.rl.suite_options.filler_mix = tuple(min(f, CODE_FILLER) for f in FILLER_MIX)
        c.rollout.summary_budget = 80
        c.rollout.turn_budget = 88  # the fix, written in one call: a one-line function per register (78 tokens)
    if v["qwen"]:
        if quick or v["code"]:
            raise ValueError("configs/rl_horizon.py: qwen is the registers tier at full size (no quick, no code)")
        qwen(c)
    if v["greedy"] or v["qwen"]:
        c.eval_rollout.temperature = 0.0
    if v["long_tasks"] < 1:
        raise ValueError(f"configs/rl_horizon.py: long_tasks={v['long_tasks']} must be >= 1")
    c = tier(c, v["hops"])
    harness = dict(compaction="harness")
    c.experiment = ml_collections.ConfigDict(dict(
        sft=dict(sft={}, sft_harness=harness),  # the harness arm's demonstrations play under its compaction
        arms=dict(trained={}, masked=dict(rl=dict(train_summaries=False)), harness=dict(sft="sft_harness",
                                                                                       rollout=harness)),
        policies=dict(trained=dict(checkpoint="trained"), masked=dict(checkpoint="masked"),
                      harness=dict(checkpoint="harness", rollout=harness),
                      none=dict(checkpoint="trained", rollout=dict(max_segments=1, summarize_at=1.0)),
                      sft=dict(checkpoint="sft")),
        evaluations={f"{m}x": horizon_set(c, m, tasks=2 if quick else v["long_tasks"] if m >= 30 else 16)
                     for m in ((1, 3) if quick else HORIZONS)},
        pairs=tuple(f"trained:{p}" for p in ("masked", "harness", "none", "sft")),
        only=only[0] if only else ""))
    if v["no_harness"]:
        if v["harness"]:
            raise ValueError("configs/rl_horizon.py: harness and no_harness together")
        e = c.experiment
        del e.arms["harness"], e.policies["harness"], e.sft["sft_harness"]
        e.pairs = tuple(p for p in e.pairs if p != "trained:harness")
    if v["qwen"]:  # one lease: the trained arm only; the harness compacts for the SFT policy
        e = c.experiment
        e.sft, e.arms = dict(sft={}), dict(trained={})
        e.policies = dict(trained=dict(checkpoint="trained"), sft=dict(checkpoint="sft"),
                          none=dict(checkpoint="trained", rollout=dict(max_segments=1, summarize_at=1.0)),
                          harness=dict(checkpoint="sft", rollout=harness))
        e.evaluations = {f"{m}x": horizon_set(c, m, 16, QWEN_HORIZONS) for m in QWEN_HORIZONS}
        e.pairs = ("trained:sft", "trained:none", "trained:harness", "sft:harness")
    return c


def qwen(c: ml_collections.ConfigDict) -> None:
    """`:qwen`: the recipe on the imported Qwen2.5-Coder-0.5B-Instruct at window 4,096, cut to one
    15-minute GPU lease as configs/qwen_coder_0p5b.py:bugfix_h200 is (its measured memory settings:
    every layer recomputed, logits 512 positions at a time, one learner row)."""
    c.model = qwen_coder_0p5b.model_block()
    c.model.update(remat="full", logits_chunk=512)
    c.mesh.data = -1  # every device the lease has (the tiny policy's recipe pins one)
    imported = qwen_coder_0p5b.IMPORTED
    c.rl.update(tokenizer=imported + "/tokenizer.json", init_from=imported, curriculum=(), steps=4,
                groups_per_step=8, group_size=8, max_sampling_rounds=1, row_len=4096, minibatch_rows=1,
                checkpoint_every=4, keep=1)
    c.rl.suite_options.update(filler_lines=QWEN_FILLER, hops_mix=(2, 4, 8),
                              filler_mix=(QWEN_FILLER, QWEN_FILLER, QWEN_FILLER, 0))
    c.rl.optim.update(lr=3e-6, steps=4, clip_norm=1.0)
    # No copy drills and no held-back stop: a pretrained base copies; 32 steps is what a lease holds.
    # embed_lr_scale: Qwen never learned to predict the harness's call delimiters (docs/results/rl_bugfix.md)
    c.sft.update(demos=256, batch_rows=4, init_from=imported, copy_warmup=0, target_reward=0.0)
    c.sft.optim.update(steps=32, lr=1e-5, warmup_steps=4, min_lr_ratio=0.1, embed_lr_scale=100.0)
    # 8x the tiny budgets for summaries and turns; 32 slots x 1,024-token prefills fit an H100
    c.rollout.update(window=4096, summary_budget=256, turn_budget=256, slots=32, prefill_buckets=(512, 1024),
                     decode_buckets=True)


def horizon_set(c: ml_collections.ConfigDict, mult: int, tasks: int, horizons: dict = HORIZONS) -> dict:
    """The held-out set of a horizon: that tier's tasks (the expert drops no key there) under
    the tier's caps (experiment.evaluations of the config)."""
    hops, filler = horizons[mult]
    if c.rl.suite_options.carry == "code":
        filler = min(filler, CODE_FILLER)
    caps = tier(copy.deepcopy(c), hops, filler)
    return dict(tasks=tasks, x=mult, suite_options=dict(hops=hops, hops_mix=(), filler_mix=(), filler_lines=filler,
                                                              expert_drop_key=0.0),
                rl=dict(env_max_turns=caps.rl.env_max_turns),
                rollout=dict(max_turns=caps.rollout.max_turns, max_segments=caps.rollout.max_segments))
