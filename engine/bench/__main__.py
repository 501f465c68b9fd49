"""python -m engine.bench: run lanes of our engine and peers on one workload and compare them.

  python -m engine.bench --workload quick --strategies continuous,static,dynamic,hf-generate,hf-cb \\
      --json out.json [--csv out.csv] [--rates 1,2,4] [--model M] [--device cpu]
  python -m engine.bench --lanes 'small:block_size=16' --lanes 'big:block_size=128' --strategies hf-generate
  python -m engine.bench --lanes lanes.json     # {"lane name": {"strategy": "static", "block_size": 128}}
  python -m engine.bench --strategies continuous --remote llama.cpp=http://127.0.0.1:8080/v1 [--remote-model M]

A lane is a name and an engine configuration: the engine flags below with the lane's overrides; or a
remote OpenAI-compatible server (--remote, or a lane {"remote": url, "model": name}), sent the same
workload as token ids and timed at the client.
"""
from __future__ import annotations

import argparse
import sys

from ..config import EngineConfig
from ..serving.lanes import check_lane_name, describe_difference, load_lanes, parse_lane
from ..serving.remote.config import RemoteConfig, remote_config
from .config import ALL_STRATEGIES, SWITCH, BenchConfig
from .control import Cancelled, Progress
from .report import add_ratios, format_table, write_csv, write_json
from .workloads import PRESETS, Lengths, load_trace, make_workload, preset, save_trace

DEFAULT_STRATEGIES = "continuous,static,hf-generate"
QUIET_PCT = 10.0  # other processes' CPU share above which a run's timings are flagged


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m engine.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None,
                    help="hub id or local directory (default: $INFLIGHT_MODEL or SmolLM2-135M-Instruct)")
    ap.add_argument("--device", default=None, help="auto | cpu | cuda (default: $INFLIGHT_DEVICE or auto)")
    ap.add_argument("--dtype", default=None, help="auto | float32 | bfloat16 | float16")
    ap.add_argument("--workload", default="quick",
                    help=f"a preset ({', '.join(PRESETS)}) or a JSONL trace file to replay")
    ap.add_argument("--strategies", default=None,
                    help=f"comma-separated, from {', '.join(ALL_STRATEGIES)}; each of ours is a lane named after "
                         "it (default: continuous,static,hf-generate, or none when --lanes is given)")
    ap.add_argument("--lanes", action="append", default=[],
                    help="a lane 'name:key=value,...' (EngineConfig fields) or a JSON file of lanes; repeatable")
    ap.add_argument("--remote", action="append", default=[], metavar="NAME=URL",
                    help="a lane served by an OpenAI-compatible server at URL (its /v1), timed at the client; repeatable")
    ap.add_argument("--remote-model", default=None,
                    help="the model name the --remote servers serve (default: --model's)")
    ap.add_argument("--rates", default=None,
                    help="comma-separated arrival rates (requests/s) to sweep; 0 = offline")
    ap.add_argument("--burst", type=int, default=None, help="requests per arrival burst (online)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the preset's request count")
    ap.add_argument("--num-requests", type=int, default=None, help="override the preset's request count")
    ap.add_argument("--output-len", default=None, help="N | uniform:LO:HI | exp:MEAN:CAP")
    ap.add_argument("--prompt-len", default=None,
                    help="'real' (bundled prompts) or a synthetic length: N | uniform:LO:HI")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--save-trace", default=None, help="write the workload (token ids included) as JSONL")
    # Engine flags default to None: EngineConfig's own defaults apply.
    ap.add_argument("--attention-backend", default=None, help="auto | torch | triton")
    ap.add_argument("--linear-backend", default=None, help="auto | torch | onednn (CPU)")
    ap.add_argument("--torch-compile", choices=tuple(SWITCH), default="auto",
                    help="the decode graphs' forward through torch.compile (auto: where CUDA graphs are captured)")
    ap.add_argument("--overlap", choices=tuple(SWITCH), default="auto",
                    help="launch each step before the one before it is read back (auto: on CUDA, continuous)")
    ap.add_argument("--block-size", type=int, default=None)
    ap.add_argument("--kv-blocks", type=int, default=None, help="KV pool size in blocks (default: 1 GiB on CPU)")
    ap.add_argument("--kv-memory-gb", type=float, default=None)
    ap.add_argument("--max-model-len", type=int, default=None, help="default: the model's context length")
    ap.add_argument("--max-num-seqs", type=int, default=None)
    ap.add_argument("--max-num-batched-tokens", type=int, default=None)
    ap.add_argument("--no-chunked-prefill", action="store_true", help="admit whole prompts only")
    ap.add_argument("--static-batch-size", type=int, default=None)
    ap.add_argument("--static-max-wait", type=float, default=None, help="dynamic batching's max wait (s)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: torch's, one per core); 1 is steadier on a shared CPU")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every lane and peer N times in interleaved rounds and keep each one's best run "
                         "(steadier numbers on a shared CPU)")
    ap.add_argument("--warmup", type=int, default=2, help="warm-up requests per lane and peer (not measured)")
    ap.add_argument("--slo-ttft", type=float, default=None, help="goodput SLO on TTFT, seconds")
    ap.add_argument("--slo-tpot", type=float, default=None, help="goodput SLO on TPOT, seconds")
    ap.add_argument("--price-per-hour", type=float, default=None,
                    help="dollars per device hour, for the cost per million output tokens "
                         "(default: $INFLIGHT_PRICE_PER_HOUR or 2.00)")
    ap.add_argument("--json", default=None, help="write results as JSON")
    ap.add_argument("--csv", default=None, help="write results as CSV")
    ap.add_argument("--details", action="store_true", help="include per-request and per-step records in the JSON")
    ap.add_argument("--no-progress", action="store_true", help="no progress bars")
    return ap.parse_args(argv)


