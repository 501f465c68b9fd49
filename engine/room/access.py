"""Who may do what: the presenter and the audience.

On loopback (the default) the local user is the presenter and everything works. When the server
listens beyond loopback, or INFLIGHT_ROOM=1, the server is in *room mode*: control (pause, resume,
step, slow motion, configure, clear, aborting someone else's request, the benchmark, engine
settings) needs the presenter token; everyone else may watch and submit prompts within the
per-client limits (engine/room/limits.py).

The token is random per start unless INFLIGHT_TOKEN is set. Browsers receive it once through the
presenter link (/presenter?token=...), which stores it in a session cookie; the socket also takes
it in an `auth` command or a `token` query parameter; the OpenAI API takes it (or INFLIGHT_API_KEY)
as a bearer key.

Who a client is, for the limits: its IP address, read from X-Forwarded-For only when the connection
comes from a proxy named in INFLIGHT_TRUSTED_PROXIES (a forged header from anyone else changes
nothing). Behind a tunnel every phone has the tunnel's address, so /join also gives each browser a
signed id (a cookie, HMAC under a secret made at start): each phone has its own limits, and its
address stays an outer bound (engine/room/limits.py).
"""
from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlsplit

PRESENTER_COOKIE = "inflight_presenter"
PHONE_COOKIE = "inflight_phone"


class NotPresenter(PermissionError):
    """A control action without the presenter token."""


@dataclass(frozen=True)
class Client:
    """Who submits: `key` groups a client's requests for the limits (its IP address in a room, or a
    phone's signed id); `outer`, when set, is its IP address's key: a bound on everyone behind it."""
    key: str
    presenter: bool
    outer: str | None = None


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
    trusted_proxies: tuple = ()             # networks whose X-Forwarded-For is believed
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)  # signs phone ids

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
        return cls(room=room, api_key=environ.get("INFLIGHT_API_KEY") or None, origins=origins,
                   trusted_proxies=proxy_networks(environ.get("INFLIGHT_TRUSTED_PROXIES", "")), **kw)

    # ---- who is calling ------------------------------------------------------------------------
    def address(self, peer: str | None, forwarded_for: str | None) -> str | None:
        """The client's IP address: the peer's, or, when the peer is a trusted proxy, the last address
        in X-Forwarded-For that is not one (each proxy appends the address it was called from)."""
        if not forwarded_for or not self._trusted(peer):
            return peer
        for hop in reversed([h.strip() for h in forwarded_for.split(",")]):
            if not self._trusted(hop):
                return hop if _is_ip(hop) else peer
        return peer

    def key_of(self, peer: str | None, forwarded_for: str | None = None) -> str:
        """The limits' key of a connection from `peer` (with its X-Forwarded-For header)."""
        return client_key(self.address(peer, forwarded_for))

    def _trusted(self, address: str | None) -> bool:
        try:
            ip = ipaddress.ip_address((address or "").strip("[]"))
        except ValueError:
            return False
        return any(ip in net for net in self.trusted_proxies)

    def phone_cookie(self) -> str:
        """A new phone's signed id, for its cookie."""
        pid = secrets.token_urlsafe(12)
        return f"{pid}.{self._sign(pid)}"

    def phone_id(self, cookie: str | None) -> str | None:
        """The id in a cookie this server signed (since it started), else None."""
        pid, _, sig = (cookie or "").partition(".")
        if not pid or len(pid) > 32 or not hmac.compare_digest(sig.encode(), self._sign(pid).encode()):
            return None
        return pid

    def tenant_of(self, key: str) -> str:
        """A viewer's tenant as everyone sees it (events, recordings, a remote server's `user`): a label
        that tells its requests apart from others' without its address or phone id, and that nobody
        without this server's secret can trace back."""
        return f"viewer {self._sign('tenant:' + key)[:8]}"

    def _sign(self, pid: str) -> str:
        return hmac.new(self.secret, pid.encode(), "sha256").hexdigest()[:32]

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


def proxy_networks(setting: str) -> tuple:
    """INFLIGHT_TRUSTED_PROXIES: comma-separated addresses or networks (10.0.0.5, 172.16.0.0/12)."""
    nets = []
    for item in filter(None, (s.strip() for s in setting.split(","))):
        try:
            nets.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"INFLIGHT_TRUSTED_PROXIES: {item!r} is not an IP address or network") from None
    return tuple(nets)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]"))
        return True
    except ValueError:
        return False


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
