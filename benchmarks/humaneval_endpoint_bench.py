"""HumanEval through the OpenAI endpoint vs in-process: the same problems, prompts and grader.

    python benchmarks/humaneval_endpoint_bench.py --config configs/qwen_coder_0p5b.py \
        --checkpoint ~/.cache/composer_jax/qwen2.5-coder-0.5b-instruct --limit 16 \
        --out benchmarks/results/humaneval_endpoint_qwen.json

Each problem's chat (humaneval_bench's system prompt and the Implement suite's single-turn
prompt) is sent with the official `openai` client (temperature 0, `max_tokens` =
`sample.max_new_tokens`, `--streams` concurrent clients) to the server on the checkpoint; the
reply is graded by the suite's single-turn grader, as in-process. The in-process replies of
`benchmarks/results/humaneval_qwen.jsonl` (humaneval_bench.py) are the reference: per problem,
whether both pass and whether the replies are the same text.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import pathlib
import time

import tqdm

from benchmarks.humaneval_bench import SYSTEM_PROMPT, read_log
from composer_jax.config_loading import load_config, split_overrides
from environments.suites.implement import ImplementSuite, grade_single_turn, single_turn_prompt


def main(argv=None) -> None:
    given = list(argv or [])
    argv, overrides = split_overrides(given)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--limit", type=int, default=16, help="first N validation problems (0 = all 164)")
    p.add_argument("--streams", type=int, default=8)
    p.add_argument("--reference", default="benchmarks/results/humaneval_qwen.jsonl")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    import openai

    from composer_jax.serve.__main__ import build_server
    from composer_jax.serve.app import Background

    config = load_config(args.config, overrides)
    max_tokens = int(config.sample.max_new_tokens)
    config.rollout.update(slots=args.streams, turn_budget=max_tokens, summary_budget=64,
                          window=max(int(config.rollout.window), 1024 + max_tokens))
    suite = ImplementSuite()
    tasks = [suite.get(t) for t in suite.task_ids("validation")]
    tasks = tasks[: args.limit] if args.limit else tasks
    reference = read_log(args.reference)
    server = build_server(config, args.checkpoint, summarize=False)
    http = Background(server)
    client = openai.OpenAI(base_url=http.url, api_key="unused", max_retries=0, timeout=3600)

    def solve(task) -> dict:
        r = client.chat.completions.create(model=server.model_name, temperature=0, max_tokens=max_tokens,
                                           messages=[{"role": "system", "content": SYSTEM_PROMPT},
                                                     {"role": "user", "content": single_turn_prompt(task)}])
        reply = r.choices[0].message.content or ""
        ref = reference.get(task.task_id, {})
        return dict(task_id=task.task_id, passed=bool(grade_single_turn(task, reply).passed),
                    n_tokens=r.usage.completion_tokens, reference_passed=ref.get("passed"),
                    same_reply=ref.get("reply") == reply if ref else None, reply=reply)

    t0 = time.perf_counter()
    try:
        with concurrent.futures.ThreadPoolExecutor(args.streams) as pool:
            rows = list(tqdm.tqdm(pool.map(solve, tasks), total=len(tasks), desc="HumanEval", unit="problem"))
    finally:
        http.close()
        server.close()
    wall = time.perf_counter() - t0
    compared = [r for r in rows if r["reference_passed"] is not None]
    result = dict(
        config=args.config, checkpoint=args.checkpoint, problems=len(rows), passed=sum(r["passed"] for r in rows),
        reference_passed=sum(bool(r["reference_passed"]) for r in compared), compared=len(compared),
        same_outcome=sum(r["passed"] == r["reference_passed"] for r in compared),
        same_reply=sum(bool(r["same_reply"]) for r in compared), wall_s=wall,
        output_tokens_per_s=sum(r["n_tokens"] for r in rows) / wall, streams=args.streams,
        command="python benchmarks/humaneval_endpoint_bench.py " + " ".join(given), rows=rows)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
