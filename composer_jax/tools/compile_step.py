"""Compile the real train step from abstract shapes: nothing is allocated, so a 1T-parameter
config compiles on a laptop's fake CPU mesh and its program can be read (tools/hlo.py).

  XLA_FLAGS=--xla_force_host_platform_device_count=64 python -c \
    "from composer_jax.tools.compile_step import *; ..."
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from composer_jax.model import ModelConfig
from composer_jax.model.create import abstract_model
from composer_jax.sharding import batch_sharding, check_divisibility, state_shardings
from composer_jax.train.optim import make_optimizer
from composer_jax.train.step import init_train_state, make_train_step, train_state_shardings


def _with_shardings(abstract, shardings):
    return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                        abstract, shardings)


def compile_train_step(config, mesh: jax.sharding.Mesh, batch_size: int | None = None,
                       seq_len: int | None = None):
    """`make_train_step(...).lower(...).compile()` for `config` on `mesh`, from
    jax.ShapeDtypeStruct inputs placed as the sharding rules say. Batch defaults to the
    config's global `data.batch_size` x `data.seq_len`."""
    cfg = ModelConfig.from_config(config.model)
    batch_size = int(batch_size or config.data.batch_size)
    seq_len = int(seq_len or config.data.seq_len)
    check_divisibility(cfg, mesh, batch_size)
    graphdef, abstract_state = abstract_model(cfg)
    abstract_state = _with_shardings(abstract_state, state_shardings(abstract_state, mesh))
    tx = make_optimizer(config.train)
    train_shardings = train_state_shardings(abstract_state, tx)
    abstract_train = _with_shardings(
        jax.eval_shape(lambda s: init_train_state(s, tx), abstract_state), train_shardings)
    bsh = batch_sharding(mesh)
    batch = {name: jax.ShapeDtypeStruct((batch_size, seq_len), jnp.int32, sharding=bsh)
             for name in ("tokens", "segment_ids", "positions")}
    step = make_train_step(graphdef, tx, cfg, config.train, train_shardings, bsh)
    with jax.set_mesh(mesh):
        return step.lower(abstract_train, batch).compile()
