"""Build (or resume) a data directory: corpus manifest, tokenizer, token stores per source/split.

    python -m composer_jax.data.build --config configs/tiny.py --workdir DIR

With `data.tokenizer_agent_tasks > 0` the tokenizer also trains on the RL env's expert
transcripts (rl/envs.py agent_texts), so the text the policy reads in RL tokenizes as compactly
as code. Rerunning reuses what exists: the tokenizer if DIR/tokenizer.json is there, every store shard
already marked DONE. A corpus that changed since DIR was built is an error, not a silent mix.
"""
import itertools
import json
import time
from collections.abc import Sequence

import ml_collections
import tqdm

from composer_jax.data import layout
from composer_jax.data.corpus import Manifest, build_manifest, read_text
from composer_jax.data.store import write_store
from composer_jax.data.tokenizer import Tokenizer, check_vocab_size
from composer_jax.errors import ConfigError


def validate_data_config(config: ml_collections.ConfigDict) -> None:
    """Fail early, naming the field, for values no build or loader could use."""
    data = config.data
    check_vocab_size(config.model.vocab_size)
    if data.seq_len < 2:
        raise ConfigError(f"data.seq_len must be >= 2 (a token and its target), got {data.seq_len}")
    if data.batch_size < 1:
        raise ConfigError(f"data.batch_size must be >= 1, got {data.batch_size}")
    if not data.mixture or min(data.mixture.values()) <= 0:
        raise ConfigError(f"data.mixture needs at least one source with a positive weight, "
                          f"got {dict(data.mixture)}")


def tokenizer_agent_texts(config, data_dir) -> list[str]:
    """`data.tokenizer_agent_tasks` expert transcripts of the RL env (`rl.env_id`) and the
    harness's text, repeated `data.tokenizer_agent_repeat` times: the tokenizer then covers what
    the policy reads in RL as well as code. Nothing when the tokenizer already exists."""
    tasks = int(config.data.get("tokenizer_agent_tasks", 0))
    if not tasks or layout.tokenizer_path(data_dir).exists():
        return []
    from composer_jax.rl.envs import agent_texts

    return agent_texts(config.rl, tasks) * int(config.data.get("tokenizer_agent_repeat", 1))


def corpus_manifest(data: ml_collections.ConfigDict, data_dir) -> Manifest:
    """The manifest of the corpus as it is now; must equal the one saved in data_dir, if any."""
    manifest = build_manifest(list(data.corpus_paths), data.include_stdlib, data.val_fraction,
                              data.max_file_bytes)
    path = layout.manifest_path(data_dir)
    if path.exists():
        saved = Manifest.load(path)
        if saved.hash != manifest.hash:
            raise ConfigError(
                f"{path}: the corpus changed since this directory was built (manifest "
                f"{saved.hash} -> {manifest.hash}); use a fresh --workdir")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        manifest.save(path)
    return manifest


def corpus_tokenizer(manifest: Manifest, vocab_size: int, data_dir,
                     extra: Sequence[str] = ()) -> tuple[Tokenizer, float]:
    """(tokenizer, seconds spent training: 0 when reused). Trained on the train split only,
    plus `extra` texts (tokenizer_agent_texts)."""
    path = layout.tokenizer_path(data_dir)
    if path.exists():
        tok = Tokenizer.load(path)
        if tok.vocab_size > vocab_size:
            raise ConfigError(f"{path} has {tok.vocab_size} tokens > model.vocab_size={vocab_size}")
        return tok, 0.0
    start = time.perf_counter()
    tok = Tokenizer.train(itertools.chain((read_text(d) for d in manifest.split("train")), extra), vocab_size)
    seconds = time.perf_counter() - start
    tok.save(path)
    return tok, seconds


