"""Checkpoints: restore onto another mesh shape, fall back past a corrupt save, refuse a
different config, ignore a half-written save."""
import logging
import pathlib

import grain
import jax
import numpy as np
import pytest

from configs.tiny import get_config
from composer_jax.errors import ConfigError
from composer_jax.model import ModelConfig, create_sharded
from composer_jax.sharding import make_mesh
from composer_jax.train.checkpoint import Checkpointer, abstract_train_state
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import create_train_state


@pytest.fixture(scope="module")
def setup():
    config = get_config("test")
    model_cfg = ModelConfig.from_config(config.model)
    tx = make_optimizer(config.train)
    mesh = make_mesh(dict(data=8))
    _, params = create_sharded(model_cfg, mesh, seed=0)
    state, _ = create_train_state(params, tx)
    # Non-trivial optimiser moments and step, so a restore that zero-fills would fail.
    state = jax.jit(lambda s: jax.tree.map(lambda x: x + np.asarray(0.25 if x.dtype.kind == "f" else 3,
                                                                    x.dtype), s))(state)
    return config, model_cfg, tx, state


def data_iter():
    return iter(grain.MapDataset.range(1000).batch(2).to_iter_dataset())


def advanced(n):
    it = data_iter()
    for _ in range(n):
        next(it)
    return it


def save_steps(directory, config, state, steps):
    ckpt = Checkpointer(directory, config, keep=5)
    for step in steps:
        ckpt.save(step, state, jax.random.key(step), advanced(step))
    ckpt.wait()
    ckpt.close()


def assert_same_values(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_restore_onto_a_different_mesh_shape(tmp_path, setup):
    config, model_cfg, tx, state = setup
    save_steps(tmp_path, config, state, [4])
    mesh = make_mesh(dict(data=2, fsdp=4))
    target = abstract_train_state(model_cfg, mesh, tx)
    it = data_iter()
    ckpt = Checkpointer(tmp_path, config, keep=5)
    restored = ckpt.restore_latest(target, it)
    ckpt.close()
    assert restored.step == 4
    assert_same_values(restored.train_state, state)
    np.testing.assert_array_equal(jax.random.key_data(restored.rng),
                                  jax.random.key_data(jax.random.key(4)))
    for got, want in zip(jax.tree.leaves(restored.train_state), jax.tree.leaves(target)):
        assert got.sharding == want.sharding
    embed = restored.train_state.params["embed_vd"][...]
    assert embed.sharding.mesh.shape["fsdp"] == 4 and "fsdp" in embed.sharding.spec
    mu = restored.train_state.opt_state[1][0].mu["embed_vd"][...]
    assert mu.sharding == embed.sharding  # optimiser moments live next to their parameters
    np.testing.assert_array_equal(next(it), next(advanced(4)))  # data resumes where it stopped


def test_corrupt_latest_falls_back_with_a_warning(tmp_path, setup, caplog):
    config, model_cfg, tx, state = setup
    save_steps(tmp_path, config, state, [2, 4])
    for f in (tmp_path / "4" / "state").rglob("*"):
        if f.is_file():
            f.write_bytes(b"")
    ckpt = Checkpointer(tmp_path, config, keep=5)
    target = abstract_train_state(model_cfg, make_mesh(dict(data=8)), tx)
    it = data_iter()
    with caplog.at_level(logging.WARNING):
        restored = ckpt.restore_latest(target, it)
    assert restored.step == 2
    assert "checkpoint" in caplog.text and "corrupt" in caplog.text and "/4" in caplog.text
    assert_same_values(restored.train_state, state)
    np.testing.assert_array_equal(next(it), next(advanced(2)))
    assert ckpt.all_steps() == [2]
    assert len(list(pathlib.Path(f"{tmp_path}.corrupt").iterdir())) == 1  # kept for inspection
    ckpt.save(4, restored.train_state, restored.rng, it)  # the resumed run can reach step 4 again
    ckpt.wait()
    assert ckpt.all_steps() == [2, 4]
    ckpt.close()


def test_half_written_save_is_ignored(tmp_path, setup):
    config, model_cfg, tx, state = setup
    save_steps(tmp_path, config, state, [3])
    (tmp_path / "9.orbax-checkpoint-tmp").mkdir()  # a save killed before its final rename
    (tmp_path / "9.orbax-checkpoint-tmp" / "junk").write_text("partial")
    ckpt = Checkpointer(tmp_path, config, keep=5)
    target = abstract_train_state(model_cfg, make_mesh(dict(data=8)), tx)
    assert ckpt.restore_latest(target, data_iter()).step == 3
    ckpt.close()


def test_different_model_config_refuses_to_resume(tmp_path, setup):
    config, _, tx, state = setup
    save_steps(tmp_path, config, state, [1])
    other = get_config("test")
    other.model.d_model = 128
    other_cfg = ModelConfig.from_config(other.model)
    ckpt = Checkpointer(tmp_path, other, keep=5)
    with pytest.raises(ConfigError, match=r"model\.d_model: checkpoint has 64, config has 128"):
        ckpt.restore_latest(abstract_train_state(other_cfg, make_mesh(dict(data=8)), tx), data_iter())
    ckpt.close()
    assert (tmp_path / "1").exists()  # refusing is not quarantining


def test_data_position_that_does_not_fit_is_an_error_not_a_fallback(tmp_path, setup):
    config, model_cfg, tx, state = setup
    save_steps(tmp_path, config, state, [2, 4])
    ckpt = Checkpointer(tmp_path, config, keep=5)
    short = iter(grain.MapDataset.range(3).to_iter_dataset())  # 3 elements: position 4 is past it
    with pytest.raises(ConfigError, match=r"4/data: the saved data position does not fit"):
        ckpt.restore_latest(abstract_train_state(model_cfg, make_mesh(dict(data=8)), tx), short)
    assert ckpt.all_steps() == [2, 4]
    ckpt.close()
