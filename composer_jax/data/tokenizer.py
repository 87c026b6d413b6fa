"""One tokenizer interface over a HuggingFace `tokenizers` model: trained byte-level BPE, a plain
byte vocabulary for tests, or any pretrained `tokenizer.json`.

Special tokens: the harness tokens (`harness.special_tokens.SPECIAL_TOKENS`) are single reserved
ids, 0..10 in a tokenizer we build (so PAD is 0). Two encoders, on purpose:
  * `encode(text)`: corpus text. Special-token strings are NOT parsed, so a source file that
    contains "<|eos|>" encodes it as ordinary bytes and `decode(encode(t)) == t` holds for every
    str (valid unicode: no lone surrogates, which have no UTF-8 encoding).
  * `encode_with_specials(text)`: harness text, where "<|eos|>" etc. become their single ids.
No normaliser and no added prefix space, so nothing is lost or inserted.

A pretrained tokenizer (e.g. Qwen's) has no harness tokens; `special_text` maps each onto the
model's own chat-template text (`<|user|>` -> "<|im_start|>user\n"). `encode_with_specials`
then renders harness text in the model's template, `special_seq` gives any harness token's ids
(one or several), `token_to_id` answers for the harness tokens whose mapped text is one token
(EOS, tool-call tags), and `decode_harness` maps the template text back to harness tokens (what
the environment parses).
"""
import hashlib
import json
import os
import pathlib
from collections.abc import Iterable, Sequence

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from composer_jax.errors import ConfigError
from composer_jax.harness.special_tokens import EOS, PAD, SPECIAL_TOKENS

MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + 256  # specials + one token per byte


def _byte_level_pipeline(model: models.Model) -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def _with_flag(tok_json: str, parse_specials: bool) -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer.from_str(tok_json)
    tok.encode_special_tokens = not parse_specials
    return tok


class Tokenizer:
    """Text <-> token ids. Build with `train`, `byte_level` or `load`."""

    def __init__(self, tok: tokenizers.Tokenizer, special_text: dict[str, str] | None = None):
        self._json = tok.to_str()
        self._plain = _with_flag(self._json, parse_specials=False)
        self._harness = _with_flag(self._json, parse_specials=True)
        self.special_text = dict(special_text or {})
        self.special_ids: dict[str, int] = {
            t: i for t in SPECIAL_TOKENS if (i := self._single_id(t)) is not None
        }

    def _single_id(self, token: str) -> int | None:
        if token not in self.special_text:
            return self._plain.token_to_id(token)
        ids = self._harness.encode(self.special_text[token], add_special_tokens=False).ids
        return ids[0] if len(ids) == 1 else None

    # Construction -----------------------------------------------------------------------------
    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> "Tokenizer":
        """Byte-level BPE on `texts`; specials take ids 0..10, the 256 bytes come next."""
        check_vocab_size(vocab_size)
        tok = _byte_level_pipeline(models.BPE())
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(SPECIAL_TOKENS),
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            min_frequency=2,
            show_progress=False,
        )
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok)

    @classmethod
    def byte_level(cls) -> "Tokenizer":
        """No merges: specials 0..10, then one id per byte (for tests and as a baseline)."""
        alphabet = sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda c: _BYTE_OF_CHAR[c])
        vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *alphabet])}
        tok = _byte_level_pipeline(models.BPE(vocab=vocab, merges=[]))
        tok.add_special_tokens(list(SPECIAL_TOKENS))
        return cls(tok)

    @classmethod
    def load(cls, path: str | os.PathLike, special_text: dict[str, str] | None = None) -> "Tokenizer":
        path = pathlib.Path(path)
        if not path.is_file():
            raise ConfigError(f"tokenizer file not found: {path}")
        return cls(tokenizers.Tokenizer.from_file(str(path)), special_text)

    def save(self, path: str | os.PathLike) -> None:
        pathlib.Path(path).write_text(self._json)

    # Interface --------------------------------------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Corpus text -> ids; special-token strings in `text` stay ordinary bytes."""
        return self._plain.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` over many texts, in parallel threads inside `tokenizers`."""
        return [e.ids for e in self._plain.encode_batch_fast(list(texts), add_special_tokens=False)]

    def encode_with_specials(self, text: str) -> list[int]:
        """Harness text -> ids; "<|eos|>" and the other specials become their single ids (or, for
        a pretrained tokenizer, the ids of the model's own template text)."""
        for token, mapped in self.special_text.items():
            text = text.replace(token, mapped)
        return self._harness.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._plain.decode(list(ids), skip_special_tokens=False)

    def decode_harness(self, ids: Sequence[int]) -> str:
        """`decode`, with the model's template text turned back into harness tokens (longest
        first: "<|im_end|>\n" is END_OF_TURN before "<|im_end|>" is EOS)."""
        text = self.decode(ids)
        for token, mapped in sorted(self.special_text.items(), key=lambda kv: -len(kv[1])):
            text = text.replace(mapped, token)
        return text

    def special_seq(self, token: str) -> tuple[int, ...]:
        """The ids a harness token stands for: one reserved id, or a pretrained model's template."""
        if token in self.special_text:
            return tuple(self._harness.encode(self.special_text[token], add_special_tokens=False).ids)
        return (self.token_to_id(token),)

    def token_to_id(self, token: str) -> int:
        if token in self.special_text:
            if token not in self.special_ids:
                raise KeyError(f"harness token {token!r} maps to the multi-token text "
                               f"{self.special_text[token]!r} in this pretrained vocabulary; "
                               "encode harness text with encode_with_specials")
            return self.special_ids[token]
        i = self._plain.token_to_id(token)
        if i is None:
            raise KeyError(f"token {token!r} is not in the vocabulary")
        return i

    @property
    def vocab_size(self) -> int:
        return self._plain.get_vocab_size(with_added_tokens=True)

    @property
    def pad_id(self) -> int:
        return self._special(PAD)

    @property
    def eos_id(self) -> int:
        return self._special(EOS)

    @property
    def hash(self) -> str:
        """Hash of the canonical JSON (vocab, merges, pipeline): equal iff tokenization is equal."""
        canonical = json.dumps(json.loads(self._json), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def _special(self, token: str) -> int:
        if token not in self.special_ids:
            raise ConfigError(f"tokenizer has no harness special token {token!r}; map it first")
        return self.special_ids[token]


def check_vocab_size(vocab_size: int) -> None:
    if vocab_size < MIN_VOCAB_SIZE:
        raise ConfigError(
            f"model.vocab_size={vocab_size} is too small: the tokenizer needs "
            f"{len(SPECIAL_TOKENS)} special tokens + 256 bytes = {MIN_VOCAB_SIZE}"
        )


def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte -> printable-char table, inverted (what `ByteLevel.alphabet()` holds)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


_BYTE_OF_CHAR = _byte_of_char()
