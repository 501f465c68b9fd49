"""python -m engine.harness.long_recording: how a long recording at a GPU's pace fares (issue #42, item 4).

A real recording (a GPU run's: docs/perf/2026-11-27-h100-socket/gpu_socket.jsonl.gz holds two lanes of
256 rows on an H100) is written again end to end as many times as `--minutes` takes, each pass a new
load (request ids moved past the previous pass's, times after its last event), through the recorder's
own writer: a chunk every few MiB, each opening with the lanes and each KV pool's tables and rows whole,
each step as the socket sends it today (as_sent_now). Then the file is read as the app reads an upload
and its chunks checked as a replay checks them, and the offline page is written from it. Every event is a
real one of the source run: only its pass's ids and times, and its steps' encoding, changed. Times are
this machine's (name its CPU with them).

    python -m engine.harness.long_recording docs/perf/2026-11-27-h100-socket/gpu_socket.jsonl.gz \
        --minutes 10 -o long10.jsonl.gz --page long10.html --json long10.json
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from ..events import SHORT_ENTRY, StepEntry, StepRows, continued_rows, row_context, sampled_ids, wire_entry
from ..kv_wire import fold_kv, is_key
from ..telemetry.device_peaks import cpu_model
from ..workshop.recording.format import Writer, load
from ..workshop.recording.web_page import web_page

RID_STEP = 100_000  # each pass's request ids: the source's plus pass x RID_STEP
# the fields of a wire event that hold request ids: lists of them, objects keyed by them, lists of rows led by one
ID_LISTS = ("admitted", "finished", "preempted", "sampled", "unsampled", "handed_off")
ID_KEYED = ("deltas", "waits", "answer_ends")
ID_ROWS = ("entries", "swaps", "handoffs")
KV_KEYED = ("block_tables", "tables", "kv_tokens")


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m engine.harness.long_recording", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="a recording to repeat (a GPU run's)")
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the written recording runs")
    ap.add_argument("-o", "--out", type=Path, required=True, help="the long recording (.jsonl.gz)")
    ap.add_argument("--page", type=Path, default=None, help="also write its offline page here, and time that")
    ap.add_argument("--json", type=Path, default=None)
    return ap.parse_args(argv)


def moved(event: dict, k: int) -> dict:
    """The event of pass k: its request ids moved by k x RID_STEP."""
    d = k * RID_STEP
    if not d:
        return event
    e = dict(event)
    if "request_id" in e:
        e["request_id"] += d
    for f in ID_LISTS:
        if isinstance(e.get(f), dict):  # (older recordings: sampled as request id -> token id)
            e[f] = {str(int(r) + d): v for r, v in e[f].items()}
        elif f in e:
            e[f] = [r + d for r in e[f]]
    for f in ID_KEYED:
        if f in e:
            e[f] = {str(int(r) + d): v for r, v in e[f].items()}
    for f in ID_ROWS:
        if f in e:
            e[f] = [[row[0] + d, *row[1:]] for row in e[f]]
    if "kv" in e:
        e["kv"] = {**e["kv"], **{f: {str(int(r) + d): v for r, v in e["kv"][f].items()}
                                 for f in KV_KEYED if f in e["kv"]}}
    return e


def as_sent_now(step: dict, prev: list[list] | None, kv: dict) -> dict:
    """A step (its rows whole) as the socket sends it today: plain decode rows short, `sampled` beside them
    (`unsampled`), and but for a key frame (prev None) the rows that go on from its pool's previous step as
    runs (`cont`)."""
    entries = [e if len(e) == len(SHORT_ENTRY) else wire_entry(StepEntry(*e), i) for i, e in enumerate(step["entries"])]
    out = {**step, "kv": kv, "entries": entries}
    if "unsampled" not in step:  # (recorded before sampled went relative)
        ids, short = sampled_ids(step), [e[0] for e in entries if len(e) == len(SHORT_ENTRY)]
        out.update(sampled=[r for r in ids if r not in set(short)], unsampled=[r for r in short if r not in set(ids)])
    if prev is not None and not is_key(kv):  # (a step with its tables whole sends its rows whole)
        rest, runs = continued_rows(map(row_context, prev), entries)
        if runs:
            out.update(entries=rest, cont=runs)
    return out


def write(source, out: Path, minutes: float) -> dict:
    """The source's events again and again for `minutes`, written as the recorder writes (format.Writer)."""
    pairs = source.events
    lanes = next(e for _, e in pairs if e["type"] == "lanes")
    span = pairs[-1][0] - pairs[0][0] + 0.01
    writer, folded, keyed, passes, rows, last = Writer(out, source.header), {}, set(), 0, StepRows(), {}
    t_end = pairs[0][0] + 60 * minutes
    while pairs[0][0] + passes * span < t_end:
        for t, e in pairs:
            t, e = t + passes * span, moved(e, passes)
            if writer.chunk_full:
                writer.new_chunk()
                writer.event(t, lanes)
                keyed.clear()
            if e["type"] == "step":
                pool, whole = (e["lane"], e.get("part")), rows.resolve(e)
                folded[pool] = fold_kv(folded.get(pool), e["kv"], whole["entries"])
                key = pool not in keyed  # the pool's first step in this chunk: its tables and rows whole
                keyed.add(pool)
                e = as_sent_now(whole, None if key else last.get(pool), folded[pool] if key else e["kv"])
                last[pool] = whole["entries"]
            writer.event(t, e)
        passes += 1
    writer.close()
    return {"passes": passes, "chunks": writer.chunks, "lines": writer.lines, "bytes": writer.bytes,
            "file_bytes": writer.file_bytes}


def measure(args) -> dict:
    source = load(args.source)
    t = time.perf_counter()
    written = write(source, args.out, args.minutes)
    write_s = time.perf_counter() - t
    t = time.perf_counter()
    rec = load(args.out)
    load_s = time.perf_counter() - t
    checks = []
    for i in range(len(rec.chunks)):
        t = time.perf_counter()
        rec.chunk(i)
        checks.append(time.perf_counter() - t)
    span_min = (rec.end - rec.start) / 60
    out = {"source": str(args.source), "label": rec.label, "cpu": cpu_model(), **written,
           "span_s": rec.end - rec.start, "events": len(rec), "write_s": write_s, "load_s": load_s,
           "mib_per_min": written["bytes"] / 2 ** 20 / span_min,
           "file_mib_per_min": written["file_bytes"] / 2 ** 20 / span_min,
           "check_s_total": sum(checks), "check_s_max": max(checks),
           "check_share_at_1x": sum(checks) / (rec.end - rec.start),  # of one core, while it plays
           "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    if args.page:
        t = time.perf_counter()
        args.page.write_text(web_page(rec), encoding="utf-8")
        out.update(page_s=time.perf_counter() - t, page_mib=args.page.stat().st_size / 2 ** 20)
    return out


def main(argv=None) -> int:
    args = parse_args(argv)
    out = measure(args)
    print(f"{args.out}: {out['span_s'] / 60:.1f} min, {out['events']:,} events in {out['chunks']} chunks, "
          f"{out['file_bytes'] / 2 ** 20:.1f} MiB ({out['bytes'] / 2 ** 20:.0f} MiB of lines: "
          f"{out['mib_per_min']:.1f} a minute); read in {out['load_s']:.2f} s; every chunk checked in "
          f"{out['check_s_total']:.1f} s ({out['check_share_at_1x']:.0%} of a core at 1x, "
          f"the longest {out['check_s_max']:.2f} s); {out['cpu']}")
    if args.page:
        print(f"{args.page}: {out['page_mib']:.1f} MiB, written in {out['page_s']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
