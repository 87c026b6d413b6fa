"""Parameter/FLOP accounting: exact on the tiny model, Kimi-K2.5 scale from abstract shapes."""
import json
import subprocess
import sys

import jax
import numpy as np
from flax import nnx

from configs.tiny import get_config
from composer_jax.model import ModelConfig, Transformer
from composer_jax.model.stats import model_stats


def test_counts_match_a_materialised_model():
    cfg = ModelConfig.from_config(get_config("test").model)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    materialised = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    stats = model_stats(cfg, seq_len=64)
    assert stats.total_params == materialised + cfg.n_moe_layers * cfg.n_experts  # + router biases
    per_expert = 3 * cfg.d_model * cfg.d_ff_expert
    assert stats.total_params - stats.active_params_per_token == (
        cfg.n_moe_layers * (cfg.n_experts - cfg.top_k) * per_expert)
    # Token-shift tables are lookups: parameters, no matmul FLOPs.
    shifted = model_stats(ModelConfig.from_config({**get_config("test").model, "token_shift": 2}), seq_len=64)
    assert shifted.total_params - stats.total_params == 2 * cfg.vocab_size * cfg.d_model
    assert shifted.flops_per_token_forward == stats.flops_per_token_forward


def test_kimi_config_matches_published_scale_without_materialising():
    out = subprocess.run([sys.executable, "-m", "composer_jax.tools.model_stats", "--config",
                          "configs/kimi_k2_5.py"], capture_output=True, text=True, check=True)
    stats = json.loads(out.stdout)
    assert abs(stats["total_params"] / 1.04e12 - 1) < 0.05
    assert abs(stats["active_params_per_token"] / 3.2e10 - 1) < 0.10
    # 6 * N_active dominates; attention at 32k context adds a visible share on top.
    assert stats["flops_per_token_train"] > 6 * 0.9 * stats["active_params_per_token"]
    assert set(stats["bytes_per_param_state"]) >= {"params_f32", "adam_mu_f32", "adam_nu_f32"}


def test_bad_config_path_is_a_clear_error():
    out = subprocess.run([sys.executable, "-m", "composer_jax.tools.model_stats", "--config",
                          "configs/nope.py"], capture_output=True, text=True)
    assert out.returncode == 2 and "no such config file 'configs/nope.py'" in out.stderr
