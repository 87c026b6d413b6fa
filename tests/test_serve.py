"""The OpenAI-compatible endpoint, driven by the official `openai` client over real HTTP.

One tiny policy on the 8-device CPU mesh serves every test (a fresh model writes random
tokens, which is all that scheduling, recording and summarisation need); the tool-call round
trip uses a policy whose tokens are scripted but scored by the real model.
"""
from __future__ import annotations

import concurrent.futures
import json
import threading
import time

import httpx2 as httpx
import jax
import numpy as np
import openai
import pytest

from composer_jax.config_loading import load_config
from composer_jax.harness.protocol import format_tool_call
from composer_jax.rl import train
from composer_jax.rl.engine import expert_shape
from composer_jax.rl.engine_host import RolloutEngine
from composer_jax.rl.learner import make_logp
from composer_jax.rl.segments import episode_sequences, pack
from composer_jax.serve import chat, sessions
from composer_jax.serve.app import Background
from composer_jax.serve.server import Server
from composer_jax.train.step import split_params
from scripted_engine import ScriptedEngine  # tests/scripted_engine.py

ROLLOUT = ["rollout.window=512", "rollout.turn_budget=32", "rollout.summary_budget=24", "rollout.slots=8",
           "rollout.prefill_buckets=(64, 256)", "rollout.summarize_at=0.9"]
MODEL = "tiny_test"
TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Show a file.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]


@pytest.fixture(scope="module")
def run():
    return train.build(load_config("configs/tiny.py:test", ROLLOUT), None, make_env=lambda: None)


@pytest.fixture(scope="module")
def engine2(run):
    """A second engine for the scripted servers (the shared server's parked slots stay intact)."""
    e = run.engine
    return RolloutEngine(run.graphdef, e.params, run.model_cfg, e.rollout, valid_vocab=e.valid_vocab,
                         mesh=run.mesh)


@pytest.fixture(scope="module")
def served(run):
    server = Server(run.engine, run.tokenizer, model_name=MODEL, chunk=8)
    bg = Background(server)
    client = openai.OpenAI(base_url=bg.url, api_key="unused", max_retries=0, timeout=120)
    yield server, bg, client
    bg.close()
    server.close()


def learner_vs_recorded(run, episode, temperature):
    """(learner log-probs, recorded sampler log-probs) of every policy token of `episode`."""
    seqs = episode_sequences(episode, 1.0, with_experts=True)
    rows = pack(seqs, 512, expert_shape=expert_shape(run.model_cfg))
    params, buffers = split_params(run.engine.params)
    with jax.set_mesh(run.engine.mesh):
        logp = np.asarray(make_logp(run.graphdef, temperature, True)(params, buffers, rows.arrays()))
    mask = rows.loss_mask > 0
    return logp[mask], rows.sampler_logp[mask]


def ask(client, messages, **kw):
    kw = {"model": MODEL, "temperature": 0, "max_tokens": 12, **kw}
    return client.chat.completions.create(messages=messages, **kw)


def test_models_health_and_errors_keep_serving(served):
    server, bg, client = served
    assert [m.id for m in client.models.list().data] == [MODEL]
    with pytest.raises(openai.NotFoundError) as e:
        ask(client, [{"role": "user", "content": "hi"}], model="gpt-4")
    assert e.value.code == "model_not_found"
    bad = {
        "unknown role": dict(messages=[{"role": "wizard", "content": "x"}]),
        "max_tokens over the window": dict(messages=[{"role": "user", "content": "x"}], max_tokens=10_000),
        "prompt over the window": dict(messages=[{"role": "user", "content": "x" * 700}]),
        "not a JSON Schema": dict(messages=[{"role": "user", "content": "x"}], tools=[
            {"type": "function", "function": {"name": "f", "parameters": {"type": "banana"}}}]),
        "bad temperature": dict(messages=[{"role": "user", "content": "x"}], temperature=5),
        "max_tokens not an integer": dict(messages=[{"role": "user", "content": "x"}], max_tokens="many"),
    }
    params = {}
    for why, kw in bad.items():
        with pytest.raises(openai.BadRequestError) as e:
            ask(client, **kw)
        body = e.value.body
        assert body["type"] == "invalid_request_error" and body["message"], why
        params[why] = body["param"]
    assert params["unknown role"] == "messages[0].role"
    assert params["max_tokens over the window"] == "max_tokens"
    assert params["max_tokens not an integer"] == "max_tokens"
    assert params["not a JSON Schema"] == "tools[0].function.parameters"
    raw = httpx.post(bg.url + "/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert raw.status_code == 400 and "not valid JSON" in raw.json()["error"]["message"]
    assert ask(client, [{"role": "user", "content": "still serving?"}]).choices[0].message.content is not None
    assert httpx.get(bg.url.removesuffix("/v1") + "/health").json()["active"] == 0


def test_stream_n_and_concurrency_give_the_sequential_tokens(served):
    server, _, client = served
    prompts = [[{"role": "user", "content": f"task {i}: " + "ab" * i}] for i in range(6)]
    sequential = [ask(client, p).choices[0].message.content for p in prompts]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        concurrent_ = list(pool.map(lambda p: ask(client, p).choices[0].message.content, prompts))
    assert concurrent_ == sequential
    stream = ask(client, prompts[3], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == sequential[3]
    # n > 1 at temperature 1: one seed gives the same n samples every time, and they differ
    a = ask(client, prompts[1], n=3, temperature=1.0, seed=7, max_tokens=16)
    b = ask(client, prompts[1], n=3, temperature=1.0, seed=7, max_tokens=16)
    texts = [c.message.content for c in a.choices]
    assert [c.index for c in a.choices] == [0, 1, 2]
    assert texts == [c.message.content for c in b.choices] and len(set(texts)) > 1
    assert ask(client, prompts[1], temperature=1.0, seed=-(2**62)).choices  # any int64 seed (OpenAI's)


def test_a_recorded_session_trains_exactly_what_was_sampled(served, run):
    """Three turns of one conversation: each continues the slot (prefilling only the new
    message) and the session is one segment whose learner log-probs equal the sampler's."""
    server, _, client = served
    reuse = server.scheduler.stats["prefix_reuse"]
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "first"}]
    for turn in range(3):
        r = ask(client, messages, temperature=1.0, seed=turn, extra_headers={"x-session-id": "conv-1"})
        messages += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": f"more {turn}"}]
    assert server.scheduler.stats["prefix_reuse"] - reuse == 2
    ep = sessions.episode(server.recorder.get("conv-1"))
    assert len(ep.segments) == 1 and ep.turns == 3
    learner, recorded = learner_vs_recorded(run, ep, 1.0)
    assert len(learner) == sum(ep.segments[0].loss_mask) > 0
    np.testing.assert_allclose(learner, recorded, atol=1e-5)


