"""Helpers for service tests: a service on a tiny model, a real server on a free port."""
from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import pytest
import uvicorn

from engine import EngineConfig
from engine.api.server import create_app
from engine.api.ws import PING_S
from engine.harness.app_process import free_port  # noqa: F401 - the tests take it from here
from engine.serving.registry import get_service, shutdown_service
from engine.serving.service import EngineService


def make_service(model_dir, strategies=("continuous", "dynamic"), access=None, limits=None,
                 **overrides) -> EngineService:
    kw = dict(model=str(model_dir), device="cpu", dtype="float32", block_size=4, num_kv_blocks=256,
              max_model_len=128, max_num_seqs=8, max_num_batched_tokens=64, static_batch_size=4,
              static_max_wait_s=0.05)
    kw.update(overrides)
    svc = EngineService(EngineConfig(**kw), strategies=list(strategies), access=access, limits=limits)
    svc.wait_ready(120)
    return svc


def service_fixture(registered: bool = False, **settings):
    """A module's `svc` fixture: a service on the tiny llama (make_service, with these settings), stopped
    once the module's tests have run. registered: it is the process's service (get_service), as the pages
    find it; any earlier one is shut down first, and it is resumed (a page may have paused it) and shut
    down after."""
    @pytest.fixture(scope="module")
    def svc(tiny_model_dirs):
        if not registered:
            s = make_service(tiny_model_dirs["llama"], **settings)
            yield s
            s.stop()
            return
        shutdown_service()
        s = get_service(lambda: make_service(tiny_model_dirs["llama"], **settings))
        yield s
        s.resume()
        shutdown_service()
    return svc


def clean_fixture(limits=None):
    """A module's autouse fixture around each test on its `svc`: a fresh allowance under `limits` first (room
    limits; None: left as they are); after, the service resumed at full speed, nothing in flight and every
    KV block free."""
    @pytest.fixture(autouse=True)
    def _clean(svc):
        if limits is not None:
            from engine.room.limits import ClientLimiter
            svc.limiter = ClientLimiter(limits)
        yield
        svc.resume()
        svc.set_slow_motion(0)
        assert_all_free(svc)
    return _clean


def app_fixture(name: str, url: str = "http://{}"):
    """A module's fixture `name`: its `svc` served (HTTP API and socket) on a free port, as `url` with the
    address in it ("ws://{}/engine/ws", "{}": the bare address)."""
    @pytest.fixture(scope="module", name=name)
    def served(svc):
        with serve(create_app(svc)) as addr:
            yield url.format(addr)
    return served


def wait_idle(svc: EngineService, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not svc.idle():
        if time.monotonic() > deadline:
            raise TimeoutError("service still has requests in flight")
        time.sleep(0.01)


def wait_settled(svc: EngineService, timeout: float = 60.0) -> None:
    """Until every lane runs the settings last asked for (or is back on the old ones after a failure)."""
    deadline = time.monotonic() + timeout
    while svc._configuring or svc._target != svc._committed:
        if time.monotonic() > deadline:
            raise TimeoutError("lanes did not settle")
        time.sleep(0.02)
    svc.wait_ready(timeout)


def assert_all_free(svc: EngineService) -> None:
    """No request in flight and every KV block free, on every engine."""
    svc.wait_ready(120)
    wait_idle(svc)
    for s, w in svc.workers.items():
        deadline = time.monotonic() + 10
        while w.engine.has_unfinished() and time.monotonic() < deadline:
            time.sleep(0.01)
        cache = w.engine.cache
        assert not w.engine.has_unfinished(), f"{s}: requests left in the engine"
        assert cache.num_free == cache.num_blocks, f"{s}: {cache.num_blocks - cache.num_free} KV blocks not freed"


@contextlib.contextmanager
def serve(asgi_app, ping_s: float = PING_S):
    """Run an ASGI app on 127.0.0.1:<free port> in a thread; yields the base URL. ping_s: the socket's ping
    interval and timeout (the app's by default)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(asgi_app, host="127.0.0.1", port=port, log_level="warning",
                                           ws_ping_interval=ping_s, ws_ping_timeout=ping_s))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise TimeoutError("test server did not start")
        time.sleep(0.02)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        t.join(timeout=10)


def run(coro, timeout=60):
    """Run a socket client coroutine to its end, within timeout seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def recv_until(ws, pred, limit=2000):
    """Read socket messages until pred(message); returns it and every message read."""
    seen = []
    for _ in range(limit):
        msg = json.loads(await ws.recv())
        seen.append(msg)
        if pred(msg):
            return msg, seen
    raise AssertionError("condition not met")
