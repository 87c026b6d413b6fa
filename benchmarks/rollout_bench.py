"""Rollout engine throughput vs a naive per-token loop, and env wait in an agent-loop run.

  python benchmarks/rollout_bench.py --out benchmarks/results/rollout_tiny.json

Engine: every slot starts from a random prompt and decodes --new_tokens tokens (no stop ids, so
generations are long) inside one jitted `lax.while_loop`, for 1, 8 and 32 slots. Naive: the same
model through a jit-compiled single-token step (sample inside the jit) called from Python once
per token, checking for a stop token on the host, one episode at a time. Decoding a tiny model
on CPU at small batch is bound by reading the weights every step, so slots are where the
speed comes from. Agent loop: LongHorizon episodes driven by the (random) model through the
real environments; reports the fraction of wall time spent waiting on env reset/step.
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="configs/tiny.py")
    parser.add_argument("--prompt_len", type=int, default=32)
    parser.add_argument("--new_tokens", type=int, default=256)
    parser.add_argument("--naive_tokens", type=int, default=128)
    parser.add_argument("--agent_episodes", type=int, default=16)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    cfg = ModelConfig.from_config(load_config(args.config).model)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)

    result = dict(config=args.config, prompt_len=args.prompt_len, new_tokens=args.new_tokens)
    result["naive_tokens_per_s"] = naive_tokens_per_s(model, args.prompt_len, args.naive_tokens)
    for slots in (1, 8, 32):
        result[f"engine_tokens_per_s_{slots}"] = engine_tokens_per_s(
            graphdef, params, cfg, slots, args.prompt_len, args.new_tokens)
    result["speedup"] = result["engine_tokens_per_s_32"] / result["naive_tokens_per_s"]
    agent = agent_loop_env_fraction(graphdef, params, cfg, args.agent_episodes, slots=8)
    result["agent_loop"] = agent
    result["env_wait_fraction"] = agent["env_fraction"]
    write_result(args.out, result)


if __name__ == "__main__":
    main()
