"""OpenAI-compatible routes on a real server, driven by the openai client and raw httpx."""
from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest
from transformers import AutoTokenizer

from engine.detokenizer import apply_chat_template
from engine.events import FinishedEvent, RequestEvent
from engine_helpers import greedy
from service_helpers import app_fixture, clean_fixture, service_fixture, wait_settled

MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the answer?"}]
GREEDY = dict(temperature=0, extra_body={"ignore_eos": True})


svc = service_fixture(max_num_seqs=16, max_num_batched_tokens=256, static_batch_size=8)
base = app_fixture("base")


@pytest.fixture(scope="module")
def tok(tiny_model_dirs):
    return AutoTokenizer.from_pretrained(str(tiny_model_dirs["llama"]))


@pytest.fixture
def client(base):
    with openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60) as c:
        yield c


_clean = clean_fixture()


def _events(svc, cursor, kind, timeout=10.0, until=lambda evs: True):
    """Hub events of one class since cursor, waiting (up to timeout) until `until` holds."""
    deadline = time.monotonic() + timeout
    while True:
        evs = [e for _, e in svc.hub.read(cursor).events if isinstance(e, kind)]
        if until(evs) or time.monotonic() > deadline:
            return evs
        time.sleep(0.02)


def test_models(client, svc):
    assert [m.id for m in client.models.list().data] == [svc.cfg.model]


def test_chat_plain_and_streamed(client, svc, tok):
    cursor = svc.hub.head
    n_prompt = len(apply_chat_template(tok, MESSAGES))
    r = client.chat.completions.create(model="whatever", messages=MESSAGES, max_tokens=7, user="alice", **GREEDY)
    assert r.model == svc.cfg.model and r.object == "chat.completion"
    (choice,) = r.choices
    assert choice.finish_reason == "length" and choice.message.role == "assistant" and choice.message.content
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (n_prompt, 7, n_prompt + 7)
    # Served by every running strategy, tagged with its source.
    reqs = _events(svc, cursor, RequestEvent)
    assert {e.strategy for e in reqs} == {"continuous", "dynamic"}
    assert {e.tag for e in reqs} == {"openai:alice"}

    chunks = list(client.chat.completions.create(messages=MESSAGES, max_completion_tokens=7, stream=True,
                                                 stream_options={"include_usage": True}, model="m", **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == choice.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 7
    assert chunks[-1].usage.prompt_tokens == n_prompt
    assert all(c.usage is None for c in chunks[:-1])


def test_completions_text_and_token_ids(client, svc, tok):
    prompt = "Once upon a time there was"
    r = client.completions.create(model="m", prompt=prompt, max_tokens=5, **GREEDY)
    assert r.object == "text_completion" and r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(tok.encode(prompt)), 5)

    ids = [5, 17, 42, 99, 7, 8]
    chunks = list(client.completions.create(model="m", prompt=ids, max_tokens=6, stream=True,
                                            stream_options={"include_usage": True}, **GREEDY))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].usage.prompt_tokens == len(ids) and chunks[-1].usage.completion_tokens == 6
    plain = client.completions.create(model="m", prompt=[ids], max_tokens=6, **GREEDY)  # [[ids]]: one prompt
    assert plain.choices[0].text == text and plain.usage.prompt_tokens == len(ids)


def test_lanes_extension_and_stop(client, svc):
    cursor = svc.hub.head
    r = client.completions.create(model="m", prompt=[5, 6, 7], max_tokens=4,
                                  temperature=0, extra_body={"ignore_eos": True, "lanes": ["dynamic"]})
    assert r.usage.completion_tokens == 4
    assert {e.strategy for e in _events(svc, cursor, RequestEvent)} == {"dynamic"}
    full = client.completions.create(model="m", prompt=[5, 6, 7], max_tokens=12, **GREEDY).choices[0].text
    stop = full[3:5]
    cut = client.completions.create(model="m", prompt=[5, 6, 7], max_tokens=12, stop=[stop], **GREEDY)
    assert cut.choices[0].finish_reason == "stop" and stop not in cut.choices[0].text


