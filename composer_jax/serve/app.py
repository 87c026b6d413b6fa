"""The HTTP layer: OpenAI's chat-completions API over a `Server` (FastAPI on uvicorn).

    POST /v1/chat/completions   (stream: server-sent events; n choices; tools; logprobs)
    GET  /v1/models
    GET  /health                (scheduler occupancy)

Every error is an OpenAI error object {"error": {"message", "type", "param", "code"}}; a failed,
cancelled or disconnected request frees its slots and records nothing. The response names the
request's session in the `X-Session-Id` header (send it back to keep a conversation in one
session; a request that continues a recorded completion joins its session without it).
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
import traceback

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from composer_jax.harness import special_tokens as st
from composer_jax.serve import chat
from composer_jax.serve.chat import RequestError
from composer_jax.serve.server import Plan, Server

DISCONNECT_POLL_S = 0.5


def create_app(server: Server) -> FastAPI:
    app = FastAPI(title="composer_jax", docs_url=None, redoc_url=None)
    started = int(time.time())

    @app.exception_handler(Exception)
    async def internal(request: Request, exc: Exception):
        traceback.print_exc()
        return JSONResponse(RequestError(f"internal error: {type(exc).__name__}: {exc}", status=500,
                                         kind="server_error").body(), 500)

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": server.model_name, **server.scheduler.busy()}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": server.model_name, "object": "model", "created": started,
                                            "owned_by": "composer_jax"}]}

    @app.post("/v1/chat/completions")
    async def completions(request: Request):
        try:
            body = json.loads(await request.body())
        except ValueError as e:
            return _error(RequestError(f"the request body is not valid JSON: {e}"))
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        holder: dict[str, Plan] = {}

        def emit_for(i: int):
            def emit(event):
                try:
                    if event[0] == "done":
                        record, choice = server.completion(holder["plan"], i, event[1])
                        event[1].park_ref = record.id
                        event = ("done", record, choice)
                    elif event[0] == "tokens":
                        event = ("tokens", list(server.answer_tokens(event[1])))
                except Exception as e:  # noqa: BLE001 - this request fails, the loop goes on
                    traceback.print_exc()
                    event = ("error", e)
                loop.call_soon_threadsafe(events.put_nowait, (i, event))
            return emit

        try:
            plan = server.plan(body, emit_for, request.headers.get("x-session-id"))
        except RequestError as e:
            return _error(e)
        holder["plan"] = plan
        for job in plan.jobs:
            server.scheduler.submit(job)
        headers = {"x-session-id": plan.session}
        if plan.stream:
            return StreamingResponse(_stream(server, plan, events), media_type="text/event-stream",
                                     headers=headers)
        records, choices = {}, {}
        try:
            while len(records) < len(plan.jobs):
                try:
                    i, event = await asyncio.wait_for(events.get(), DISCONNECT_POLL_S)
                except TimeoutError:
                    if await request.is_disconnected():
                        _cancel(server, plan)
                        return JSONResponse({}, 499)
                    continue
                if event[0] == "error":
                    _cancel(server, plan)
                    return _error(RequestError(f"generation failed: {event[1]}", status=500, kind="server_error"))
                if event[0] == "done":
                    records[i], choices[i] = event[1], event[2]
        except asyncio.CancelledError:
            _cancel(server, plan)
            raise
        server.recorder.add(plan.session, [records[i] for i in range(len(plan.jobs))])
        return JSONResponse({"id": plan.id, "object": "chat.completion", "created": plan.created,
                             "model": server.model_name, "choices": [choices[i] for i in range(len(plan.jobs))],
                             "usage": server.usage(plan)}, headers=headers)

    return app


def _error(e: RequestError) -> JSONResponse:
    return JSONResponse(e.body(), e.status)


def _cancel(server: Server, plan: Plan) -> None:
    for job in plan.jobs:
        server.scheduler.cancel(job)


def _sse(obj) -> str:
    return f"data: {json.dumps(obj)}\n\n"


def visible_text(server: Server, plan: Plan, tokens: list[int]) -> str:
    """What may be streamed of a partial answer: no closing tokens, nothing from a tool-call
    open on (it may become `tool_calls`), no half character, no suffix that may begin a special
    token or a stop string."""
    text = chat.strip_stop(server.text(tokens, plan.stop))
    if plan.tools and st.TOOL_CALL_OPEN in text:
        text = text[:text.index(st.TOOL_CALL_OPEN)]
    text = text.rstrip("\ufffd")
    holds = (*st.SPECIAL_TOKENS, *plan.stop)
    for k in range(min(len(text), max(map(len, holds))), 0, -1):
        if any(h.startswith(text[-k:]) for h in holds):
            return text[:-k]
    return text


async def _stream(server: Server, plan: Plan, events: asyncio.Queue):
    n, finished = len(plan.jobs), False
    sent, records = [""] * n, {}

    def chunk(i, delta, finish=None, **extra):
        return _sse({"id": plan.id, "object": "chat.completion.chunk", "created": plan.created,
                     "model": server.model_name, "choices": [{"index": i, "delta": delta, "finish_reason": finish,
                                                              "logprobs": extra.get("logprobs")}]})
    try:
        for i in range(n):
            yield chunk(i, {"role": "assistant", "content": ""})
        while len(records) < n:
            i, event = await events.get()
            if event[0] == "error":
                yield _sse(RequestError(f"generation failed: {event[1]}", status=500, kind="server_error").body())
                return
            if event[0] == "tokens":
                text = visible_text(server, plan, event[1])
                if text.startswith(sent[i]) and len(text) > len(sent[i]):
                    yield chunk(i, {"content": text[len(sent[i]):]})
                    sent[i] = text
                continue
            record, choice = event[1], event[2]
            records[i] = record
            message = choice["message"]
            content = message.get("content") or ""
            if content.startswith(sent[i]) and len(content) > len(sent[i]):
                yield chunk(i, {"content": content[len(sent[i]):]})
            for k, call in enumerate(message.get("tool_calls") or []):
                yield chunk(i, {"tool_calls": [{"index": k, **call}]})
            yield chunk(i, {}, choice["finish_reason"], logprobs=choice["logprobs"])
        server.recorder.add(plan.session, [records[i] for i in range(n)])
        if plan.include_usage:
            yield _sse({"id": plan.id, "object": "chat.completion.chunk", "created": plan.created,
                        "model": server.model_name, "choices": [], "usage": server.usage(plan)})
        yield "data: [DONE]\n\n"
        finished = True
    finally:
        if not finished:  # the client went away (or the request failed): free its slots now
            _cancel(server, plan)


class Background:
    """The app on uvicorn in a daemon thread (tests, benchmarks, harness RL): `.url` is its
    OpenAI base URL; `close()` stops it."""

    def __init__(self, server: Server, host: str = "127.0.0.1", port: int = 0):
        self.server = server
        self._uv = uvicorn.Server(uvicorn.Config(create_app(server), host=host, port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._uv.run, name="serve-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._uv.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the HTTP server did not start")
            time.sleep(0.02)
        self.port = self._uv.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{host}:{self.port}/v1"

    def close(self) -> None:
        self._uv.should_exit = True
        self._thread.join(timeout=30)
