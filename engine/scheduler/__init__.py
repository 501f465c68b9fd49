from ..config import EngineConfig
from .base import ScheduledRow, Scheduler, SchedulerOutput
from .continuous import ContinuousScheduler
from .static import StaticScheduler


def make_scheduler(cfg: EngineConfig, cache, clock) -> Scheduler:
    if cfg.strategy == "continuous":
        return ContinuousScheduler(cfg, cache, clock)
    return StaticScheduler(cfg, cache, clock, dynamic=cfg.strategy == "dynamic")


__all__ = ["ScheduledRow", "Scheduler", "SchedulerOutput", "ContinuousScheduler", "StaticScheduler",
           "make_scheduler"]
