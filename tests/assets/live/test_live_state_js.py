"""The live view's event reducer (assets/live/state.js), run in node on events recorded from a real run.

The recording (tests/data/events_tiny_llama.json) comes from tests/js/record_events.py; re-record it
when the wire format changes.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from engine.events import wire_contract
from repo_paths import TESTS

RECORDING = TESTS / "data" / "events_tiny_llama.json"
NODE = shutil.which("node")

if NODE is None:
    if os.environ.get("CI"):  # CI must run it (.ci/run installs node)
        raise RuntimeError("the reducer test needs node (apt-get install nodejs)")
    pytest.skip("needs node", allow_module_level=True)


def test_recording_speaks_the_current_contract():
    assert json.loads(RECORDING.read_text())["contract"] == wire_contract()


def test_reducer_on_recorded_events():
    run = subprocess.run([NODE, str(TESTS / "js" / "state_test.js"), str(RECORDING)], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("ok - ") == 24, run.stdout
