"""How a recording plays in the offline page (engine/harness/page_fps.py): the shipped recording, sped up,
taken to each lane's last step in chromium, with the live view's own frame counters read while it plays."""
from __future__ import annotations

import json

from browser_helpers import CHROMIUM, require_browser
from engine.harness import page_fps  # (the app tier too: --app starts the app with running_app()
from engine.workshop.recording import SHIPPED

require_browser()  # playwright: the tier is read from this module


def test_the_shipped_recording_plays_to_its_end_with_frames_counted(tmp_path):
    out = tmp_path / "fps.json"
    assert page_fps.main([str(SHIPPED), "--speed", "8", "--chromium", CHROMIUM, "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["last_step_drawn"] == res["last_step_recorded"] and min(res["last_step_drawn"].values()) > 100
    assert res["samples"] and 0 < res["fps_p50"] <= 31 and res["frame_ms_mean"] > 0  # (the loop's cap: 30)
    assert res["play_wall_s"] < res["span_s"] / 8 + 10


def test_in_the_apps_replay_a_recording_uploaded_as_a_presenter_would_plays_to_its_end(tmp_path):
    """The first seconds of the shipped recording (a prefix of a recording is one), uploaded in the app's
    sidebar and played by its replay in chromium, its frames counted."""
    import gzip
    lines = gzip.decompress(SHIPPED.read_bytes()).decode().splitlines()
    start = json.loads(lines[1])["t"]
    short = tmp_path / "short.jsonl.gz"
    short.write_bytes(gzip.compress("\n".join([lines[0]] + [x for x in lines[1:] if json.loads(x)["t"] < start + 4])
                                    .encode()))
    out = tmp_path / "fps.json"
    assert page_fps.main([str(short), "--app", "--chromium", CHROMIUM, "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["where"] == "app" and res["last_step_drawn"] == res["last_step_recorded"]
    assert min(res["last_step_drawn"].values()) > 0 and res["samples"] and res["fps_p50"] > 0
