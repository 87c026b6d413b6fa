"""RL on LongHorizon at tiny scale on CPU: the recipe behind docs/results/rl_longhorizon.md.

The 3-seed ablation (trained / masked / no summaries; one seed shown, the others take
`--config.seed=N`):
  python -m composer_jax.experiments.longhorizon --workdir W --rl_lr 3e-4 --rl_steps 24 --rl_groups 16 \
      --config.rl.negative_weight=0.0 --final_eval 128
Variants (`configs/rl_longhorizon.py:ARG`, ARG a comma list): `quick` (minutes: the notebooks
and tests), `hops=N`, `filler=N` (the tier: notes to follow and filler lines per note).
The runner (arms, copy warm-up, tokenizer, paired evaluation) is composer_jax/experiments/longhorizon.py.
"""
import ml_collections

from configs import parse_variant
from configs.tiny import get_config as tiny

SYSTEM = "Tools: read_file(path), write_file(path, content), submit(). One tool call per turn."


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    v = parse_variant(arg, dict(quick=False, hops=4, filler=6), "configs/rl_longhorizon.py")
    quick, hops = v["quick"], v["hops"]
    c = tiny("test")
    c.name = f"rl_longhorizon{'_' + arg.replace(',', '_').replace('=', '') if arg else ''}"
    # Dense 2-layer d_model 128 with token shift over 9 previous tokens: keys then see the
    # "Fragment 2 of 4: `" that precedes a word (5 tokens) and the word that ends the previous
    # summary line (9), so one attention layer can copy the right word. Without it the policy
    # stayed at chance on every secret it had to copy; with 1 previous token it copied the key
    # but mixed up fragments (docs/results/rl_longhorizon.md).
    c.model.update(vocab_size=1024, max_seq_len=1024, n_experts=0, first_dense_layers=2, d_model=128,
                   head_dim=32, d_ff=512, token_shift=9)
    c.mesh.data = 1
    # Word secrets: one token each, so what the policy must learn is to carry them across resets.
    c.rl.update(system_prompt=SYSTEM, suite_options=dict(hops=hops, filler_lines=v["filler"], secrets="words"),
                env_max_turns=hops + 6,
                reward_mode="fraction",  # partial credit (key right, fragments wrong) gives RL a gradient
                steps=4 if quick else 30, groups_per_step=4, group_size=6, row_len=512, minibatch_rows=32,
                eval_tasks=8 if quick else 32, eval_every=1000, checkpoint_every=1000, max_sampling_rounds=1)
    c.rl.optim.update(lr=1e-4, steps=c.rl.steps)
    c.sft.update(demos=64 if quick else 768, batch_rows=8)
    c.sft.optim.update(steps=60 if quick else 200, lr=3e-3, warmup_steps=50, min_lr_ratio=0.1)
    # summarize_at 0.5: a read starts only with room for a whole note (~200 tokens) after it
    c.rollout.update(window=512, summarize_at=0.5, summary_budget=64, turn_budget=72, max_segments=hops + 4,
                     slots=24, max_turns=hops + 6, prefill_buckets=(64, 256), temperature=1.0)
    return c
