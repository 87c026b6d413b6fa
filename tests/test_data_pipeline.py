"""Loader: packing invariants, seeded shuffle, exact resume (also across host counts), mixture,
device placement."""
import json
from collections import Counter

import jax
import numpy as np
import pytest

from composer_jax.data.packing import PackedStream
from composer_jax.data.pipeline import make_dataset, packing_efficiency, to_device
from composer_jax.data.store import TokenStore, write_store
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.errors import ConfigError
from composer_jax.sharding import batch_sharding, make_mesh

SEQ = 64


def _store(path, texts, num_shards=2):
    tok = Tokenizer.byte_level()
    write_store(path, tokenizer=tok, num_shards=num_shards, source_hash="t",
                shard_texts=lambda i: texts[i::num_shards])
    return TokenStore.open(path, tok)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    # Lengths from 1 to ~5 rows; every text distinct; one document much longer than a row.
    texts = [f"# doc {i}\n" + "x = 1\n" * (i * 3 % 50) for i in range(40)] + ["y" * 5 * SEQ]
    return _store(tmp_path_factory.mktemp("store"), texts)


def _dataset(stores, weights=(1.0,), batch=4, seed=0, index=0, count=1, seq=SEQ):
    return make_dataset(stores, list(weights), seq_len=seq, global_batch_size=batch, seed=seed,
                        process_index=index, process_count=count)


def _take(iterator, n):
    return [next(iterator) for _ in range(n)]


def test_rows_never_mix_documents_and_positions_restart(store):
    stream = PackedStream(store.tokens_t, store.offsets_d1, SEQ, (0, 0))
    n_rows = 3 * store.n_tokens // SEQ  # about three epochs
    for i in range(n_rows):
        row = stream.row(i)
        seg, pos, tokens = row["segment_ids"], row["positions"], row["tokens"]
        assert seg[0] == 1 and np.all(np.diff(seg) >= 0) and np.all(np.diff(seg) <= 1)
        for s in np.unique(seg):
            piece = tokens[seg == s]
            np.testing.assert_array_equal(pos[seg == s], np.arange(len(piece)))
            # EOS (id 1) only ever ends a piece: a piece holds at most one document.
            assert 1 not in piece[:-1].tolist()


def test_an_epoch_holds_every_token_once(store):
    stream = PackedStream(store.tokens_t, store.offsets_d1, SEQ, (0, 0))
    n_rows = -(-store.n_tokens // SEQ)
    flat = np.concatenate([stream.row(i)["tokens"] for i in range(n_rows)])[:store.n_tokens]
    docs = np.split(flat, np.flatnonzero(flat == 1)[:-1] + 1)  # cut after each EOS
    expected = Counter(tuple(store.document(d)) for d in range(store.n_docs))
    assert Counter(map(tuple, docs)) == expected
    order, _ = stream.epoch(0)
    assert tuple(docs[0]) == tuple(store.document(order[0]))


def test_seeded_shuffle(store):
    def first(seed):
        return next(iter(_dataset([store], seed=seed)))["tokens"]

    np.testing.assert_array_equal(first(0), first(0))
    assert not np.array_equal(first(0), first(1))
    stream = PackedStream(store.tokens_t, store.offsets_d1, SEQ, (0, 0))
    assert not np.array_equal(stream.epoch(0)[0], stream.epoch(1)[0])


def test_batches_have_the_contract(store):
    batch = next(iter(_dataset([store])))
    assert sorted(batch) == ["positions", "segment_ids", "tokens"]
    assert all(v.shape == (4, SEQ) and v.dtype == np.int32 for v in batch.values())
    assert packing_efficiency(batch) == 1.0


def test_resume_is_bit_identical(store):
    it = iter(_dataset([store]))
    _take(it, 7)
    state = json.loads(json.dumps(it.get_state()))  # checkpoints store it as JSON
    expected = _take(it, 5)
    resumed = iter(_dataset([store]))
    resumed.set_state(state)
    for a, b in zip(expected, _take(resumed, 5)):
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])


def _rows(batch):
    return {tuple(r) for r in batch["tokens"].tolist()}


def test_host_shards_partition_the_global_batch_and_resume_on_another_host_count(store):
    one = iter(_dataset([store], batch=4))
    two = [iter(_dataset([store], batch=4, index=h, count=2)) for h in range(2)]
    for _ in range(3):
        global_rows = _rows(next(one))
        a, b = (_rows(next(it)) for it in two)
        assert a | b == global_rows and not a & b
    # A 1-host checkpoint restores on 2 hosts: same global rows next, none skipped or repeated.
    state = one.get_state()
    expected = [_rows(b) for b in _take(one, 3)]
    for h, it in enumerate(two):
        it.set_state(state)
    for rows in expected:
        assert _rows(next(two[0])) | _rows(next(two[1])) == rows


def test_mixture_follows_the_weights(tmp_path, store):
    other = _store(tmp_path, ["z" * 200] * 5)  # rows of only 'z' and EOS
    z, eos = Tokenizer.byte_level().encode("z")[0], 1
    it = iter(_dataset([store, other], weights=(3.0, 1.0), batch=8))
    rows = np.concatenate([b["tokens"] for b in _take(it, 50)])
    from_other = np.all(np.isin(rows, [z, eos]), axis=1).mean()
    assert 0.2 < from_other < 0.3


def test_device_placement_shards_the_batch(store):
    mesh = make_mesh({"data": -1})
    sharding = batch_sharding(mesh)
    batch = next(iter(_dataset([store], batch=8)))
    placed = to_device(batch, sharding)
    assert placed["tokens"].sharding == sharding and placed["tokens"].shape == (8, SEQ)
    np.testing.assert_array_equal(np.asarray(placed["positions"]), batch["positions"])
    assert len(placed["tokens"].addressable_shards) == len(jax.devices())


def test_config_errors(store):
    with pytest.raises(ConfigError, match="data.seq_len"):
        _dataset([store], seq=1)
    with pytest.raises(ConfigError, match="data.batch_size"):
        _dataset([store], batch=3, count=2)
    with pytest.raises(ConfigError, match="data.mixture"):
        _dataset([store], weights=(0.0,))
