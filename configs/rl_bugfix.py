"""RL on BugFix at tiny scale on CPU: does RL improve an SFT policy at fixing unseen code?
The recipe behind docs/results/rl_bugfix.md, run by composer_jax/experiments/run.py.

  python -m composer_jax.experiments.run --config configs/rl_bugfix.py:drills --workdir runs/rl_bugfix_drills \
      --out benchmarks/results/rl_bugfix_core_drills.json
  (seeds: add --config.seed=N with another workdir and --out, then
   python -m composer_jax.experiments.pool A.json B.json C.json --out benchmarks/results/rl_bugfix_core_drills_seeds.json)

The tier: single-bug BugFix tasks whose prompt names the bug's line, as a traceback would
(`hint_line`); the bug's kind and its fix are the policy's to find, on validation functions it
has never seen (the split is by source function). The policy of configs/rl_longhorizon.py with a
2k BPE trained on every train task's prompt, numbered files and expert actions; 1,500 steps of
copy drills (300 left copying at loss 4.6 on this vocabulary), SFT on expert demonstrations
spread over the train split, then positive-only GRPO, 24 steps x 96 episodes graded by the
hidden tests; the SFT and RL policies on every validation task, paired, by bug kind.
Variants (`:ARG`, a comma list):
  drills     3,000 drills (functions of the project's dependencies that no sandbox holds,
             environments/suites/drills.py) join the train split; 4,096 demonstrations, 1,000 SFT
             steps: with the tested tasks' ~150 functions alone the policy memorises them
  methods    with drills: RL's 3,000 drills are class methods, code SFT never showed
  steps=N    RL steps (the 48-step runs: the same workdir resumes from step 24)
  greedy     evaluate at temperature 0 (the same workdir: training stages are reused)
  realrepos  the same policy on RealRepos (single bugs in real PyPI packages, a CI report as the
             prompt, no line hint): SFT on 768 expert demonstrations spread over the train
             packages, then greedy pass@1 on 64 tasks of the held-out packages; no RL arm (an
             RL step grades 96 episodes at ~1.5 s each, an hour a step on 2 cores):
               python -m composer_jax.experiments.run --config configs/rl_bugfix.py:realrepos \
                   --workdir runs/rl_realrepos --out benchmarks/results/rl_realrepos_tiny.json
             (51 min; 0/64 [0, 0.057]: docs/realrepos.md)
  quick      minutes: the tests
"""
import ml_collections

from configs import parse_variant
from configs.rl_longhorizon import get_config as longhorizon

SYSTEM = ("Tools: read_file(path, start_line, end_line), edit_file(path, old, new), submit(). "
          "One tool call per turn.")
SUITE_OPTIONS = dict(max_bugs=1, hint_line=True)
DRILLS = 3000


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    v = parse_variant(arg, dict(quick=False, drills=False, methods=False, steps=24, greedy=False, realrepos=False),
                      "configs/rl_bugfix.py")
    quick = v["quick"]
    if v["methods"] and not v["drills"]:
        raise ValueError("configs/rl_bugfix.py: `methods` swaps the drills RL trains on; use `drills,methods`")
    c = longhorizon("quick" if quick else None)  # the same 2-layer policy as the LongHorizon experiments
    c.name = f"rl_bugfix{'_' + arg.replace(',', '_').replace('=', '') if arg else ''}"
    c.model.vocab_size = 2048  # code needs more merges than note chains: expert actions ~80 tokens
    # The tokenizer's texts: every train task's prompt, files and expert actions, once (drills left
    # out, so runs with and without them share the tokenizer and the copy warm-up)
    c.data.update(tokenizer_agent_tasks=1_000_000, tokenizer_agent_repeat=1)
    drills = dict(drills=DRILLS) if v["drills"] else {}
    c.rl.suite_options = dict(SUITE_OPTIONS, **drills)  # replaced, not merged with LongHorizon's
    c.rl.update(env_id="composer/BugFix-v0", system_prompt=SYSTEM,
                reward_mode="",  # all hidden tests must pass
                env_max_turns=6, steps=4 if quick else v["steps"], groups_per_step=4 if quick else 16, group_size=6,
                negative_weight=0.0, eval_tasks=8 if quick else 64)
    c.rl.optim.update(lr=3e-4, steps=c.rl.steps)
    c.sft.update(demos=64 if quick else 4096 if v["drills"] else 2048, copy_warmup=20 if quick else 1500)
    c.sft.optim.update(steps=60 if quick else 1000 if v["drills"] else 500)
    # A whole episode (~400 tokens) fits one window: no summaries on this suite (the window still
    # keeps room for a turn and a summary after the prompt, hence 768).
    c.rl.row_len = 768
    c.rollout.update(window=768, summarize_at=1.0, max_segments=1, turn_budget=192, max_turns=6,
                     prefill_buckets=(64, 256))
    if v["greedy"]:
        c.eval_rollout.temperature = 0.0
    rl_arm = dict(rl=dict(suite_options=dict(c.rl.suite_options, drill_source="methods"))) if v["methods"] else {}
    c.experiment = ml_collections.ConfigDict(dict(
        arms=dict(rl=rl_arm), policies=dict(sft=dict(checkpoint="sft"), rl=dict(checkpoint="rl")),
        evaluations=dict(validation=dict(tasks=8 if quick else 0)),  # 0: every validation task
        pairs=("rl:sft",)))
    if v["realrepos"]:
        if v["drills"]:
            raise ValueError("configs/rl_bugfix.py: drills are BugFix tasks; `realrepos` takes none")
        c.rl.update(env_id="composer/RealRepos-v0", env_max_turns=8)
        c.rl.suite_options = dict(max_bugs=1)
        # One 1,024-token window, no summaries: the expert's episode fits it on 23 of 32 train
        # tasks (5 run out of window, 4 prompts alone do not fit), so 524 of 768 demonstrations
        # are kept
        c.model.max_seq_len = c.rl.row_len = 1024
        c.rollout.update(window=1024, max_turns=8)
        # 256 tasks spread over the 11 train packages (TaskSuite.sample_ids), each played: ~5 min
        c.data.update(tokenizer_agent_tasks=16 if quick else 256, tokenizer_agent_repeat=1)
        c.sft.update(demos=16 if quick else 768, copy_warmup=20 if quick else 1000)
        c.sft.optim.update(steps=20 if quick else 500)
        c.eval_rollout.temperature = 0.0
        c.experiment = ml_collections.ConfigDict(dict(
            arms={}, policies=dict(sft=dict(checkpoint="sft")),
            evaluations=dict(validation=dict(tasks=4 if quick else 64)), pairs=()))
    return c
