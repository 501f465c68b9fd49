"""How a recording plays in the offline page (engine/harness/page_fps.py): the shipped recording, sped up,
taken to each lane's last step in chromium, with the live view's own frame counters read while it plays."""
from __future__ import annotations

import json

from browser_helpers import CHROMIUM, require_browser
from engine.harness import page_fps
from engine.workshop.recording import SHIPPED

require_browser()  # playwright: the tier is read from this module


def test_the_shipped_recording_plays_to_its_end_with_frames_counted(tmp_path):
    out = tmp_path / "fps.json"
    assert page_fps.main([str(SHIPPED), "--speed", "8", "--chromium", CHROMIUM, "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["last_step_drawn"] == res["last_step_recorded"] and min(res["last_step_drawn"].values()) > 100
    assert res["samples"] and 0 < res["fps_p50"] <= 31 and res["frame_ms_mean"] > 0  # (the loop's cap: 30)
    assert res["play_wall_s"] < res["span_s"] / 8 + 10