def build_workload(args):
    """The workload named by --workload, with the command-line overrides applied."""
    if args.workload in PRESETS:
        over = {"num_requests": args.num_requests, "seed": args.seed,
                "output_lengths": Lengths.parse(args.output_len) if args.output_len else None}
        if args.rates is None and args.burst:
            over["burst"] = args.burst
        if args.prompt_len:
            if args.prompt_len == "real":
                over["prompts"] = "real"
            else:
                over.update(prompts="synthetic", prompt_lengths=Lengths.parse(args.prompt_len), chat=False)
        return make_workload(preset(args.workload, args.scale, **over))
    if any(v is not None for v in (args.num_requests, args.output_len, args.prompt_len)):
        raise ValueError("--num-requests, --output-len and --prompt-len apply to presets, not to a replayed trace")
    return load_trace(args.workload)


# engine flag -> EngineConfig field
ENGINE_FLAGS = {"model": "model", "device": "device", "dtype": "dtype", "attention_backend": "attention_backend",
                "linear_backend": "linear_backend",
                "block_size": "block_size", "kv_blocks": "num_kv_blocks", "kv_memory_gb": "kv_cache_memory_gb",
                "max_model_len": "max_model_len", "max_num_seqs": "max_num_seqs",
                "max_num_batched_tokens": "max_num_batched_tokens", "static_batch_size": "static_batch_size",
                "static_max_wait": "static_max_wait_s", "slo_ttft": "slo_ttft_s", "slo_tpot": "slo_tpot_s"}


def base_engine_config(args) -> EngineConfig:
    """The engine flags given on the command line over EngineConfig's defaults."""
    kw = {field: getattr(args, flag) for flag, field in ENGINE_FLAGS.items() if getattr(args, flag) is not None}
    if args.no_chunked_prefill:
        kw["enable_chunked_prefill"] = False
    for flag in ("torch_compile", "overlap"):
        if SWITCH[getattr(args, flag)] is not None:
            kw[flag] = SWITCH[getattr(args, flag)]
    return EngineConfig(**kw)


def parse_remotes(specs: list[str], model: str, taken) -> dict[str, RemoteConfig]:
    """--remote values: NAME=URL, each a lane served by that server."""
    out: dict[str, RemoteConfig] = {}
    for spec in specs:
        name, sep, url = spec.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--remote must be NAME=URL, got {spec!r}")
        name = check_lane_name(name.strip())
        if name in out or name in taken:
            raise ValueError(f"lane {name!r} is given twice")
        out[name] = remote_config({"remote": url.strip(), "model": model})
    return out


def parse_lanes(specs: list[str], base: EngineConfig) -> dict[str, EngineConfig]:
    """--lanes values in order: JSON files (a path ending in .json) or 'name:key=value,...'."""
    lanes: dict[str, EngineConfig] = {}
    for spec in specs:
        more = load_lanes(spec, base) if spec.endswith(".json") else dict([parse_lane(spec, base)])
        twice = lanes.keys() & more.keys()
        if twice:
            raise ValueError(f"lane {sorted(twice)[0]!r} is given twice")
        lanes.update(more)
    return lanes


