"""A remote lane's server's own gauges: requests running and waiting, KV cache usage, read from its
Prometheus /metrics under vLLM's names (SGLang's and llama.cpp's as fallbacks) and published as
RemoteMetricsEvent.

These are the server's numbers, not measured by us; a server without /metrics (404, or none of the
names) is asked once and then left alone.
"""
from __future__ import annotations

import asyncio
import logging
import math

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ...events import RemoteMetricsEvent

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


def read_metrics(text: str, model: str) -> dict | None:
    """{num_running, num_waiting, kv_usage} from an exposition (None: none of the names is there).
    Series labelled with another model_name are left out when some carry this one."""
    samples: dict[str, list[tuple[dict, float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append((s.labels, s.value))
    out = {field: _value(samples, names, model, field in MEAN) for field, names in NAMES.items()}
    return out if any(v is not None for v in out.values()) else None


def _value(samples: dict, names: tuple[str, ...], model: str, mean: bool) -> float | None:
    for name in names:
        series = samples.get(name)
        if not series:
            continue
        mine = [v for labels, v in series if labels.get("model_name") == model]
        values = mine or [v for _, v in series]
        value = sum(values) / len(values) if mean else sum(values)
        return value if math.isfinite(value) else None  # Prometheus allows NaN; our events do not
    return None


async def poll(client: httpx.AsyncClient, cfg, publish, clock) -> None:
    """Every POLL_S: read cfg.metrics_url and publish what it says (a RemoteMetricsEvent, without its
    lane: publish stamps it). A server that is down is asked again next time."""
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    while True:
        try:
            resp = await client.get(cfg.metrics_url, headers=headers, timeout=min(cfg.timeout_s, 5.0))
        except httpx.HTTPError:
            resp = None
        if resp is not None and resp.status_code == 200:
            values = _parse(resp.text, cfg.model)
            if values is None:
                log.info("remote %s: /metrics has none of %s; not polling it", cfg.host, sorted(NAMES))
                return
            publish(RemoteMetricsEvent(t=clock(), **values))
        elif resp is not None and resp.status_code == 404:
            log.info("remote %s has no /metrics; not polling it", cfg.host)
            return
        await asyncio.sleep(POLL_S)


def _parse(text: str, model: str) -> dict | None:
    try:
        return read_metrics(text, model)
    except ValueError:  # not the Prometheus text format
        return None
