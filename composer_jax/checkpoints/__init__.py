"""Pretrained checkpoints in: Hugging Face safetensors and GGUF importers (Qwen2, DeepSeek-V3 /
Kimi-K2), the Qwen2.5-Coder setup step, the orbax store, and sparse upcycling."""
