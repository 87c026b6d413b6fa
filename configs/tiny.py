"""Tiny MoE decoder: trains on 2 CPU cores in minutes.

Run:
  python -m composer_jax.train.midtrain --config configs/tiny.py --workdir runs/tiny
Variants (`--config configs/tiny.py:dense`): "" (MoE, default), "dense" (no experts),
"test" (smaller still, for unit tests), "pipeline" (the ~18-minute
one-command pipeline whose RL stage learns, `python launch/xm_launch.py`), "scaling" (the MoE that the
expert-parallel tests and benchmarks/moe_scaling_bench.py compile on a mesh).
"""
import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variant = arg or ""
    if variant not in ("", "dense", "test", "pipeline", "scaling"):
        raise ValueError(f"configs/tiny.py: unknown variant {variant!r}; use '', 'dense', 'test', "
                         "'pipeline' or 'scaling'")
    c = ml_collections.ConfigDict()
    c.name = f"tiny{('_' + variant) if variant else ''}"
    c.seed = 0  # the root seed: init, RL task order, rollout and evaluation keys (composer_jax/seeds.py)

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
            # The tokenizer's corpus also holds this many expert transcripts of rl.env_id's train
            # tasks, repeated tokenizer_agent_repeat times (0: code only; data/build.py).
            tokenizer_agent_tasks=0,
            tokenizer_agent_repeat=64,
            # source -> weight: "code" is the file corpus; other names are seqio tasks/mixtures.
            mixture={"code": 1.0},
        )
    )

    c.rollout = ml_collections.ConfigDict(
        dict(
            window=2048,  # context tokens per slot; a summary + reset keeps episodes inside it
            summarize_at=0.85,  # summarise before a turn once context + turn_budget > this x window
            summary_budget=256,  # max summary tokens (longer: cut and flagged)
            max_segments=4,  # contexts per episode; needing more truncates the episode (flagged)
            turn_budget=256,  # max new tokens per assistant turn
            slots=8,  # episodes decoded together (continuous batching)
            temperature=1.0,
            top_p=1.0,
            max_turns=30,
            prefill_buckets=(64, 256, 1024),  # padded prefill chunk lengths: one compile each
            reset_keeps_prompt=True,  # a reset keeps the prompt's KV and prefills only the summary
            compaction="policy",  # who writes the context after a reset: policy | harness (baseline)
            # Decode every slot each step: a tiny step costs milliseconds, a compile per slot
            # bucket seconds. The configs of real models set True (only running slots decode).
            decode_buckets=False,
        )
    )

    # Sampling of every evaluation (rl.train's, the pipeline's, the experiments'), declared apart
    # from the training rollouts' (temperature 0 = greedy); budgets and shapes are `rollout`'s.
    c.eval_rollout = ml_collections.ConfigDict(dict(temperature=1.0, top_p=1.0))

    c.launch = ml_collections.ConfigDict(
        dict(
            slice="v5e-8",  # for --launch_mode=vertex|gke; `local` runs on this machine
            image="python:3.11",
            chips_per_host=4,
            one_job_per_stage=False,
        )
    )

    # RL (composer_jax/rl/train.py --mode rl); rl.* also names the env, tokenizer and row layout
    # that SFT (--mode sft) uses.
    c.rl = ml_collections.ConfigDict(
        dict(
            env_id="composer/LongHorizon-v0",
            suite_options=dict(hops=2, filler_lines=3),
            env_max_turns=30,
            reward_mode="",  # "" = the env's (all_pass); "fraction" gives partial credit per hidden test
            system_prompt="",  # "" keeps the env's tool manual; a tiny window needs a short one
            tokenizer="",  # tokenizer.json path; "" = byte-level
            init_from="",  # a checkpoints directory (e.g. an SFT run's) to start from
            steps=20,
            groups_per_step=4,  # tasks per step (usable groups after dynamic sampling)
            group_size=4,  # rollouts per task (G)
            max_sampling_rounds=2,  # rounds per step at most; later ones replace zero-variance groups
            advantage="grpo",  # grpo | dr_grpo | rloo
            negative_weight=1.0,  # scale of below-baseline advantages (< 1: asymmetric REINFORCE)
            mask_unfinished=False,  # no gradient from runs that hit turn/segment limits
            train_summaries=True,  # False: summary tokens get no gradient (ablation)
            row_len=2048,  # packed row length (>= rollout.window)
            minibatch_rows=8,
            epochs=1,  # passes over the step's rows
            recompute_old_logp=True,  # PPO denominator from the learner (TIS corrects the sampler)
            routing_replay=True,  # train MoE layers on the experts the sampler chose
            reward_tests=1.0,  # weight of the env's hidden-test reward
            reward_judge=0.0,  # weight of the summary rubric judge
            judge_from="",  # the judge model's checkpoints directory (needed when reward_judge > 0)
            max_nonfinite=3,  # skipped non-finite updates in a row before stopping
            eval_split="validation",
            eval_tasks=32,
            eval_samples=1,
            eval_every=10,
            checkpoint_every=10,
            keep=3,
            curriculum=(),  # suite_options overrides, shortest first: a length curriculum (rl/cursor.py)
            curriculum_promote_at=0.8,  # train pass rate that moves it to the next tier
            # Who drives the episodes: "native" (our agent loop and tool protocol) or
            # "mini_swe_agent" (the PyPI harness through our OpenAI endpoint; rl/harness_loop.py).
            harness="native",
            loss=dict(name="ppo", clip_low=0.2, clip_high=0.28, gspo_clip_low=3e-4, gspo_clip_high=4e-4,
                      cispo_is_low=1.0, cispo_is_high=0.28, aggregation="token_mean", norm_constant=1024.0,
                      tis_cap=2.0, kl_coef=0.0, kl_estimator="k3", entropy_coef=0.0),
            optim=dict(steps=20, lr=1e-4, warmup_steps=0, min_lr_ratio=1.0, weight_decay=0.0, b1=0.9,
                       b2=0.99, eps=1e-8, clip_norm=1.0),
        )
    )
    c.sft = ml_collections.ConfigDict(
        dict(
            demos=256,  # scripted demonstrations (train-split tasks)
            successful_only=True,  # False: clone failed demonstrations too (an imperfect demonstrator)
            copy_warmup=0,  # steps of copy drills before the demonstrations (rl/drills.py)
            init_from="",  # a checkpoints directory (e.g. mid-training's) to start from
            batch_rows=8,
            harnesses=("native",),  # and/or "mini_swe_agent": demonstrations in that harness's format
            # embed_lr_scale: the embedding's and head's step relative to lr (train/optim.py)
            optim=dict(steps=300, lr=3e-3, warmup_steps=20, min_lr_ratio=0.1, weight_decay=0.0, b1=0.9,
                       b2=0.95, eps=1e-8, clip_norm=1.0, embed_lr_scale=1.0),
        )
    )

    c.fleet = ml_collections.ConfigDict(
        dict(
            backend="local",  # local: envs in this process; ray: env workers as Ray actors (docs/fleet.md)
            address="",  # "" = private local Ray; "auto" = the running cluster; "ray://head:10001" = client
            num_cpus=0,  # CPUs of a private local Ray; 0 = all
            workers=8,  # env worker actors, each one env + its sandboxes
            cpus_per_worker=1.0,
            max_retries=2,  # replays of an episode on another worker when its worker is lost
            step_timeout_s=300.0,
            start_timeout_s=120.0,
            acquire_timeout_s=600.0,
            rl_mode="sync",  # sync (on-policy) | async (rollouts for step t+1 during step t's update)
            max_lag=1,  # async: max learner steps between a sample's policy and the step training on it
            chunk_size=1,  # async: samples per rollout call
            concurrency=8,  # async: rollout calls in flight
        )
    )

    # The one-command pipeline (launch/xm_launch.py): what the final evaluation covers.
    c.pipeline = ml_collections.ConfigDict(
        dict(
            eval_suites={"BugFix": "composer/BugFix-v0", "Implement": "composer/Implement-v0",
                         "LongHorizon": "composer/LongHorizon-v0"},
            eval_tasks=8,  # held-out validation tasks per suite
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
    if variant == "scaling":
        # Who does the MoE's work on a mesh (tests/test_expert_parallel.py,
        # benchmarks/moe_scaling_bench.py): 2 MoE layers, 16 experts top-2, batch 8 x 64.
        c.model.update(
            vocab_size=1024, d_model=128, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=32,
            d_ff=256, d_ff_expert=96, n_experts=16, top_k=2, n_shared_experts=1, max_seq_len=256,
            capacity_factor=1.25,
        )
        c.data.update(seq_len=64, batch_size=8)
    if variant == "pipeline":
        # About 20 minutes end to end on 2 CPU cores, and its RL stage learns (README, "make run").
        # The model: 2 layers (dense, then MoE) with token shift over 9 previous tokens, so one
        # attention layer can copy (docs/results/rl_longhorizon.md); mid-trained on code.
        c.model.update(vocab_size=1024, max_seq_len=1024, d_model=128, n_layers=2, head_dim=32, d_ff=512,
                       first_dense_layers=1, n_experts=4, top_k=2, d_ff_expert=128, token_shift=9)
        # lr 3e-4, not 3e-3: after 150 steps at 3e-3 on code (val loss 5.43 against 5.53 here)
        # SFT could no longer teach the model to copy the secret words (mean probability 0.015
        # on the key, SFT loss stuck at 0.2; docs/results/pipeline.md).
        c.train.update(steps=150, warmup_steps=15, eval_every=50, lr=3e-4)
        c.checkpoint.every = 50
        # The tokenizer also learns the RL env's transcripts: every secret word is one token.
        c.data.tokenizer_agent_tasks = 64
        # RL task: LongHorizon, 2 notes after the start note, word secrets; ~4 context windows an
        # episode. The SFT demonstrator leaves the access key out of 1 summary in 4 and its
        # failures are cloned too, so the SFT policy has a summary habit that RL must fix.
        c.rl.update(env_id="composer/LongHorizon-v0", env_max_turns=8, reward_mode="fraction",
                    suite_options=dict(hops=2, filler_lines=6, secrets="words", expert_drop_key=0.25),
                    system_prompt="Tools: read_file(path), write_file(path, content), submit(). "
                                  "One tool call per turn.",
                    steps=12, groups_per_step=8, group_size=6, max_sampling_rounds=1, negative_weight=0.0,
                    row_len=512, minibatch_rows=32, eval_tasks=64, eval_every=12, checkpoint_every=6)
        c.rl.optim.update(steps=12, lr=3e-4)
        c.sft.update(demos=256, batch_rows=8, successful_only=False, copy_warmup=300)
        c.sft.optim.update(steps=400, lr=3e-3, warmup_steps=50, min_lr_ratio=0.1)
        # summarize_at 0.5: a read starts only with room for a whole note (~200 tokens) after it
        c.rollout.update(window=512, summarize_at=0.5, summary_budget=64, turn_budget=72, max_segments=6,
                         slots=24, max_turns=8, prefill_buckets=(64, 256))
        c.pipeline.eval_tasks = 8
    return c
