"""Loader speed vs training speed, same run, same machine; writes JSON.

    python benchmarks/data_bench.py --out benchmarks/results/data_bench.json

Builds (or reuses) the stdlib data directory of configs/tiny.py, then measures
  loader_tokens_per_s  packed, batched rows on the host at the tiny training shape,
  train_tokens_per_s   the real jitted train step (composer_jax.train.step) of the tiny config,
  ratio                loader / train (the loader must never be the bottleneck: >= 10),
  packing_efficiency   non-pad fraction of rows at seq_len 512 on the stdlib store.
"""
import argparse
import json
import pathlib
import time

import jax
import numpy as np

from composer_jax.data import layout
from composer_jax.data.build import build
from composer_jax.data.pipeline import make_dataset, packing_efficiency, to_device
from composer_jax.data.store import TokenStore
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.model import ModelConfig, create_sharded
from composer_jax.sharding import batch_sharding, make_mesh
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import create_train_state, make_train_step
from configs.tiny import get_config


def loader_rate(store: TokenStore, seq_len: int, batch_size: int, n_batches: int) -> tuple[float, float]:
    """(tokens per second, packing efficiency) over n_batches after one warm-up batch."""
    it = iter(make_dataset([store], [1.0], seq_len=seq_len, global_batch_size=batch_size, seed=0,
                           process_index=0, process_count=1))
    next(it)
    start, eff = time.perf_counter(), []
    for _ in range(n_batches):
        eff.append(packing_efficiency(next(it)))
    return n_batches * batch_size * seq_len / (time.perf_counter() - start), float(np.mean(eff))


def train_rate(config, store: TokenStore, n_steps: int) -> float:
    """Tokens per second of the real train step on batches from the loader (compile excluded)."""
    mesh = make_mesh(config.mesh)
    cfg = ModelConfig.from_config(config.model)
    graphdef, state = create_sharded(cfg, mesh, seed=0)
    tx = make_optimizer(config.train)
    data = iter(make_dataset([store], [1.0], seq_len=config.data.seq_len,
                             global_batch_size=config.data.batch_size, seed=0))
    sharding = batch_sharding(mesh)
    with jax.set_mesh(mesh):
        train_state, shardings = create_train_state(state, tx)
        step = make_train_step(graphdef, tx, cfg, config.train, shardings, sharding)
        for _ in range(2):  # compile + one warm step
            train_state, metrics = step(train_state, to_device(next(data), sharding))
        jax.block_until_ready(metrics)
        start = time.perf_counter()
        for _ in range(n_steps):
            train_state, metrics = step(train_state, to_device(next(data), sharding))
        jax.block_until_ready(metrics)
    return n_steps * config.data.batch_size * config.data.seq_len / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--data_dir", default="/tmp/composer_jax_data_bench")
    parser.add_argument("--train_steps", type=int, default=10)
    parser.add_argument("--loader_batches", type=int, default=300)
    args = parser.parse_args()

    config = get_config()
    summary = build(config, args.data_dir, progress=False)
    tok = Tokenizer.load(layout.tokenizer_path(args.data_dir))
    store = TokenStore.open(layout.store_path(args.data_dir, layout.CORPUS_SOURCE, "train"), tok)

    loader, _ = loader_rate(store, config.data.seq_len, config.data.batch_size, args.loader_batches)
    loader_512, efficiency = loader_rate(store, 512, config.data.batch_size, args.loader_batches)
    train = train_rate(config, store, args.train_steps)
    result = {
        "loader_tokens_per_s": round(loader),
        "train_tokens_per_s": round(train, 1),
        "ratio": round(loader / train, 1),
        "packing_efficiency": efficiency,
        "loader_tokens_per_s_seq512": round(loader_512),
        "train_step": "composer_jax.train.step.make_train_step (tiny config, AdamW, jitted, sharded)",
        "seq_len": config.data.seq_len,
        "batch_size": config.data.batch_size,
        "devices": f"{len(jax.devices())} x {jax.devices()[0].device_kind}",
        "store_tokens": store.n_tokens,
        "build_seconds": summary["seconds"],
    }
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    if result["ratio"] < 10 or efficiency < 0.98:
        raise SystemExit("data bench: the loader would hold training back (ratio < 10 or packing < 0.98)")


if __name__ == "__main__":
    main()
