"""A small reverse proxy standing in for a tunnel in front of a room (tests of /join behind one address)."""
from __future__ import annotations

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

PROXY_ADDRESS = "127.0.0.2"  # the proxy calls the server from here: the address named as trusted


def reverse_proxy(upstream: str) -> Starlette:
    """What a tunnel does: forward everything with the Host the caller used (cloudflared and ngrok pass it
    through), appending the caller's address to X-Forwarded-For."""
    async def forward(request: Request) -> Response:
        transport = httpx.AsyncHTTPTransport(local_address=PROXY_ADDRESS)
        headers = {k: v for k, v in request.headers.items() if k != "content-length"}
        seen = request.headers.get("x-forwarded-for")
        headers["x-forwarded-for"] = f"{seen}, {request.client.host}" if seen else request.client.host
        async with httpx.AsyncClient(transport=transport, base_url=f"http://{upstream}", timeout=60) as c:
            r = await c.request(request.method, request.url.path, content=await request.body(), headers=headers)
        out = Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type"))
        for cookie in r.headers.get_list("set-cookie"):
            out.headers.append("set-cookie", cookie)
        return out
    return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])
