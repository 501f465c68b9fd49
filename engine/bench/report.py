"""Benchmark output: a plain-text table with speedups against baselines, JSON and CSV files."""
from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

PEER_BASELINE = "hf-generate"

# (header, key, format, scale)
COLUMNS = [
    ("lane", "lane", "{}", None),
    ("dtype", "dtype", "{}", None),  # peers run in the lanes' dtype: comparisons at equal precision
    ("out tok/s", "output_tokens_per_s", "{:.1f}", 1),
    ("req/s", "requests_per_s", "{:.2f}", 1),
    ("TTFT p50", "ttft_p50_s", "{:.2f}s", 1),
    ("TTFT p99", "ttft_p99_s", "{:.2f}s", 1),
    ("TPOT p50", "tpot_p50_s", "{:.0f}ms", 1000),
    ("TPOT p99", "tpot_p99_s", "{:.0f}ms", 1000),
    ("E2E p50", "e2e_p50_s", "{:.2f}s", 1),
    ("E2E p99", "e2e_p99_s", "{:.2f}s", 1),
    ("queue p50", "queue_wait_p50_s", "{:.2f}s", 1),
    ("pad %", "padding_waste_pct", "{:.1f}", 1),
    ("KV waste %", "kv_waste_pct", "{:.1f}", 1),
    ("batch", "mean_batch_size", "{:.1f}", 1),
    ("goodput r/s", "goodput_requests_per_s", "{:.2f}", 1),
    ("telem %", "telemetry_pct", "{:.1f}", 1),
    ("$/M out", "usd_per_million_output_tokens", "{:.2f}", 1),
]

# Shown when a lane of the group caches prefixes.
PREFIX_COLUMNS = [
    ("prefill tok", "prefill_tokens", "{:.0f}", 1),
    ("hit %", "prefix_hit_rate", "{:.1f}", 100),
]

# Shown when a lane of the group speculates.
SPEC_COLUMNS = [
    ("accept %", "acceptance_rate", "{:.1f}", 100),
    ("tok/row-step", "tokens_per_decode_row", "{:.2f}", 1),
]

# Shown when the run has latency SLOs: the share of requests meeting both (goodput counts them per second).
SLO_COLUMNS = [
    ("SLO met %", "slo_attainment_pct", "{:.1f}", 1),
]

# Shown when a lane of the group preempts or swaps.
PREEMPT_COLUMNS = [
    ("preempt", "preemptions", "{}", None),
    ("recomp tok", "recomputed_tokens", "{}", None),
    ("swap MB", "swap_mb", "{:.1f}", 1),
    ("swap ms", "swap_ms", "{:.1f}", 1),
]

# Shown when a lane of the group is disaggregated: the KV its decode half copied from its prefill half.
HANDOFF_COLUMNS = [
    ("handoff MB", "handoff_mb", "{:.1f}", 1),
    ("handoff ms", "handoff_ms", "{:.1f}", 1),
]

# Per class (workloads labelling requests short/long): (header, key, format, scale)
CLASS_COLUMNS = [
    ("n", "requests", "{}", None),
    ("TTFT p50", "ttft_p50_s", "{:.2f}s", 1),
    ("TTFT p99", "ttft_p99_s", "{:.2f}s", 1),
    ("E2E p50", "e2e_p50_s", "{:.2f}s", 1),
    ("E2E p99", "e2e_p99_s", "{:.2f}s", 1),
    ("queue max", "queue_wait_max_s", "{:.2f}s", 1),
]

# Speedups: (header, key, higher_is_better)
RATIOS = [
    ("out tok/s", "output_tokens_per_s", True),
    ("req/s", "requests_per_s", True),
    ("goodput", "goodput_requests_per_s", True),
    ("TTFT p50", "ttft_p50_s", False),
    ("TPOT p50", "tpot_p50_s", False),
    ("TPOT p99", "tpot_p99_s", False),
    ("E2E p50", "e2e_p50_s", False),
]


def _cell(value, fmt: str, scale) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return fmt.format(value * scale if scale else value)


def _grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def speedup(result: dict, base: dict, key: str, higher_is_better: bool) -> float | None:
    """How many times better `result` is than `base` on `key` (> 1 is better)."""
    a, b = result.get(key), base.get(key)
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return a / b if higher_is_better else b / a


def _groups(results: list[dict]) -> list[tuple[object, list[dict]]]:
    groups: dict = {}
    for r in results:
        groups.setdefault(r.get("rate"), []).append(r)
    return list(groups.items())


def baselines(rows: list[dict]) -> list[dict]:
    """The rows the others are compared with: the first static lane (else the first lane), and
    hf-generate when present."""
    first = next((r for r in rows if r.get("strategy") == "static"), rows[0])
    peer = next((r for r in rows if r["lane"] == PEER_BASELINE), None)
    return [first] + ([peer] if peer is not None and peer is not first else [])


def ratio_key(base_lane: str, key: str) -> str:
    """vs_<lane>_<key>, the lane's name in lower case with other characters as '_'."""
    return f"vs_{re.sub(r'[^a-z0-9]+', '_', base_lane.lower()).strip('_')}_{key}"


def _table(rows: list[dict], columns: list[tuple]) -> str:
    return _grid([c[0] for c in columns], [[_cell(r.get(k), f, s) for _, k, f, s in columns] for r in rows])


def class_table(rows: list[dict]) -> str:
    """Per-class latencies, one line per (lane, class)."""
    lines = [{"lane": r["lane"], "class": c, **m} for r in rows for c, m in r.get("classes", {}).items()]
    return _table(lines, [("lane", "lane", "{}", None), ("class", "class", "{}", None), *CLASS_COLUMNS])


