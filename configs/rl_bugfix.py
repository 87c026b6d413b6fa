"""RL on BugFix at tiny scale on CPU: the recipe behind docs/results/rl_bugfix.md.

  python -m composer_jax.experiments.bugfix --drills 3000 --config.sft.demos=4096 \
      --config.sft.optim.steps=1000 --out benchmarks/results/rl_bugfix_drills.json
Variants: `quick` (minutes: tests). The runner is composer_jax/experiments/bugfix.py (its docstring
has the other commands: methods drills, paired greedy evaluation, pooling seeds).
"""
import ml_collections

from configs.rl_longhorizon import get_config as longhorizon

SYSTEM = ("Tools: read_file(path, start_line, end_line), edit_file(path, old, new), submit(). "
          "One tool call per turn.")
SUITE_OPTIONS = dict(max_bugs=1, hint_line=True)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    if arg not in (None, "", "quick"):
        raise ValueError(f"configs/rl_bugfix.py: unknown variant {arg!r}; use '' or 'quick'")
    quick = arg == "quick"
    c = longhorizon("quick" if quick else None)  # the same 2-layer policy as the LongHorizon experiments
    c.name = f"rl_bugfix{'_quick' if quick else ''}"
    c.model.vocab_size = 2048  # code needs more merges than note chains: expert actions ~80 tokens
    c.rl.suite_options = dict(SUITE_OPTIONS)  # replaced, not merged with LongHorizon's
    c.rl.update(env_id="composer/BugFix-v0", system_prompt=SYSTEM,
                reward_mode="",  # all hidden tests must pass
                env_max_turns=6, steps=4 if quick else 24, groups_per_step=4 if quick else 16, group_size=6,
                negative_weight=0.0, eval_tasks=8 if quick else 64)
    c.rl.optim.update(lr=3e-4, steps=c.rl.steps)
    c.sft.update(demos=64 if quick else 2048)
    c.sft.optim.update(steps=60 if quick else 500)
    # A whole episode (~400 tokens) fits one window: no summaries on this suite (the window still
    # keeps room for a turn and a summary after the prompt, hence 768).
    c.rl.row_len = 768
    c.rollout.update(window=768, summarize_at=1.0, max_segments=1, turn_budget=192, max_turns=6,
                     prefill_buckets=(64, 256))
    return c
