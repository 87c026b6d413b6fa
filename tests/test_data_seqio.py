"""seqio interop (extra `seqio`): vocabulary wrapper, corpus Tasks/Mixture, seqio as a store source."""

import numpy as np
import pytest

seqio = pytest.importorskip("seqio", reason="the seqio extra is not installed (pip install -e '.[seqio]')")

from composer_jax.data import layout, seqio_tasks
from composer_jax.data.build import build
from composer_jax.data.corpus import build_manifest, read_text
from composer_jax.data.store import TokenStore
from composer_jax.data.tokenizer import Tokenizer
from configs import tiny

pytestmark = pytest.mark.slow  # imports TensorFlow


@pytest.fixture
def corpus(tmp_path):
    root = tmp_path / "mini"
    root.mkdir()
    for i in range(8):
        (root / f"m{i}.py").write_text(f"x = {i}  # <|eos|> é\n" * (i + 1))
    return root


def test_vocabulary_wraps_the_tokenizer():
    import tensorflow as tf

    vocab = seqio_tasks.CodeVocabulary(Tokenizer.byte_level())
    ids = vocab.encode("héllo <|eos|>")
    assert vocab.decode(ids) == "héllo <|eos|>" and vocab.pad_id == 0 and vocab.eos_id == 1
    np.testing.assert_array_equal(vocab.encode_tf(tf.constant("héllo <|eos|>")).numpy(), ids)
    assert vocab.decode_tf(tf.constant(ids)).numpy().decode() == "héllo <|eos|>"


def test_corpus_tasks_and_mixture_give_back_the_split_texts(corpus):
    manifest = build_manifest([str(corpus)], include_stdlib=False, val_fraction=0.3)
    tok = Tokenizer.byte_level()
    assert seqio_tasks.register_corpus(manifest, tok) == ["composer_code_mini"]
    example = next(seqio.get_mixture_or_task("composer_code_mini").get_dataset(
        sequence_length=None, split="train", shuffle=False).as_numpy_iterator())
    assert tok.decode(example["targets"].tolist()) in {read_text(d) for d in manifest.split("train")}
    for split in ("train", "val"):
        texts = [t for i in range(3) for t in seqio_tasks.shard_texts("composer_code", split, i, 3)]
        assert sorted(texts) == sorted(read_text(d) for d in manifest.split(split))


def test_a_seqio_mixture_as_a_store_source(corpus, tmp_path):
    c = tiny.get_config("test")
    c.data.update(corpus_paths=(str(corpus),), include_stdlib=False, val_fraction=0.3, num_shards=2,
                  mixture={"code": 1.0, "composer_code": 1.0})
    summary = build(c, tmp_path / "data", progress=False)
    files, via_seqio = summary["stores"]["code/train"], summary["stores"]["composer_code/train"]
    assert via_seqio["n_tokens"] == files["n_tokens"] and via_seqio["n_docs"] == files["n_docs"]
    store = TokenStore.open(layout.store_path(tmp_path / "data", "composer_code", "train"))
    assert store.meta["source_hash"] == "seqio:composer_code"
