"""Serving throughput and latency of the OpenAI endpoint at 1, 8 and 32 concurrent streams.

    python benchmarks/serve_bench.py --out benchmarks/results/serve_tiny.json
    python benchmarks/serve_bench.py --config configs/qwen_coder_0p5b.py --checkpoint DIR \
        --peer_gguf PATH.gguf --out benchmarks/results/serve_qwen_cpu.json

Each stream is an `openai` client sending streaming requests (temperature 0, `max_tokens`
each) one after another; all streams start together. Per stream count: output tokens/s over
the wall time, time to first token (TTFT: request sent -> first content chunk) and per-token
latency ((last chunk - first chunk) / (tokens - 1)), p50 and p99 over requests. With
`--peer_gguf`, Hugging Face transformers `generate` on the same weights and dtype (loaded from
the GGUF, greedy, the stream count as the batch) is measured beside it: the floor. With
`--peer_url` (and `--peer_model`), another OpenAI-compatible server on the same machine (vLLM's,
llama.cpp's) gets the same requests from the same driver right after ours, one stream count at a
time: ratio_vs_peer is ours over its tokens/s.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import pathlib
import platform
import time

import numpy as np

from composer_jax.config_loading import load_config, split_overrides


def one_request(client, model: str, i: int, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    first = last = None
    tokens = 0
    stream = client.chat.completions.create(
        model=model, temperature=0, max_tokens=max_tokens, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": f"Request {i}: write a function that returns {i} squared."}])
    for chunk in stream:
        now = time.perf_counter()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        if chunk.choices and chunk.choices[0].delta.content:
            first = first if first is not None else now
            last = now
    first = first if first is not None else time.perf_counter()
    last = last if last is not None else first
    return dict(ttft_s=first - t0, tokens=tokens, per_token_s=(last - first) / max(tokens - 1, 1),
                total_s=time.perf_counter() - t0)


def measure(client, model: str, streams: int, requests: int, max_tokens: int) -> dict:
    def stream(s: int) -> list[dict]:
        return [one_request(client, model, s * 1000 + r, max_tokens) for r in range(requests)]

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(streams) as pool:
        results = [r for rs in pool.map(stream, range(streams)) for r in rs]
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)

    def pct(key, q):
        return float(np.percentile([r[key] for r in results], q))
    return dict(streams=streams, requests=len(results), output_tokens=tokens, wall_s=wall,
                output_tokens_per_s=tokens / wall, ttft_p50_s=pct("ttft_s", 50), ttft_p99_s=pct("ttft_s", 99),
                per_token_p50_s=pct("per_token_s", 50), per_token_p99_s=pct("per_token_s", 99))


def hf_peer(gguf: str, streams: int, max_tokens: int, dtype: str) -> dict:
    """transformers `generate` on the same GGUF weights: a batch of `streams` prompts, greedy."""
    import torch
    import transformers

    path = pathlib.Path(gguf)
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                              torch_dtype=getattr(torch, dtype))
    tok.padding_side = "left"
    prompts = [tok.apply_chat_template([{"role": "user", "content": f"Request {i}: write a function that returns "
                                         f"{i} squared."}], tokenize=False, add_generation_prompt=True)
               for i in range(streams)]
    batch = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        model.generate(**batch, max_new_tokens=2, do_sample=False)  # warm-up
        t0 = time.perf_counter()
        out = model.generate(**batch, max_new_tokens=max_tokens, do_sample=False, min_new_tokens=max_tokens)
        wall = time.perf_counter() - t0
    tokens = int((out.shape[1] - batch["input_ids"].shape[1]) * streams)
    return dict(streams=streams, output_tokens=tokens, wall_s=wall, output_tokens_per_s=tokens / wall)


def main(argv=None) -> None:
    given = list(argv or [])
    argv, overrides = split_overrides(given)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/tiny.py")
    p.add_argument("--checkpoint", default="")
    p.add_argument("--streams", default="1,8,32")
    p.add_argument("--requests", type=int, default=2, help="requests per stream")
    p.add_argument("--max_tokens", type=int, default=64)
    p.add_argument("--chunk", type=int, default=16)
    p.add_argument("--peer_gguf", default="", help="the same model as a GGUF file: measure transformers beside it")
    p.add_argument("--peer_url", default="", help="another OpenAI-compatible server's base URL (.../v1)")
    p.add_argument("--peer_model", default="", help="the model name that server serves")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if bool(args.peer_url) != bool(args.peer_model):
        p.error("--peer_url and --peer_model go together")
    import openai

    from composer_jax.serve.__main__ import build_server
    from composer_jax.serve.app import Background

    streams = [int(s) for s in args.streams.split(",")]
    overrides = [f"rollout.slots={max(streams)}", f"rollout.turn_budget={args.max_tokens}", *overrides]
    config = load_config(args.config, overrides)
    server = build_server(config, args.checkpoint, chunk=args.chunk, summarize=False)
    http = Background(server)
    client = openai.OpenAI(base_url=http.url, api_key="unused", max_retries=0, timeout=3600)
    peer = (openai.OpenAI(base_url=args.peer_url, api_key="unused", max_retries=0, timeout=3600)
            if args.peer_url else None)
    try:
        measure(client, server.model_name, max(streams), 1, 4)  # compile every prefill/decode shape once
        if peer is not None:
            measure(peer, args.peer_model, max(streams), 1, 4)
        rows = []
        for n in streams:
            row = measure(client, server.model_name, n, args.requests, args.max_tokens)
            if args.peer_gguf:
                row["hf_transformers"] = hf_peer(args.peer_gguf, n, args.max_tokens, config.model.dtype)
                row["ratio_vs_hf"] = row["output_tokens_per_s"] / row["hf_transformers"]["output_tokens_per_s"]
            if peer is not None:
                row["peer_server"] = dict(url=args.peer_url, **measure(peer, args.peer_model, n, args.requests,
                                                                       args.max_tokens))
                row["ratio_vs_peer"] = row["output_tokens_per_s"] / row["peer_server"]["output_tokens_per_s"]
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        http.close()
        server.close()
    result = dict(config=args.config, checkpoint=args.checkpoint, model=server.model_name,
                  max_tokens=args.max_tokens, chunk=args.chunk, slots=server.engine.slots,
                  machine=f"{platform.machine()} CPU x{__import__('os').cpu_count()}", rows=rows,
                  command="python benchmarks/serve_bench.py " + " ".join(given))
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    import sys
    main(sys.argv[1:])
