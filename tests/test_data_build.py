"""Build CLI: manifest + tokenizer + stores from config, resume, loader from config, errors."""
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from composer_jax.data.build import build
from composer_jax.data.corpus import stdlib_root
from composer_jax.data.pipeline import dataset_from_config
from composer_jax.errors import ConfigError
from configs import tiny


@pytest.fixture
def config(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in sorted(stdlib_root().glob("*.py"))[:30]:
        shutil.copy(path, corpus)
    c = tiny.get_config("test")  # vocab 512
    c.data.update(corpus_paths=(str(corpus),), include_stdlib=False, val_fraction=0.2,
                  num_shards=2, seq_len=64, batch_size=8)
    return c


def test_build_then_resume_then_load(config, tmp_path):
    data_dir = tmp_path / "data"
    first = build(config, data_dir, progress=False)
    assert first["files"] == 30 and first["vocab_size"] == 512
    train = first["stores"]["code/train"]
    val = first["stores"]["code/val"]
    assert train["n_docs"] + val["n_docs"] == 30 and val["n_docs"] > 0
    assert train["shards_built"] == 2 and first["val_bytes_per_token"] > 1.5
    again = build(config, data_dir, progress=False)
    assert again["tokenizer_train_seconds"] == 0 and again["tokenizer_hash"] == first["tokenizer_hash"]
    assert again["stores"]["code/train"]["shards_reused"] == 2
    assert again["stores"]["code/train"]["n_tokens"] == train["n_tokens"]
    batch = next(iter(dataset_from_config(config, data_dir)))
    assert batch["tokens"].shape == (8, 64) and batch["tokens"].max() < 512
    assert np.all(batch["segment_ids"] > 0)


def test_agent_transcripts_make_the_rl_envs_secret_words_single_tokens(config, tmp_path):
    """data.tokenizer_agent_tasks: the tokenizer also trains on the RL env's expert transcripts
    (and its suite's vocabulary), so the words a LongHorizon policy must carry are one token each,
    which a code-only tokenizer of the same size does not give."""
    from composer_jax.data.tokenizer import Tokenizer
    from environments.suites.longhorizon import FRAGMENT_WORDS, KEY_WORDS, NOTE_WORDS

    config.model.vocab_size = 1024
    config.rl.update(env_id="composer/LongHorizon-v0", suite_options=dict(hops=2, filler_lines=2, secrets="words"))
    build(config, tmp_path / "code", progress=False)
    config.data.tokenizer_agent_tasks = 4
    build(config, tmp_path / "agent", progress=False)
    words = KEY_WORDS + FRAGMENT_WORDS + NOTE_WORDS

    def single(d):
        tok = Tokenizer.load(tmp_path / d / "tokenizer.json")
        return sum(len(tok.encode(w)) == 1 for w in words)

    assert single("agent") == len(words) and single("code") < len(words) // 2


def test_changed_corpus_is_refused(config, tmp_path):
    build(config, tmp_path / "data", progress=False)
    with open(f"{config.data.corpus_paths[0]}/extra.py", "w") as f:
        f.write("x = 1\n")
    with pytest.raises(ConfigError, match="corpus changed"):
        build(config, tmp_path / "data", progress=False)


@pytest.mark.parametrize("field, value, message", [
    ("data.seq_len", 1, "data.seq_len"),
    ("model.vocab_size", 100, "model.vocab_size=100"),
    ("data.mixture", {"code": 0.0}, "data.mixture"),
])
def test_config_errors_name_the_field(config, tmp_path, field, value, message):
    section, key = field.split(".")
    config[section][key] = value
    with pytest.raises(ConfigError, match=message):
        build(config, tmp_path / "data", progress=False)


def test_cli_reports_a_config_error_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "composer_jax.data.build", "--config", "configs/tiny.py",
         "--config.data.seq_len=1", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, check=False, cwd=pathlib.Path(__file__).parents[1])
    assert result.returncode != 0
    assert "error: data.seq_len must be >= 2" in result.stderr
    assert "Traceback" not in result.stderr
