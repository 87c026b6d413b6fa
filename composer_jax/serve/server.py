"""One served policy: a request becomes jobs for the scheduler, a finished job a recorded
completion and an OpenAI choice. The HTTP layer (app.py) only moves JSON.

A request's ids: when a recorded completion's messages and reply are a prefix of the request's
messages, its context is the completion's recorded ids + the turn's closing + the new messages +
the generation prompt (and the job may continue in the same slot, prefilling only the new ids);
otherwise the whole conversation is rendered fresh. Sessions are named by the `X-Session-Id`
header or `metadata.session_id`, or inherited from the completion a request continues.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import time
import uuid

import jax
import numpy as np

from composer_jax.checkpoints.chat_template import TEMPLATES
from composer_jax.errors import ConfigError
from composer_jax.harness.protocol import encode_conversation, encode_message
from composer_jax.rl import summarize
from composer_jax.rl.engine import expert_shape
from composer_jax.rl.engine_host import MAX_STOPS, RolloutEngine
from composer_jax.serve import chat
from composer_jax.serve.chat import RequestError
from composer_jax.serve.scheduler import Job, Scheduler
from composer_jax.serve.sessions import Completion, Recorder

UNSUPPORTED_NONZERO = ("frequency_penalty", "presence_penalty")


@dataclasses.dataclass
class Plan:
    """A parsed request: its jobs (one per choice) and what recording them needs."""
    id: str
    session: str
    jobs: list[Job]
    messages: tuple
    tools: dict
    tools_key: str
    parent: Completion | None
    stream: bool
    logprobs: bool
    include_usage: bool
    stop: list[str]
    created: int


class Server:
    def __init__(self, engine: RolloutEngine, tokenizer, *, model_name: str, chunk: int = 16,
                 summarize_at_endpoint: bool = True, seed: int = 0):
        self.engine, self.tok, self.model_name = engine, tokenizer, model_name
        self.ids = summarize.SpecialIds.from_tokenizer(tokenizer)
        # Whose words list the tools: an imported model's chat template's (checkpoints/chat_template.py)
        self.template = next((name for name, text in TEMPLATES.items() if tokenizer.special_text == text), "harness")
        self.rollout = r = engine.rollout
        self.summarize = summarize_at_endpoint
        room = r.window - summarize.reserve(r, self.ids)
        if summarize_at_endpoint and room < r.turn_budget:
            raise ConfigError(f"rollout.window={r.window} leaves {room} tokens beside the summary request "
                              f"({len(self.ids.request)} ids) and rollout.summary_budget={r.summary_budget}: "
                              f"less than rollout.turn_budget={r.turn_budget}; raise the window or serve "
                              "without summarisation")
        self.scheduler = Scheduler(engine, self.ids, chunk=chunk)
        self.recorder = Recorder()
        self._key = jax.random.key(seed)
        self._counter = itertools.count()

    def close(self) -> None:
        self.scheduler.close()

    # -- requests -----------------------------------------------------------------------------
    def plan(self, body, emit_for, session_header: str | None = None) -> Plan:
        """Check the request (RequestError names the parameter) and build its jobs; `emit_for(i)`
        gives choice i's event callback."""
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        model = body.get("model")
        if model != self.model_name:
            raise RequestError(f"model {model!r} does not exist; this server serves {self.model_name!r}",
                               "model", status=404, code="model_not_found")
        for name in UNSUPPORTED_NONZERO:
            if body.get(name) not in (None, 0, 0.0):
                raise RequestError(f"{name} is not supported (must be 0 or absent)", name)
        if body.get("logit_bias"):
            raise RequestError("logit_bias is not supported", "logit_bias")
        if body.get("top_logprobs") not in (None, 0):
            raise RequestError("top_logprobs is not supported (the sampled token's log-prob is returned "
                               "with logprobs=true)", "top_logprobs")
        fmt = body.get("response_format")
        if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
            raise RequestError("response_format: only {'type': 'text'} is supported", "response_format")
        choice = body.get("tool_choice", "auto")
        if choice not in ("auto", "none"):
            raise RequestError("tool_choice: only 'auto' and 'none' are supported", "tool_choice")
        tools = chat.parse_tools(body.get("tools"))
        if choice == "none":
            tools = {}
        temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
        top_p = _number(body, "top_p", 1.0, 0.0, 1.0, open_low=True)
        n = _integer(body, "n", 1, 1, self.engine.slots)
        stream = _flag(body, "stream")
        logprobs = _flag(body, "logprobs")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else stop
        if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
            raise RequestError("'stop' must be a string or a list of up to 4 non-empty strings", "stop")
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise RequestError("'metadata' must be an object", "metadata")
        stream_options = body.get("stream_options") or {}
        if not isinstance(stream_options, dict):
            raise RequestError("'stream_options' must be an object", "stream_options")
        raw = body.get("messages")
        harness_messages = chat.to_messages(raw, tools, self.template)  # validates roles and contents
        messages = tuple(chat.normalise(m) for m in raw)
        tools_key = hashlib.sha256(json.dumps(body.get("tools") if tools else None, sort_keys=True)
                                   .encode()).hexdigest()[:16]
        wanted = session_header or metadata.get("session_id")
        if wanted is not None and not isinstance(wanted, str):
            raise RequestError("metadata.session_id must be a string", "metadata.session_id")
        found = self.recorder.find(messages, tools_key, wanted)
        request_id = "chatcmpl-" + uuid.uuid4().hex[:24]
        session = wanted or (found[0] if found else request_id)
        parent = found[1] if found else None

        wanted_tokens = self._requested_tokens(body)
        summarize_first, carried = False, []
        if parent is None:
            context, _ = encode_conversation(harness_messages, self.tok, add_generation_prompt=True)
            base_len, reuse_len = len(context) - len(self.ids.assistant), 0
        else:
            n_prefix = len(parent.messages) + 1
            closing = (self.ids.end_of_turn_tail if parent.last_token == self.ids.end_of_turn
                       else self.ids.end_of_turn_seq)
            rest = chat.to_messages(raw, {})[n_prefix:]
            new = list(closing) + [i for m in rest for i in encode_message(m, self.tok)[0]]
            context, base_len, reuse_len = parent.context + new, parent.base_len, len(parent.context)
            summarize_first = self.summarize and (len(context) + len(self.ids.assistant) + (
                wanted_tokens or self.rollout.turn_budget) > summarize.turn_limit(self.rollout, self.ids))
            if not summarize_first:
                context = context + list(self.ids.assistant)
            elif len(context) + len(self.ids.request) + self.rollout.summary_budget > self.rollout.window:
                context, carried = list(parent.context), new  # summarise first; the new ids follow it
                if len(context) + len(self.ids.request) + self.rollout.summary_budget > self.rollout.window:
                    raise RequestError(
                        f"no room to summarise: the conversation holds {len(context)} tokens, the summary "
                        f"request {len(self.ids.request)} and the summary up to {self.rollout.summary_budget}, "
                        f"more than the {self.rollout.window}-token window", "messages",
                        code="context_length_exceeded")
        max_tokens = self._max_tokens(wanted_tokens, body, len(context), base_len, summarize_first, len(carried))
        stops = (self.ids.end_of_turn, self.ids.eos) + ((self.ids.tool_call_close,) if tools else ())
        assert len(stops) <= MAX_STOPS
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise RequestError("'seed' must be an integer", "seed")
        # Any int64 seed (OpenAI's), and the turn: a session's turns sharing one seed draw fresh noise.
        seed = seed % 2**64 if seed is not None else 2**63 + next(self._counter)
        key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(self._key, seed >> 32), seed & 0xFFFFFFFF),
                                 len(raw))
        base_experts = _base_experts(self.recorder, session, parent) if summarize_first else None
        jobs = [Job(key=jax.random.fold_in(key, i), context=context, reuse=parent.id if parent else None,
                    reuse_len=reuse_len, base_len=base_len, base_experts=base_experts, max_tokens=max_tokens,
                    stops=stops, temperature=temperature, top_p=top_p, summarize_first=summarize_first,
                    carried=carried, emit=emit_for(i), stop_check=self._stop_check(stop)) for i in range(n)]
        return Plan(request_id, session, jobs, messages, tools, tools_key, parent, stream, logprobs,
                    bool(stream_options.get("include_usage")), stop, int(time.time()))

    @staticmethod
    def _requested_tokens(body) -> int | None:
        """The request's max_completion_tokens (or max_tokens), checked; None when absent."""
        name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        return None if body.get(name) is None else _integer(body, name, None, 1, None)

    def _max_tokens(self, value: int | None, body, context_len: int, base_len: int, summarize_first: bool,
                    carried: int) -> int:
        window, ids = self.rollout.window, self.ids
        if summarize_first:  # the answer follows the reset prompt with a full-length summary
            context_len = len(summarize.reset_prompt([0] * base_len, [0] * self.rollout.summary_budget, ids)) \
                + carried + len(ids.assistant)
        room = window - context_len
        if room < 1:
            hint = "" if self.summarize else " (summarisation at the endpoint is off)"
            raise RequestError(f"the prompt is {context_len} tokens; the window is {window}{hint}",
                               "messages", code="context_length_exceeded")
        if value is None:
            return min(self.rollout.turn_budget, room)
        name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        if value > room:
            raise RequestError(f"{name}={value} does not fit: the prompt is {context_len} tokens and the "
                               f"window {window}, so at most {room}", name, code="context_length_exceeded")
        return value

    def _stop_check(self, stop: list[str]):
        if not stop:
            return lambda tokens: None
        tok = self.tok

        def check(tokens: list[int]) -> int | None:
            text = tok.decode_harness(tokens)
            if not any(s in text for s in stop):
                return None
            return next(k for k in range(1, len(tokens) + 1)
                        if any(s in tok.decode_harness(tokens[:k]) for s in stop))
        return check

    # -- finished jobs ------------------------------------------------------------------------
    def answer_tokens(self, job: Job) -> list[int]:
        tokens = job.answer.tokens
        return tokens[:job.cut] if job.cut is not None else tokens

    def text(self, tokens: list[int], stop: list[str]) -> str:
        text = self.tok.decode_harness(tokens)
        for s in stop:
            if s in text:
                text = text[:text.index(s)]
        return text

    def completion(self, plan: Plan, i: int, job: Job) -> tuple[Completion, dict]:
        """Job -> (its record, its OpenAI choice). Called on the scheduler's thread at "done"."""
        tokens = self.answer_tokens(job)
        content, tool_calls = chat.parse_reply(self.text(tokens, plan.stop), plan.tools)
        finish = "tool_calls" if tool_calls else job.finish_reason
        pieces = []
        pre = job.context[job.prefilled_from:]
        if plan.parent is None:
            pieces.append(("prompt", job.context, job.prefill_experts))
        else:
            tail = job.context[len(plan.parent.context):]
            pieces.append(("harness", tail, job.prefill_experts[len(pre) - len(tail):]))
        context = list(job.context)
        for phase in job.phases:
            if phase.harness and phase.kind == "summary":
                pieces.append(("harness", phase.harness, phase.harness_experts))
            if phase.kind == "action" and job.reset_ids is not None:
                pieces.append(("reset", job.reset_ids, job.reset_experts))
                pieces.append(("harness", phase.harness, phase.harness_experts))
                context = job.reset_ids + phase.harness
            n = len(tokens) if phase is job.answer else len(phase.tokens)
            reason = self.ids.end_reason(phase.tokens[n - 1] if n else None, n, phase.budget)
            experts = np.concatenate(phase.experts)[:n] if phase.experts else \
                np.zeros((0, *expert_shape(self.engine.cfg)), np.int32)
            pieces.append(("policy", phase.kind, phase.tokens[:n], phase.logp[:n], phase.logp_sampler[:n],
                           experts, reason))
        context = context + tokens
        reply = chat.normalise(chat.reply_message(content, tool_calls))
        record = Completion(id=f"{plan.id}-{i}", parent=plan.parent.id if plan.parent else None,
                            pieces=pieces, context=context, messages=plan.messages, reply=reply,
                            tools_key=plan.tools_key, finish_reason=finish,
                            last_token=tokens[-1] if tokens else None, base_len=job.base_len)
        message = chat.reply_message(content, tool_calls)
        choice = {"index": i, "message": message, "finish_reason": finish, "logprobs": None}
        if plan.logprobs:
            choice["logprobs"] = {"content": [self._logprob(t, lp) for t, lp in
                                              zip(tokens, job.answer.logp[:len(tokens)])]}
        return record, choice

    def _logprob(self, token: int, logp: float) -> dict:
        text = self.tok.decode([token])
        return {"token": text, "logprob": float(logp), "bytes": list(text.encode()), "top_logprobs": []}

    def usage(self, plan: Plan) -> dict:
        prompt = len(plan.jobs[0].context)
        completion = sum(len(self.answer_tokens(j)) for j in plan.jobs)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _base_experts(recorder: Recorder, session: str, parent: Completion | None):
    """Expert choices of the session's prompt (the first context's first piece)."""
    if parent is None:
        return None
    s = recorder.get(session)
    root = s.chain(parent.id)[0] if s is not None and parent.id in s.completions else None
    return None if root is None else np.asarray(root.pieces[0][2])[:parent.base_len]


def _number(body, name, default, low, high, open_low=False) -> float:
    v = body.get(name, default)
    v = default if v is None else v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v > high or v < low or (open_low and v <= low):
        raise RequestError(f"'{name}' must be a number in {'(' if open_low else '['}{low}, {high}]", name)
    return float(v)


def _integer(body, name, default, low, high) -> int:
    v = body.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise RequestError(f"'{name}' must be an integer {bound}", name)
    return v


def _flag(body, name) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise RequestError(f"'{name}' must be true or false", name)
    return v