def build_source(source: str, split: str, manifest: Manifest, tok: Tokenizer,
                 num_shards: int, data_dir, progress: bool) -> dict:
    """Write the store of one mixture source and split (the file corpus or a seqio task)."""
    if source == layout.CORPUS_SOURCE:
        docs = manifest.split(split)
        total, source_hash = len(docs), manifest.hash
        shard_texts = lambda i: [read_text(d) for d in docs[i::num_shards]]
    else:
        seqio_tasks = _seqio_tasks(source)
        seqio_tasks.register_corpus(manifest, tok)  # so our own tasks/mixture can be named too
        if source not in seqio_tasks.seqio.TaskRegistry.names() | seqio_tasks.seqio.MixtureRegistry.names():
            raise ConfigError(f"data.mixture: {source!r} is neither {layout.CORPUS_SOURCE!r} nor a "
                              "registered seqio task or mixture")
        total, source_hash = None, f"seqio:{source}"
        shard_texts = lambda i: seqio_tasks.shard_texts(source, split, i, num_shards)
    with tqdm.tqdm(total=total, desc=f"{source}/{split}", unit="doc", disable=not progress) as bar:
        return write_store(layout.store_path(data_dir, source, split), tokenizer=tok,
                           num_shards=num_shards, shard_texts=shard_texts, source_hash=source_hash,
                           on_shard=lambda i, n_docs, n_tokens: bar.update(n_docs))


def _seqio_tasks(source: str):
    try:
        from composer_jax.data import seqio_tasks  # optional extra: imports TensorFlow
    except ImportError as e:
        raise ConfigError(f"data.mixture: source {source!r} is a seqio task, which needs the seqio "
                          f"extra (pip install -e '.[seqio]'): {e}") from None
    return seqio_tasks


def build(config: ml_collections.ConfigDict, data_dir, progress: bool = True) -> dict:
    """Manifest, tokenizer and every store for `config.data`; returns (and saves) a summary."""
    validate_data_config(config)
    start = time.perf_counter()
    manifest = corpus_manifest(config.data, data_dir)
    tok, tokenizer_seconds = corpus_tokenizer(manifest, config.model.vocab_size, data_dir,
                                              tokenizer_agent_texts(config, data_dir))
    stores = {f"{source}/{split}": build_source(source, split, manifest, tok,
                                                config.data.num_shards, data_dir, progress)
              for source in config.data.mixture for split in layout.SPLITS}
    val = stores[f"{layout.CORPUS_SOURCE}/val"] if layout.CORPUS_SOURCE in config.data.mixture else None
    summary = {
        "files": len(manifest.documents),
        "skipped": manifest.skipped,
        "manifest_hash": manifest.hash,
        "tokenizer_hash": tok.hash,
        "vocab_size": tok.vocab_size,
        "tokenizer_train_seconds": round(tokenizer_seconds, 2),
        # EOS tokens are ours, not the text's: leave them out of the compression figure.
        "val_bytes_per_token": (round(val["n_bytes"] / max(val["n_tokens"] - val["n_docs"], 1), 3)
                                if val and val["n_docs"] else None),
        "stores": {name: {k: s[k] for k in ("n_docs", "n_tokens", "n_bytes", "shards_built",
                                            "shards_reused")} for name, s in stores.items()},
        "tokens": sum(s["n_tokens"] for s in stores.values()),
        "seconds": round(time.perf_counter() - start, 2),
    }
    layout.summary_path(data_dir).write_text(json.dumps(summary, indent=1))
    return summary


def main(argv) -> None:
    from composer_jax.config_schema import validate

    del argv
    validate(_CONFIG.value)
    summary = build(_CONFIG.value, _WORKDIR.value)
    print(f"files {summary['files']} (skipped {summary['skipped']}), tokens {summary['tokens']:,}, "
          f"val bytes/token {summary['val_bytes_per_token']}, tokenizer "
          f"{summary['tokenizer_train_seconds']} s, total {summary['seconds']} s")
    print(json.dumps(summary["stores"], indent=1))


if __name__ == "__main__":
    from absl import app, flags
    from ml_collections import config_flags

    _CONFIG = config_flags.DEFINE_config_file("config", None, "config file, e.g. configs/tiny.py")
    _WORKDIR = flags.DEFINE_string("workdir", None, "data directory to build or resume")
    flags.mark_flags_as_required(["config", "workdir"])
    try:
        app.run(main)
    except ConfigError as e:  # a user error: one clear line, no library traceback
        raise SystemExit(f"error: {e}") from None
