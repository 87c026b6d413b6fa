"""The decoder model: config, modules, KV cache, sharded creation."""
from composer_jax.model.attention import KVCache, init_cache
from composer_jax.model.config import ModelConfig
from composer_jax.model.create import abstract_model, create_sharded
from composer_jax.model.moe import RouterBias, update_router_bias
from composer_jax.model.transformer import Transformer

__all__ = ["KVCache", "ModelConfig", "RouterBias", "Transformer", "abstract_model",
           "create_sharded", "init_cache", "update_router_bias"]
