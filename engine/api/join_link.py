"""The address phones in the room use for /join, for the presenter's QR code.

The presenter's browser often shows the app as http://localhost:8501, which a phone cannot reach. In
that order: INFLIGHT_PUBLIC_URL (behind a proxy or a tunnel), the address the presenter's browser used
when it is not loopback, the address the server listens on when it names one, else this machine's
address on the local network (the interface the default route leaves by; found without sending anything).
"""
from __future__ import annotations

import os
import socket
from urllib.parse import urlsplit

from ..room.access import is_loopback

PATH = "/join"


def join_url(page_url: str | None, bind_address: str | None, port: int, environ=os.environ) -> str:
    public = environ.get("INFLIGHT_PUBLIC_URL", "").strip().rstrip("/")
    if public:
        return public + PATH
    parts = urlsplit(page_url or "")
    if parts.hostname and not is_loopback(parts.hostname):
        return f"{parts.scheme or 'http'}://{parts.netloc}{PATH}"
    host = bind_address if bind_address and bind_address not in ("0.0.0.0", "::") else lan_address()
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address in a URL
    return f"http://{host}:{port}{PATH}"


def lan_address() -> str:
    """This machine's address on its local network, or 127.0.0.1 when it has none. Connecting a UDP
    socket only picks the route: no packet is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"
