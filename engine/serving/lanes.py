"""Lanes: a name plus a full EngineConfig, written as text (`name:key=value,...`) or JSON; or a name
plus a remote OpenAI-compatible server (`name:remote=http://host:8000/v1,model=...`, engine/serving/remote/config.py).

Pure functions, no threads: the benchmark's CLI and the UI parse, compare and label lanes here.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re

from ..config import STRATEGIES, EngineConfig
from .remote.config import RemoteConfig, is_remote_spec, remote_config

MAX_NAME_LEN = 32
_NAME_RE = re.compile(r"^[A-Za-z0-9 ._-]+$")
FIELDS = tuple(f.name for f in dataclasses.fields(EngineConfig))


def check_lane_name(name) -> str:
    """The name if it can label a lane (UI header, result key), else ValueError."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_LEN or not _NAME_RE.match(name):
        raise ValueError(f"lane name {name!r} must be 1 to {MAX_NAME_LEN} characters: letters, digits, "
                         "space, '-', '_' or '.'")
    return name


def lane_config(base: EngineConfig, overrides: dict) -> EngineConfig:
    """base with overrides applied; an unknown key or a bad value raises ValueError naming the field."""
    unknown = [k for k in overrides if k not in FIELDS]
    if unknown:
        raise ValueError(f"unknown EngineConfig field {unknown[0]!r}; fields: {', '.join(FIELDS)}")
    return dataclasses.replace(base, **overrides)


def lane_spec(base: EngineConfig, spec: dict) -> EngineConfig | RemoteConfig:
    """A lane's spec: a remote server's ({"remote": url, "model": ...}) or the fields that differ from base."""
    return remote_config(spec) if is_remote_spec(spec) else lane_config(base, spec)


