"""Kimi-K2.5-class MoE (about 1.04T total, 32B active parameters): planning only, never materialised.

Shapes follow the published Kimi K2 figures: 61 layers, hidden 7168, 384 routed experts
(top-8, expert FFN 2048) plus 1 shared expert, first layer dense (FFN 18432), 64 attention
heads, ~160k vocabulary, sigmoid routing with a scaling factor of 2.827.
Multi-head latent attention with Kimi K2's ranks (q_lora 1536, kv_lora 512, qk_nope 128, qk_rope
64, v_head 128); the KV cache holds the 576-wide latent per token and layer.

Run:
  python -m composer_jax.tools.model_stats --config configs/kimi_k2_5.py
  python -m composer_jax.tools.plan --config configs/kimi_k2_5.py --slice v5p-1024
  python benchmarks/kimi_compile_check.py --out benchmarks/results/kimi_compile.json
"""
import ml_collections

from configs import tiny


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    if arg:
        raise ValueError(f"configs/kimi_k2_5.py: takes no variant, got {arg!r}")
    c = tiny.get_config()
    c.name = "kimi_k2_5"
    c.rollout.decode_buckets = True  # a step costs more than a compile: decode only running slots
    c.model.update(
        vocab_size=163_840,
        d_model=7168,
        n_layers=61,
        n_heads=64,
        # GQA fields, unused by MLA; tools/plan.py still sizes attention activations from them.
        n_kv_heads=8,
        head_dim=128,
        attention="mla",
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        d_ff=18_432,
        rope_base=50_000.0,
        tie_embeddings=False,
        max_seq_len=262_144,
        dtype="bfloat16",
        n_experts=384,
        top_k=8,
        d_ff_expert=2048,
        n_shared_experts=1,
        first_dense_layers=1,
        router_score="sigmoid",
        routed_scale=2.827,
        remat="full",
        # Expert parallelism: each device sends its tokens' rows to the 16 expert shards
        # (all-to-all); per peer 1.25x the balanced share, overflow counted as dropped_fraction.
        moe_impl="expert_parallel",
        capacity_factor=1.25,
    )
    # 33.5M tokens per step as 8,192 rows of 4k: one row per chip per micro-batch. 32k rows
    # (most published mid-training) need flash attention or context parallelism, which this
    # code does not have: the planner refuses them on the attention scores (384 GiB per chip).
    c.data.seq_len = 4096
    c.data.batch_size = 8192
    c.mesh.update(data=-1, fsdp=32, expert=16, tensor=1)
    c.launch.update(slice="v5p-1024", one_job_per_stage=True)
    c.train.update(lr=2e-4, warmup_steps=2000, steps=100_000, grad_accum=16)
    return c