def tenant_table(rows: list[dict]) -> str:
    """Per lane: each tenant's tokens served, its rate while all had requests waiting, Jain's index."""
    names = list(dict.fromkeys(t for r in rows for t in r.get("tenants", {})))
    cols = [("lane", "lane", "{}", None)]
    for t in names:
        cols += [(f"{t} tok", f"{t} tok", "{}", None), (f"{t} tok/s", f"{t} rate", "{:.1f}", 1)]
    cols += [("backlogged", "backlogged_s", "{:.1f}s", 1), ("Jain", "jain_index", "{:.3f}", 1)]
    lines = [{**r, **{f"{t} tok": m["tokens_served"] for t, m in r.get("tenants", {}).items()},
              **{f"{t} rate": m["backlogged_rate"] for t, m in r.get("tenants", {}).items()}} for r in rows]
    return _table(lines, cols)


def format_table(results: list[dict]) -> str:
    """One block per arrival rate: the metrics table (the SLO share when the run has SLOs, prefix columns
    when a lane caches prefixes, speculative decoding's when one drafts, preemption's when one preempts or
    swaps),
    per-class and per-tenant tables when the workload has them, then speedups against each baseline."""
    out = []
    for rate, rows in _groups(results):
        title = "offline (all requests at t=0)" if not rate else f"online: {rate:g} requests/s"
        out.append(f"== {rows[0].get('workload', 'workload')}, {title} ==")
        caching = any(r.get("info", {}).get("prefix_caching") for r in rows)
        drafting = any(r.get("info", {}).get("speculative", "off") != "off" for r in rows)
        preempting = any(r.get("preemptions") or r.get("info", {}).get("preemption_mode") == "swap" for r in rows)
        slo = any(r.get("slo_ttft_s") is not None or r.get("slo_tpot_s") is not None for r in rows)
        split = any(r.get("info", {}).get("disaggregated") for r in rows)
        out.append(_table(rows, COLUMNS + (SLO_COLUMNS if slo else []) + (PREFIX_COLUMNS if caching else [])
                          + (SPEC_COLUMNS if drafting else []) + (PREEMPT_COLUMNS if preempting else [])
                          + (HANDOFF_COLUMNS if split else [])))
        if any(r.get("classes") for r in rows):
            out.append("\nper class (queue max: longest wait from arrival to admission)\n" + class_table(rows))
        if any(r.get("tenants") for r in rows):
            out.append("\nper tenant: tokens served (prompt + decode), and their rate while every tenant had "
                       "requests waiting\n" + tenant_table(rows))
        how = how_lanes_ran(rows)
        if how:
            out.append("\nhow each ran (warm-ups are outside the measured runs)\n" + how)
        for base in baselines(rows):
            others = [r for r in rows if r is not base]
            if not others:
                continue
            name = base["lane"]
            out.append(f"\nspeedup vs {name} (x, > 1 is better; latency ratios are {name}/lane)")
            body = [[r["lane"]] + [_cell(speedup(r, base, k, hib), "{:.2f}x", 1) for _, k, hib in RATIOS]
                    for r in others]
            out.append(_grid(["lane"] + [h for h, _, _ in RATIOS], body))
        out.append("")
    return "\n".join(out)


def how_lanes_ran(rows: list[dict]) -> str:
    """A line per lane: its attention backend and why, CUDA graphs, its warm-up and what the measured
    run still compiled (a warm engine compiles nothing); a peer's attention and warm-up."""
    lines = []
    for r in rows:
        info, parts = r.get("info", {}), []
        if info.get("attention"):
            graphs = info.get("cuda_graphs", "off")
            parts.append(f"{info['attention']} attention ({info.get('attention_why', '?')})"
                         + (f", CUDA graphs {graphs}" if graphs != "off" else "")
                         + (", each step launched before the one before it is read back" if info.get("overlap")
                            else ""))
        elif info.get("attn_implementation"):
            parts.append(f"transformers' {info['attn_implementation']} attention")
        warm = info.get("warmup")
        if warm:
            parts.append(f"warm-up {warm['seconds']:.2f} s ({len(warm['batches'])} forwards, "
                         f"{warm['compiled']} kernel variants compiled)")
        elif info.get("warmup_s") is not None:
            parts.append(f"warm-up {info['warmup_s']:.2f} s")
        if info.get("kernel_compiles_in_run") is not None:
            parts.append(f"{info['kernel_compiles_in_run']} compiled during the run")
        if parts:
            lines.append(f"{r['lane']}: " + "; ".join(parts))
    return "\n".join(lines)


def add_ratios(results: list[dict]) -> None:
    """Add vs_<baseline lane>_output_tokens_per_s (and the other RATIOS) to each result, in place."""
    for _, rows in _groups(results):
        for base in baselines(rows):
            for r in rows:
                for _, key, hib in RATIOS:
                    r[ratio_key(base["lane"], key)] = speedup(r, base, key, hib)


def write_json(data: dict, path: str | Path) -> None:
    Path(path).write_text(json.dumps(data, indent=2, default=_json_default) + "\n")


def _json_default(x):
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"cannot write {type(x).__name__} to JSON")


def write_csv(results: list[dict], path: str | Path) -> None:
    """One row per result; nested fields (info) are written as JSON strings."""
    keys: list[str] = []
    for r in results:
        keys.extend(k for k in r if k not in keys)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for r in results:
            w.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()})
