"""Token-exact records of served completions, grouped into sessions, and sessions as Episodes.

A completion is a list of pieces applied to its slot's context, in order:
    ("prompt", ids, experts)                     a fresh context (a session's first request, or
                                                 one that extends no earlier completion)
    ("harness", ids, experts)                    tokens the server appended (turn closings, the
                                                 client's new messages, generation prompts)
    ("policy", kind, ids, logp, logp_sampler, experts, reason)
                                                 sampled tokens, kind "action" | "summary", and
                                                 why the turn ended (trajectory.TURN_END_REASONS)
    ("reset", ids, experts)                      a summary reset: the context is now `ids`
A request whose messages extend an earlier completion's (its messages, then its reply) is
that completion's child: its context starts with the parent's recorded ids, never re-tokenised
text, so a chain of completions replays as exactly what was sampled. `episode` turns the chain
ending at a completion into an `Episode` for the learner (one Segment per context).
"""
from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence

import numpy as np

from composer_jax.rl.trajectory import Episode, Segment, Turn


@dataclasses.dataclass
class Completion:
    id: str
    parent: str | None  # id of the completion this one extends
    pieces: list[tuple]
    context: list[int]  # the slot's ids after it: what a child's prompt starts with
    messages: tuple  # the request's messages, normalised (chat.normalise)
    reply: tuple  # the reply as the client will echo it, normalised
    tools_key: str  # the request's tools (a child must list the same ones)
    finish_reason: str
    last_token: int | None  # the final sampled id (decides how the turn is closed)
    base_len: int  # where the session's prompt ends in its first context (the reset point)

    def key(self) -> tuple:
        """What a child request's messages start with: this one's messages, then its reply."""
        return (*self.messages, self.reply), self.tools_key


@dataclasses.dataclass
class Session:
    id: str
    completions: dict[str, Completion] = dataclasses.field(default_factory=dict)  # in order

    def chain(self, leaf: str | None = None) -> list[Completion]:
        """The completions from the session's first context to `leaf` (default the newest)."""
        i = leaf if leaf is not None else next(reversed(self.completions))
        out = []
        while i is not None:
            out.append(self.completions[i])
            i = out[-1].parent
        return out[::-1]


class Recorder:
    """Sessions by id, and every completion by what a continuing request starts with
    (thread-safe). Only whole requests are added: a failed or cancelled one leaves nothing."""

    def __init__(self, max_sessions: int = 10_000):
        self.max_sessions = max_sessions  # the oldest session is dropped past this (a server that runs for days)
        self._sessions: dict[str, Session] = {}
        self._by_key: dict[tuple, tuple[str, str]] = {}  # Completion.key() -> (session, completion)
        self._lock = threading.Lock()

    def find(self, messages: Sequence[tuple], tools_key: str,
             session_id: str | None = None) -> tuple[str, Completion] | None:
        """The newest completion that `messages` continue: a prefix of them is its messages
        followed by its reply (longest prefix first), in `session_id` when given."""
        with self._lock:
            for n in range(len(messages), 0, -1):
                hit = self._by_key.get((tuple(messages[:n]), tools_key))
                if hit and (session_id is None or hit[0] == session_id):
                    return hit[0], self._sessions[hit[0]].completions[hit[1]]
        return None

    def add(self, session_id: str, completions: Sequence[Completion]) -> None:
        with self._lock:
            s = self._sessions.setdefault(session_id, Session(session_id))
            for c in completions:
                s.completions[c.id] = c
                self._by_key[c.key()] = (session_id, c.id)
        while len(self._sessions) > self.max_sessions:
            self.pop(next(iter(self._sessions)))

    def get(self, session_id: str) -> Session | None:
        with self._lock:
            return self._sessions.get(session_id)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    def pop(self, session_id: str) -> Session | None:
        """Remove a session (a trainer takes it); its completions are no longer continued."""
        with self._lock:
            s = self._sessions.pop(session_id, None)
            if s is not None:
                for c in s.completions.values():
                    self._by_key.pop(c.key(), None)
            return s


def context_experts(session: Session, completion: Completion) -> np.ndarray:
    """Expert choices of every id of `completion.context` (its chain's pieces since the last
    reset or fresh prompt)."""
    rows: list[np.ndarray] = []
    for c in session.chain(completion.id):
        for piece in c.pieces:
            if piece[0] in ("prompt", "reset"):
                rows = [np.asarray(piece[2])]
            else:
                rows.append(np.asarray(piece[2] if piece[0] == "harness" else piece[5]))
    return np.concatenate(rows)


def episode(session: Session, *, reward: float = 0.0, index: int = 0, task: dict | None = None,
            task_id: str | None = None, end_reason: str = "submit") -> Episode:
    """Every completion of the session as one Episode: the ids, log-probs and expert choices
    exactly as sampled, a Turn per policy piece. A completion that continues the newest one of
    a segment extends it; one that starts afresh (a harness that dropped a reply, a reset)
    or branches off an earlier completion opens a new segment, so each sampled token is in
    exactly one segment. `reward` and `end_reason` are the grader's."""
    ep = Episode(index, dict(task or {}), task_id=task_id, reward=float(reward))
    tips: dict[str, Segment] = {}  # completion id -> the segment it ends (extendable)
    for c in session.completions.values():
        seg = tips.pop(c.parent, None) if c.parent is not None else None
        if seg is None and c.parent is not None:  # its parent's segment went on without it: a branch
            parent = session.completions[c.parent]
            seg = Segment(prompt=list(parent.context), prompt_experts=context_experts(session, parent))
            ep.segments.append(seg)
        for piece in c.pieces:
            kind = piece[0]
            if kind in ("prompt", "reset"):
                if seg is not None and kind == "reset":
                    seg.end_reason = "summary_reset"
                seg = Segment(prompt=list(piece[1]), prompt_experts=np.asarray(piece[2]))
                ep.segments.append(seg)
            elif kind == "harness":
                seg.add(piece[1], piece[2])
            else:
                _, turn_kind, ids, logp, logp_sampler, experts, reason = piece
                start = len(seg.tokens)
                seg.add(ids, experts, logp=logp, logp_sampler=logp_sampler, policy=True)
                seg.turns.append(Turn(turn_kind, start, len(seg.tokens), reason))
                ep.turns += turn_kind == "action"
        tips[c.id] = seg
    return ep.finish(end_reason) if ep.segments else ep
