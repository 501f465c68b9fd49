"""/join: the room's phones take part. GET /join is a small plain page (assets/join/: HTML, JS, CSS; no
Streamlit, so it loads fast on venue wifi); POST /join/ask {name, prompt} submits one prompt to every
lane, labelled with the name, and streams the answer back as server-sent events:
  data: {"request_id": 12}   then   data: {"text": "..."} ...   then
  data: {"finish_reason": "stop"}   or   data: {"error": "..."}
Refusals before the stream are JSON {"error": "..."} with the status saying which kind (429 past a
room limit, 413 too long, 400 bad input, 403 foreign origin, 415 not JSON, 503 engine not ready).

Room safety: a phone is a viewer (unless it carries the presenter cookie). GET /join gives each browser
a signed id (a cookie): its limits (engine/room/limits.py) are its own, with its IP address's (read behind a
trusted proxy from X-Forwarded-For: engine/room/access.py) as an outer bound, so phones behind one tunnel
are not one client; a browser without the cookie is keyed by its address. The prompt and the name have
length limits; a phone that leaves has its request aborted on every lane.
"""
from __future__ import annotations

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..paths import ASSETS
from ..request import SamplingParams
from ..room.access import PHONE_COOKIE, PRESENTER_COOKIE, Client
from ..room.participants import MAX_NAME_CHARS, clean_name
from ..untrusted import text
from .http_common import failure, json_response, read_body, require_json, sse_event, submit, text_deltas
from .openai_schema import ApiError, parse_json

ASSETS = ASSETS / "join"
MAX_PROMPT_CHARS = 1000
MAX_BODY_BYTES = 8 * 1024
MAX_TOKENS = 128           # per answer (lower still if the room's limit is lower)
TEMPERATURE = 0.7          # a room typing the same prompt gets different answers
JOIN_TAG = "join"          # the tag of every request a phone sends
HEARTBEAT_S = 1.0          # while no text arrives, check this often whether the phone left
PHONE_COOKIE_S = 12 * 3600  # a phone's id lasts a workshop day (the secret changes at every start anyway)
_TYPES = {"join.js": "text/javascript; charset=utf-8", "join.css": "text/css; charset=utf-8"}
_HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'"}


def join_routes(get_service) -> list[Route]:
    async def page(request: Request) -> Response:
        svc = get_service()
        html = (ASSETS / "join.html").read_text(encoding="utf-8")
        for key, value in _page_numbers(svc).items():
            html = html.replace("{{%s}}" % key, str(value))
        response = Response(html, media_type="text/html; charset=utf-8", headers=_HEADERS)
        if svc.access.phone_id(request.cookies.get(PHONE_COOKIE)) is None:  # this browser's own limits
            response.set_cookie(PHONE_COOKIE, svc.access.phone_cookie(), max_age=PHONE_COOKIE_S, path="/join",
                                httponly=True, samesite="strict")
        return response

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _TYPES:
            return Response("not found", status_code=404)
        return Response((ASSETS / name).read_bytes(), media_type=_TYPES[name], headers=_HEADERS)

    async def ask(request: Request) -> Response:
        svc = get_service()
        try:
            handles = await _submit(request, svc)
        except ApiError as e:
            return json_response({"error": e.message}, e.status)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is listening
        return StreamingResponse(_stream(request, svc, handles[0]), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    return [Route("/join", page, methods=["GET"]), Route("/join/ask", ask, methods=["POST"]),
            Route("/join/{name}", asset, methods=["GET"])]


def _page_numbers(svc) -> dict:
    return {"MAX_NAME_CHARS": MAX_NAME_CHARS, "MAX_PROMPT_CHARS": MAX_PROMPT_CHARS, "MAX_TOKENS": _max_tokens(svc)}


def _max_tokens(svc) -> int:
    return min(MAX_TOKENS, svc.limiter.limits.max_tokens)


def _client(request: Request, svc) -> Client:
    """A phone is its signed id (its own limits), bounded by its address; without one, its address."""
    access = svc.access
    if not access.request_allowed(request.headers.get("origin"), request.headers.get("host")):
        raise ApiError("cross-origin requests are not accepted", status=403)
    address = access.key_of(request.client and request.client.host, request.headers.get("x-forwarded-for"))
    presenter = access.is_presenter(request.cookies.get(PRESENTER_COOKIE))
    phone = access.phone_id(request.cookies.get(PHONE_COOKIE))
    return Client(address, presenter) if phone is None else Client(f"phone:{phone}", presenter, outer=address)


async def _submit(request: Request, svc):
    client = _client(request, svc)
    require_json(request)
    body = parse_json(await read_body(request, MAX_BODY_BYTES))
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise ApiError("please write a prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ApiError(f"a prompt has at most {MAX_PROMPT_CHARS} characters (this one has {len(prompt)})", status=413)
    try:
        text(prompt, "prompt", MAX_PROMPT_CHARS)  # named as the phone's field, not as the chat message it becomes
        name = clean_name(body.get("name"))
    except ValueError as e:
        raise ApiError(str(e)) from None
    params = SamplingParams(max_tokens=_max_tokens(svc), temperature=TEMPERATURE)
    # the tag says where it came from; the live views show the name (as text) where they label requests
    return await submit(svc, messages=[{"role": "user", "content": prompt}], params=params, tag=JOIN_TAG,
                        client=client, name=name)


async def _stream(request: Request, svc, handle):
    rid, completed = handle.request_id, False
    try:
        yield sse_event({"request_id": rid})
        async for delta in text_deltas(handle, HEARTBEAT_S):
            if await request.is_disconnected():
                return  # finally aborts
            if delta:
                yield sse_event({"text": delta})
        completed = True
        problem = failure(handle)
        yield sse_event({"error": problem.message} if problem else {"finish_reason": handle.output.finish_reason})
    finally:  # also reached when the response is torn down (the phone left)
        if not completed:
            svc.abort(rid)
