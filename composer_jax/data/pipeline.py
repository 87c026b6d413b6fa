"""grain loader: token stores -> packed rows -> mixture -> host shard -> batches -> devices.

    rows(store_i) = MapDataset over the endless packed stream of store i (see packing.py)
    mixed         = MapDataset.mix(rows, weights)          one global row sequence
    host shard    = mixed[process_index::process_count]    interleaved rows
    batches       = .batch(global_batch // process_count) -> .to_iter_dataset()

Local batch k on every host holds rows of global rows [k*G, (k+1)*G), whatever the host count,
so the iterator state ({'next_index': k}) restores exactly on any number of hosts with the same
global batch size. Batches: {'tokens','segment_ids','positions'} int32 [B, L].
"""
import sys
from collections.abc import Sequence

import grain
import jax
import numpy as np
from jax.sharding import NamedSharding

from composer_jax.data import layout
from composer_jax.data.packing import PackedStream
from composer_jax.data.store import TokenStore
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.errors import ConfigError


def packed_rows(store: TokenStore, seq_len: int, seed: tuple[int, ...]) -> grain.MapDataset:
    """Endless MapDataset: element i is row i of the store's packed stream."""
    if store.n_tokens == 0:
        raise ConfigError(f"token store {store.path} holds no tokens")
    stream = PackedStream(store.tokens_t, store.offsets_d1, seq_len, seed)
    return grain.MapDataset.range(sys.maxsize).map(stream.row)


def make_dataset(
    stores: Sequence[TokenStore],
    weights: Sequence[float],
    *,
    seq_len: int,
    global_batch_size: int,
    seed: int,
    process_index: int | None = None,
    process_count: int | None = None,
    read_threads: int = 2,
) -> grain.IterDataset:
    """Batches for this host; `iter(...)` gives a checkpointable grain DatasetIterator."""
    if seq_len < 2:
        raise ConfigError(f"data.seq_len must be >= 2 (a token and its target), got {seq_len}")
    if len(stores) != len(weights) or not stores or min(weights) <= 0:
        raise ConfigError(f"data.mixture: need one positive weight per store, got {list(weights)}")
    process_index = jax.process_index() if process_index is None else process_index
    process_count = jax.process_count() if process_count is None else process_count
    if global_batch_size % process_count:
        raise ConfigError(
            f"data.batch_size={global_batch_size} is not divisible by {process_count} hosts")
    rows = [packed_rows(s, seq_len, (seed, i)) for i, s in enumerate(stores)]
    mixed = rows[0] if len(rows) == 1 else grain.MapDataset.mix(rows, list(weights))
    local = mixed[process_index::process_count].batch(global_batch_size // process_count)
    return local.to_iter_dataset(grain.ReadOptions(num_threads=read_threads, prefetch_buffer_size=4))


def dataset_from_config(config, data_dir, split: str = "train") -> grain.IterDataset:
    """The loader for `config.data` over a directory made by `composer_jax.data.build`."""
    tok = Tokenizer.load(layout.tokenizer_path(data_dir))
    if tok.vocab_size > config.model.vocab_size:
        raise ConfigError(f"model.vocab_size={config.model.vocab_size} < {tok.vocab_size} tokens "
                          f"of {layout.tokenizer_path(data_dir)}")
    sources = list(config.data.mixture)
    stores = [TokenStore.open(layout.store_path(data_dir, s, split), tok) for s in sources]
    return make_dataset(stores, [config.data.mixture[s] for s in sources],
                        seq_len=config.data.seq_len, global_batch_size=config.data.batch_size,
                        seed=config.data.shuffle_seed)


def to_device(batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
    """Host-local [B_local, L] numpy arrays -> global [B, L] jax Arrays with `sharding`
    (`composer_jax.sharding.batch_sharding(mesh)`: batch over the data-parallel axes)."""
    return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in batch.items()}


def packing_efficiency(batch: dict[str, np.ndarray]) -> float:
    """Fraction of non-pad tokens (segment id > 0)."""
    return float(np.mean(batch["segment_ids"] > 0))
