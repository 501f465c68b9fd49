"""Run a shipped scenario headless, as the app runs it (its lanes side by side on this machine's cores),
and print each lane's metrics as the cards compute them, whether each claim of its "What to watch" held
(engine/workshop/scenarios/claims.py) and, asked, what the narration said.

    python -m engine.workshop.scenarios.headless 15-disaggregated-prefill [--model M] [--narration]

Exit status 1 if a claim failed.

The scenario is named by its key or a part of it (its file name under assets/scenarios/).
"""
from __future__ import annotations

import argparse
import time

from engine.config import EngineConfig, default_model
from engine.serving.service import EngineService
from engine.telemetry.live_metrics import LiveMetrics

from ..narration import Narrator
from . import claims, runner
from .catalog import shipped
from .headline import METRICS, run_headline

SHOWN = ("completed", "ttft_p50_s", "tpot_p50_s", "max_token_wait_s", "output_tokens_per_s",
         "slo_attainment_pct", "goodput_requests_per_s", "duration_s", "num_steps", "mean_step_ms")
TIMEOUT_S = 1800


def find(key: str):
    """The shipped scenario whose key contains `key` (SystemExit naming the keys unless exactly one does)."""
    matches = [s for s in shipped() if key in s.key]
    if len(matches) != 1:
        raise SystemExit(f"{key!r} names {len(matches)} scenarios; keys: {', '.join(s.key for s in shipped())}")
    return matches[0]


def run(key: str, model: str | None = None) -> tuple[dict[str, dict], list, list]:
    """Each lane's metrics once the scenario's stream has been served, the verdicts on its claims, and the
    narration's sentences (oldest first), as the room would have heard them."""
    scenario = find(key)
    svc = EngineService(EngineConfig(model=model), hub_capacity=100_000)
    try:
        svc.wait_ready(900)
        stream = runner.start(svc, scenario)
        deadline = time.monotonic() + TIMEOUT_S
        while (stream.is_alive() or not svc.idle()) and time.monotonic() < deadline:
            time.sleep(1.0)
        # the narrator reads the hub from its start: it knows nothing ran before the scenario, so it tells its totals
        metrics, narrator = LiveMetrics(), Narrator(keep=10_000)
        metrics.consume(svc.hub)
        narrator.consume(svc.hub)
        slos = {name: (c.slo_ttft_s, c.slo_tpot_s) for name, c in svc.lanes.items()}
        summary = metrics.summary(slos)
        in_order = {name: summary[name] for name in scenario.lanes if name in summary}  # the scenario's order
        events = [e for _, e in svc.hub.read(0).events]
        verdicts = claims.check(scenario.claims, summary, events, default_model=(model or default_model()) == default_model())
        return in_order, verdicts, narrator.recent(10_000, now=svc.clock() + 10)[::-1]
    finally:
        svc.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", help="a scenario's key, or a part of it")
    ap.add_argument("--model", default=None)
    ap.add_argument("--narration", action="store_true", help="print what the narration said, too")
    args = ap.parse_args(argv)
    summary, verdicts, said = run(args.scenario, args.model)
    for lane, r in summary.items():
        print(lane, "  ".join(f"{k}={r[k]:.3g}" if isinstance(r.get(k), float) else f"{k}={r.get(k)}" for k in SHOWN))
    headline = run_headline(METRICS[find(args.scenario).headline[0]], summary)
    print(f"headline: {headline or '(no ratio: a lane has no value)'}")
    for v in verdicts:
        print(v.line())
    for s in said if args.narration else ():
        print(f"{s.t:7.1f} s  {s.lane or 'both'}: {s.text}")
    return 1 if any(v.holds is False for v in verdicts) else 0


if __name__ == "__main__":
    raise SystemExit(main())
