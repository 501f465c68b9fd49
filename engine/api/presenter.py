"""GET /presenter?token=...: the presenter's link. A right token becomes a session cookie (it lasts
until the browser closes; the pages and the socket read it) and the browser goes on to the app,
so the token leaves the address bar before the screen is shown to a room."""
from __future__ import annotations

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from ..room.access import PRESENTER_COOKIE, Access


def presenter_route(get_service) -> Route:
    async def presenter(request: Request) -> Response:
        access = get_service().access
        token = request.query_params.get("token")
        if not access.room:
            return RedirectResponse("/", status_code=303)
        if not access.is_token(token):
            return PlainTextResponse("Wrong or missing presenter token. Use the presenter link printed on the "
                                     "server's console.", status_code=403)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(PRESENTER_COOKIE, token, httponly=True, samesite="strict", path="/")
        return response
    return Route("/presenter", presenter, methods=["GET"])


def unless_presenter(request: Request, access: Access, what: str) -> Response | None:
    """The refusal for a request that is not the presenter's (None: it is): a foreign origin (403), or in
    room mode neither the presenter cookie nor the token as a bearer key (401)."""
    if not access.request_allowed(request.headers.get("origin"), request.headers.get("host")):
        return PlainTextResponse("cross-origin requests are not accepted", status_code=403)
    bearer = access.api_client(what, request.headers.get("authorization"))
    if access.is_presenter(request.cookies.get(PRESENTER_COOKIE)) or (bearer is not None and bearer.presenter):
        return None
    return PlainTextResponse(f"this server is shared with a room: {what} is the presenter's (open the presenter "
                             "link, or send the token as a bearer key: Authorization: Bearer ...)",
                             status_code=401, headers={"WWW-Authenticate": "Bearer"})
