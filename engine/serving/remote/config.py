"""RemoteConfig: a lane served by an OpenAI-compatible server elsewhere (vLLM, SGLang, another Inflight).

Written as a lane spec: {"remote": "http://host:8000/v1", "model": "...", "api_key": "..."}. Pure data,
no network: the lane's worker is engine/serving/remote/lane.py. The API key never leaves this process: it is
left out of to_dict() (what status and the `lanes` event show) and of repr().
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from urllib.parse import urlsplit

from ...config import MAX_MODEL_NAME_CHARS
from ...config import _check as config_check
from ...events import REMOTE
from ...untrusted import is_int, is_number, is_text

MAX_CONCURRENCY = 256


@dataclass(frozen=True)
class RemoteConfig:
    remote: str                    # the server's OpenAI base URL, e.g. http://host:8000/v1
    model: str                     # the model name the server serves
    api_key: str | None = field(default=None, repr=False)
    max_concurrency: int = 16      # requests streaming at once; more wait on our side
    timeout_s: float = 30.0        # no byte from the server for this long ends the request as an error
    max_request_s: float = 300.0   # a request still streaming this long after it was sent ends as an error
    metrics: bool = True           # poll the server's /metrics (vLLM or SGLang names) for its own gauges

    def __post_init__(self):
        object.__setattr__(self, "remote", check_url(self.remote))
        _check(is_text(self.model, MAX_MODEL_NAME_CHARS), "model", self.model, "the model name the server serves")
        _check(self.api_key is None or is_text(self.api_key, 4096), "api_key", "(hidden)", "None or a non-empty string")
        _check(is_int(self.max_concurrency) and 1 <= self.max_concurrency <= MAX_CONCURRENCY, "max_concurrency",
               self.max_concurrency, f"an integer from 1 to {MAX_CONCURRENCY}")
        _check(is_number(self.timeout_s) and 0 < self.timeout_s <= 3600, "timeout_s", self.timeout_s,
               "a number of seconds in (0, 3600]")
        _check(is_number(self.max_request_s) and 0 < self.max_request_s <= 3600, "max_request_s",
               self.max_request_s, "a number of seconds in (0, 3600]")
        _check(isinstance(self.metrics, bool), "metrics", self.metrics, "True or False")

    strategy = REMOTE  # what the lane's events carry as their strategy
    is_remote = True   # a server elsewhere (EngineConfig.is_remote: False)

    @property
    def metrics_url(self) -> str:
        """/metrics at the server's root: the base URL less a trailing /v1."""
        root = self.remote[:-3] if self.remote.endswith("/v1") else self.remote
        return f"{root}/metrics"

    @property
    def host(self) -> str:
        return urlsplit(self.remote).netloc

    def to_dict(self) -> dict:
        """The public view (status, the `lanes` event): no API key; `source` marks what the lane's
        timings are: measured at this client, not inside the engine."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "api_key"}
        return {**out, "strategy": REMOTE, "source": REMOTE, "api_key_set": self.api_key is not None}


FIELDS = tuple(f.name for f in fields(RemoteConfig))


def is_remote_spec(spec) -> bool:
    return isinstance(spec, dict) and "remote" in spec


def remote_config(spec: dict) -> RemoteConfig:
    """A lane spec with a "remote" key -> RemoteConfig; unknown keys and bad values raise ValueError."""
    unknown = [k for k in spec if k not in FIELDS]
    if unknown:
        raise ValueError(f"unknown remote lane field {unknown[0]!r}; fields: {', '.join(FIELDS)}")
    if "model" not in spec:
        raise ValueError("a remote lane needs the model name its server serves: {\"remote\": url, \"model\": ...}")
    return RemoteConfig(**spec)


def check_url(url) -> str:
    """An http(s) URL with a host and nothing after the path (no query, fragment or credentials)."""
    if not isinstance(url, str):
        raise ValueError(f"RemoteConfig.remote must be an http(s) URL, got {url!r}")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"RemoteConfig.remote must be an http:// or https:// URL with a host, got {url!r}")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError("RemoteConfig.remote must not carry credentials, a query or a fragment "
                         "(give the key as api_key)")
    return url.strip().rstrip("/")


def _check(ok: bool, name: str, value, expected: str) -> None:
    config_check(ok, name, value, expected, owner="RemoteConfig")
