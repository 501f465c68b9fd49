"""Inflight's server entry: `streamlit run app.py`.

One process: the Streamlit pages, the engine threads (created once, at startup),
the live event socket /engine/ws, the OpenAI-compatible /v1 routes and /metrics, all on one port.
"""
from contextlib import asynccontextmanager

import streamlit as st
from starlette.middleware import Middleware
from streamlit import config

from engine.api.server import build_routes
from engine.api.upload_guard import UploadGuard
from engine.config import EngineConfig
from engine.room.access import Access
from engine.serving.lanes import lanes_from_env
from engine.serving.registry import get_service, shutdown_service
from engine.serving.service import EngineService
from engine.workshop.scenarios.catalog import shipped


def _announce(access: Access, address: str, port: int) -> None:
    """The presenter's link, on the console only (never on a page the room can see)."""
    if not access.room:
        return
    host = "localhost" if address in ("", "0.0.0.0", "::") else address
    print(f"\n  Inflight is in room mode: viewers watch and submit prompts within limits.\n"
          f"  Presenter link (controls; keep it off the projector):\n"
          f"    http://{host}:{port}/presenter?token={access.token}\n"
          f"  (from another machine, put this server's address in place of {host})\n", flush=True)


def room_settings(access: Access) -> None:
    """In a room, no page shows a traceback (server paths, code): errors read as messages, the console
    keeps the details."""
    if access.room:
        config.set_option("client.showErrorDetails", "none")


@asynccontextmanager
async def lifespan(_app):
    address, port = config.get_option("server.address"), config.get_option("server.port")
    access = Access.from_env(address)
    room_settings(access)
    base = EngineConfig()
    # INFLIGHT_LANES=lanes.json (e.g. a local lane beside a remote server), else the first scenario's lanes:
    # the primer's first step runs it
    lanes = lanes_from_env(base) or shipped()[0].lane_configs(base)
    get_service(lambda: EngineService(base, access=access, lanes=lanes))  # engines load in their own threads
    _announce(access, address, port)
    yield
    shutdown_service()


app = st.App("pages/main.py", lifespan=lifespan, routes=build_routes(get_service),
             middleware=[Middleware(UploadGuard, get_service=get_service)])
