"""Every entry point, fuzzed (hypothesis drives engine/harness/fuzz.py, and shrinks what fails): the socket's
commands, OpenAI bodies, /join bodies, recording files, scenario files, the event encoder. Each input
gets a clear answer that names the field it broke, never a 500, a traceback or an "internal error";
meanwhile another client keeps being served, and afterwards every event the server holds still encodes.

CI runs a fixed set of examples; FUZZ_EXAMPLES=2000 pytest tests/engine/harness/test_fuzz_entry_points.py explores fresh
ones (each run new)."""
from __future__ import annotations

import gzip
import json
import os
import threading
import time
import tomllib

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from engine import SamplingParams, wire_json
from engine.room.access import PRESENTER_COOKIE, Access
from engine.api.protocol import MAX_MESSAGE_BYTES
from engine.harness import fuzz
from engine.workshop.recording import Replayer, load
from engine.workshop.recording.format import RecordingError
from engine.workshop.recording.stage import SHIPPED
from engine.workshop.scenarios import ScenarioError, load_scenario
from engine.workshop.scenarios.loader import SCENARIO_DIR
from service_helpers import app_fixture, assert_all_free, service_fixture

TOKEN = "fuzz-presenter-token"
FUZZ = settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", 120)), derandomize="FUZZ_EXAMPLES" not in os.environ,
                deadline=None, database=None, suppress_health_check=list(HealthCheck))
RANDOMS = st.randoms(use_true_random=False)


svc = service_fixture(access=Access(room=True, token=TOKEN), max_model_len=512)
base = app_fixture("base", "{}")


@pytest.fixture(scope="module")
def repairs_before():
    """Input is checked where it enters, so no outgoing message should need the encoder's repairs."""
    return wire_json.repairs


class Watcher(threading.Thread):
    """Another client, subscribed to everything, that must keep being served through the fuzz."""

    def __init__(self, base: str):
        super().__init__(daemon=True)
        self.ws = connect(f"ws://{base}/engine/ws", max_size=2**24)
        self.finished: set[int] = set()
        self.messages = 0
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            for raw in self.ws:
                msg = json.loads(raw)
                self.messages += 1
                for ev in msg.get("events", ()):
                    if ev["type"] == "finished":
                        self.finished.add(ev["request_id"])
        except Exception as e:  # noqa: BLE001 - reported by the last test
            self.error = e


@pytest.fixture(scope="module")
def watcher(base):
    w = Watcher(base)
    w.start()
    yield w
    w.ws.close()


@pytest.fixture(scope="module")
def presenter_socket(base, watcher):
    # max_queue None: its reader keeps reading the events no test reads, so its close handshake ends at once
    # (with the default 16 frames queued it stopped reading, and closing waited out its 10 s timeout)
    with connect(f"ws://{base}/engine/ws?token={TOKEN}", max_size=2**24, max_queue=None) as ws:
        json.loads(ws.recv())
        yield ws


def answer(ws) -> dict:
    """The reply or error to the last command (events in between are skipped)."""
    while True:
        msg = json.loads(ws.recv(timeout=30))
        if msg["type"] in ("reply", "error"):
            return msg


def assert_clear(message: str, fuzzed: fuzz.Fuzzed | None = None) -> None:
    """A message a person can act on: no internal error or traceback, and it names what was broken."""
    assert message and "internal error" not in message and "Traceback" not in message, message
    if fuzzed is not None:
        assert fuzzed.named_by(message), f"{message!r} does not name {fuzzed.field!r}"


# ---- the socket ----------------------------------------------------------------------------------
@FUZZ
@given(rnd=RANDOMS)
def test_every_socket_command_gets_a_clear_answer(presenter_socket, repairs_before, rnd):
    f = fuzz.socket_frame(rnd)
    presenter_socket.send(f.text)
    msg = answer(presenter_socket)
    if msg["type"] == "error":
        too_long = len(f.text) > MAX_MESSAGE_BYTES
        assert_clear(msg["message"], None if too_long else f)
        assert not too_long or "64 KiB" in msg["message"]


@FUZZ
@given(rnd=RANDOMS)
def test_a_viewer_is_refused_every_control_command_whatever_it_holds(base, svc, rnd):
    with connect(f"ws://{base}/engine/ws") as ws:
        json.loads(ws.recv())
        ws.send(fuzz.socket_frame(rnd, fuzz.CONTROL_COMMANDS).text)
        msg = answer(ws)
    assert msg["type"] == "error" and msg["message"]
    assert not svc.paused.is_set() and svc.min_interval_s == 0 and svc.lane_names == ["continuous", "dynamic"]