def lanes_line(lanes: dict[str, EngineConfig], base: EngineConfig) -> str:
    """Each lane and how it differs from the engine flags, e.g. 'lanes: a (base); b (block 128)'."""
    parts = [f"{name} ({', '.join(describe_difference(cfg, base)) or 'base'})" for name, cfg in lanes.items()]
    return "lanes: " + "; ".join(parts) if parts else ""


def parse_rates(text: str | None) -> list[float | None] | None:
    if text is None:
        return None
    try:
        rates = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--rates must be comma-separated numbers, got {text!r}") from None
    if not rates or any(r < 0 for r in rates):
        raise ValueError(f"--rates must be numbers >= 0, got {text!r}")
    return [r or None for r in rates]


def cpu_note(results: list[dict]) -> str:
    """The share of CPU other processes used during each run, with a warning when it was high."""
    parts, busy = [], False
    for r in results:
        pct = r["info"].get("other_cpu_pct")
        if pct is None:
            continue
        parts.append(r["lane"] + ("" if not r.get("rate") else f"@{r['rate']:g}") + f" {pct:.0f}%")
        busy = busy or pct > QUIET_PCT
    if not parts:
        return ""
    note = "CPU used by other processes during each run: " + ", ".join(parts)
    if busy:
        note += (f"\nwarning: other processes used more than {QUIET_PCT:g}% of the CPU during some runs; their "
                 "timings are inflated (try --repeat 3, or a quiet machine) before comparing")
    return note


class _Bars:
    """tqdm bars on stderr, one per (lane, rate) run."""

    def __init__(self, enabled: bool):
        self.enabled, self.bar, self.key = enabled, None, None

    def __call__(self, p: Progress) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm
        key = (p.strategy, p.rate)
        if p.stage in ("load", "warmup"):
            self.close()
            tqdm.write(f"[{p.strategy}] {p.stage}{': ' + p.message if p.message else ''}", file=sys.stderr)
            return
        if key != self.key or self.bar is None:
            self.close()
            desc = p.strategy + ("" if not p.rate else f" @{p.rate:g}/s")
            self.bar, self.key = tqdm(total=p.total, desc=desc, unit="req", file=sys.stderr, leave=True), key
        self.bar.n = p.done
        self.bar.refresh()
        if p.stage == "done":
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar, self.key = None, None


def main(argv=None) -> int:
    from .suite import plan_lanes, run_benchmark

    args = parse_args(argv)
    bars = _Bars(not args.no_progress)
    try:
        engine = base_engine_config(args)
        lanes = parse_lanes(args.lanes, engine)
        lanes = {**lanes, **parse_remotes(args.remote, args.remote_model or engine.model, lanes)}
        strategies = args.strategies if args.strategies is not None else "" if lanes else DEFAULT_STRATEGIES
        ours, _ = plan_lanes(strategies, lanes, engine)  # reject bad names before anything loads
        rates = parse_rates(args.rates)
        workload = build_workload(args)
        price = {} if args.price_per_hour is None else {"price_per_hour": args.price_per_hour}
        cfg = BenchConfig(engine=engine, warmup_requests=args.warmup, threads=args.threads,
                          slo_ttft_s=args.slo_ttft, slo_tpot_s=args.slo_tpot, **price)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cmd = "python -m engine.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        result = run_benchmark(workload, strategies, cfg, rates=rates, burst=args.burst, repeat=args.repeat,
                               progress=bars, extra_config={"command": cmd}, lanes=lanes)
    except ValueError as e:
        bars.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (Cancelled, KeyboardInterrupt):
        bars.close()
        print("cancelled", file=sys.stderr)
        return 130
    bars.close()
    add_ratios(result.results)
    w = result.config["workload"]
    print(f"\nmodel {engine.model} on {result.results[0]['info'].get('device', engine.device)}, workload "
          f"{w['name']}: {w['num_requests']} requests, prompts {w['prompt_tokens_mean']:.0f} tokens on average, "
          f"{w['output_tokens_total']} output tokens (mean {w['output_tokens_mean']:.0f}, "
          f"max {w['output_tokens_max']})")
    print(lanes_line(ours, engine))
    print(f"$/M out: dollars per million output tokens at ${cfg.price_per_hour:.2f} per device hour\n")
    print(format_table(result.results))
    print(cpu_note(result.results))
    if args.save_trace:
        from .suite import load_tokenizer
        from .workloads import materialize
        tok, ctx = load_tokenizer(engine)
        save_trace(materialize(workload, tok, ctx), args.save_trace)
    if args.json:
        write_json(result.to_dict(details=args.details), args.json)
    if args.csv:
        write_csv(result.results, args.csv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
