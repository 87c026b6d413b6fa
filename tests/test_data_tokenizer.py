"""Tokenizer: reserved special ids, exact round trip, special-token handling, save/load, hash."""

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_jax.data.corpus import stdlib_root
from composer_jax.data.tokenizer import MIN_VOCAB_SIZE, Tokenizer
from composer_jax.errors import ConfigError
from composer_jax.harness.special_tokens import EOS, SPECIAL_TOKENS, SUMMARY_OPEN


def _stdlib_texts(n=30):
    return [p.read_bytes().decode("utf-8") for p in sorted(stdlib_root().glob("*.py"))[:n]]


@pytest.fixture(scope="module")
def texts():
    return _stdlib_texts()


@pytest.fixture(scope="module")
def trained(texts):
    return Tokenizer.train(texts, 600)


@pytest.fixture(scope="module", params=["trained", "byte_level"])
def tok(request, trained):
    return trained if request.param == "trained" else Tokenizer.byte_level()


def test_specials_are_the_first_ids(tok):
    assert [tok.special_ids[t] for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    assert tok.pad_id == 0 and tok.eos_id == 1
    assert tok.token_to_id(EOS) == 1


def test_sizes(trained):
    assert Tokenizer.byte_level().vocab_size == MIN_VOCAB_SIZE
    assert trained.vocab_size == 600


def test_round_trip_on_corpus_files(tok, texts):
    for text, ids in zip(texts, tok.encode_batch(texts)):
        assert ids == tok.encode(text)
        assert tok.decode(ids) == text


def test_trained_tokenizer_compresses(trained, texts):
    n_bytes = sum(len(t.encode()) for t in texts)
    assert n_bytes / sum(map(len, trained.encode_batch(texts))) > 2.0


@settings(max_examples=200, deadline=None)
@given(text=st.text() | st.lists(st.sampled_from([*SPECIAL_TOKENS, " ", "\n", "é", "x"])).map("".join))
def test_round_trip_arbitrary_unicode(tok, text):
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert not set(ids) & set(tok.special_ids.values())  # raw text never yields a special id


def test_harness_text_parses_specials(tok):
    text = f"a{EOS}b {SUMMARY_OPEN}"
    ids = tok.encode_with_specials(text)
    assert tok.eos_id in ids and tok.special_ids[SUMMARY_OPEN] == ids[-1]
    assert tok.decode(ids) == text
    assert tok.eos_id not in tok.encode(text)


def test_save_load_keeps_behaviour_and_hash(trained, texts, tmp_path):
    path = tmp_path / "tokenizer.json"
    trained.save(path)
    loaded = Tokenizer.load(path)
    assert loaded.hash == trained.hash
    assert loaded.encode(texts[0]) == trained.encode(texts[0])


def test_hash_is_stable_and_content_sensitive(texts, trained):
    assert Tokenizer.train(texts, 600).hash == trained.hash
    assert Tokenizer.train(texts, 700).hash != trained.hash
    assert Tokenizer.byte_level().hash != trained.hash


def test_loads_a_foreign_tokenizer_json(tmp_path):
    foreign = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    foreign.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    foreign.save(str(tmp_path / "tokenizer.json"))
    tok = Tokenizer.load(tmp_path / "tokenizer.json")
    assert tok.encode("a a") == [0, 0] and tok.special_ids == {}
    with pytest.raises(ConfigError, match="no harness special token"):
        _ = tok.pad_id


def test_errors(tmp_path):
    with pytest.raises(ConfigError, match="model.vocab_size=200"):
        Tokenizer.train(["x"], 200)
    with pytest.raises(ConfigError, match="tokenizer file not found"):
        Tokenizer.load(tmp_path / "missing.json")
