"""The GPU-pace source (engine/harness/gpu_pace.py): its lanes, and the socket meter on a real service."""
from __future__ import annotations

import json
import time

from engine import EngineConfig, SamplingParams
from engine.harness.gpu_pace import NUM_BLOCKS, SocketMeter, lanes_file
from engine.serving.lanes import load_lanes
from service_helpers import app_fixture, service_fixture, wait_idle

svc = service_fixture()
url = app_fixture("url", "ws://{}/engine/ws")


def test_two_lanes_of_the_rows_asked_for_over_the_pool(tmp_path):
    lanes = load_lanes(str(lanes_file(tmp_path / "lanes.json", 256)), EngineConfig())
    assert {n: c.strategy for n, c in lanes.items()} == {"continuous": "continuous", "static": "static"}
    assert all(c.max_num_seqs == 256 and c.num_kv_blocks == NUM_BLOCKS for c in lanes.values())
    assert lanes["static"].static_batch_size == 256


def test_the_meter_counts_what_a_tab_receives(svc, url):
    with SocketMeter(url) as meter:
        for h in svc.submit([5, 6, 7], SamplingParams(max_tokens=8, ignore_eos=True)):
            h.result(30)
        wait_idle(svc)
        time.sleep(0.2)  # the socket's last message
    f = meter.figures()
    assert meter.steps >= 2 * 8 and meter.key_frames >= 2  # both lanes' steps, each lane's tables whole first
    assert f["socket_kb_per_s"] > 0 and f["recording_mb_per_min"] > f["recording_gzip_mb_per_min"] > 0
    assert meter.bytes > meter.raw > 0  # (the events' lines, less the messages' envelopes)
    # uvicorn deflates each message for a client that offers it (the app: server.enableWebsocketCompression)
    assert meter.deflate.startswith("permessage-deflate") and 0 < f["wire_kb_per_s"] < f["socket_kb_per_s"] / 2
    json.dumps(f)
