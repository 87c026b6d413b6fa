"""Tiny MoE decoder: trains on 2 CPU cores in minutes.

Run:
  python -m composer_jax.train.midtrain --config configs/tiny.py --workdir runs/tiny
Variants (`--config configs/tiny.py:dense`): "" (MoE, default), "dense" (no experts),
"test" (smaller still, for unit tests).
"""
import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or ""
    if variant not in ("", "dense", "test"):
        raise ValueError(f"configs/tiny.py: unknown variant {variant!r}; use '', 'dense' or 'test'")
    c = ml_collections.ConfigDict()
    c.name = f"tiny{('_' + variant) if variant else ''}"
    c.seed = 0

    c.model = ml_collections.ConfigDict(
        dict(
            vocab_size=8192,
            d_model=256,
            n_layers=4,
            n_heads=4,
            n_kv_heads=2,
            head_dim=64,
            d_ff=768,  # dense FFN width (the first `first_dense_layers` layers, or all if no MoE)
            rope_base=10_000.0,
            qkv_bias=False,
            tie_embeddings=True,
            norm_eps=1e-6,
            max_seq_len=2048,
            dtype="float32",  # compute dtype; parameters are always float32 masters
            n_experts=8,
            top_k=2,
            d_ff_expert=256,
            n_shared_experts=1,
            first_dense_layers=1,
            router_score="softmax",  # softmax | sigmoid
            # Dropless dispatch: blocked (sort + block-padded batched matmul: fastest on CPU) |
            # ragged (sort + lax.ragged_dot: the TPU/GPU path) | dense (one-hot reference).
            moe_impl="blocked",
            capacity_factor=0.0,  # 0 = dropless; >0 drops tokens past ceil(T*k/E)*factor
            routed_scale=1.0,
            remat="none",  # none | full | save_dots_except_mlp
        )
    )
    c.train = ml_collections.ConfigDict(
        dict(
            steps=2000,
            lr=3e-3,
            warmup_steps=100,
            min_lr_ratio=0.1,
            weight_decay=0.1,
            b1=0.9,
            b2=0.95,
            eps=1e-8,
            clip_norm=1.0,
            grad_accum=1,
            z_loss_weight=1e-4,  # output-logit z-loss
            load_balance_weight=1e-3,  # Switch load-balance loss (small: the bias does most of the work)
            router_z_weight=1e-3,
            bias_update_rate=1e-3,  # aux-loss-free router bias step; 0 disables
            log_every=10,  # TensorBoard + progress bar; the JSONL gets every step
            eval_every=100,  # validation loss/perplexity (and at the last step)
            eval_batches=8,  # fixed leading batches of the validation split
            peak_flops=0.0,  # FLOP/s for MFU; 0 = measure a large matmul at start-up
        )
    )
    c.checkpoint = ml_collections.ConfigDict(
        dict(
            every=100,  # steps between saves (and at the last step / on SIGTERM, SIGINT)
            keep=3,  # newest checkpoints kept
            async_save=True,  # write in the background while training continues
        )
    )
    c.mesh = ml_collections.ConfigDict(dict(data=-1, fsdp=1, expert=1, tensor=1))
    c.data = ml_collections.ConfigDict(
        dict(
            corpus_paths=(),  # directories / globs of .py files (a tuple: overridable by flag)
            include_stdlib=True,  # the running interpreter's standard library source (~31 MB)
            val_fraction=0.02,  # by hash of the file name: stable across machines
            max_file_bytes=1 << 20,
            num_shards=8,  # token store shards: the unit of resume for an interrupted build
            seq_len=256,
            batch_size=8,  # global rows per step, split over hosts
            shuffle_seed=0,
            # source -> weight: "code" is the file corpus; other names are seqio tasks/mixtures.
            mixture={"code": 1.0},
        )
    )

    if variant == "dense":
        c.model.n_experts = 0
        c.model.first_dense_layers = c.model.n_layers
    if variant == "test":
        c.model.update(
            vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
            d_ff=128, d_ff_expert=32, n_experts=8, top_k=2, max_seq_len=256,
        )
    return c
