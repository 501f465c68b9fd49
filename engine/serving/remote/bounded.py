"""Reading a remote server's bytes under bounds checked as they arrive: a body's size, a line's length and a
response's total. Every byte a remote lane reads (its answers, their error bodies, /metrics) comes
through here.

A remote server is untrusted: an endless body, a 400 MB line without a newline, a 30 MB chunk must cost
this process a bounded amount of memory and work, and end what it was for with an error that names the
bound it crossed. (Time is bounded where the reads are awaited: the lane's total deadline, the metrics
poll's.)
"""
from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx

KiB, MiB = 1 << 10, 1 << 20


class TooMuch(Exception):
    """The server sent more than a bound allows; the message says what and which bound."""


async def read_body(resp: httpx.Response, limit: int, what: str) -> bytes:
    """The whole body, or TooMuch once it passes `limit` bytes (reading stops there)."""
    body = bytearray()
    async for chunk in resp.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise TooMuch(f"{what} is over {_size(limit)}")
    return bytes(body)


async def read_lines(resp: httpx.Response, max_line: int, max_total: int, what: str) -> AsyncIterator[str]:
    """The body's lines (ended by LF, CRLF or a lone CR, as server-sent events may be; decoded as UTF-8,
    bad bytes replaced), or TooMuch once a line passes `max_line` bytes or the body `max_total` (reading
    stops there)."""
    buf, total, seen = bytearray(), 0, 0  # seen: bytes of buf already searched for a line end
    async for chunk in resp.aiter_bytes():
        total += len(chunk)
        if total > max_total:
            raise TooMuch(f"{what} is over {_size(max_total)}")
        buf += chunk
        while (end := _LINE_END.search(buf, seen)) is not None and end.start() <= max_line:
            if end.group() == b"\r" and end.end() == len(buf):
                break  # a CR last: its LF may come with the next chunk
            line = bytes(buf[:end.start()])
            del buf[:end.end()]
            seen = 0
            yield line.decode("utf-8", "replace")
        if len(buf) > max_line + 1:
            raise TooMuch(f"{what} has a line over {_size(max_line)}")
        seen = max(0, len(buf) - 1)
    if buf:
        yield buf.rstrip(b"\r").decode("utf-8", "replace")


_LINE_END = re.compile(rb"\r\n|\r|\n")


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n % MiB == 0 else f"{n // KiB} KiB" if n % KiB == 0 else f"{n} bytes"
