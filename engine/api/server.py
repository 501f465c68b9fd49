"""Routes and lifespan shared by `streamlit run app.py` and by tests (a plain Starlette app)."""
from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette
from starlette.routing import BaseRoute, WebSocketRoute

from ..serving.service import EngineService
from .join_route import join_routes
from .metrics_route import metrics_route
from .openai_routes import openai_routes
from .presenter import presenter_route
from .trace_route import trace_route
from .ws import engine_ws_endpoint

ServiceGetter = Callable[[], EngineService]


def build_routes(get_service: ServiceGetter) -> list[BaseRoute]:
    return [WebSocketRoute("/engine/ws", engine_ws_endpoint(get_service)), presenter_route(get_service),
            metrics_route(get_service), *openai_routes(get_service), *join_routes(get_service),
            trace_route(get_service)]


def create_app(service: EngineService) -> Starlette:
    """A bare ASGI app over one service (tests, or embedding without Streamlit)."""
    return Starlette(routes=build_routes(lambda: service))
