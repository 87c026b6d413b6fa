"""Rollout engine throughput vs a naive per-token loop, and env wait in an agent-loop run.

  python benchmarks/rollout_bench.py --out benchmarks/results/rollout_tiny.json

Engine: every slot starts from a random prompt and decodes --new_tokens tokens (no stop ids, so
generations are long) inside one jitted `lax.while_loop`, for 1, 8 and 32 slots. Naive: the same
model through a jit-compiled single-token step (sample inside the jit) called from Python once
per token, checking for a stop token on the host, one episode at a time. Decoding a tiny model
on CPU at small batch is bound by reading the weights every step, so slots are where the
speed comes from. Agent loop: LongHorizon episodes driven by the (random) model through the
real environments; reports the fraction of wall time spent waiting on env reset/step. Resets
(`--reset_episodes`, alone with `--only_resets`): the same scripted episodes with and without
`rollout.reset_keeps_prompt`, tokens prefilled per summary reset and episode tokens/s.
Prefill (alone with `--only_prefill`): prompt tokens/s of `engine.append` with and without the
per-token log-probs (`score=False`, what prompts and harness text use), same prompts, same slots:

  python benchmarks/rollout_bench.py --config configs/qwen_coder_0p5b.py --only_prefill --prompt_len 512 \
      --out benchmarks/results/prefill_qwen_cpu.json
"""
from __future__ import annotations

import argparse
import time

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import environments  # noqa: F401 - registers the environments
from benchmarks.common import write_result
from composer_jax.config_loading import load_config
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.model import ModelConfig, Transformer, init_cache
from composer_jax.rl.agent import AgentLoop
from composer_jax.rl.engine_host import RolloutEngine
from composer_jax.rl.rollout_config import RolloutConfig
from composer_jax.rl.sampling import sample


def engine_tokens_per_s(graphdef, params, cfg, slots, prompt_len, new_tokens, repeats=2):
    rollout = RolloutConfig(window=prompt_len + new_tokens, summary_budget=1, turn_budget=new_tokens,
                            slots=slots, prefill_buckets=(prompt_len,))
    engine = RolloutEngine(graphdef, params, cfg, rollout)
    prompts = np.random.default_rng(0).integers(11, cfg.vocab_size, (slots, prompt_len)).tolist()

    def episode_batch(seed):
        engine.start(range(slots), [jax.random.key(seed * slots + s) for s in range(slots)])
        engine.append(range(slots), prompts)
        start = time.perf_counter()
        outs = engine.generate(range(slots), [new_tokens] * slots, [[]] * slots)
        return sum(len(o.tokens) for o in outs), time.perf_counter() - start

    episode_batch(0)  # compile
    runs = [episode_batch(i + 1) for i in range(repeats)]
    return max(n / s for n, s in runs)


def prefill_tokens_per_s(graphdef, params, cfg, slots, prompt_len, repeats=3) -> dict:
    """Prompt tokens/s of one append of `slots` prompts, scored and unscored, best of `repeats`
    after a compile each (the two alternate, so a shared machine's load falls on both)."""
    rollout = RolloutConfig(window=prompt_len + 1, summary_budget=1, turn_budget=1, slots=slots,
                            prefill_buckets=(prompt_len,))
    engine = RolloutEngine(graphdef, params, cfg, rollout)
    prompts = np.random.default_rng(0).integers(11, cfg.vocab_size, (slots, prompt_len)).tolist()
    best = {True: 0.0, False: 0.0}
    for i in range(repeats + 1):
        for score in (True, False):
            engine.start(range(slots), [jax.random.key(s) for s in range(slots)])
            start = time.perf_counter()
            engine.append(range(slots), prompts, score=score)
            jax.block_until_ready(engine.state)
            if i:  # the first round compiles
                best[score] = max(best[score], slots * prompt_len / (time.perf_counter() - start))
    return dict(slots=slots, prompt_len=prompt_len, scored_tokens_per_s=best[True],
                unscored_tokens_per_s=best[False], speedup=best[False] / best[True])


def naive_tokens_per_s(model, prompt_len, new_tokens, episodes=2):
    cfg = model.cfg

    @jax.jit
    def step(model, tok_11, cache, key):
        logits, cache, _ = model.extend(tok_11, cache)
        tok, _, _ = sample(logits[:, -1], key[None], jnp.float32(1), jnp.float32(1), jnp.int32(cfg.vocab_size))
        return tok, cache

    prefill = jax.jit(lambda m, t, c: m.extend(t, c)[1])
    prompt = np.random.default_rng(0).integers(11, cfg.vocab_size, (1, prompt_len))

    def episode(seed):
        cache = prefill(model, jnp.asarray(prompt[:, :-1]), init_cache(cfg, 1, prompt_len + new_tokens))
        tok = jnp.asarray(prompt[:, -1])
        start = time.perf_counter()
        for i in range(new_tokens):
            tok, cache = step(model, tok[:, None], cache, jax.random.fold_in(jax.random.key(seed), i))
            if int(tok[0]) == -1:  # the host-side stop check a naive loop makes every token
                break
        return new_tokens, time.perf_counter() - start

    episode(0)  # compile
    runs = [episode(i + 1) for i in range(episodes)]
    return sum(n for n, _ in runs) / sum(s for _, s in runs)


