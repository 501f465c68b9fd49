"""GET /metrics: the service's Prometheus metrics (engine/telemetry/prometheus.py).

Open on loopback; when the server is shared with a room, it needs the presenter token as a bearer
key or the presenter link's cookie (the audience's API key is not enough: the metrics describe
everyone's traffic)."""
from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .presenter import unless_presenter


def metrics_route(get_service) -> Route:
    async def metrics(request: Request) -> Response:
        svc = get_service()
        if refusal := unless_presenter(request, svc.access, "/metrics"):
            return refusal
        return Response(svc.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})
    return Route("/metrics", metrics, methods=["GET"])
