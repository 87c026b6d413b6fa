"""Small MoE coder for one accelerator (hours): 0.86B total / 0.20B active parameters.

The tiny pipeline's code paths at a size where the model can learn real code and the RL
policy has room to copy and plan: 16 layers, d=1024, 32 experts (top-4, expert FFN 512) + 1
shared expert, first layer dense, a 32k BPE trained on the corpus, 8k-token rollout windows. The planner puts it at 57.3 GiB of an H100's 72 usable (grad_accum 4 keeps
the logits and attention scores small) and 0.61 s per 131k-token step at 35% MFU. `dense`: 0.21B, all active.

Plan / run:
  python -m composer_jax.tools.plan --config configs/small.py --slice h100-1
  python launch/xm_launch.py --config=configs/small.py --workdir runs/small
  python launch/xm_launch.py --config=configs/small.py:dense --workdir runs/small_dense
"""
import ml_collections

from configs import tiny


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or ""
    if variant not in ("", "dense"):
        raise ValueError(f"configs/small.py: unknown variant {variant!r}; use '' or 'dense'")
    c = tiny.get_config("pipeline")
    c.name = f"small{('_' + variant) if variant else ''}"
    c.rollout.decode_buckets = True  # a step costs more than a compile: decode only running slots
    c.model.update(
        vocab_size=32_768, d_model=1024, n_layers=16, n_heads=16, n_kv_heads=4, head_dim=64,
        d_ff=2816, max_seq_len=8192, dtype="bfloat16", n_experts=32, top_k=4, d_ff_expert=512,
        n_shared_experts=1, first_dense_layers=1, remat="save_dots_except_mlp",
        # Per-device routing and all-to-all dispatch on any mesh (ragged_dot kernel on GPU/TPU);
        # on one device the 1.25 send capacity is above the dropless bound, so nothing drops.
        moe_impl="expert_parallel", capacity_factor=1.25,
    )
    if variant == "dense":  # same active FFN width (4 routed + 1 shared expert of 512 = 2560 ~ 2816)
        c.model.update(n_experts=0, first_dense_layers=c.model.n_layers)
    c.data.update(seq_len=4096, batch_size=32)
    c.train.update(steps=20_000, lr=1e-3, warmup_steps=1000, eval_every=1000, log_every=50, grad_accum=4)
    c.checkpoint.every = 1000
    c.launch.update(slice="h100-1", chips_per_host=1)
    c.rollout.update(window=8192, turn_budget=1024, summary_budget=512, max_segments=6, slots=64,
                     prefill_buckets=(256, 1024, 4096), max_turns=40)
    c.rl.update(suite_options=dict(hops=6, filler_lines=30), env_max_turns=40, row_len=8192,
                minibatch_rows=16, steps=500, groups_per_step=16, group_size=8, eval_tasks=100,
                eval_every=50, checkpoint_every=25)
    c.rl.optim.update(steps=500, lr=1e-6)
    c.sft.update(demos=4096, batch_rows=16)
    c.sft.optim.update(steps=3000, lr=2e-4, warmup_steps=100)
    c.pipeline.eval_tasks = 100
    return c