def parse_value(text: str):
    """int, float, true/false, none, else the text itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text.strip()


def parse_lane(text: str, base: EngineConfig) -> tuple[str, EngineConfig]:
    """`name:key=value,key=value`; a bare strategy name (`static`) is base with that strategy."""
    name, sep, body = text.partition(":")
    name = check_lane_name(name.strip())
    if not sep:
        if name not in STRATEGIES:
            raise ValueError(f"lane {name!r} has no settings: write {name}:key=value,... or name a strategy "
                             f"({', '.join(STRATEGIES)})")
        return name, dataclasses.replace(base, strategy=name)
    overrides = {}
    for item in filter(None, (p.strip() for p in body.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"lane {name!r}: {item!r} is not key=value")
        overrides[key.strip()] = parse_value(value)
    return name, _named(name, base, overrides)


def load_lanes(path: str, base: EngineConfig) -> dict[str, EngineConfig | RemoteConfig]:
    """A JSON file {"lane name": {"strategy": "static", "block_size": 128, ...}, ...} (or {"remote": ...})."""
    with open(path) as f:
        data = json.load(f)
    if not isinstance(data, dict) or not data:
        raise ValueError(f"{path}: expected a JSON object of lanes, {{\"name\": {{\"field\": value}}}}")
    lanes = {}
    for name, overrides in data.items():
        if not isinstance(overrides, dict):
            raise ValueError(f"{path}: lane {name!r} must map to an object of EngineConfig fields")
        lanes[check_lane_name(name)] = _named(name, base, overrides)
    return lanes


def lanes_from_env(base: EngineConfig, environ=os.environ) -> dict[str, EngineConfig | RemoteConfig] | None:
    """The lanes the server starts with: the JSON file named by INFLIGHT_LANES (None: the default lanes)."""
    path = environ.get("INFLIGHT_LANES", "").strip()
    return load_lanes(path, base) if path else None


def _named(name: str, base: EngineConfig, overrides: dict) -> EngineConfig | RemoteConfig:
    try:
        return lane_spec(base, overrides)
    except (ValueError, TypeError) as e:
        raise ValueError(f"lane {name!r}: {e}") from None


def lane_overrides(cfg: EngineConfig, base: EngineConfig) -> dict:
    """The fields where cfg differs from base."""
    return {k: getattr(cfg, k) for k in FIELDS if getattr(cfg, k) != getattr(base, k)}


def _on_off(v) -> str:
    return "on" if v else "off"


# field -> short label of its value, for lane headers
_LABELS = {
    "model": lambda v: v.rstrip("/").split("/")[-1],
    "strategy": str,
    "scheduling_policy": lambda v: f"{v} policy",
    "device": str,
    "dtype": str,
    "attention_backend": lambda v: f"{v} attention",
    "linear_backend": lambda v: f"{v} linear",
    "cuda_graphs": lambda v: f"CUDA graphs {'auto' if v is None else _on_off(v)}",
    "torch_compile": lambda v: f"torch.compile {'auto' if v is None else _on_off(v)}",
    "warmup": lambda v: f"warm-up {'auto' if v is None else _on_off(v)}",
    "block_size": lambda v: f"block {v}",
    "num_kv_blocks": lambda v: f"{v} KV blocks" if v is not None else "KV blocks auto",
    "kv_cache_memory_gb": lambda v: f"KV {v:g} GiB" if v is not None else "KV memory auto",
    "max_model_len": lambda v: f"max len {v}" if v is not None else "max len auto",
    "max_num_seqs": lambda v: f"max batch {v}",
    "max_num_batched_tokens": lambda v: f"budget {v} tok",
    "enable_chunked_prefill": lambda v: f"chunked prefill {_on_off(v)}",
    "enable_prefix_caching": lambda v: f"prefix cache {_on_off(v)}",
    "speculative": lambda v: {"off": "no drafts", "draft": "model drafts"}.get(v, f"{v} drafts"),
    "num_speculative_tokens": lambda v: f"up to {v} drafts",
    "speculative_model": lambda v: "no draft model" if v is None else f"draft model {v.rstrip('/').split('/')[-1]}",
    "preemption_mode": lambda v: f"preempt by {v}",
    "swap_space_gb": lambda v: f"host pool {v:g} GiB",
    "disaggregated": lambda v: "prefill/decode disaggregated" if v else "prefill and decode colocated",
    "static_batch_size": lambda v: f"static batch {v}",
    "static_max_wait_s": lambda v: f"wait {v:g} s",
    "seed": lambda v: f"seed {v}",
}


# settings a strategy never reads: a lane's header does not show them
UNUSED_BY = {
    "continuous": {"static_batch_size", "static_max_wait_s"},
    "static": {"max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "static_max_wait_s",
               "preemption_mode", "swap_space_gb", "disaggregated"},
    "dynamic": {"max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "preemption_mode",
                "swap_space_gb", "disaggregated"},
}


def unused_settings(cfg) -> set[str]:
    """Settings this lane never reads, given its strategy and its other settings (a recompute lane has no
    host pool: "host pool 1 GiB" on it read as if it had one)."""
    unused = set(UNUSED_BY.get(cfg.strategy, set()))
    if cfg.preemption_mode != "swap":
        unused.add("swap_space_gb")
    if cfg.speculative == "off":
        unused.add("num_speculative_tokens")
    return unused


def describe_difference(a, b) -> list[str]:
    """Short labels of how a differs from b, in field order, e.g. ["static", "block 128"], leaving out
    settings a's strategy never reads. Beside a remote lane, each side says what it is:
    ["remote host:8000", "Llama-3.1-8B"] and ["continuous", ...]."""
    if a.is_remote or b.is_remote:
        where = f"remote {a.host}" if a.is_remote else a.strategy
        return [where, _LABELS["model"](a.model)]
    unused = unused_settings(a)
    return [_LABELS.get(k, lambda v, k=k: f"{k} {v}")(v) for k, v in lane_overrides(a, b).items() if k not in unused]


def lane_headers(lanes: dict) -> dict[str, list[str]]:
    """Each lane's header labels: how its config differs from the other lane's (["block 128"] beside
    ["block 16"]); with more than two, from the first lane's; a lone lane has none."""
    configs = list(lanes.values())
    if len(configs) == 2:
        return {name: describe_difference(cfg, configs[1 - i]) for i, (name, cfg) in enumerate(lanes.items())}
    return {name: describe_difference(cfg, configs[0]) for name, cfg in lanes.items()}
