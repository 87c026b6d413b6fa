"""A `tokenizers` BPE tokenizer rebuilt from GGUF metadata (`tokenizer.ggml.*`), the same
pipeline as the model's own tokenizer.json (checked against transformers' GGUF conversion)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers

from composer_jax.errors import ConfigError

# llama.cpp's pre-tokenizer names -> the split regex of the original tokenizer.json.
PRE_TOKENIZER_REGEX = {
    "qwen2": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+"),
}
CONTROL, USER_DEFINED = 3, 4  # llama.cpp token types that are added (never merged) tokens


def tokenizer_from_gguf_metadata(meta: Mapping[str, object]) -> tokenizers.Tokenizer:
    model, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre")
    if model != "gpt2" or pre not in PRE_TOKENIZER_REGEX:
        raise ConfigError(f"GGUF tokenizer {model!r}/{pre!r} is not supported "
                          f"(expected 'gpt2' with pre-tokenizer one of {', '.join(PRE_TOKENIZER_REGEX)})")
    tokens: Sequence[str] = meta["tokenizer.ggml.tokens"]
    types: Sequence[int] = meta["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tok = tokenizers.Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                                          fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(PRE_TOKENIZER_REGEX[pre]), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind in (CONTROL, USER_DEFINED)])
    return tok
