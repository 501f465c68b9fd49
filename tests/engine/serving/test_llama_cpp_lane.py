"""llama.cpp's llama-server as a remote lane, for real: built by .ci/llama_server.sh (CI's install step) from
the llama.cpp tree that the llama-cpp-python source distribution vendors, serving the default model as an
F32 GGUF made by the converter in the same tree. Skipped where it has not been built."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from engine.config import DEFAULT_MODEL
from engine.events import RemoteMetricsEvent
from engine.model.files.loader import resolve_model_dir
from engine.workshop.prompts import load_prompts
from engine_helpers import greedy
from service_helpers import free_port, make_service, wait_idle, wait_settled

LLAMA_DIR = Path(os.environ.get("INFLIGHT_LLAMA_DIR", Path.home() / ".cache/inflight/llama.cpp-0.3.36"))
SERVER, GGUF = LLAMA_DIR / "bin" / "llama-server", LLAMA_DIR / "SmolLM2-135M-Instruct-F32.gguf"
pytestmark = pytest.mark.skipif(not (SERVER.exists() and GGUF.exists()),
                                reason="llama-server is not built here: bash .ci/llama_server.sh builds it")
SLOTS = 4


@pytest.fixture(scope="module")
def llama_server():
    """llama-server on the default model at F32, 4 slots, its /metrics on: yields its /v1 URL."""
    port = free_port()
    proc = subprocess.Popen([str(SERVER), "-m", str(GGUF), "-np", str(SLOTS), "-c", str(1024 * SLOTS), "-t", "2",
                             "--host", "127.0.0.1", "--port", str(port), "--metrics", "-a", DEFAULT_MODEL],
                            env={**os.environ, "LD_LIBRARY_PATH": str(SERVER.parent)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None and time.monotonic() < deadline, "llama-server did not start"
        time.sleep(0.5)
    yield f"{base}/v1"
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def svc(llama_server):
    """Our engine on the same model at fp32 (lane "local") beside the llama-server lane ("llama.cpp")."""
    s = make_service(resolve_model_dir(DEFAULT_MODEL), strategies=("continuous",), max_model_len=1024,
                     max_num_seqs=SLOTS, max_num_batched_tokens=512, block_size=16, num_kv_blocks=512)
    s.set_lanes({"local": s.cfg, "llama.cpp": {"remote": llama_server, "model": DEFAULT_MODEL}})
    wait_settled(s)
    yield s
    s.stop()


def test_the_llama_cpp_lane_streams_every_request_with_our_greedy_text(svc):
    """Six bundled chat prompts to both lanes (as a scenario sends them): each finishes on llama-server
    too, streamed, with the same greedy text as our lane (F32 on both sides: the numerics agree)."""
    cursor = svc.hub.head
    prompts = [p["prompt"] for p in load_prompts()[:6]]
    handles = [svc.submit(messages=[{"role": "user", "content": p}], params=greedy(20)) for p in prompts]
    for local, far in handles:
        a, b = local.result(120), far.result(120)
        assert (b.finish_reason, b.error) == ("length", None) and len(b.output_token_ids) == 20
        assert b.text == a.text, (a.text, b.text)
        assert b.arrival_s <= b.first_token_s <= b.finish_s
    wait_idle(svc)
    gauges = [e for _, e in svc.hub.read(cursor).events if isinstance(e, RemoteMetricsEvent)]
    assert gauges and all(e.lane == "llama.cpp" for e in gauges)
    assert any(e.num_running for e in gauges), "llamacpp:requests_processing read while requests ran"
    assert all(e.kv_usage is None for e in gauges)  # llama-server exports no KV usage gauge
