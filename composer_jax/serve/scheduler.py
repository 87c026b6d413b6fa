"""Continuous batching of served completions over one RolloutEngine, in one thread.

Each choice of a request is a `Job` on one engine slot. The loop repeats: drop cancelled jobs
(their slots are freed at once), admit waiting jobs into free slots (one batched prefill), then
decode one chunk of `chunk` tokens for every running job that shares a sampling setting
(temperature, top_p are arguments of the compiled decode, so settings take turns chunk by
chunk); a chunk is one token while a job in it has none yet, so its first token is not held
up behind a whole chunk. New requests therefore join between chunks, never waiting for others to finish.

A finished job's slot is parked with its context: the session's next request, whose ids start
with exactly that context, prefills only its new tokens. Parked slots are evicted oldest first
when a job needs a slot. A job's samples depend only on its key and its tokens (engine.py), so
concurrent clients get the tokens sequential ones would.

Self-summarisation at the endpoint: a job whose context would pass the turn limit first appends
the summary request, lets the policy write the summary, rewinds the slot to the session's
prompt (its KV kept, engine.mark / rewind) and appends the summary behind it, then generates
the answer; the client only sees the answer. New messages go before the summary request when
they fit beside it (the summary sees them), else after the summary (as the agent loop carries
an observation into the next segment).
"""
from __future__ import annotations

import collections
import dataclasses
import threading
import traceback
from collections.abc import Callable

import jax
import numpy as np

from composer_jax.rl import summarize
from composer_jax.rl.engine_host import RolloutEngine


@dataclasses.dataclass
class Phase:
    kind: str  # "summary" | "action"
    harness: list[int]  # appended before it
    harness_experts: np.ndarray | None
    budget: int
    stops: tuple[int, ...]
    tokens: list[int] = dataclasses.field(default_factory=list)
    logp: list[float] = dataclasses.field(default_factory=list)
    logp_sampler: list[float] = dataclasses.field(default_factory=list)
    experts: list[np.ndarray] = dataclasses.field(default_factory=list)
    stopped: bool = False


@dataclasses.dataclass(eq=False)
class Job:
    """One choice of one request. `context` is the slot's ids before the first phase (the
    parent's recorded context + new harness ids, or a fresh prompt); `base_len` is where the
    session's prompt ends (the reset point)."""
    key: jax.Array
    context: list[int]
    reuse: str | None  # the completion whose parked slot holds context[:reuse_len]
    reuse_len: int
    base_len: int
    base_experts: np.ndarray | None  # experts of context[:base_len] when already recorded
    max_tokens: int
    stops: tuple[int, ...]
    temperature: float
    top_p: float
    summarize_first: bool
    carried: list[int]  # new ids that open the context after the summary (they did not fit before it)
    # ("tokens", job) after each chunk | ("done", job) | ("error", exc); called on the loop's
    # thread. On "done" the owner records the job and sets `park_ref` to keep its slot's context.
    emit: Callable[[tuple], None]
    stop_check: Callable[[list[int]], int | None] = lambda tokens: None  # cut point of a stop string
    cancelled: threading.Event = dataclasses.field(default_factory=threading.Event)
    # filled by the scheduler
    slot: int | None = None
    phases: list[Phase] = dataclasses.field(default_factory=list)
    prefill_experts: np.ndarray | None = None  # experts of what was prefilled at admission
    prefilled_from: int = 0
    reset_ids: list[int] | None = None
    reset_experts: np.ndarray | None = None
    cut: int | None = None  # answer tokens kept when a stop string ended it
    finish_reason: str = ""
    park_ref: str | None = None
    completion: object = None  # the owner's record of it

    @property
    def answer(self) -> Phase:
        return self.phases[-1]


