"""Copy drills: synthetic sequences that teach a small model to copy from its context.

    [noise][marker span][noise][marker span], loss on the repeated span

Offsets and lengths vary, so copying needs content matching (previous-token and induction
heads), not a fixed positional offset. A 2-layer policy trained on LongHorizon demonstrations
alone stayed at chance on every secret word it had to copy (docs/results/rl_longhorizon.md);
`sft.copy_warmup` steps of these first give it the circuit, standing in for what mid-training on
much more code gives a larger model.
"""
from __future__ import annotations

import numpy as np

from composer_jax.rl import segments


def copy_sequence(rng: np.random.Generator, pool: np.ndarray) -> segments.TrainSeq:
    marker, span = rng.choice(pool), rng.choice(pool, rng.integers(2, 9))
    a, b = rng.choice(pool, rng.integers(0, 17)), rng.choice(pool, rng.integers(1, 33))
    tokens = np.concatenate([a, [marker], span, b, [marker], span]).astype(np.int32)
    mask = np.zeros(len(tokens), np.float32)
    mask[-len(span):] = 1.0
    return segments.TrainSeq(tokens, mask, np.zeros(len(tokens), np.float32), 1.0)


def copy_drills(tokenizer, n: int, seed: int) -> list[segments.TrainSeq]:
    """`n` drills over every non-special token of `tokenizer`."""
    pool = np.array(sorted(set(range(tokenizer.vocab_size)) - set(tokenizer.special_ids.values())), np.int32)
    rng = np.random.default_rng(seed)
    return [copy_sequence(rng, pool) for _ in range(n)]
