"""Summarise a mid-training run: validation loss curve against the corpus unigram baseline.

    python benchmarks/midtrain_report.py --workdir runs/midtrain_tiny --data_dir runs/data_tiny \
        --out benchmarks/results/midtrain_tiny.json --plot benchmarks/results/midtrain_tiny_loss.png

Baselines (nats per token): the unigram entropy of the training tokens, and the unigram model's
cross-entropy on the validation tokens (add-one smoothed). Bits per byte = validation loss /
ln 2 / validation bytes per token (the build's figure, which leaves our EOS tokens out).
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from composer_jax.data import layout
from composer_jax.data.store import TokenStore
from composer_jax.train.metrics import read_jsonl


def unigram_baselines(train_tokens: np.ndarray, val_tokens: np.ndarray, vocab: int) -> dict:
    counts = np.bincount(train_tokens, minlength=vocab).astype(np.float64)
    p = counts / counts.sum()
    entropy = float(-np.sum(p[p > 0] * np.log(p[p > 0])))
    smoothed = (counts + 1) / (counts.sum() + vocab)
    val_ce = float(-np.mean(np.log(smoothed[val_tokens])))
    return {"unigram_entropy_train": entropy, "unigram_ce_val": val_ce}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--plot", required=True)
    args = parser.parse_args()

    records = read_jsonl(pathlib.Path(args.workdir) / "metrics.jsonl")
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    if not evals:
        raise SystemExit(f"{args.workdir}/metrics.jsonl has no validation records yet")
    summary = json.loads(layout.summary_path(args.data_dir).read_text())
    bytes_per_token = summary["val_bytes_per_token"]
    train_store = TokenStore.open(layout.store_path(args.data_dir, layout.CORPUS_SOURCE, "train"))
    val_store = TokenStore.open(layout.store_path(args.data_dir, layout.CORPUS_SOURCE, "val"))
    base = unigram_baselines(train_store.tokens_t.astype(np.int64), val_store.tokens_t.astype(np.int64),
                             summary["vocab_size"])
    rate = [r["tokens_per_s"] for r in train if "tokens_per_s" in r]
    mfus = [r["mfu"] for r in train if "mfu" in r]
    first, last = evals[0], evals[-1]
    out = {
        "steps": train[-1]["step"],
        "tokens_trained": sum(r["tokens"] for r in train),
        "val_loss": [(r["step"], r["loss"]) for r in evals],
        "val_loss_first": first["loss"], "val_loss_first_step": first["step"],
        "val_loss_last": last["loss"], "val_loss_last_step": last["step"],
        "val_perplexity_last": last["perplexity"],
        **base,
        "val_bytes_per_token": bytes_per_token,
        "val_bits_per_byte_last": last["loss"] / math.log(2) / bytes_per_token,
        "unigram_bits_per_byte_val": base["unigram_ce_val"] / math.log(2) / bytes_per_token,
        "median_tokens_per_s": float(np.median(rate)) if rate else None,
        "median_mfu": float(np.median(mfus)) if mfus else None,
        "peak_flops": next(r["peak_flops"] for r in records if r["kind"] == "run"),
        "train_store_tokens": train_store.n_tokens,
        "val_store_tokens": val_store.n_tokens,
    }
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1))

    fig, ax = plt.subplots(figsize=(7, 4.2))
    steps = np.array([r["step"] for r in train])
    ce = np.array([r["ce"] for r in train])
    k = min(10, len(ce))
    ax.plot(steps[k - 1:], np.convolve(ce, np.ones(k) / k, mode="valid"), lw=1, alpha=0.6,
            label=f"train CE ({k}-step mean)")
    ax.plot([r["step"] for r in evals], [r["loss"] for r in evals], "o-", label="validation CE")
    ax.axhline(base["unigram_entropy_train"], color="gray", ls="--",
               label=f"unigram entropy {base['unigram_entropy_train']:.2f}")
    ax.set_xlabel("step")
    ax.set_ylabel("nats / token")
    ax.set_title(f"tiny MoE mid-training on the stdlib: val {last['loss']:.2f} nats, "
                 f"{out['val_bits_per_byte_last']:.2f} bits/byte", fontsize=9)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    print(json.dumps({k: v for k, v in out.items() if k != "val_loss"}, indent=1))


if __name__ == "__main__":
    main()
