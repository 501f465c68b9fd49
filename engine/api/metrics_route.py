"""GET /metrics: the service's Prometheus metrics (engine/metrics_registry.py).

Open on loopback; when the server is shared with a room, it needs the presenter token as a bearer
key (the audience's API key is not enough: the metrics describe everyone's traffic)."""
from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route


def metrics_route(get_service) -> Route:
    async def metrics(request: Request) -> Response:
        svc = get_service()
        access = svc.access
        if not access.request_allowed(request.headers.get("origin"), request.headers.get("host")):
            return PlainTextResponse("cross-origin requests are not accepted", status_code=403)
        client = access.api_client("metrics", request.headers.get("authorization"))
        if client is None or not client.presenter:
            return PlainTextResponse("this server is shared with a room: /metrics needs the presenter token "
                                     "(Authorization: Bearer ...)", status_code=401,
                                     headers={"WWW-Authenticate": "Bearer"})
        return Response(svc.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})
    return Route("/metrics", metrics, methods=["GET"])
