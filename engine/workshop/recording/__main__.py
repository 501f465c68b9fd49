"""python -m engine.workshop.recording: record a scripted run, or describe a recording.

  python -m engine.workshop.recording record --scenario "Straggler: continuous vs static" --out run.jsonl.gz [--model M]
  python -m engine.workshop.recording info run.jsonl.gz
  python -m engine.workshop.recording html run.jsonl.gz -o demo.html   # one web page that plays it, offline
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...config import EngineConfig
from .format import load
from .script import record_scenario
from .web_page import web_page


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m engine.workshop.recording", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="run a scenario's stream on its lanes and record every event")
    rec.add_argument("--scenario", default="Straggler: continuous vs static", help="a shipped scenario's title")
    rec.add_argument("--out", required=True, type=Path, help="the recording (gzip JSON lines: .jsonl.gz)")
    rec.add_argument("--model", default=None, help="hub id or local directory (default: $INFLIGHT_MODEL or "
                                                   "SmolLM2-135M-Instruct)")
    rec.add_argument("--device", default=None, help="auto | cpu | cuda (default: $INFLIGHT_DEVICE or auto)")
    rec.add_argument("--dtype", default=None, help="auto | float32 | bfloat16 | float16")
    rec.add_argument("--max-seconds", type=float, default=60.0, help="stop recording after this long")
    info = sub.add_parser("info", help="what a recording holds")
    info.add_argument("path", type=Path)
    page = sub.add_parser("html", help="write one self-contained web page that plays the recording")
    page.add_argument("path", type=Path)
    page.add_argument("-o", "--out", required=True, type=Path, help="the page (.html)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.command in ("info", "html"):
        try:
            rec = load(args.path)
        except (OSError, ValueError) as e:
            print(f"cannot read {args.path}: {e}", file=sys.stderr)
            return 1
        if args.command == "html":
            args.out.write_text(web_page(rec), encoding="utf-8")
            print(f"{args.out}: {rec.label}, {len(rec)} events over {rec.end - rec.start:.1f} s, "
                  f"{args.out.stat().st_size // 1024} KiB")
            return 0
        print(f"{rec.label}\nlanes: {', '.join(rec.lanes)}\n{len(rec)} events over {rec.end - rec.start:.1f} s")
        return 0
    fields = {k: v for k, v in (("model", args.model), ("device", args.device), ("dtype", args.dtype)) if v}
    res = record_scenario(args.scenario, args.out, EngineConfig(**fields), args.max_seconds)
    print(f"{args.out}: {res['events']} events over {res['seconds']:.1f} s, {res['requests']} requests, "
          f"{args.out.stat().st_size // 1024} KiB")
    for problem in ([f"{res['skipped']} events lost"] if res["skipped"] else []) + res["refused"][:3] + (
            [] if res["complete"] else ["stopped at --max-seconds with requests still running"]):
        print(f"warning: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
