"""OpenAI-compatible routes: GET /v1/models, POST /v1/completions, POST /v1/chat/completions.

- Lanes: a request goes to every running lane (or to those in the extension field `lanes`; its old
  name `strategies` still works), so it shows side by side in every live view. The answer comes
  from the first of those lanes; the copies on the other lanes run on in the background and
  nobody waits for them.
- finish_reason is the engine's, reported honestly: "stop", "length", or "abort" (the request was
  aborted by someone else, e.g. from the live view, or the service stopped). An engine error is
  HTTP 500 with an OpenAI-style error body, or an error chunk (`data: {"error": ...}`) in a stream.
- A client that goes away (mid-stream or while waiting for a whole answer) has its request
  aborted on every lane, so its KV blocks are freed.
- Requests are tagged "openai", or "openai:<user>" when the body names a `user`, which is also the
  request's tenant (the fair policy). `priority` (an extension, as in vLLM: lower runs first) needs
  the presenter token below 0 in room mode (403 otherwise).
- Access (engine/room/access.py): bodies must be `application/json` (415 otherwise: a cross-site form
  or text/plain post never reaches the engine) and a browser Origin must be this server's own.
  In room mode every call needs a bearer key: the presenter token, or INFLIGHT_API_KEY (whose
  holders are held to the per-client limits: 429 past them).
"""
from __future__ import annotations

import asyncio
import time

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..room.access import Client
from ..serving.handles import RequestHandle
from .http_common import failure, json_response, read_body, require_json, sse_event, submit, text_deltas
from .openai_schema import (
    MAX_BODY_BYTES,
    ApiError,
    ApiRequest,
    chunk_body,
    completion_body,
    parse_json,
    parse_request,
)

HEARTBEAT_S = 1.0  # while no text arrives, check this often whether a streaming client left


def openai_routes(get_service) -> list[Route]:
    created = int(time.time())

    async def models(request: Request) -> Response:
        svc = get_service()
        try:
            _client(request, svc)
        except ApiError as e:
            return _error(e)
        model = svc.cfg.model
        return json_response({"object": "list", "data": [
            {"id": model, "object": "model", "created": created, "owned_by": "inflight"}]})

    async def completions(request: Request) -> Response:
        return await _serve(request, get_service(), chat=False)

    async def chat_completions(request: Request) -> Response:
        return await _serve(request, get_service(), chat=True)

    return [Route("/v1/models", models, methods=["GET"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"])]


def _client(request: Request, svc) -> Client:
    """Who calls: refuses foreign browser origins (403) and, in room mode, calls without a key (401)."""
    if not svc.access.request_allowed(request.headers.get("origin"), request.headers.get("host")):
        raise ApiError("cross-origin requests are not accepted", status=403, type="permission_error")
    key = svc.access.key_of(request.client and request.client.host, request.headers.get("x-forwarded-for"))
    client = svc.access.api_client(key, request.headers.get("authorization"))
    if client is None:
        raise ApiError("this server is shared with a room: send the presenter token or the API key "
                       "as a bearer key (Authorization: Bearer ...)", status=401, type="authentication_error")
    return client


async def _serve(request: Request, svc, chat: bool) -> Response:
    try:
        client = _client(request, svc)
        require_json(request)
        req = parse_request(parse_json(await read_body(request, MAX_BODY_BYTES)), chat)
        handles = await submit(svc, req.prompt, req.params, messages=req.messages, lanes=req.lanes, tag=req.tag,
                               client=client, priority=req.priority, tenant=req.tenant)
    except ApiError as e:
        return _error(e)
    except ClientDisconnect:
        return Response(status_code=400)  # nobody is listening
    primary = handles[0]
    model = svc.cfg.model
    if req.stream:
        return StreamingResponse(_sse(request, svc, req, primary, model), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
    if not await _wait_unless_client_leaves(request, svc, primary):
        return Response(status_code=499)  # the client left; its request was aborted
    if problem := failure(primary):
        return _error(problem)
    return json_response(completion_body(req, primary.request_id, model, primary.output))


def _error(e: ApiError) -> Response:
    return json_response(e.body(), e.status)


async def _wait_unless_client_leaves(request: Request, svc, handle: RequestHandle):
    """True once the handle has finished; False (and the request aborted) if the client left first."""
    async def drain():
        async for _ in text_deltas(handle):
            pass

    async def client_gone():
        while (await request.receive())["type"] != "http.disconnect":
            pass

    work, gone = asyncio.ensure_future(drain()), asyncio.ensure_future(client_gone())
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not work.done():  # the client left, or we are being cancelled (shutdown)
            work.cancel()
            svc.abort(handle.request_id)
    return work.done() and not work.cancelled()


async def _sse(request: Request, svc, req: ApiRequest, handle: RequestHandle, model: str):
    rid, completed = handle.request_id, False
    try:
        if req.chat:
            yield sse_event(chunk_body(req, rid, model, role=True))
        async for delta in text_deltas(handle, HEARTBEAT_S):
            if await request.is_disconnected():
                return  # finally aborts
            if delta:
                yield sse_event(chunk_body(req, rid, model, text=delta))
        completed = True
        if problem := failure(handle):
            yield sse_event(problem.body())
        else:
            yield sse_event(chunk_body(req, rid, model, finish_reason=handle.output.finish_reason))
            if req.include_usage:
                yield sse_event(chunk_body(req, rid, model, out=handle.output))
        yield sse_event("[DONE]")
    finally:  # also reached when the response is torn down (client gone: cancelled or closed)
        if not completed:
            svc.abort(rid)