def test_summarisation_at_the_endpoint_runs_a_conversation_over_several_windows(served, run):
    """A client whose conversation grows past the 512-token window many times: the server
    summarises and resets the slot itself, the client never sees an error, and the session is
    an episode of several segments whose summaries are trained policy tokens."""
    server, _, client = served
    summaries = server.scheduler.stats["summaries"]
    messages = [{"role": "user", "content": "keep notes: " + "x" * 20}]
    total = 0
    for turn in range(16):
        r = ask(client, messages, temperature=1.0, seed=100 + turn, max_tokens=16,
                extra_headers={"x-session-id": "long-1"})
        messages += [r.choices[0].message.model_dump(exclude_none=True),
                     {"role": "user", "content": f"note {turn}: " + "y" * 100}]
        total += r.usage.completion_tokens
    ep = sessions.episode(server.recorder.get("long-1"))
    resets = server.scheduler.stats["summaries"] - summaries
    assert resets >= 3 and len(ep.segments) == resets + 1
    assert sum(t.kind == "summary" for s in ep.segments for t in s.turns) == resets
    assert ep.transcript_tokens > 3 * server.rollout.window
    learner, recorded = learner_vs_recorded(run, ep, 1.0)
    np.testing.assert_allclose(learner, recorded, atol=1e-5)


