"""What the HTTP routes that take prompts share: reading a bounded JSON body, submitting with the
errors mapped to HTTP statuses, and following a handle's text without blocking the event loop."""
from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import AsyncIterator

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ..room.access import NotPresenter
from ..room.limits import LimitExceeded
from ..serving.handles import RequestHandle
from ..wire_json import dumps
from .openai_schema import ApiError, param_of


def json_response(body, status: int = 200, headers: dict | None = None) -> Response:
    """A JSON response through the one encoder that cannot fail (engine/wire_json.py)."""
    return Response(dumps(body), status_code=status, media_type="application/json", headers=headers)


def sse_event(body: dict | str) -> bytes:
    """One server-sent event carrying a JSON body (or a bare word: [DONE])."""
    return f"data: {body if isinstance(body, str) else dumps(body)}\n\n".encode()


def require_json(request: Request) -> None:
    """A cross-site form or text/plain post cannot send this content type without a preflight."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise ApiError(f"the request body must be application/json, got {kind or 'no content type'!r}",
                       status=415)


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused (413) as soon as it is known to exceed `limit` bytes."""
    too_big = ApiError(f"the request body is larger than {limit} bytes", status=413)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_big
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise too_big
    return bytes(raw)


async def submit(svc, *args, **kwargs) -> list[RequestHandle]:
    """svc.submit off the event loop; its refusals as ApiError (429 past a limit, 403 for a viewer's
    control, 400 for bad input, 503 when a lane did not take the request in time)."""
    try:
        return await run_in_threadpool(svc.submit, *args, **kwargs)
    except LimitExceeded as e:
        raise ApiError(str(e), status=429, type="rate_limit_error") from None
    except NotPresenter as e:
        raise ApiError(str(e), status=403, param="priority", type="permission_error") from None
    except ValueError as e:  # the engines' own checks (prompt too long, unknown lane, ...): named first
        raise ApiError(str(e), param=param_of(str(e))) from None
    except TimeoutError as e:
        raise ApiError(str(e), status=503, type="server_error") from None


def failure(handle: RequestHandle) -> ApiError | None:
    """Why a finished handle has no answer to give (engine error, service stopped), or None."""
    if handle.output is None:
        field = param_of(handle.rejection or "")
        if field:  # its input refused after its lane took it: as a refusal at once
            return ApiError(handle.rejection, param=field)
        return ApiError(handle.rejection or "the request ended without a result", status=503, type="server_error")
    if handle.output.finish_reason == "error":
        return ApiError(handle.output.error or "the engine failed on this request", status=500, type="server_error")
    return None


async def text_deltas(handle: RequestHandle, heartbeat_s: float | None = None) -> AsyncIterator[str]:
    """The handle's text deltas, without blocking the event loop (a thread feeds a queue).
    With heartbeat_s, yields "" whenever nothing arrived for that long."""
    loop, queue = asyncio.get_running_loop(), asyncio.Queue()

    def pump():
        try:
            for item in itertools.chain(handle, [None]):
                loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the event loop has closed (server shutdown)
            pass

    threading.Thread(target=pump, daemon=True, name=f"stream-{handle.request_id}").start()
    while True:
        try:
            item = await asyncio.wait_for(queue.get(), heartbeat_s)
        except TimeoutError:
            item = ""
        if item is None:
            return
        yield item
