"""Inflight's server entry: `streamlit run app.py`.

One process: the Streamlit pages, the engine threads (created once, at startup),
the live event socket /engine/ws and the OpenAI-compatible /v1 routes, all on one port.
"""
from contextlib import asynccontextmanager

import streamlit as st

from engine.api.server import build_routes
from engine.service import get_service, shutdown_service


@asynccontextmanager
async def lifespan(_app):
    get_service()  # engines start loading in their own threads; pages show progress
    yield
    shutdown_service()


app = st.App("pages/main.py", lifespan=lifespan, routes=build_routes(get_service))
