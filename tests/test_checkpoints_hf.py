"""Import from Hugging Face safetensors: logits equal transformers' (float32) for a tiny random
Qwen2 (QKV biases, tied and untied heads); the orbax round trip; clear errors on bad input."""
import json

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from composer_jax.checkpoints.hf_import import import_safetensors_dir  # noqa: E402
from composer_jax.checkpoints.store import load_imported, save_imported  # noqa: E402
from composer_jax.errors import ConfigError  # noqa: E402
from composer_jax.model import init_cache  # noqa: E402


def tiny_qwen2(tmp_path, tie: bool):
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6,
                                   tie_word_embeddings=tie, max_position_embeddings=64, rms_norm_eps=1e-6)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # random biases: the default init leaves them zero, which hides mapping bugs
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(tmp_path)
    return model


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.numpy()


@pytest.mark.parametrize("tie", [False, True])
def test_qwen2_logits_match_transformers(tmp_path, tie):
    hf = tiny_qwen2(tmp_path, tie)
    imported = import_safetensors_dir(tmp_path)
    assert imported.cfg.qkv_bias and imported.cfg.tie_embeddings == tie and imported.cfg.rope_base == 1e6
    tokens = np.random.default_rng(0).integers(0, 320, (2, 12))
    ours, _ = imported.model(jnp.asarray(tokens))
    np.testing.assert_allclose(np.asarray(ours), hf_logits(hf, tokens), atol=1e-4, rtol=0)


def test_cached_decoding_and_orbax_round_trip(tmp_path):
    hf = tiny_qwen2(tmp_path / "hf", tie=False)
    save_imported(tmp_path / "ckpt", import_safetensors_dir(tmp_path / "hf"))
    restored = load_imported(tmp_path / "ckpt")
    tokens = np.random.default_rng(1).integers(0, 320, (1, 10))
    model = restored.model
    cache = init_cache(restored.cfg, 1, 16)
    first, cache, _ = model.extend(jnp.asarray(tokens[:, :7]), cache)
    rest, cache, _ = model.extend(jnp.asarray(tokens[:, 7:]), cache)
    np.testing.assert_allclose(np.concatenate([first, rest], axis=1), hf_logits(hf, tokens), atol=1e-4, rtol=0)


def test_missing_tensor_and_unsupported_architecture_are_clear_errors(tmp_path):
    hf = tiny_qwen2(tmp_path, tie=False)
    from safetensors.torch import save_file
    tensors = {k: v.contiguous() for k, v in hf.state_dict().items() if "layers.1.mlp.up_proj" not in k}
    (tmp_path / "model.safetensors").unlink()
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ConfigError, match="missing tensor 'model.layers.1.mlp.up_proj.weight'"):
        import_safetensors_dir(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(ConfigError, match="model_type 'gpt2' is not supported.*qwen2"):
        import_safetensors_dir(tmp_path)
