"""The live view's event reducer (assets/live/state.js), run in node on events recorded from a real run.

The recording (tests/data/events_tiny_llama.json) comes from tests/js/record_events.py; re-record it
when the wire format changes.
"""
from __future__ import annotations

import json

from engine.events import wire_contract
from node_js import require_node, run_node
from repo_paths import TESTS

RECORDING = TESTS / "data" / "events_tiny_llama.json"
require_node("the reducer test")


def test_recording_speaks_the_current_contract():
    assert json.loads(RECORDING.read_text())["contract"] == wire_contract()


def test_reducer_on_recorded_events():
    out = run_node("state_test.js", RECORDING)
    assert out.count("ok - ") == 31, out
