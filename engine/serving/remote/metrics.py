"""A remote lane's server's own gauges: requests running and waiting, KV cache usage, read from its
Prometheus /metrics under vLLM's names (SGLang's and llama.cpp's as fallbacks) and published as
RemoteMetricsEvent.

These are the server's numbers, not measured by us; a server without /metrics (404, or none of the
names) is asked once and then left alone. Its reply is untrusted: read under a size and a line bound
and a deadline (engine/serving/remote/bounded.py), only the lines of the names above parsed (at most
MAX_SERIES of each), and a value outside what the gauge can hold (negative, not finite, a usage above
1) shown as unknown. A reply over the bounds ends the polling, and the lane's status says why.
"""
from __future__ import annotations

import asyncio
import logging
import math

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ...events import RemoteMetricsEvent
from .bounded import KiB, MiB, TooMuch, read_lines

log = logging.getLogger(__name__)
POLL_S = 1.0
# our field -> the names that carry it, preferred first (vLLM, its pre-V1 KV name, SGLang, llama.cpp's
# llama-server with --metrics: its requests in a slot and those deferred for want of one)
NAMES = {
    "num_running": ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    "num_waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"),
}
MEAN = {"kv_usage"}  # one value per engine (data parallel): their mean; counts are summed
RANGE = {"num_running": (0, 1e7), "num_waiting": (0, 1e7), "kv_usage": (0.0, 1.0)}  # what each gauge can be
WANTED = tuple(name for names in NAMES.values() for name in names)
MAX_BYTES = 4 * MiB      # a whole reply (vLLM's is some hundreds of KiB)
MAX_LINE = 64 * KiB      # one line of it
MAX_SERIES = 4096        # series of one name kept (an engine per series)
DEADLINE_S = 5.0         # for one poll, reply included


def read_metrics(text: str, model: str) -> dict | None:
    """{num_running, num_waiting, kv_usage} from an exposition (None: none of the names is there; a
    value that is there but impossible: None). Series labelled with another model_name are left out
    when some carry this one."""
    samples: dict[str, list[tuple[dict, float]]] = {}
    for family in text_string_to_metric_families("\n".join(wanted_lines(text.splitlines())) + "\n"):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    if not any(name in samples for name in WANTED):
        return None
    return {field: _value(samples, names, model, field) for field, names in NAMES.items()}


def wanted_lines(lines) -> list[str]:
    """The sample lines of our names, at most MAX_SERIES of each (comments and every other metric
    are never parsed)."""
    kept, count = [], dict.fromkeys(WANTED, 0)
    for line in lines:
        if not line.startswith(WANTED):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in count and count[name] < MAX_SERIES:
            count[name] += 1
            kept.append(line)
    return kept


def _value(samples: dict, names: tuple[str, ...], model: str, field: str) -> float | None:
    for name in names:
        series = samples.get(name)
        if not series:
            continue
        mine = [v for labels, v in series if labels.get("model_name") == model]
        values = mine or [v for _, v in series]
        value = sum(values) / len(values) if field in MEAN else sum(values)
        low, high = RANGE[field]
        return value if math.isfinite(value) and low <= value <= high else None
    return None


async def poll(client: httpx.AsyncClient, cfg, publish, clock) -> str:
    """Every POLL_S: read cfg.metrics_url and publish what it says (a RemoteMetricsEvent, without its
    lane: publish stamps it). A server that is down or slow is asked again next time; returns why it
    stopped asking (no /metrics, none of the names, a reply over the bounds)."""
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    while True:
        try:
            async with asyncio.timeout(min(cfg.timeout_s, DEADLINE_S)):
                status, lines = await _fetch(client, cfg.metrics_url, headers)
        except (httpx.HTTPError, TimeoutError):
            status, lines = None, None
        except TooMuch as e:
            return _stopped(cfg, f"its /metrics {str(e).removeprefix('the reply ')}")
        if status == 200:
            values = _parse(lines, cfg.model)
            if values is None:
                return _stopped(cfg, f"its /metrics has none of {', '.join(WANTED)}")
            publish(RemoteMetricsEvent(t=clock(), **values))
        elif status == 404:
            return _stopped(cfg, "it has no /metrics")
        await asyncio.sleep(POLL_S)


async def _fetch(client: httpx.AsyncClient, url: str, headers: dict) -> tuple[int, list[str] | None]:
    """(HTTP status, the lines of a 200 reply that start with one of our names), read under the bounds;
    read_metrics keeps at most MAX_SERIES of each."""
    async with client.stream("GET", url, headers=headers) as resp:
        if resp.status_code != 200:
            return resp.status_code, None
        lines = []
        async for line in read_lines(resp, MAX_LINE, MAX_BYTES, "the reply"):
            if line.startswith(WANTED):
                lines.append(line)
        return 200, lines


def _stopped(cfg, why: str) -> str:
    log.info("remote %s: not polling its /metrics: %s", cfg.host, why)
    return why


def _parse(lines: list[str], model: str) -> dict | None:
    try:
        return read_metrics("\n".join(lines), model)
    except ValueError:  # not the Prometheus text format
        return None