def test_fifty_concurrent_streams(base, tok):
    async def one(c, i):
        prompt = f"Hello number {i}, how are you"
        stream = await c.completions.create(model="m", prompt=prompt, max_tokens=3 + i % 4, stream=True,
                                            stream_options={"include_usage": True}, **GREEDY)
        chunks = [ch async for ch in stream]
        usage = chunks[-1].usage
        assert (usage.prompt_tokens, usage.completion_tokens) == (len(tok.encode(prompt)), 3 + i % 4)
        assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"

    async def main():
        async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0, timeout=60) as c:
            await asyncio.gather(*(one(c, i) for i in range(50)))

    asyncio.run(main())


def test_disconnect_mid_stream_aborts(client, svc):
    svc.set_slow_motion(0.05)  # 60 tokens take >= 3 s: the client leaves long before
    cursor = svc.hub.head
    stream = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=60, stream=True, **GREEDY)
    rid = int(next(iter(stream)).id.rsplit("-", 1)[1])
    stream.close()
    ended = _events(svc, cursor, FinishedEvent, until=lambda evs: len(evs) == 2)
    assert sorted((e.strategy, e.request_id, e.finish_reason) for e in ended) == [
        ("continuous", rid, "abort"), ("dynamic", rid, "abort")]


def test_disconnect_while_waiting_aborts(base, svc):
    svc.set_slow_motion(0.05)
    cursor = svc.hub.head
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{base}/v1/completions", timeout=httpx.Timeout(5, read=0.5),
                   json={"prompt": [5, 6, 7], "max_tokens": 100, "ignore_eos": True})
    ended = _events(svc, cursor, FinishedEvent, until=lambda evs: len(evs) == 2)
    assert {(e.strategy, e.finish_reason) for e in ended} == {("continuous", "abort"), ("dynamic", "abort")}


def test_aborted_elsewhere_reports_abort(client, svc):
    svc.set_slow_motion(0.05)
    cursor = svc.hub.head
    stream = client.completions.create(model="m", prompt=[5, 6, 7], max_tokens=60, stream=True, **GREEDY)
    req = _events(svc, cursor, RequestEvent, until=lambda evs: len(evs) == 2)[0]
    svc.abort(req.request_id)  # as the live view's abort button does
    assert [c.choices[0].finish_reason for c in stream][-1] == "abort"


def test_engine_error_is_500_or_error_chunk(client, svc):
    w = svc.workers["continuous"]
    real = w.engine.runner.launch

    def broken(rows, cache):
        raise RuntimeError("injected fault")

    w.engine.runner.launch = broken
    try:
        body = dict(model="m", prompt=[5, 6], max_tokens=4, extra_body={"lanes": ["continuous"]})
        with pytest.raises(openai.InternalServerError, match="injected fault") as e:
            client.completions.create(**body)
        assert e.value.status_code == 500 and e.value.body["type"] == "server_error"
        with pytest.raises(openai.APIError, match="injected fault"):
            list(client.completions.create(stream=True, **body))
    finally:
        w.engine.runner.launch = real


