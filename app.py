"""Inflight's server entry: `streamlit run app.py`.

One process: the Streamlit pages, the engine threads (created once, at startup),
the live event socket /engine/ws and the OpenAI-compatible /v1 routes, all on one port.
"""
from contextlib import asynccontextmanager
from pathlib import Path

import plotly
import streamlit as st
from starlette.responses import FileResponse
from starlette.routing import Route

from engine.api.server import build_routes
from engine.service import get_service, shutdown_service


@asynccontextmanager
async def lifespan(_app):
    get_service()  # engines start loading in their own threads; pages show progress
    yield
    shutdown_service()


# plotly.js from the installed plotly package, so the live views work offline.
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


async def plotly_js(_request):
    return FileResponse(PLOTLY_JS, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})


app = st.App("pages/main.py", lifespan=lifespan,
             routes=[*build_routes(get_service), Route("/assets/plotly.min.js", plotly_js)])
