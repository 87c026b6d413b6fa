"""Rewards: the env's hidden-test reward, plus rubric scores from an LLM judge.

A rubric is a list of weighted yes/no items (RaR): essential 1.0, important 0.7, optional 0.3,
pitfall 0.9 (a pitfall that holds subtracts). The score is explicit:
    clip((sum_{items} w * pass - sum_{pitfalls} w * pass) / sum_{items} w, 0, 1)
A judge answers each item with P(yes) (a model of this codebase: next-token probability of "yes"
vs "no" after a judge prompt) or None when it could not judge. The judge fails closed: if any
item gets no valid verdict the whole judgement scores 0 and is counted, so a broken judge can
never hand out reward.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from composer_jax.errors import ConfigError
from composer_jax.harness import special_tokens as st
from composer_jax.harness.protocol import Message, encode_conversation
from composer_jax.rl.trajectory import Episode

KIND_WEIGHTS = {"essential": 1.0, "important": 0.7, "optional": 0.3, "pitfall": 0.9}
JUDGE_SYSTEM = "You are a strict grader. Answer with one word: yes or no."


@dataclasses.dataclass(frozen=True)
class RubricItem:
    criterion: str  # a yes/no question about the text
    kind: str = "essential"
    weight: float | None = None  # default: KIND_WEIGHTS[kind]

    def __post_init__(self):
        if self.kind not in KIND_WEIGHTS:
            raise ValueError(f"rubric kind {self.kind!r}: use one of {sorted(KIND_WEIGHTS)}")

    @property
    def w(self) -> float:
        return KIND_WEIGHTS[self.kind] if self.weight is None else float(self.weight)


def aggregate(items: Sequence[RubricItem], passed: Sequence[bool]) -> float:
    positive = sum(it.w for it in items if it.kind != "pitfall")
    if positive <= 0:
        raise ValueError("a rubric needs at least one non-pitfall item")
    gained = sum(it.w for it, p in zip(items, passed, strict=True) if p and it.kind != "pitfall")
    lost = sum(it.w for it, p in zip(items, passed, strict=True) if p and it.kind == "pitfall")
    return float(min(max((gained - lost) / positive, 0.0), 1.0))


def judge_prompt(criterion: str, text: str) -> list[Message]:
    return [Message("system", JUDGE_SYSTEM),
            Message("user", f"Question: {criterion}\n\nText:\n{text}\n\nAnswer yes or no.")]


def parse_verdict(text) -> float | None:
    """A text judge's answer -> 1.0 / 0.0, or None for anything but a clear yes or no."""
    if not isinstance(text, str):
        return None
    word = text.strip().lower().rstrip(".!").split()
    if len(word) != 1 or word[0] not in ("yes", "no"):
        return None
    return 1.0 if word[0] == "yes" else 0.0


Judge = Callable[[Sequence[tuple[str, str]]], Sequence[float | None]]  # (criterion, text) -> P(yes)


@dataclasses.dataclass
class Judgement:
    score: float
    failed: bool
    reason: str = ""


def score_rubric(judge: Judge, items: Sequence[RubricItem], text: str, threshold: float = 0.5) -> Judgement:
    try:
        verdicts = list(judge([(it.criterion, text) for it in items]))
    except Exception as e:  # noqa: BLE001 - a crashing judge scores 0, it does not stop training
        return Judgement(0.0, True, f"judge raised {type(e).__name__}: {e}")
    if len(verdicts) != len(items):
        return Judgement(0.0, True, f"judge returned {len(verdicts)} verdicts for {len(items)} items")
    bad = [i for i, v in enumerate(verdicts)
           if not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= v <= 1.0]
    if bad:
        return Judgement(0.0, True, f"no valid verdict for item(s) {bad}")
    return Judgement(aggregate(items, [v > threshold for v in verdicts]), False)


class ModelJudge:
    """P(yes) from a causal LM of this codebase: the judge prompt, then the assistant role token;
    the verdict is P(yes) / (P(yes) + P(no)) over the first token of each word. When those two
    tokens hold less than `min_mass` of the probability the model is not answering the question:
    no verdict (None)."""

    def __init__(self, graphdef: nnx.GraphDef, state: nnx.State, tokenizer, *, max_len: int,
                 min_mass: float = 0.05, batch: int = 8):
        yes, no = tokenizer.encode("yes"), tokenizer.encode("no")
        if not yes or not no or yes[0] == no[0]:
            raise ConfigError("judge tokenizer: 'yes' and 'no' must start with different tokens")
        self.tokenizer, self.max_len, self.min_mass, self.batch = tokenizer, max_len, min_mass, batch
        self.yes, self.no = yes[0], no[0]
        self.state = state

        @jax.jit
        def next_logp(state, tokens_bt, lengths_b):
            logits, _ = nnx.merge(graphdef, state)(tokens_bt)
            last = logits[jnp.arange(tokens_bt.shape[0]), lengths_b - 1]
            return jax.nn.log_softmax(last, axis=-1)

        self._next_logp = next_logp

    def encode(self, criterion: str, text: str) -> list[int]:
        ids, _ = encode_conversation(judge_prompt(criterion, text), self.tokenizer, add_generation_prompt=True)
        if len(ids) > self.max_len:  # keep the question's end and the generation prompt: cut the text's head
            head = ids[:8]
            ids = head + ids[len(ids) - (self.max_len - len(head)):]
        return ids

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float | None]:
        out: list[float | None] = []
        for start in range(0, len(pairs), self.batch):
            chunk = [self.encode(c, t) for c, t in pairs[start:start + self.batch]]
            tokens = np.zeros((self.batch, self.max_len), np.int32)
            lengths = np.ones(self.batch, np.int32)
            for i, ids in enumerate(chunk):
                tokens[i, :len(ids)], lengths[i] = ids, len(ids)
            logp = np.asarray(self._next_logp(self.state, tokens, lengths))
            for i in range(len(chunk)):
                p_yes, p_no = math.exp(logp[i, self.yes]), math.exp(logp[i, self.no])
                mass = p_yes + p_no
                out.append(p_yes / mass if math.isfinite(mass) and mass >= self.min_mass else None)
        return out


def episode_summaries(ep: Episode, tokenizer) -> list[str]:
    out = []
    for seg in ep.segments:
        for turn in seg.turns:
            if turn.kind == "summary":
                body = tokenizer.decode_harness(seg.tokens[turn.start:turn.end])
                out.append(body.replace(st.SUMMARY_CLOSE, "").strip())
    return out


@dataclasses.dataclass(frozen=True)
class RewardWeights:
    tests: float = 1.0  # the env's hidden-test reward
    judge: float = 0.0  # mean rubric score of the episode's summaries


def combine(ep: Episode, weights: RewardWeights, judge: Judge | None, rubric: list[RubricItem] | None,
            tokenizer) -> tuple[float, dict[str, int]]:
    """(reward, counts): tests x w_tests + mean summary rubric score x w_judge (no summaries: 0)."""
    counts = {"judge_calls": 0, "judge_failures": 0}
    reward = weights.tests * float(ep.reward)
    if weights.judge and judge is not None and rubric:
        scores = []
        for text in episode_summaries(ep, tokenizer):
            j = score_rubric(judge, rubric, text)
            counts["judge_calls"] += 1
            counts["judge_failures"] += int(j.failed)
            scores.append(j.score)
        reward += weights.judge * (float(np.mean(scores)) if scores else 0.0)
    return reward, counts
