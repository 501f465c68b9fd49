"""The one JSON encoder for what leaves the server (socket messages, the trace, recordings, API bodies).

It cannot fail: text that UTF-8 cannot encode becomes U+FFFD, a number JSON cannot carry (NaN,
infinity) becomes null, and an object json does not know (a numpy scalar) becomes its Python value or
its text. Input is checked where it enters (engine/untrusted.py), so these repairs should never be
needed; if one is, it is logged once, and one odd event never closes a socket or fails a download.
"""
from __future__ import annotations

import json
import logging
import math

from .untrusted import encodable, scrub

log = logging.getLogger(__name__)
_STRICT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_LENIENT = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=lambda o: _plain(o))
repairs = 0  # outgoing messages that needed a repair (tests assert none did: input is checked where it enters)


def dumps(obj) -> str:
    """Compact JSON text of obj that always encodes as UTF-8."""
    try:
        out = _STRICT.encode(obj)
    except (ValueError, TypeError, RecursionError):
        _note_repair()
        try:
            out = _LENIENT.encode(_finite(obj))
        except (ValueError, TypeError, RecursionError):  # a cycle: no JSON can hold it
            out = _STRICT.encode({"unencodable": type(obj).__name__})
    if not encodable(out):  # raw lone surrogates only occur inside JSON strings: replacing them keeps it JSON
        _note_repair()
        out = scrub(out)
    return out


def _finite(obj, depth: int = 0):
    """obj with non-finite floats as None (deeper than any event: left as text)."""
    if depth > 64:
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k if isinstance(k, (str, int, float, bool)) or k is None else str(k): _finite(v, depth + 1)
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v, depth + 1) for v in obj]
    return obj


def _plain(obj):
    item = getattr(obj, "item", None)  # numpy and torch scalars
    if callable(item):
        try:
            value = item()
            return _finite(value) if isinstance(value, float) else value
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(obj)


def _note_repair() -> None:
    global repairs
    repairs += 1
    if repairs == 1:
        log.warning("an outgoing message held text or numbers JSON cannot carry; repaired (logged once)")
