"""Token store: tokenised documents as tensorstore zarr3 jagged arrays, one pair per shard.

Layout (Levanter-style: flat tokens + cumulative offsets):
    store.json                  what built it: tokenizer hash, source hash, vocab size, dtype, shards
    shard_00000/tokens          zarr3 [n_tokens] uint16 (uint32 when the vocab exceeds 65536)
    shard_00000/offsets         zarr3 [n_docs + 1] int64; document d is tokens[offsets[d]:offsets[d+1]]
    shard_00000/DONE            written last (atomic rename): the shard is complete
A build writes shard after shard; an interrupted build resumes by skipping shards that have DONE.
Every document ends with EOS, so packed rows show the model where documents stop.
"""
import json
import os
import pathlib
from collections.abc import Callable, Iterable

import numpy as np
import tensorstore as ts

from composer_jax.data.tokenizer import Tokenizer
from composer_jax.errors import ConfigError

FORMAT_VERSION = 1
_CHUNK = 1 << 18  # elements per zarr chunk: 512 kB of uint16 tokens


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


def _array_spec(path: pathlib.Path) -> dict:
    return {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(path)}}


def _write_array(path: pathlib.Path, values: np.ndarray) -> None:
    spec = _array_spec(path) | {
        "metadata": {
            "shape": [len(values)],
            "data_type": values.dtype.name,
            "chunk_grid": {"name": "regular",
                           "configuration": {"chunk_shape": [max(1, min(len(values), _CHUNK))]}},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}},
                       {"name": "zstd", "configuration": {"level": 3}}],
        }
    }
    ts.open(spec, create=True, delete_existing=True).result().write(values).result()


def _read_array(path: pathlib.Path) -> np.ndarray:
    return ts.open(_array_spec(path), open=True).result().read().result()


def _shard_dir(root: pathlib.Path, i: int) -> pathlib.Path:
    return root / f"shard_{i:05d}"


def _write_json_atomic(path: pathlib.Path, payload: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    os.replace(tmp, path)


def _check_meta(path: pathlib.Path, found: dict, expected: dict) -> None:
    diffs = [f"{k}: store has {found.get(k)!r}, expected {v!r}" for k, v in expected.items()
             if found.get(k) != v]
    if diffs:
        raise ConfigError(
            f"token store {path} does not match: " + "; ".join(diffs)
            + ". It was built from another tokenizer or corpus: delete it or use another workdir."
        )


def write_store(
    path: str | os.PathLike,
    *,
    tokenizer: Tokenizer,
    num_shards: int,
    shard_texts: Callable[[int], Iterable[str]],
    source_hash: str,
    on_shard: Callable[[int, int, int], None] | None = None,
) -> dict:
    """Tokenise `shard_texts(i)` for every shard i not yet DONE.

    Returns the store's metadata plus totals: n_docs, n_tokens (EOS included), n_bytes of text,
    shards_built (this call) and shards_reused (DONE before it).

    `source_hash` identifies the input (e.g. the corpus manifest hash): resuming with another
    source or tokenizer is an error rather than a silently mixed store.
    `on_shard(i, n_docs, n_tokens)` is called after each shard (skipped ones included).
    """
    if num_shards < 1:
        raise ConfigError(f"data.num_shards must be >= 1, got {num_shards}")
    root = pathlib.Path(path)
    root.mkdir(parents=True, exist_ok=True)
    dtype = token_dtype(tokenizer.vocab_size)
    meta = {
        "format_version": FORMAT_VERSION,
        "tokenizer_hash": tokenizer.hash,
        "source_hash": source_hash,
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "num_shards": num_shards,
        "eos_id": tokenizer.eos_id,
    }
    meta_path = root / "store.json"
    if meta_path.exists():
        _check_meta(root, json.loads(meta_path.read_text()), meta)
    else:
        _write_json_atomic(meta_path, meta)
    totals = {k: 0 for k in ("n_docs", "n_tokens", "n_bytes", "shards_built", "shards_reused")}
    for i in range(num_shards):
        shard = _shard_dir(root, i)
        done = shard / "DONE"
        if done.exists():
            stats = json.loads(done.read_text())
            totals["shards_reused"] += 1
        else:
            stats = _write_shard(shard, tokenizer, list(shard_texts(i)), dtype)
            _write_json_atomic(done, stats)
            totals["shards_built"] += 1
        for k in ("n_docs", "n_tokens", "n_bytes"):
            totals[k] += stats[k]
        if on_shard is not None:
            on_shard(i, stats["n_docs"], stats["n_tokens"])
    return meta | totals


def _write_shard(shard: pathlib.Path, tokenizer: Tokenizer, texts: list[str], dtype) -> dict:
    ids = tokenizer.encode_batch(texts)
    lengths_d = np.array([len(x) + 1 for x in ids], dtype=np.int64)  # + EOS
    offsets_d1 = np.concatenate([[0], np.cumsum(lengths_d)]).astype(np.int64)
    tokens_t = np.full(int(offsets_d1[-1]), tokenizer.eos_id, dtype=dtype)
    for x, start in zip(ids, offsets_d1[:-1]):
        tokens_t[start:start + len(x)] = x
    shard.mkdir(parents=True, exist_ok=True)
    _write_array(shard / "tokens", tokens_t)
    _write_array(shard / "offsets", offsets_d1)
    return {"n_docs": len(texts), "n_tokens": int(offsets_d1[-1]),
            "n_bytes": sum(len(t.encode("utf-8")) for t in texts)}


class TokenStore:
    """A complete store, read into host memory (tokens as uint16/uint32: 2-4 bytes per token).

    `tokens_t` is all shards' tokens back to back; document d is tokens_t[offsets_d1[d]:offsets_d1[d+1]].
    """

    def __init__(self, path: pathlib.Path, meta: dict, tokens_t: np.ndarray, offsets_d1: np.ndarray):
        self.path, self.meta, self.tokens_t, self.offsets_d1 = path, meta, tokens_t, offsets_d1

    @classmethod
    def open(cls, path: str | os.PathLike, tokenizer: Tokenizer | None = None) -> "TokenStore":
        """Open a finished store; with `tokenizer`, fail unless the store was built with it."""
        root = pathlib.Path(path)
        meta_path = root / "store.json"
        if not meta_path.exists():
            raise ConfigError(f"no token store at {root} (missing store.json): build it first")
        meta = json.loads(meta_path.read_text())
        if tokenizer is not None:
            _check_meta(root, meta, {"tokenizer_hash": tokenizer.hash, "vocab_size": tokenizer.vocab_size})
        missing = [i for i in range(meta["num_shards"]) if not (_shard_dir(root, i) / "DONE").exists()]
        if missing:
            raise ConfigError(f"token store {root} is incomplete (shards {missing} unfinished): "
                                  "rerun the build to resume it")
        tokens, offsets, base = [], [np.zeros(1, np.int64)], 0
        for i in range(meta["num_shards"]):
            shard = _shard_dir(root, i)
            tokens.append(_read_array(shard / "tokens"))
            offsets.append(_read_array(shard / "offsets")[1:] + base)
            base += len(tokens[-1])
        return cls(root, meta, np.concatenate(tokens), np.concatenate(offsets))

    @property
    def n_docs(self) -> int:
        return len(self.offsets_d1) - 1

    @property
    def n_tokens(self) -> int:
        return len(self.tokens_t)

    @property
    def lengths_d(self) -> np.ndarray:
        return np.diff(self.offsets_d1)

    def document(self, d: int) -> np.ndarray:
        return self.tokens_t[self.offsets_d1[d]:self.offsets_d1[d + 1]]