class Scheduler:
    def __init__(self, engine: RolloutEngine, ids: summarize.SpecialIds, *, chunk: int = 16):
        if not 1 <= chunk <= engine.rollout.max_new_tokens:
            raise ValueError(f"chunk={chunk} must be in [1, rollout.max_new_tokens="
                             f"{engine.rollout.max_new_tokens}]")
        self.engine, self.ids, self.chunk = engine, ids, chunk
        self.rollout = engine.rollout
        self._pending: collections.deque[Job] = collections.deque()
        self._active: dict[int, Job] = {}
        self._parked: collections.OrderedDict[int, tuple] = collections.OrderedDict()  # slot -> (completion, len)
        self._free = list(range(engine.slots))
        self._cv = threading.Condition()
        self._stop = False
        self._turn = 0
        self.stats = collections.Counter()
        self._thread = threading.Thread(target=self._run, name="serve-scheduler", daemon=True)
        self._thread.start()

    # -- called from request handlers ---------------------------------------------------------
    def submit(self, job: Job) -> None:
        with self._cv:
            self._pending.append(job)
            self._cv.notify()

    def cancel(self, job: Job) -> None:
        job.cancelled.set()
        with self._cv:
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify()
        self._thread.join(timeout=30)

    def busy(self) -> dict[str, int]:
        with self._cv:
            return dict(active=len(self._active), pending=len(self._pending), parked=len(self._parked),
                        free=len(self._free))

    # -- the loop -----------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stop and not self._pending and not self._active:
                    self._cv.wait()
                if self._stop:
                    return
            try:
                self._reap()
                self._admit()
                self._decode()
            except Exception as e:  # noqa: BLE001 - the jobs in flight fail; the server keeps serving
                traceback.print_exc()
                for slot, job in list(self._active.items()):
                    self._release(slot)
                    job.emit(("error", e))

    def _release(self, slot: int) -> None:
        with self._cv:
            self._active.pop(slot, None)
            self._parked.pop(slot, None)
            self._free.append(slot)

    def _reap(self) -> None:
        with self._cv:
            kept = collections.deque(j for j in self._pending if not j.cancelled.is_set())
            self.stats["cancelled"] += len(self._pending) - len(kept)
            self._pending = kept
        for slot, job in list(self._active.items()):
            if job.cancelled.is_set():
                self.stats["cancelled"] += 1  # before the release: whoever sees the slot free sees the count
                self._release(slot)

    def _take_slot(self, job: Job) -> tuple[int, bool] | None:
        with self._cv:
            if job.reuse is not None:
                for slot, (ref, length) in self._parked.items():
                    if ref == job.reuse and length == job.reuse_len:
                        del self._parked[slot]
                        return slot, True
            if self._free:
                return self._free.pop(0), False
            if self._parked:
                slot, _ = self._parked.popitem(last=False)
                return slot, False
        return None

    def _admit(self) -> None:
        jobs, fresh = [], []
        while True:
            with self._cv:
                if not self._pending:
                    break
                job = self._pending[0]
            taken = self._take_slot(job)
            if taken is None:
                break
            job.slot, reused = taken
            with self._cv:
                self._pending.popleft()
                self._active[job.slot] = job  # from here a failure reaches the job
            self.stats["prefix_reuse" if reused else "fresh_prefill"] += 1
            job.prefilled_from = job.reuse_len if reused else 0
            jobs.append(job)
            if not reused:
                fresh.append(job)
        if not jobs:
            return
        reused = [j for j in jobs if j not in fresh]
        if fresh:  # the prompt up to the reset point, the mark, then the rest
            self.engine.start([j.slot for j in fresh], [j.key for j in fresh])
            head = self.engine.append([j.slot for j in fresh], [j.context[:j.base_len] for j in fresh], score=False)
            self.engine.mark([j.slot for j in fresh])
        if reused:
            self.engine.seed([j.slot for j in reused], [j.key for j in reused])
        tails = self.engine.append([j.slot for j in jobs],
                                   [j.context[j.base_len if j in fresh else j.prefilled_from:] for j in jobs],
                                   score=False)  # a served prompt's log-probs are never returned
        for j, tail in zip(jobs, tails):
            parts = [head[fresh.index(j)].experts] if j in fresh else []
            j.prefill_experts = np.concatenate([*parts, tail.experts])
            self._open_phases(j)

    def _open_phases(self, job: Job) -> None:
        ids = self.ids
        if job.summarize_first:
            scored = self.engine.append([job.slot], [list(ids.request)], score=False)[0]
            job.phases.append(Phase("summary", list(ids.request), scored.experts, self.rollout.summary_budget,
                                    ids.summary_stops))
        else:
            job.phases.append(Phase("action", [], None, job.max_tokens, job.stops))

    def _decode(self) -> None:
        running = [j for j in self._active.values()]
        if not running:
            return
        groups: dict[tuple, list[Job]] = collections.defaultdict(list)
        for j in running:
            groups[(j.temperature, j.top_p)].append(j)
        keys = sorted(groups)
        key = keys[self._turn % len(keys)]
        self._turn += 1
        jobs = groups[key]
        self.engine.set_sampling(*key)
        # A job that has no token yet gets one at once (time to first token = its prefill + one
        # step, not a whole chunk): the call is then a single step for the group.
        step = 1 if any(not j.phases[-1].tokens and j.phases[-1].kind == "action" for j in jobs) else self.chunk
        budgets = [min(step, j.phases[-1].budget - len(j.phases[-1].tokens)) for j in jobs]
        out = self.engine.generate([j.slot for j in jobs], budgets, [j.phases[-1].stops for j in jobs])
        self.stats["decode_calls"] += 1
        lengths = self.engine.lengths()
        for job, gen in zip(jobs, out):
            phase = job.phases[-1]
            phase.tokens += gen.tokens.tolist()
            phase.logp += gen.logp.tolist()
            phase.logp_sampler += gen.logp_sampler.tolist()
            phase.experts.append(gen.experts)
            self.stats["tokens"] += len(gen.tokens)
            full = lengths[job.slot] >= self.engine.window
            done = gen.stopped or len(phase.tokens) >= phase.budget or full or len(gen.tokens) == 0
            if phase.kind == "summary":
                if done:
                    self._reset(job)
                continue
            cut = job.stop_check(phase.tokens)
            if cut is not None:
                job.cut, job.finish_reason = cut, "stop"
            elif done:
                job.finish_reason = "stop" if gen.stopped else "length"
            if job.finish_reason:
                self.stats["completions"] += 1
                job.emit(("done", job))
                with self._cv:
                    self._active.pop(job.slot, None)
                    if job.park_ref is not None and job.cut is None:
                        self._parked[job.slot] = (job.park_ref, lengths[job.slot])
                    else:
                        self._free.append(job.slot)
            else:
                job.emit(("tokens", job))

    def _reset(self, job: Job) -> None:
        """The summary is written: rewind to the session's prompt, append the summary, open the
        answer phase."""
        ids, summary = self.ids, job.phases[-1]
        reason = ids.end_reason(summary.tokens[-1] if summary.tokens else None, len(summary.tokens), summary.budget)
        body = ids.summary_body(summary.tokens, reason)
        prompt = summarize.reset_prompt(job.context[:job.base_len], body, ids)
        self.engine.rewind([job.slot])
        after = job.carried + list(ids.assistant)
        scored = self.engine.append([job.slot], [prompt[job.base_len:] + after], score=False)[0]
        job.reset_ids = prompt
        base = job.base_experts if job.base_experts is not None else job.prefill_experts[:job.base_len]
        job.reset_experts = np.concatenate([base, scored.experts[:len(prompt) - job.base_len]])
        job.phases.append(Phase("action", after, scored.experts[len(prompt) - job.base_len:],
                                job.max_tokens, job.stops))
        self.stats["summaries"] += 1
