"""Token store: jagged round trip, dtype, resumable build, mismatch errors."""
import json

import numpy as np
import pytest

from composer_jax.data.store import TokenStore, token_dtype, write_store
from composer_jax.data.tokenizer import Tokenizer
from composer_jax.errors import ConfigError

TEXTS = [f"def f{i}():\n    return {'x' * i!r}\n" for i in range(20)] + ["", "é <|eos|>"]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.byte_level()


def _build(path, tok, **kw):
    kw.setdefault("shard_texts", lambda i: TEXTS[i::3])
    return write_store(path, tokenizer=tok, num_shards=3, source_hash="corpus-1", **kw)


def test_round_trip_every_document_ends_with_eos(tmp_path, tok):
    meta = _build(tmp_path, tok)
    store = TokenStore.open(tmp_path, tok)
    assert store.tokens_t.dtype == np.uint16 and meta["dtype"] == "uint16"
    assert store.n_docs == len(TEXTS) == meta["n_docs"] and store.n_tokens == meta["n_tokens"]
    shard_order = [t for i in range(3) for t in TEXTS[i::3]]
    for d, text in enumerate(shard_order):
        assert store.document(d).tolist() == tok.encode(text) + [tok.eos_id]
        assert tok.decode(store.document(d)[:-1].tolist()) == text


def test_token_dtype():
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32


def test_interrupted_build_resumes_to_the_same_store(tmp_path, tok):
    calls = []

    def failing(i):
        calls.append(i)
        if i == 2:
            raise KeyboardInterrupt
        return TEXTS[i::3]

    with pytest.raises(KeyboardInterrupt):
        _build(tmp_path / "a", tok, shard_texts=failing)
    with pytest.raises(ConfigError, match="incomplete"):
        TokenStore.open(tmp_path / "a")
    calls.clear()
    meta = _build(tmp_path / "a", tok, shard_texts=lambda i: calls.append(i) or TEXTS[i::3])
    assert calls == [2] and meta["shards_reused"] == 2 and meta["shards_built"] == 1
    _build(tmp_path / "b", tok)
    a, b = TokenStore.open(tmp_path / "a"), TokenStore.open(tmp_path / "b")
    np.testing.assert_array_equal(a.tokens_t, b.tokens_t)
    np.testing.assert_array_equal(a.offsets_d1, b.offsets_d1)


def test_other_tokenizer_or_source_is_refused(tmp_path, tok):
    _build(tmp_path, tok)
    other = Tokenizer.train(TEXTS * 5, 300)
    with pytest.raises(ConfigError, match="tokenizer_hash"):
        TokenStore.open(tmp_path, other)
    with pytest.raises(ConfigError, match="source_hash"):
        write_store(tmp_path, tokenizer=tok, num_shards=3, source_hash="corpus-2",
                    shard_texts=lambda i: TEXTS[i::3])
    assert json.loads((tmp_path / "store.json").read_text())["source_hash"] == "corpus-1"


def test_open_missing_store(tmp_path):
    with pytest.raises(ConfigError, match="no token store"):
        TokenStore.open(tmp_path / "nope")
