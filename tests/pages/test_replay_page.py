"""The playground with recordings (AppTest, no browser): the shipped recording plays while the engines
load and gives way to them once ready; the presenter records, replays, pauses, changes speed and seeks."""
from __future__ import annotations

import threading

import pytest
from streamlit.testing.v1 import AppTest

from engine import EngineConfig
from engine.workshop.recording import SHIPPED, stop_replay
from engine.serving.registry import get_service, shutdown_service
from engine.serving.service import EngineService
from engine.serving.worker import EngineWorker
from service_helpers import wait_idle
from repo_paths import ROOT

PAGE = str(ROOT / "pages" / "playground.py")
LABEL = "Recording of a real run: HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def gated(tiny_model_dirs):
    """A service whose engines load only once the gate opens (a fresh machine's first start)."""
    gate = threading.Event()
    build = EngineWorker._build
    EngineWorker._build = lambda self, cfg: gate.wait(120) and build(self, cfg)
    shutdown_service()
    cfg = EngineConfig(model=str(tiny_model_dirs["llama"]), device="cpu", dtype="float32", block_size=4,
                       num_kv_blocks=256, max_model_len=128, static_batch_size=2)
    svc = get_service(lambda: EngineService(cfg, strategies=("continuous", "static")))
    yield svc, gate
    gate.set()
    EngineWorker._build = build
    shutdown_service()


def page() -> AppTest:
    at = AppTest.from_file(PAGE, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def marked(at: AppTest) -> bool:
    return any(LABEL in w.value for w in at.warning)


def test_the_landing_page_plays_the_shipped_recording_until_the_engines_are_ready(gated):
    svc, gate = gated
    at = page()
    assert marked(at) and "still loading" in next(w.value for w in at.warning if LABEL in w.value)
    assert svc.replay is not None and svc.replay.loop and svc.replay.recording.lanes == ["continuous", "static"]
    gate.set()
    svc.wait_ready(120)
    at.run()
    assert not at.exception and not marked(at) and svc.replay is None
    # later, lanes that load (a scenario picked) leave the views live: the recording is the first start's
    gate.clear()
    svc.set_lanes({"continuous": {"strategy": "continuous"}, "dynamic": {"strategy": "dynamic"}})
    at.run()
    assert not at.exception and not marked(at) and svc.replay is None
    gate.set()
    svc.wait_ready(120)


def test_the_presenter_records_and_replays_with_speed_pause_and_seek(gated):
    svc, gate = gated
    gate.set()
    svc.wait_ready(120)
    at = page()
    next(b for b in at.sidebar.button if b.label == "Start recording").click().run()
    assert svc.recorder is not None and svc.recorder.active
    svc.submit([5, 6, 7, 8], lanes=["continuous"])  # static waits for a full batch
    wait_idle(svc)
    next(b for b in at.sidebar.button if b.label.startswith("Stop recording")).click().run()
    assert svc.recorder is None
    assert downloads(at) == ["Download the recording", "Download as a web page"]
    next(b for b in at.sidebar.button if b.label == "Play the shipped recording").click().run()
    r = svc.replay
    assert r is not None and r.recording.header["started_at"] == _shipped_start() and marked(at)
    assert "replay, not the engines" in next(w.value for w in at.warning if LABEL in w.value)
    assert downloads(at)[-1] == "Download this replay as a web page"  # the replay that plays, as one page
    at.sidebar.button(key="replay_pause").click().run()
    assert r.paused and not svc.paused.is_set()
    assert at.sidebar.button(key="replay_pause").label == "Play replay"
    at.sidebar.select_slider(key="replay_speed").set_value(2.0).run()
    assert r.speed == 2.0
    at.sidebar.slider(key="replay_at").set_value(20.0).run()
    assert abs(r.position() - (r.recording.start + 20.0)) < 1e-6
    next(b for b in at.sidebar.button if b.label == "Go live").click().run()
    assert not at.exception and svc.replay is None and not marked(at)
    stop_replay(svc)


def downloads(at) -> list[str]:
    """The sidebar's downloads of recordings (the trace's button is another matter)."""
    return [d.proto.label for d in at.sidebar.get("download_button") if "trace" not in d.proto.label]


def _shipped_start() -> str:
    from engine.workshop.recording import load
    return load(SHIPPED).header["started_at"]
