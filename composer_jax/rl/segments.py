"""Trajectory segments -> fixed-length packed training rows (numpy, host side).

Every segment (one context of an episode, or one SFT conversation) becomes one sequence in a row:
rows of `row_len` tokens hold several sequences, told apart by `segment_ids` (1..n; 0 = padding)
with `positions` restarting at 0, so attention never crosses sequences and training cost follows
the tokens present, not rows x window. Per-token arrays are aligned to the *targets*: column t
describes token t + 1 (the token the logits at t predict), so
    loss_mask[t]     1 if token t + 1 is a policy token of the same sequence
    sampler_logp[t]  the engine's log-prob of token t + 1
    advantages[t]    the advantage of that token's episode
`experts` ([moe_layers, rows, row_len, k]) are the rollout's expert choices of every token, for
MoE routing replay (`forced_expert_lbtk`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from composer_jax.rl.trajectory import Episode, Segment


@dataclasses.dataclass
class TrainSeq:
    """One training sequence: per-token arrays over its tokens (not yet target-shifted)."""
    tokens: np.ndarray  # int32 [n]
    loss_mask: np.ndarray  # float32 [n]: 1 on policy tokens
    logp: np.ndarray  # float32 [n]: sampler log-prob of each token (0 off the policy)
    advantage: float = 0.0
    experts: np.ndarray | None = None  # int32 [n, moe_layers, k]


def segment_sequence(seg: Segment, advantage: float, *, with_experts: bool) -> TrainSeq:
    """A rollout segment as a sequence: prompt (never trained) + stream (policy tokens masked in)."""
    n_prompt = len(seg.prompt)
    experts = None
    if with_experts:
        experts = seg.all_experts().astype(np.int32)
    return TrainSeq(
        tokens=np.asarray(seg.all_tokens, np.int32),
        loss_mask=np.concatenate([np.zeros(n_prompt, np.float32), np.asarray(seg.loss_mask, np.float32)]),
        logp=np.concatenate([np.zeros(n_prompt, np.float32), np.asarray(seg.logp, np.float32)]),
        advantage=float(advantage), experts=experts)


def episode_sequences(ep: Episode, advantage: float, *, train_summaries: bool = True,
                      with_experts: bool = False) -> list[TrainSeq]:
    """Every segment of `ep` with the episode's advantage on all its policy tokens, summaries
    included; `train_summaries=False` masks the summary turns' tokens (the ablation)."""
    out = []
    for seg in ep.segments:
        if not seg.tokens:
            continue
        s = segment_sequence(seg, advantage, with_experts=with_experts)
        if not train_summaries:
            for turn in seg.turns:
                if turn.kind == "summary":
                    s.loss_mask[len(seg.prompt) + turn.start:len(seg.prompt) + turn.end] = 0.0
        out.append(s)
    return out


@dataclasses.dataclass
class PackedRows:
    tokens: np.ndarray  # int32 [rows, row_len]
    positions: np.ndarray  # int32
    segment_ids: np.ndarray  # int32, 0 = padding
    loss_mask: np.ndarray  # float32, target-aligned
    sampler_logp: np.ndarray  # float32, target-aligned
    advantages: np.ndarray  # float32, target-aligned
    experts: np.ndarray | None  # int32 [moe_layers, rows, row_len, k]

    @property
    def rows(self) -> int:
        return self.tokens.shape[0]

    def arrays(self) -> dict[str, np.ndarray]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: v for k, v in out.items() if v is not None}

    def take(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The batch dict of a subset of rows (experts are indexed on their row axis)."""
        return {k: (v[:, rows] if k == "experts" else v[rows]) for k, v in self.arrays().items()}


def first_fit(lengths: Sequence[int], row_len: int) -> list[list[int]]:
    """Sequence indices per row, first-fit in the given order (deterministic)."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i, n in enumerate(lengths):
        if n > row_len:
            raise ValueError(f"sequence {i} has {n} tokens, more than the row length {row_len}; "
                             "raise rl.row_len to at least rollout.window")
        for r, free in enumerate(room):
            if n <= free:
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(row_len - n)
    return rows


def pack(seqs: Sequence[TrainSeq], row_len: int, *, min_rows: int = 1, row_multiple: int = 1,
         expert_shape: tuple[int, int] | None = None) -> PackedRows:
    """Pack sequences into rows; the row count is padded up to a multiple of `row_multiple`
    (the minibatch size, so every update has the same shape) with empty rows."""
    layout = first_fit([len(s.tokens) for s in seqs], row_len)
    n_rows = max(len(layout), min_rows)
    n_rows = -(-n_rows // row_multiple) * row_multiple
    shape = (n_rows, row_len)
    tokens, positions, seg_ids = (np.zeros(shape, np.int32) for _ in range(3))
    mask, logp, adv = (np.zeros(shape, np.float32) for _ in range(3))
    experts = None
    if expert_shape is not None:
        layers, k = expert_shape
        experts = np.zeros((layers, n_rows, row_len, k), np.int32)
    for r, members in enumerate(layout):
        col = 0
        for sid, i in enumerate(members, start=1):
            s = seqs[i]
            n = len(s.tokens)
            sl = slice(col, col + n)
            tokens[r, sl], positions[r, sl], seg_ids[r, sl] = s.tokens, np.arange(n), sid
            # Target alignment: column t carries token t + 1's mask/log-prob; the sequence's
            # last column predicts nothing.
            mask[r, col:col + n - 1] = s.loss_mask[1:]
            logp[r, col:col + n - 1] = s.logp[1:]
            adv[r, col:col + n - 1] = s.advantage * s.loss_mask[1:]
            if experts is not None:
                experts[:, r, sl] = np.transpose(s.experts, (1, 0, 2))
            col += n
    return PackedRows(tokens, positions, seg_ids, mask, logp, adv, experts)


def packing_efficiency(rows: PackedRows) -> float:
    return float(np.mean(rows.segment_ids != 0)) if rows.rows else 0.0
