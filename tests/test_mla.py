"""DeepSeek-V3 import (MLA with interleaved rope, sigmoid group-limited routing with the balancing
bias, shared experts, first layer dense): logits equal transformers'; cached decoding over the
latent cache equals the full forward."""
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from composer_jax.checkpoints.hf_import import import_safetensors_dir  # noqa: E402
from composer_jax.model import init_cache  # noqa: E402


@pytest.fixture(scope="module")
def tiny_deepseek(tmp_path_factory):
    path = tmp_path_factory.mktemp("deepseek")
    torch.manual_seed(0)
    cfg = transformers.DeepseekV3Config(
        vocab_size=300, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=8,
        routed_scaling_factor=2.5, kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8, v_head_dim=16,
        qk_nope_head_dim=16, n_group=4, topk_group=2, num_experts_per_tok=2, first_k_dense_replace=1,
        max_position_embeddings=64, tie_word_embeddings=False, rope_interleave=True)
    model = transformers.DeepseekV3ForCausalLM(cfg).eval()
    with torch.no_grad():  # default init leaves router, bias and norms trivial: randomise them
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
            if name.endswith("gate.weight"):
                p.normal_(0, 0.3)
        for layer in model.model.layers[1:]:
            layer.mlp.gate.e_score_correction_bias.uniform_(0.0, 0.3)
    model.save_pretrained(path)
    return model, path


def test_deepseek_v3_logits_match_transformers(tiny_deepseek):
    hf, path = tiny_deepseek
    imported = import_safetensors_dir(path, moe_impl="dense")
    cfg = imported.cfg
    assert (cfg.attention, cfg.n_groups, cfg.topk_groups, cfg.routed_scale) == ("mla", 4, 2, 2.5)
    bias = imported.state["layers"][1]["ffn"]["router_bias_e"][...]
    np.testing.assert_allclose(bias, hf.model.layers[1].mlp.gate.e_score_correction_bias.numpy())
    tokens = np.random.default_rng(0).integers(0, 300, (2, 12))
    with torch.no_grad():
        want = hf(torch.tensor(tokens)).logits.numpy()
    ours, _ = imported.model(jnp.asarray(tokens))
    np.testing.assert_allclose(np.asarray(ours), want, atol=1e-4, rtol=0)


def test_mla_latent_cache_decoding_equals_full_forward(tiny_deepseek):
    _, path = tiny_deepseek
    imported = import_safetensors_dir(path, moe_impl="dense")
    model, cfg = imported.model, imported.cfg
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 300, (2, 10)))
    full, _ = model(tokens)
    cache = init_cache(cfg, 2, 16)
    assert cache.k_bksh[0].shape == (2, 1, 16, cfg.kv_lora_rank)  # the compressed latent, not per-head K
    assert cache.v_bksh[0].shape == (2, 1, 16, cfg.qk_rope_head_dim)
    steps = []
    logits, cache, _ = model.extend(tokens[:, :6], cache)
    steps.append(logits)
    for i in range(6, 10):
        logits, cache, _ = model.extend(tokens[:, i:i + 1], cache)
        steps.append(logits)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-4, rtol=0)
