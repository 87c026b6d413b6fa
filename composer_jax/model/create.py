"""Create a model with its parameters born sharded (jitted init with out_shardings)."""
from __future__ import annotations

import jax
from flax import nnx

from composer_jax.model.config import ModelConfig
from composer_jax.model.transformer import Transformer
from composer_jax.sharding import check_divisibility, state_shardings


def abstract_model(cfg: ModelConfig) -> tuple[nnx.GraphDef, nnx.State]:
    """Shapes and dtypes only (no memory): enough for a 1T-parameter config."""
    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))


def create_sharded(cfg: ModelConfig, mesh: jax.sharding.Mesh, seed: int = 0
                   ) -> tuple[nnx.GraphDef, nnx.State]:
    """(graphdef, state) with every variable placed by the logical-axis rules on `mesh`."""
    check_divisibility(cfg, mesh)
    graphdef, abstract_state = abstract_model(cfg)
    shardings = state_shardings(abstract_state, mesh)

    def init():
        return nnx.split(Transformer(cfg, rngs=nnx.Rngs(seed)))[1]

    with jax.set_mesh(mesh):
        state = jax.jit(init, out_shardings=shardings)()
    return graphdef, state
