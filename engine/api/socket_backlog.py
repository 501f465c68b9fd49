"""What a websocket client has not taken yet, and dropping a client for good.

A client that stops reading first fills the kernel's buffers (megabytes, tens of seconds at our rate)
before a send ever waits, so waiting sends alone notice it late, and closing politely leaves the
connection open with everything queued (a close frame waits behind the data). So each connection
measures its backlog (the transport's buffer plus the kernel's unsent bytes) before it sends, and a
dropped client's connection is aborted, which frees both buffers at once.

Starlette hides the transport; uvicorn's protocol object holds it and is the `self` of the ASGI `send`
under the middleware chain (each middleware wraps send in a closure). Where none is found (another
server, a test client) nothing is measured and a drop is an ordinary close.
"""
from __future__ import annotations

import struct

try:  # the kernel's count of unsent bytes (Linux); elsewhere only the transport's own buffer counts
    from fcntl import ioctl
    from termios import TIOCOUTQ
except ImportError:  # pragma: no cover - Windows
    ioctl = TIOCOUTQ = None

MAX_WRAPPERS = 8  # middleware layers searched for the transport


def find_transport(send, depth: int = MAX_WRAPPERS):
    """The asyncio transport under an ASGI send callable, or None."""
    owner = getattr(send, "__self__", None)
    transport = getattr(owner, "transport", None)
    if transport is not None and hasattr(transport, "get_write_buffer_size"):
        return transport
    if depth == 0:
        return None
    for cell in getattr(send, "__closure__", None) or ():
        try:
            inner = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(inner) and (found := find_transport(inner, depth - 1)) is not None:
            return found
    return None


def queued_bytes(transport) -> int:
    """Bytes written to the client and not yet taken by it (as far as this host can tell)."""
    queued = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is not None and ioctl is not None:
        try:
            raw = ioctl(sock.fileno(), TIOCOUTQ, b"\0\0\0\0")
            queued += struct.unpack("i", raw)[0]
        except (OSError, ValueError):  # not a TCP socket here, or already closed
            pass
    return queued


def abort(transport) -> None:
    """Close the connection now, dropping what is queued (a polite close would wait behind it)."""
    if transport is not None:
        transport.abort()  # also when already closing: that close would wait for the client
