"""run_benchmark(): every requested strategy on the same workload (and arrival rates), in one call.

Callable from a UI thread: `progress(Progress)` is called as requests finish, and the
`cancel` flag (a threading.Event or a callable) stops the run within about one step,
raising `Cancelled`. Our strategies run first so the peers are given the exact KV pool
size our engine chose; results come back in the requested order.
"""
from __future__ import annotations

import platform
import time
from dataclasses import dataclass, field

from .config import ALL_STRATEGIES, OUR_STRATEGIES, BenchConfig
from .control import check_cancel
from .metrics import summarize
from .records import StrategyRun
from .workloads import Workload, materialize


@dataclass
class BenchmarkResult:
    config: dict
    results: list[dict]                       # one summary per (rate, strategy), see metrics.summarize
    runs: list[StrategyRun] = field(default_factory=list)

    def to_dict(self, details: bool = False) -> dict:
        d = {"config": self.config, "results": self.results}
        if details:
            d["runs"] = [{"strategy": r.strategy, "rate": r.info.get("rate"),
                          "requests": [q.to_dict(r.t0) for q in r.requests],
                          "steps": [{**s.__dict__, "t_start": s.t_start - r.t0, "t_end": s.t_end - r.t0}
                                    for s in r.steps]} for r in self.runs]
        return d


def parse_strategies(text: str | list[str]) -> list[str]:
    names = [s.strip() for s in (text.split(",") if isinstance(text, str) else text) if s.strip()]
    bad = [s for s in names if s not in ALL_STRATEGIES]
    if bad or not names:
        raise ValueError(f"unknown strategy {', '.join(bad) or '(none given)'}; "
                         f"choose from {', '.join(ALL_STRATEGIES)}")
    return list(dict.fromkeys(names))


def load_tokenizer(cfg: BenchConfig):
    """The model's tokenizer and context length, without loading the weights."""
    from transformers import AutoConfig, AutoTokenizer

    from ..model.loader import resolve_model_dir

    model_dir = resolve_model_dir(cfg.model)
    hf_cfg = AutoConfig.from_pretrained(model_dir)
    ctx = getattr(hf_cfg, "max_position_embeddings", None) or getattr(hf_cfg, "n_positions", None)
    return AutoTokenizer.from_pretrained(model_dir), ctx


def run_benchmark(workload: Workload, strategies: str | list[str], cfg: BenchConfig | None = None,
                  rates: list[float | None] | None = None, burst: int | None = None, repeat: int = 1,
                  progress=None, cancel=None, extra_config: dict | None = None) -> BenchmarkResult:
    """Run each strategy on the workload (or on one copy per arrival rate in `rates`;
    None/0 in it means offline). Returns summaries (and raw runs) in requested order.

    repeat > 1 runs every strategy that many times, in interleaved rounds (all strategies,
    then all again), and keeps each strategy's run with the highest output tokens/s: on a
    shared machine other processes only ever slow a run down, so the best of several is the
    least disturbed. Every repeat's throughput is kept in the result's info["repeats"]."""
    import torch

    cfg = cfg or BenchConfig()
    strategies = parse_strategies(strategies)
    if not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be an integer >= 1, got {repeat!r}")
    tokenizer, ctx = load_tokenizer(cfg)
    mat = materialize(workload, tokenizer, min(ctx, cfg.max_model_len or ctx) if ctx else cfg.max_model_len)
    burst = burst or workload.params.get("burst", 1) or 1
    workloads = [mat] if not rates else [mat.with_rate(r or None, burst) for r in rates]
    started = time.time()

    rounds: list[dict[str, list[StrategyRun]]] = []
    threads_before = torch.get_num_threads()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    try:
        kv_blocks = None
        for _ in range(repeat):
            rounds.append(_one_round(workloads, strategies, cfg, progress, cancel, kv_blocks))
            kv_blocks = rounds[0].get("_kv_blocks")
        host = host_info()
    finally:
        torch.set_num_threads(threads_before)

    results, ordered = [], []
    for i, w in enumerate(workloads):
        for name in strategies:
            tries = [(summarize(rnd[name][i], cfg.slo_ttft_s, cfg.slo_tpot_s), rnd[name][i]) for rnd in rounds]
            summary, run = max(tries, key=lambda t: t[0]["output_tokens_per_s"] or 0.0)
            if repeat > 1:
                run.info["repeats"] = [{"output_tokens_per_s": s["output_tokens_per_s"], "ttft_p50_s": s["ttft_p50_s"],
                                        "other_cpu_pct": r.info.get("other_cpu_pct")} for s, r in tries]
            summary["rate"] = w.params.get("rate")
            summary["workload"] = w.name
            summary["info"] = run.info
            results.append(summary)
            ordered.append(run)
    config = {"model": cfg.model, "strategies": strategies, "rates": rates, "repeat": repeat,
              "bench": cfg.to_dict(), "workload": mat.summary(), "started_unix": started,
              "wall_s": time.time() - started, "host": host, **(extra_config or {})}
    return BenchmarkResult(config, results, ordered)


def _one_round(workloads, strategies, cfg, progress, cancel, kv_blocks) -> dict:
    """Every strategy once on every workload. Ours run first, so the peers get our KV pool size."""
    from .peers import run_hf_cb, run_hf_generate
    from .runner import run_engine

    runs: dict = {}
    for name in sorted(strategies, key=lambda s: (s not in OUR_STRATEGIES, strategies.index(s))):
        check_cancel(cancel)
        if name in OUR_STRATEGIES:
            runs[name] = run_engine(workloads, name, cfg, progress, cancel)
            kv_blocks = kv_blocks or runs[name][0].info.get("kv_blocks")
        elif name == "hf-generate":
            runs[name] = run_hf_generate(workloads, cfg, progress, cancel)
        else:
            runs[name] = run_hf_cb(workloads, cfg, kv_blocks, progress, cancel)
    runs["_kv_blocks"] = kv_blocks
    return runs


def host_info() -> dict:
    import os

    import torch
    import transformers
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "transformers": transformers.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
