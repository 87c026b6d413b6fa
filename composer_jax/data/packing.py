"""Packing: an endless stream of shuffled documents cut into rows of `seq_len` tokens.

The stream is epoch 0's documents in a seeded random order, then epoch 1's in another, and so
on. Row i is stream tokens [i*L, (i+1)*L): a pure function of i, so a loader's whole state is
one row index, resume is exact, and no padding is ever needed (packing efficiency 1.0). A
document that crosses a row boundary continues at the start of the next row; nothing is dropped.

Each row's pieces get `segment_ids` 1..n (attention must not cross them) and `positions`
restarting at 0 in every piece, so positions stay < seq_len whatever the document length.
"""
import threading

import numpy as np


class PackedStream:
    """Row i of the packed stream over a jagged token array (vectorised numpy)."""

    def __init__(self, tokens_t: np.ndarray, offsets_d1: np.ndarray, seq_len: int,
                 seed: tuple[int, ...]):
        self.tokens_t, self.offsets_d1 = tokens_t, offsets_d1
        self.lengths_d = np.diff(offsets_d1)
        self.epoch_tokens = int(self.lengths_d.sum())
        self.seq_len, self.seed = seq_len, seed
        self._init_cache()

    def _init_cache(self) -> None:
        self._epochs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()  # grain reads rows from several threads

    def __getstate__(self) -> dict:  # picklable for grain worker processes; caches rebuild there
        return {k: v for k, v in self.__dict__.items() if k not in ("_epochs", "_lock")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._init_cache()

    def epoch(self, e: int) -> tuple[np.ndarray, np.ndarray]:
        """(document order, stream end of each ordered document within the epoch) for epoch e."""
        with self._lock:
            if e not in self._epochs:
                order_k = np.random.default_rng([*self.seed, e]).permutation(len(self.lengths_d))
                if len(self._epochs) >= 4:  # rows only ever touch neighbouring epochs
                    self._epochs.pop(min(self._epochs))
                self._epochs[e] = (order_k, np.cumsum(self.lengths_d[order_k]))
            return self._epochs[e]

    def row(self, i: int) -> dict[str, np.ndarray]:
        stream_l = np.arange(i * self.seq_len, (i + 1) * self.seq_len, dtype=np.int64)
        epoch_l, within_l = np.divmod(stream_l, self.epoch_tokens)
        doc_l = np.empty_like(stream_l)
        offset_l = np.empty_like(stream_l)  # token index inside its document
        for e in np.unique(epoch_l):
            mask_l = epoch_l == e
            order_k, ends_k = self.epoch(int(e))
            k_l = np.searchsorted(ends_k, within_l[mask_l], side="right")
            doc_l[mask_l] = order_k[k_l]
            offset_l[mask_l] = within_l[mask_l] - (ends_k[k_l] - self.lengths_d[order_k[k_l]])
        # A new piece starts at column 0 and wherever the (epoch, document) changes.
        starts_l = np.ones(self.seq_len, dtype=bool)
        starts_l[1:] = (doc_l[1:] != doc_l[:-1]) | (epoch_l[1:] != epoch_l[:-1])
        col_l = np.arange(self.seq_len)
        piece_start_l = np.maximum.accumulate(np.where(starts_l, col_l, 0))
        return {
            "tokens": self.tokens_t[self.offsets_d1[doc_l] + offset_l].astype(np.int32),
            "segment_ids": np.cumsum(starts_l, dtype=np.int32),
            "positions": (col_l - piece_start_l).astype(np.int32),
        }