def test_cancelled_stream_frees_its_slot_and_records_nothing(run, engine2):
    no_stop = run.tokenizer.encode("a" * 200)
    gate, cancelled = threading.Event(), threading.Event()
    server = Server(ScriptedEngine(engine2, [no_stop], gate=gate), run.tokenizer, model_name=MODEL, chunk=8)
    cancel = server.scheduler.cancel
    server.scheduler.cancel = lambda job: (cancel(job), cancelled.set())
    bg = Background(server)
    try:
        with httpx.Client(timeout=60) as h, h.stream("POST", bg.url + "/chat/completions", json={
                "model": MODEL, "stream": True, "max_tokens": 200,
                "messages": [{"role": "user", "content": "a long answer please"}]}) as r:
            events = (json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: "))
            assert next(events)["choices"][0]["delta"]["role"] == "assistant"
            assert next(events)["choices"][0]["delta"]["content"]  # the job runs (held at the gate)
        assert cancelled.wait(60), "the server never noticed the client leave"
        gate.set()
        deadline = time.monotonic() + 60
        while server.scheduler.busy()["active"] + server.scheduler.busy()["pending"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.scheduler.busy()["active"] == 0 and server.scheduler.stats["cancelled"] == 1
        assert server.scheduler.stats["completions"] == 0 and server.recorder.ids() == []
        assert server.scheduler.busy()["free"] == server.engine.slots
    finally:
        gate.set()
        bg.close()
        server.close()


def test_a_stream_cancelled_while_waiting_for_a_slot_is_counted_and_never_runs(run, engine2):
    slots, answer = engine2.slots, run.tokenizer.encode("a" * 40)
    scripts = [answer] * (slots + 1)
    gate, cancelled = threading.Event(), threading.Event()
    server = Server(ScriptedEngine(engine2, scripts, gate=gate), run.tokenizer, model_name=MODEL, chunk=8)
    cancel = server.scheduler.cancel
    server.scheduler.cancel = lambda job: (cancel(job), cancelled.set())
    bg = Background(server)
    client = openai.OpenAI(base_url=bg.url, api_key="unused", max_retries=0, timeout=120)
    try:
        with concurrent.futures.ThreadPoolExecutor(slots) as pool:
            running = [pool.submit(ask, client, [{"role": "user", "content": f"job {i}"}], max_tokens=40)
                       for i in range(slots)]
            deadline = time.monotonic() + 60
            while server.scheduler.busy()["active"] < slots and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.scheduler.busy()["active"] == slots  # every slot held at the gate
            with httpx.Client(timeout=60) as h, h.stream("POST", bg.url + "/chat/completions", json={
                    "model": MODEL, "stream": True, "max_tokens": 40,
                    "messages": [{"role": "user", "content": "no slot for me"}]}) as r:
                next(line for line in r.iter_lines() if line.startswith("data: "))
                assert server.scheduler.busy()["pending"] == 1
            assert cancelled.wait(60), "the server never noticed the waiting client leave"
            gate.set()
            assert all(len(f.result().choices[0].message.content) > 0 for f in running)
        deadline = time.monotonic() + 60
        while server.scheduler.busy()["pending"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.scheduler.stats["cancelled"] == 1 and server.scheduler.stats["completions"] == slots
        assert len(server.engine._scripts) == 1, "the cancelled request was admitted and generated"
        assert len(server.recorder.ids()) == slots
    finally:
        gate.set()
        bg.close()
        server.close()


def test_tool_call_round_trip(run, engine2):
    tok = run.tokenizer
    call = tok.encode_with_specials("let me look" + format_tool_call("read_file", path="a.py"))
    answer = tok.encode_with_specials("done<|end_of_turn|>")
    server = Server(ScriptedEngine(engine2, [call, answer]), tok, model_name=MODEL, chunk=8,
                    summarize_at_endpoint=False)  # the tool listing leaves no room for the summary request
    bg = Background(server)
    try:
        client = openai.OpenAI(base_url=bg.url, api_key="unused", max_retries=0)
        messages = [{"role": "user", "content": "what is in a.py?"}]
        r = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, temperature=1.0,
                                           max_tokens=120)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content == "let me look"
        (tool_call,) = choice.message.tool_calls
        assert tool_call.function.name == "read_file" and tool_call.function.arguments == '{"path": "a.py"}'
        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": tool_call.id, "content": "print('hi')"}]
        r2 = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, temperature=1.0,
                                            max_tokens=120)
        assert r2.choices[0].message.content == "done" and r2.choices[0].finish_reason == "stop"
        assert server.scheduler.stats["prefix_reuse"] == 1
        (sid,) = server.recorder.ids()
        ep = sessions.episode(server.recorder.get(sid))
        seg = ep.segments[0]
        policy = [t for t, m in zip(seg.tokens, seg.loss_mask) if m]
        assert policy == call + answer  # the ids as generated, never re-tokenised
        learner, recorded = learner_vs_recorded(run, ep, 1.0)
        np.testing.assert_allclose(learner, recorded, atol=1e-5)
    finally:
        bg.close()
        server.close()


def test_tools_are_listed_in_the_model_templates_words():
    tools = chat.parse_tools(TOOLS)
    ours = chat.to_messages([{"role": "user", "content": "hi"}], tools)
    qwen = chat.to_messages([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}], tools,
                            "qwen2")
    assert ours[0].role == "system" and "read_file" in ours[0].content and "<tools>" not in ours[0].content
    assert qwen[0].content.startswith("be brief\n\n# Tools") and '"name": "read_file"' in qwen[0].content
    assert [m.role for m in qwen] == ["system", "user"]


def test_parse_reply_keeps_malformed_calls_as_content():
    tools = chat.parse_tools(TOOLS)
    ok = "x" + format_tool_call("read_file", path="a")
    assert chat.parse_reply(ok, tools)[1][0]["function"]["name"] == "read_file"
    for text in ["x" + format_tool_call("read_file", path=3), "x" + format_tool_call("rm", path="a"),
                 "x<|tool_call|>{not json<|/tool_call|>", "x<|tool_call|>{\"name\": \"read_file\""]:
        content, calls = chat.parse_reply(text, tools)
        assert calls is None and content == text


def test_recorder_drops_the_oldest_session_past_its_bound():
    rec = sessions.Recorder(max_sessions=2)
    user = chat.normalise({"role": "user", "content": "hi"})
    for i in range(3):
        reply = chat.normalise({"role": "assistant", "content": f"r{i}"})
        rec.add(f"s{i}", [sessions.Completion(f"c{i}", None, [], [1, 2], (user,), reply, "t", "stop", 2, 1)])
    assert rec.ids() == ["s1", "s2"]
    assert rec.find([user, chat.normalise({"role": "assistant", "content": "r0"}), user], "t") is None
    assert rec.find([user, chat.normalise({"role": "assistant", "content": "r2"}), user], "t")[0] == "s2"
