"""Who may do what: the presenter and the audience.

On loopback (the default) the local user is the presenter and everything works. When the server
listens beyond loopback, or INFLIGHT_ROOM=1, the server is in *room mode*: control (pause, resume,
step, slow motion, configure, clear, aborting someone else's request, the benchmark, engine
settings) needs the presenter token; everyone else may watch and submit prompts within the
per-client limits (engine/limits.py).

The token is random per start unless INFLIGHT_TOKEN is set. Browsers receive it once through the
presenter link (/presenter?token=...), which stores it in a session cookie; the socket also takes
it in an `auth` command or a `token` query parameter; the OpenAI API takes it (or INFLIGHT_API_KEY)
as a bearer key.
"""
from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlsplit

PRESENTER_COOKIE = "inflight_presenter"


class NotPresenter(PermissionError):
    """A control action without the presenter token."""


@dataclass(frozen=True)
class Client:
    """Who submits: `key` groups a client's requests for the limits (its IP address in a room)."""
    key: str
    presenter: bool


LOCAL = Client("local", presenter=True)  # in-process callers: the load generator, tests


def client_key(host: str | None) -> str:
    """Limits are per IP address, so more sockets or tabs do not buy a bigger share."""
    return f"ip:{host or 'unknown'}"


def is_loopback(address: str | None) -> bool:
    """True for 127.x, ::1 and localhost; False for 0.0.0.0, :: and anything reachable from outside."""
    if address in (None, ""):
        return False
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: reachable beyond this machine


@dataclass
class Access:
    room: bool = False
    token: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    api_key: str | None = None              # a second bearer key for API users (no control)
    origins: frozenset[str] = frozenset()   # extra origins the socket accepts (scheme://host[:port])

    @classmethod
    def from_env(cls, address: str | None = "127.0.0.1", environ=os.environ) -> Access:
        """Room mode when `address` (the one the server listens on) is not loopback, or INFLIGHT_ROOM=1."""
        room = environ.get("INFLIGHT_ROOM", "").strip().lower() in ("1", "true", "yes") or not is_loopback(address)
        origins = frozenset(o.strip().rstrip("/").lower()
                            for o in environ.get("INFLIGHT_ORIGINS", "").split(",") if o.strip())
        token = environ.get("INFLIGHT_TOKEN") or None
        if token is not None and len(token) < 16:
            raise ValueError("INFLIGHT_TOKEN must be at least 16 characters long")
        kw = {"token": token} if token else {}
        return cls(room=room, api_key=environ.get("INFLIGHT_API_KEY") or None, origins=origins, **kw)

    # ---- tokens ------------------------------------------------------------------------------
    def is_token(self, candidate) -> bool:
        """Constant-time comparison with the presenter token."""
        return isinstance(candidate, str) and hmac.compare_digest(candidate.encode(), self.token.encode())

    def is_presenter(self, token=None) -> bool:
        return not self.room or self.is_token(token)

    def client(self, key: str, token=None) -> Client:
        return Client(key, self.is_presenter(token))

    def api_client(self, key: str, authorization: str | None) -> Client | None:
        """The client behind an API call, or None when room mode needs a key it did not give."""
        bearer = _bearer(authorization)
        if self.is_token(bearer) or not self.room:
            return Client(key, presenter=True)
        if self.api_key is not None and isinstance(bearer, str) and hmac.compare_digest(
                bearer.encode(), self.api_key.encode()):
            return Client(key, presenter=False)
        return None

    def require_presenter(self, client: Client, action: str) -> None:
        if not client.presenter:
            raise NotPresenter(f"'{action}' is for the presenter: this server is shared with a room, and "
                               "control needs the presenter token (printed on the server's console)")

    # ---- origins -----------------------------------------------------------------------------
    def request_allowed(self, origin: str | None, host: str | None) -> bool:
        """The origin check below, and on loopback a Host that names this machine: a page whose
        own name was made to point at 127.0.0.1 (DNS rebinding) would otherwise pass as same-origin
        and, on loopback, be the presenter."""
        if not self.room and not is_loopback(_hostname(host)):
            return False
        return self.origin_allowed(origin, host)

    def origin_allowed(self, origin: str | None, host: str | None) -> bool:
        """Browsers send Origin on every websocket handshake: accept only the page's own origin
        (same host and port as the request) or one configured in INFLIGHT_ORIGINS. Clients that
        send no Origin at all (curl, SDKs) are not browsers and are let through."""
        if origin is None:
            return True
        origin = origin.strip().rstrip("/").lower()
        if origin in self.origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and bool(host) and parts.netloc == host.strip().lower()


def _hostname(host: str | None) -> str | None:
    """'127.0.0.1:8501' -> '127.0.0.1', '[::1]:8501' -> '::1', 'localhost' -> 'localhost'."""
    if not host:
        return None
    return urlsplit(f"//{host}").hostname


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else None
