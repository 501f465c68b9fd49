"""Streamlit's upload endpoint (/_stcore/upload_file/SESSION/FILE) takes a file from any session of the
server, up to server.maxUploadSize each and as many as a session sends (each under a file id of its own),
and holds them in memory until that session ends: in a room, a phone could fill the server's memory. The
only uploader on our pages is the presenter's (a recording to replay), so in room mode a request there that
is not the presenter's (engine/api/presenter.py: the cookie of the presenter link, or the token as a bearer
key) is refused before its body is read. On loopback the local user is the presenter. The route is matched
wherever it is mounted (server.baseUrlPath puts it under a prefix)."""
from __future__ import annotations

from starlette.requests import Request

from .presenter import unless_presenter

UPLOAD_PATH = "/_stcore/upload_file"


class UploadGuard:
    """ASGI middleware: Streamlit's uploads are the presenter's (st.App(middleware=...), in app.py)."""

    def __init__(self, app, get_service):
        self.app, self.get_service = app, get_service

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and UPLOAD_PATH in scope["path"]:
            refusal = unless_presenter(Request(scope), self.get_service().access, "uploading a file")
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)
