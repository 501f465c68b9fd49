"""Record what /engine/ws sends during a short real run, for the live view's reducer test.

    python tests/js/record_events.py   (from the repository root; writes tests/data/events_tiny_llama.json)

A tiny random llama (tests/tiny_models.py) serves two lanes named apart from their strategies
("iteration-level", continuous with prefix caching and n-gram drafts; "batch of 3", static without) on a small KV pool (so
continuous preempts), so the reducer must key by lane; a small event ring. A first burst finishes before
the recorder connects: its "oldest" replay starts with skipped (coalesced) events, as a late browser tab
sees. Then the recorder submits text, token-id and chat prompts through the socket and aborts one mid-run;
and, to the prefix-caching lane only, three prompts sharing a system prompt: the later two once the first
decodes, so they hit its cached blocks and share them while it still runs; and one prompt from a
participant (named, as /join sends it), to the prefix-caching lane. Beside what the socket sent, each
step's KV with its tables whole as the engine held them (`kv_whole`): the reducer's folding of the
changes the socket sends must rebuild exactly those.
"""
from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

import websockets

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS.parent), str(TESTS)]

import dataclasses  # noqa: E402

from engine import EngineConfig, SamplingParams  # noqa: E402
from engine.api.server import create_app  # noqa: E402
from engine.events import StepRows, sampled_ids, wire_contract  # noqa: E402
from engine.serving.service import EngineService  # noqa: E402
from service_helpers import serve, wait_idle  # noqa: E402
from tiny_models import make_tiny_model  # noqa: E402

OUT = TESTS / "data" / "events_tiny_llama.json"
LANES = {"iteration-level": "continuous", "batch of 3": "static"}  # lane -> strategy
PREFIX_LANE = "iteration-level"  # caches prefixes
STATIC_LANE = "batch of 3"
SLOW_MOTION_S = 0.02  # a step at least this long: the socket sends 30 messages a second
SYSTEM = "You keep the lighthouse on the rock. Answer in one line. "
PARTICIPANT = "Ada <i>Lovelace</i>"  # markup-like on purpose: the views must show it as text


def service(model_dir) -> EngineService:
    cfg = EngineConfig(model=str(model_dir), device="cpu", dtype="float32", block_size=4, num_kv_blocks=32,
                       max_model_len=96, max_num_seqs=6, max_num_batched_tokens=32, static_batch_size=3,
                       static_max_wait_s=0.05)
    lanes = {name: dataclasses.replace(cfg, strategy=s, enable_prefix_caching=name == PREFIX_LANE,
                                       speculative="ngram" if s == "continuous" else "off")
             for name, s in LANES.items()}
    svc = EngineService(cfg, lanes=lanes, hub_capacity=48)
    svc.wait_ready(120)
    return svc


def early_burst(svc: EngineService) -> None:
    for i in range(6):  # static launches full batches of 3
        svc.submit(f"early request {i}", SamplingParams(max_tokens=6, ignore_eos=True), tag="early")
    wait_idle(svc)


async def record(url: str, svc: EngineService) -> list[dict]:
    # two full static batches that fit the pool (static reserves prompt + max_tokens up front)
    prompts = [{"prompt": "The lighthouse keeper"}, {"prompt": [5, 6, 7, 8, 9, 10, 11, 12]},
               {"messages": [{"role": "user", "content": "<b>hi</b> story"}]},
               {"prompt": "A long prompt " * 2}, {"prompt": "short"}, {"prompt": "the last one"}]
    seen, open_requests, ids, rows = [], set(), {}, StepRows()
    svc.set_slow_motion(SLOW_MOTION_S)  # every request lasts long enough to be seen running and aborted
    async with websockets.connect(url, max_size=2**24) as ws:
        seen.append(json.loads(await ws.recv()))  # hello
        await ws.send(json.dumps({"cmd": "subscribe", "ref": "sub", "lanes": list(LANES), "from_seq": "oldest"}))
        for i, p in enumerate(prompts):
            params = {"max_tokens": 10 + 4 * i, "ignore_eos": True}
            await ws.send(json.dumps({"cmd": "submit", "ref": f"r{i}", "tag": "rec", "params": params, **p}))
        await submit_shared(ws, 0)
        (named,) = await asyncio.to_thread(svc.submit, "Hello from the room", SamplingParams(max_tokens=8, ignore_eos=True),
                                           lanes=[PREFIX_LANE], tag="join", name=PARTICIPANT)
        open_requests.add((named.request_id, PREFIX_LANE))
        aborted, first_shared, shared_replies = False, None, 0
        while True:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 60))  # more than enough on 2 cores
            seen.append(msg)
            if msg["type"] == "reply" and msg.get("cmd") == "submit":
                pairs = {(msg["request_id"], lane) for lane in msg["lanes"]}
                open_requests |= pairs
                if msg["ref"].startswith("r"):
                    ids[msg["ref"]] = msg["request_id"]
                else:
                    shared_replies += 1
                    first_shared = msg["request_id"] if msg["ref"] == "p0" else first_shared
            for ev in msg.get("events", []):
                if ev["type"] == "step" and (ev := rows.resolve(ev)) is None:
                    continue  # (the socket sends each pool's first step whole: never)
                if ev["type"] == "finished":
                    open_requests.discard((ev["request_id"], ev["lane"]))
                r2 = ids.get("r2")
                if (ev["type"] == "step" and not aborted and ev["lane"] == STATIC_LANE and r2 is not None
                        and any(e[0] == r2 for e in ev["entries"]) and {(r2, lane) for lane in LANES} <= open_requests):
                    aborted = True
                    # the longest of static's first batch, at the first of its steps seen there: running (an
                    # aborted queued one would leave static's second batch one short, waiting for ever), and
                    # with most of its tokens to go
                    await ws.send(json.dumps({"cmd": "abort", "request_id": r2}))
                if ev["type"] == "step" and first_shared is not None and first_shared in sampled_ids(ev):
                    first_shared = None  # it decodes: its prompt's full blocks are cached now
                    await submit_shared(ws, 1)
                    await submit_shared(ws, 2)
            if aborted and not open_requests and shared_replies == 3:
                return seen


async def submit_shared(ws, i: int) -> None:
    """A prompt that starts with the shared system prompt, to the prefix-caching lane only."""
    await ws.send(json.dumps({"cmd": "submit", "ref": f"p{i}", "tag": "shared prefix", "lanes": [PREFIX_LANE],
                              "prompt": f"{SYSTEM}Question {i}: why?", "params": {"max_tokens": 10, "ignore_eos": True}}))


def kv_key(lane: str, part: str | None, step: int) -> str:
    return f"{lane}/{part or ''}/{step}"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model("llama", Path(tmp) / "llama")
        svc = service(model_dir)
        whole = {}  # each step's KV with its tables whole, as the engine holds them: what the reducer must fold into
        svc.hub.add_listener(lambda ev: ev.TYPE == "step" and whole.setdefault(kv_key(ev.lane, ev.event.part, ev.event.step),
                                                                                ev.key_wire()["kv"]))
        try:
            early_burst(svc)
            with serve(create_app(svc)) as base:
                messages = asyncio.run(record(f"ws://{base}/engine/ws", svc))
        finally:
            svc.stop()
    text = json.dumps({"contract": wire_contract(), "lanes": list(LANES), "messages": messages, "kv_whole": whole},
                      separators=(",", ":"))
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(text.replace(json.dumps(str(model_dir))[1:-1], "tiny-llama"))  # no machine path
    print(f"{OUT.name}: {len(messages)} messages, {OUT.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()