def agent_loop_env_fraction(graphdef, params, cfg, episodes, slots):
    tok = Tokenizer.byte_level()
    rollout = RolloutConfig(window=2048, summary_budget=64, turn_budget=64, slots=slots, max_turns=4,
                            prefill_buckets=(64, 256, 1024))
    engine = RolloutEngine(graphdef, params, cfg, rollout, valid_vocab=tok.vocab_size)
    make_env = lambda: gym.make("composer/LongHorizon-v0", split="validation", max_turns=4,
                                suite_options=dict(hops=3, filler_lines=5, validation_size=50))
    loop = AgentLoop(engine, tok, rollout, make_env)
    loop.run([{"options": {"task_index": i}} for i in range(slots)])  # compile
    episodes_out = loop.run([{"options": {"task_index": i}} for i in range(episodes)])
    generated = sum(sum(s.loss_mask) for ep in episodes_out for s in ep.segments)
    loop.close()
    return dict(loop.stats, episodes=episodes, slots=slots, policy_tokens=generated)


def reset_cost(graphdef, params, cfg, episodes, keeps_prompt: bool):
    """Summary resets with and without keeping the prompt's KV: LongHorizon episodes (8 notes of 8
    filler lines, the env's own tool manual as system prompt) played by the scripted expert,
    teacher-forced through the real engine, so both runs prefill the same tokens except at resets."""
    from environments.scripted import NoteChainPolicy

    tok = Tokenizer.byte_level()
    rollout = RolloutConfig(window=4096, summarize_at=0.5, summary_budget=256, turn_budget=256, slots=8,
                            max_segments=24, max_turns=16, prefill_buckets=(64, 256, 1024),
                            reset_keeps_prompt=keeps_prompt)
    engine = RolloutEngine(graphdef, params, cfg, rollout, valid_vocab=tok.vocab_size)
    make_env = lambda: gym.make("composer/LongHorizon-v0", split="validation", max_turns=16,
                                suite_options=dict(hops=8, filler_lines=8, validation_size=50))
    loop = AgentLoop(engine, tok, rollout, make_env, make_policy=NoteChainPolicy)
    loop.run([{"options": {"task_index": i}} for i in range(8)])  # compile
    out = loop.run([{"options": {"task_index": i}} for i in range(episodes)])
    loop.close()
    tokens = sum(len(s.all_tokens) - len(s.prompt) + (len(s.prompt) if i == 0 else 0)
                 for ep in out for i, s in enumerate(ep.segments))
    st = loop.stats
    return dict(reset_keeps_prompt=keeps_prompt, episodes=episodes, passed=sum(ep.reward == 1.0 for ep in out),
                resets=st["resets"], prefill_per_reset=st["prefill_per_reset"], prefill_tokens=st["prefill_tokens"],
                prompt_tokens=len(out[0].segments[0].prompt), prefill_s=st["prefill_s"], wall_s=st["wall_s"],
                episode_tokens_per_s=tokens / st["wall_s"])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/tiny.py")
    parser.add_argument("--prompt_len", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=256)
    parser.add_argument("--naive_tokens", type=int, default=128)
    parser.add_argument("--agent_episodes", type=int, default=16)
    parser.add_argument("--reset_episodes", type=int, default=32,
                        help="episodes per arm of the reset-cost comparison (0 skips it)")
    parser.add_argument("--only_resets", action="store_true", help="measure only the reset cost")
    parser.add_argument("--only_prefill", action="store_true", help="measure only scored vs unscored prefill")
    parser.add_argument("--prefill_slots", type=int, default=8)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    cfg = ModelConfig.from_config(load_config(args.config).model)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)

    result = dict(config=args.config, prompt_len=args.prompt_len, new_tokens=args.new_tokens)
    if args.only_prefill:
        result["prefill"] = prefill_tokens_per_s(graphdef, params, cfg, args.prefill_slots, args.prompt_len)
        write_result(args.out, result)
        return
    if not args.only_resets:
        result["naive_tokens_per_s"] = naive_tokens_per_s(model, args.prompt_len, args.naive_tokens)
        for slots in (1, 8, 32):
            result[f"engine_tokens_per_s_{slots}"] = engine_tokens_per_s(
                graphdef, params, cfg, slots, args.prompt_len, args.new_tokens)
        result["speedup"] = result["engine_tokens_per_s_32"] / result["naive_tokens_per_s"]
        agent = agent_loop_env_fraction(graphdef, params, cfg, args.agent_episodes, slots=8)
        result["agent_loop"] = agent
        result["env_wait_fraction"] = agent["env_fraction"]
    if args.reset_episodes:
        resets = [reset_cost(graphdef, params, cfg, args.reset_episodes, keep) for keep in (False, True)]
        result["resets"] = resets
        result["reset_prefill_ratio"] = resets[1]["prefill_per_reset"] / resets[0]["prefill_per_reset"]
        result["reset_speedup"] = resets[1]["episode_tokens_per_s"] / resets[0]["episode_tokens_per_s"]
    write_result(args.out, result)


if __name__ == "__main__":
    main()
