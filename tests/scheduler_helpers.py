"""Factories for scheduler tests that need no model: requests, a fake clock, a fake runner."""
from __future__ import annotations

from engine.config import EngineConfig
from engine.kv import KVCacheManager
from engine.request import Request, SamplingParams
from engine.scheduler import Scheduler, SchedulerOutput, make_scheduler

TOKEN = 7  # what the fake runner samples


class FakeClock:
    def __init__(self, t: float = 0.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def request(rid: int, prompt_len: int, max_tokens: int = 4, arrival_s: float = 0.0, priority: int = 0,
            tenant: str | None = None) -> Request:
    return Request(rid, list(range(3, 3 + prompt_len)), SamplingParams(max_tokens=max_tokens, ignore_eos=True),
                   arrival_s, priority=priority, tenant=tenant)


def scheduler(strategy: str = "continuous", num_blocks: int = 64, block_size: int = 4, clock=None,
              num_host_blocks: int = 0, **cfg) -> Scheduler:
    """num_host_blocks: the host pool of swap preemption (preemption_mode="swap")."""
    config = EngineConfig(model="no-model", device="cpu", strategy=strategy, block_size=block_size, **cfg)
    cache = KVCacheManager(num_blocks, block_size, prefix_caching=config.enable_prefix_caching,
                           num_host_blocks=num_host_blocks)
    return make_scheduler(config, cache, clock or FakeClock())


def step(sched: Scheduler, now: float = 0.0) -> SchedulerOutput:
    """One iteration as the engine runs it, with a fake runner: every sampled position gets TOKEN, and a
    request ends (length) once it has max_tokens."""
    out = sched.schedule()
    run_fake(sched, out, now)
    return out


def run_fake(sched: Scheduler, out: SchedulerOutput, now: float = 0.0) -> None:
    """The fake runner's half of a step: TOKEN at every sampled position, ends at max_tokens."""
    for req, _ in sched.update(out, [TOKEN] * sum(row.num_samples for row in out.rows), now):
        if len(req.output_token_ids) >= req.params.max_tokens and not req.is_finished:
            sched.finish(req, "length", now)
    sched.on_step_done()


def rows(out: SchedulerOutput) -> list[tuple]:
    """(request id, phase, real tokens, pad tokens) per scheduled row."""
    return [(r.request.request_id, r.phase, r.num_new, r.num_pad) for r in out.rows]