def test_a_prompt_refused_after_its_lane_took_it_is_a_400_naming_it(client, svc):
    """Sent while the lanes reconfigure, a request is taken at once and read by the new engines, which refuse
    a prompt past their max_model_len: the same answer as a refusal at once, streamed or not."""
    import concurrent.futures
    svc.pause()
    running = svc.submit([5] * 4, greedy(4))  # (paused: the reconfigure cannot drain yet)
    seqs = svc.cfg.max_num_seqs
    svc.configure(max_num_seqs=seqs + 1)
    body = dict(model="m", prompt=[7] * 600, max_tokens=2, **GREEDY)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        whole = pool.submit(client.completions.create, **body)
        streamed = pool.submit(lambda: list(client.completions.create(stream=True, **body)))
        deadline = time.monotonic() + 30
        while not all(len(w._deferred) == 2 for w in svc.workers.values()) and time.monotonic() < deadline:
            time.sleep(0.02)  # (both taken, queued behind the reconfigure on every lane)
        assert all(len(w._deferred) == 2 for w in svc.workers.values())
        svc.resume()
        with pytest.raises(openai.BadRequestError, match="max_model_len") as e:
            whole.result(60)
        with pytest.raises(openai.APIError, match="max_model_len") as chunk:
            streamed.result(60)
        assert e.value.body["param"] == chunk.value.body["param"] == "prompt"
    assert all(h.result(60).finish_reason == "length" for h in running)
    svc.configure(max_num_seqs=seqs)
    wait_settled(svc)


def test_oversized_chunked_body_refused(base):
    r = httpx.post(f"{base}/v1/completions", content=iter([b'{"prompt": "', b"x" * 70_000, b'"}']),
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 413 and "larger than" in r.json()["error"]["message"]


OK_CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
BAD = [
    ("chat", b"{not json", 400, None, "not valid JSON"),
    ("chat", b"[1, 2]", 400, None, "JSON object"),
    ("chat", json.dumps({"prompt": "x" * 70_000}).encode(), 413, None, "larger than"),
    ("chat", {**OK_CHAT, "max_tokens": "ten"}, 400, "max_tokens", "integer"),
    ("chat", {**OK_CHAT, "max_tokens": 0}, 400, "max_tokens", ">= 1"),
    ("chat", {**OK_CHAT, "temperature": -1}, 400, "temperature", "between 0 and 2"),
    ("chat", {**OK_CHAT, "top_p": 2}, 400, "top_p", "top_p"),
    ("chat", {**OK_CHAT, "stop": 3}, 400, "stop", "stop must be"),
    ("chat", {**OK_CHAT, "stream": "yes"}, 400, "stream", "true or false"),
    ("chat", {**OK_CHAT, "n": 2}, 400, "n", "only n=1"),
    ("chat", {**OK_CHAT, "logprobs": True}, 400, "logprobs", "not supported"),
    ("chat", {**OK_CHAT, "messages": "hi"}, 400, "messages", "non-empty list"),
    ("chat", {**OK_CHAT, "messages": [{"role": "user"}]}, 400, "messages", "messages[0]"),
    ("chat", {**OK_CHAT, "lanes": "continuous"}, 400, "lanes", "list"),
    ("chat", {**OK_CHAT, "lanes": ["static"]}, 400, "lanes", "'static' is not running"),
    ("completions", {"prompt": ["a", "b"]}, 400, "prompt", "only one prompt"),
    ("completions", {"prompt": {"a": 1}}, 400, "prompt", "prompt must be"),
    ("completions", {"prompt": ""}, 400, "prompt", "prompt is empty"),
    ("completions", {"prompt": [5] * 120, "max_tokens": 20}, 400, "prompt", "max_model_len=128"),
    ("completions", {"prompt": [10**9]}, 400, "prompt", "outside the vocabulary"),
    ("completions", {"prompt": "hi", "priority": "high"}, 400, "priority", "must be an integer"),
    ("completions", {"prompt": "hi", "priority": 5000}, 400, "priority", "from -1000 to 1000"),
]


@pytest.mark.parametrize("route,body,status,param,message", BAD)
def test_bad_input_then_serves(base, route, body, status, param, message):
    url = f"{base}/v1/{'chat/completions' if route == 'chat' else 'completions'}"
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(url, content=raw, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert message in err["message"] and err["param"] == param
    assert err["type"] == "invalid_request_error" and err["code"] is None
    ok = httpx.post(f"{base}/v1/chat/completions", json=OK_CHAT, timeout=30)
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] >= 1
