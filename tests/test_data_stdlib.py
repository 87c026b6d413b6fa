"""End to end on the whole stdlib corpus with the tiny config: every file round-trips exactly
through the trained tokenizer and the store, and rows pack at >= 0.98 at seq_len 512."""
import numpy as np
import pytest

from composer_jax.data import layout
from composer_jax.data.build import build
from composer_jax.data.corpus import Manifest, read_text
from composer_jax.data.pipeline import make_dataset, packing_efficiency
from composer_jax.data.store import TokenStore
from composer_jax.data.tokenizer import Tokenizer
from configs.tiny import get_config

pytestmark = pytest.mark.slow


def test_full_stdlib_build_round_trips_and_packs(tmp_path):
    summary = build(get_config(), tmp_path, progress=False)
    assert summary["files"] > 1000 and summary["val_bytes_per_token"] > 3.0
    tok = Tokenizer.load(layout.tokenizer_path(tmp_path))
    manifest = Manifest.load(layout.manifest_path(tmp_path))
    num_shards = get_config().data.num_shards
    for split in layout.SPLITS:
        store = TokenStore.open(layout.store_path(tmp_path, layout.CORPUS_SOURCE, split), tok)
        docs = manifest.split(split)
        in_store_order = [d for i in range(num_shards) for d in docs[i::num_shards]]
        assert store.n_docs == len(in_store_order)
        for d, doc in enumerate(in_store_order):
            ids = store.document(d)
            assert ids[-1] == tok.eos_id and tok.decode(ids[:-1].tolist()) == read_text(doc)
    train = TokenStore.open(layout.store_path(tmp_path, layout.CORPUS_SOURCE, "train"), tok)
    it = iter(make_dataset([train], [1.0], seq_len=512, global_batch_size=8, seed=0,
                           process_index=0, process_count=1))
    assert np.mean([packing_efficiency(next(it)) for _ in range(50)]) >= 0.98
