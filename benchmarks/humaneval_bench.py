"""HumanEval pass@1 of an imported chat model, greedy, single-turn, through our KV-cache decoding.

Each problem's chat prompt (the Implement suite's `single_turn_prompt`, rendered in the model's
chat template) is decoded greedily in batches of similar length inside one jitted
`lax.while_loop`; the reply's last ```python block is graded by the suite's single-turn grader
(hidden tests in a fresh sandbox). Progress goes to `<out>.jsonl` as each batch is graded;
`--resume` keeps the problems already in that log and decodes only the rest.

  python benchmarks/humaneval_bench.py --config configs/qwen_coder_0p5b.py \
      --out benchmarks/results/humaneval_qwen.json [--limit N]
"""
from __future__ import annotations

import argparse
import functools
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from benchmarks.common import write_result
from composer_jax.checkpoints.store import load_imported, shapes
from composer_jax.config_loading import load_config
from composer_jax.harness.protocol import Message, render_conversation
from composer_jax.model import ModelConfig, init_cache
from environments.suites.implement import ImplementSuite, grade_single_turn, single_turn_prompt

SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
LENGTH_BUCKET = 256  # prompts pad up to a multiple of this: few distinct shapes, few compiles


@functools.partial(jax.jit, static_argnums=(0, 4, 5))
def greedy_generate(graphdef, state, prompt_bt, n_prompt_b, max_new: int, cache_len: int, stop_ids):
    """Greedy continuation of each row's first n_prompt_b[b] tokens -> (tokens [b, max_new],
    n_generated [b]); a row stops after emitting a stop id (which is kept)."""
    model = nnx.merge(graphdef, state)
    b = prompt_bt.shape[0]
    logits, cache, _ = model.extend(prompt_bt, init_cache(model.cfg, b, cache_len), n_prompt_b)
    first_b = jnp.argmax(logits[jnp.arange(b), n_prompt_b - 1], axis=-1).astype(jnp.int32)

    def cond(carry):
        i, _, _, _, done_b, _ = carry
        return (i < max_new) & ~jnp.all(done_b)

    def body(carry):
        i, tok_b, cache, out_bn, done_b, count_b = carry
        out_bn = out_bn.at[:, i].set(jnp.where(done_b, 0, tok_b))
        count_b = count_b + (~done_b).astype(jnp.int32)
        done_b = done_b | jnp.isin(tok_b, jnp.asarray(stop_ids))
        logits, cache, _ = model.extend(tok_b[:, None], cache)
        return i + 1, jnp.argmax(logits[:, 0], axis=-1).astype(jnp.int32), cache, out_bn, done_b, count_b

    init = (jnp.int32(0), first_b, cache, jnp.zeros((b, max_new), jnp.int32),
            jnp.zeros((b,), bool), jnp.zeros((b,), jnp.int32))
    _, _, _, out_bn, _, count_b = jax.lax.while_loop(cond, body, init)
    return out_bn, count_b


def chat_prompt_ids(tokenizer, task) -> list[int]:
    messages = [Message("system", SYSTEM_PROMPT), Message("user", single_turn_prompt(task))]
    return tokenizer.encode_with_specials(render_conversation(messages, add_generation_prompt=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", default="")
    parser.add_argument("--limit", type=int, default=0, help="first N problems only (0 = all)")
    parser.add_argument("--resume", action="store_true", help="keep graded problems from <out>.jsonl")
    args = parser.parse_args()
    config = load_config(args.config)
    imported = load_imported(config.sample.checkpoint)
    expected = ModelConfig.from_config(config.model)
    if shapes(imported.cfg) != shapes(expected):
        raise SystemExit(f"{config.sample.checkpoint} holds a different model than {args.config}")
    tok, batch, max_new = imported.tokenizer, config.sample.batch_size, config.sample.max_new_tokens
    stop_ids = tuple(sorted({tok.eos_id, tok.pad_id}))

    suite = ImplementSuite()
    tasks = [suite.get(t) for t in suite.task_ids("validation")]
    tasks = tasks[: args.limit] if args.limit else tasks
    prompts = [chat_prompt_ids(tok, t) for t in tasks]
    log_path = (args.out or "humaneval") + "l"
    done_rows = read_log(log_path) if args.resume else {}
    order = sorted((i for i in range(len(tasks)) if tasks[i].task_id not in done_rows),
                   key=lambda i: len(prompts[i]))
    passed = sum(r["passed"] for r in done_rows.values())
    timed = [r for r in done_rows.values() if "decode_s" in r]  # older logs lack per-row timing
    generated, decode_s = sum(r["n_tokens"] for r in timed), sum(r["decode_s"] for r in timed)
    if done_rows:
        print(f"resuming: {len(done_rows)} graded in {log_path} ({passed} passed), {len(order)} left")
    start = time.perf_counter()
    with open(log_path, "a" if args.resume else "w") as log:
        for first in range(0, len(order), batch):
            rows = order[first:first + batch]
            rows = rows + [rows[-1]] * (batch - len(rows))  # fixed batch shape: repeat the last row
            t = -(-max(len(prompts[i]) for i in rows) // LENGTH_BUCKET) * LENGTH_BUCKET
            prompt_bt = np.zeros((batch, t), np.int32)
            for r, i in enumerate(rows):
                prompt_bt[r, :len(prompts[i])] = prompts[i]
            n_prompt_b = np.array([len(prompts[i]) for i in rows], np.int32)
            tic = time.perf_counter()
            out_bn, count_b = jax.device_get(greedy_generate(
                imported.graphdef, imported.state, prompt_bt, n_prompt_b, max_new, t + max_new, stop_ids))
            batch_s = time.perf_counter() - tic
            decode_s += batch_s
            unique_rows = list(dict.fromkeys(rows))
            for r, i in enumerate(unique_rows):
                reply = tok.decode([x for x in out_bn[r, :count_b[r]] if x not in stop_ids])
                grade = grade_single_turn(tasks[i], reply)
                passed += bool(grade.passed)
                generated += int(count_b[r])
                log.write(json.dumps(dict(task_id=tasks[i].task_id, passed=bool(grade.passed),
                                          n_tokens=int(count_b[r]), reply=reply,
                                          decode_s=batch_s / len(unique_rows))) + "\n")
            log.flush()
            done = len(done_rows) + min(first + batch, len(order))
            print(f"{done}/{len(tasks)} passed={passed} tokens/s={generated / decode_s:.1f} "
                  f"elapsed={time.perf_counter() - start:.0f}s", flush=True)
    write_result(args.out, dict(
        config=args.config, n_problems=len(tasks), n_passed=passed, pass_at_1=passed / len(tasks),
        tokens_generated=generated, tokens_per_s=generated / max(decode_s, 1e-9), decode_s=decode_s,
        tokens_per_s_covers=f"{len(timed) + len(order)} problems with per-row decode timing",
        wall_s=time.perf_counter() - start, resumed_problems=len(done_rows), batch_size=batch, max_new_tokens=max_new,
        reference="llama.cpp on the same GGUF: 89/164 = 0.543"))


def read_log(path: str) -> dict[str, dict]:
    """task_id -> graded row from a progress log; a missing log means nothing graded yet."""
    try:
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError as e:
        raise SystemExit(f"{path}: not a humaneval progress log ({e}); delete it or drop --resume")
    return {r["task_id"]: r for r in rows}


if __name__ == "__main__":
    main()
