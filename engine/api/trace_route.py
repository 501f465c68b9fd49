"""GET /trace.json: the EventHub's current window as a Chrome trace (engine/telemetry/trace_export.py), to open in
Perfetto (ui.perfetto.dev) or chrome://tracing. Open on loopback; in room mode it is the presenter's
(the session cookie of the presenter link, or the token as a bearer key): it names everyone's requests."""
from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..events import StepMessage
from ..kv_wire import KEY, KvSync
from ..telemetry.trace_export import chrome_trace
from .http_common import json_response
from .presenter import unless_presenter

FILE_NAME = "inflight-trace.json"


def hub_trace(hub) -> dict:
    """The trace of every event the hub still holds (each pool's first step with its rows whole)."""
    sync = KvSync()
    return chrome_trace(event.key_wire() if event.TYPE == StepMessage.TYPE and sync.form(event) == KEY
                        else event.wire() for _, event in hub.read(0).events)


def trace_route(get_service) -> Route:
    async def trace(request: Request) -> Response:
        svc = get_service()
        if refusal := unless_presenter(request, svc.access, "the trace"):
            return refusal
        return json_response(await run_in_threadpool(hub_trace, svc.hub),
                             headers={"Content-Disposition": f'attachment; filename="{FILE_NAME}"'})
    return Route("/trace.json", trace, methods=["GET"])
