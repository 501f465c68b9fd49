"""NVML sampling publishes GPU events; without a GPU nothing starts and nothing fails."""
from __future__ import annotations

import time
from types import SimpleNamespace

from engine.event_hub import EventHub
from engine.events import GpuEvent
from engine.telemetry.gpu_monitor import start_gpu_monitor


class FakeNvml:
    def nvmlInit(self):
        pass

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=73)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=40 * 2**30, total=80 * 2**30)


class NoDriver(FakeNvml):
    def nvmlInit(self):
        raise OSError("NVML Shared Library Not Found")


def test_samples_are_published():
    hub = EventHub()
    mon = start_gpu_monitor(hub, time.perf_counter, nvml=FakeNvml())
    mon.period_s = 0.01
    try:
        batch = hub.read(0, timeout=5)
    finally:
        mon.stop()
    ev = batch.events[0][1]
    assert isinstance(ev, GpuEvent) and ev.util_pct == 73 and ev.mem_total_mb == 80 * 1024


def test_no_gpu_no_monitor():
    assert start_gpu_monitor(EventHub(), time.perf_counter, nvml=NoDriver()) is None