# ---- HTTP bodies ---------------------------------------------------------------------------------
def _post(base: str, path: str, text: str, **headers):
    with httpx.Client(timeout=60) as c:
        with c.stream("POST", f"http://{base}{path}", content=text.encode(),
                      headers={"Content-Type": "application/json", **headers}) as r:
            body = r.read()
    return r.status_code, body


@FUZZ
@given(rnd=RANDOMS)
def test_every_openai_body_gets_a_clear_answer(base, watcher, rnd):
    path, f = fuzz.openai_request(rnd)
    status, body = _post(base, path, f.text, Authorization=f"Bearer {TOKEN}")
    assert status in (200, 400, 413), (status, body[:300])
    if status == 400:
        error = json.loads(body)["error"]
        assert_clear(error["message"])
        assert f.named_by(error["message"]) or error["param"] == f.field, error


@FUZZ
@given(rnd=RANDOMS)
def test_every_join_body_gets_a_clear_answer(base, watcher, rnd):
    f = fuzz.join_body(rnd)
    status, body = _post(base, "/join/ask", f.text, Cookie=f"{PRESENTER_COOKIE}={TOKEN}")
    assert status in (200, 400, 413), (status, body[:300])
    if status != 200:
        assert_clear(json.loads(body)["error"], None if status == 413 else f)


# ---- files ---------------------------------------------------------------------------------------
SHIPPED_LINES = gzip.decompress(SHIPPED.read_bytes()).decode().splitlines()


@FUZZ
@given(rnd=RANDOMS)
def test_every_recording_upload_plays_or_is_refused_naming_its_line(rnd):
    data, line = fuzz.recording(rnd, SHIPPED_LINES)
    try:
        rec = load(data)
    except RecordingError as e:
        message = str(e)
        assert_clear(message)
        if line is not None and message.startswith("line "):
            assert int(message.split(":")[0][5:]) >= line, message  # at the broken line, or where it shows
        return
    r = Replayer(rec)
    r.seek(rec.end)  # every event published at once
    assert r.ended and len(r.hub) >= len(rec)
    for _, item in r.hub.read(0).events:
        assert json.loads(item.json())["type"]


@FUZZ
@given(rnd=RANDOMS)
def test_every_scenario_file_loads_or_names_its_file_and_field(tmp_path_factory, rnd):
    source = sorted(SCENARIO_DIR.glob("*.toml"))[rnd.randrange(len(list(SCENARIO_DIR.glob("*.toml"))))]
    f = fuzz.scenario_toml(rnd, tomllib.loads(source.read_text()))
    path = tmp_path_factory.mktemp("scenario") / "fuzzed.toml"
    path.write_bytes(f.text.encode("utf-8", "surrogatepass"))
    try:
        load_scenario(path)
    except ScenarioError as e:
        message = str(e)
        assert message.startswith("fuzzed.toml: ") and "Traceback" not in message
        whole = "(at line" in message or "bytes, at most" in message  # TOML syntax names its line; size the file
        assert whole or f.named_by(message), f"{message!r} does not name {f.field!r}"


# ---- and then ----------------------------------------------------------------------------------------
def test_after_the_fuzz_everyone_is_still_served(base, svc, watcher, repairs_before):
    seen = watcher.messages
    handles = svc.submit("Say hi", SamplingParams(max_tokens=3, ignore_eos=True))
    assert all(h.result(30).finish_reason == "length" for h in handles)
    deadline = time.monotonic() + 10
    while handles[0].request_id not in watcher.finished and time.monotonic() < deadline:
        time.sleep(0.05)
    assert watcher.error is None and watcher.is_alive() and watcher.messages > seen
    assert handles[0].request_id in watcher.finished
    for _, item in svc.hub.read(0).events:  # every event the ring holds encodes, fuzzed text and all
        item.json().encode("utf-8")
    trace = httpx.get(f"http://{base}/trace.json", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert trace.status_code == 200 and trace.json()["traceEvents"]
    assert_all_free(svc)
    assert wire_json.repairs == repairs_before, "an outgoing message needed repairs: some input went unchecked"
