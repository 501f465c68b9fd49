"""GPU utilization and memory from NVML, sampled in its own thread beside the engines.

Published to the EventHub as GpuEvent (engine.events).
On a machine without an NVIDIA GPU (or without nvidia-ml-py) nothing starts.
"""
from __future__ import annotations

import logging
import threading

from ..events import GpuEvent

log = logging.getLogger(__name__)


class GpuMonitor(threading.Thread):
    def __init__(self, nvml, hub, clock, device_index: int = 0, period_s: float = 0.5):
        super().__init__(daemon=True, name="inflight-nvml")
        self.nvml, self.hub, self.clock, self.period_s = nvml, hub, clock, period_s
        self.handle = nvml.nvmlDeviceGetHandleByIndex(device_index)
        self.halt = threading.Event()

    def sample(self) -> GpuEvent:
        util = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
        mem = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
        return GpuEvent(t=self.clock(), util_pct=util.gpu,
                        mem_used_mb=mem.used / 2**20, mem_total_mb=mem.total / 2**20)

    def run(self) -> None:
        while not self.halt.wait(self.period_s):
            try:
                self.hub.publish(self.sample())
            except Exception as e:  # noqa: BLE001 - a monitoring hiccup must not matter
                log.warning("NVML sample failed: %s", e)

    def stop(self) -> None:
        self.halt.set()


def start_gpu_monitor(hub, clock, device_index: int = 0, nvml=None) -> GpuMonitor | None:
    """Start sampling device `device_index`; None when NVML or the GPU is not there."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
        mon = GpuMonitor(nvml, hub, clock, device_index)
    except Exception as e:  # noqa: BLE001 - no driver, no library, no device: simply no GPU view
        log.info("no GPU monitoring: %s", e)
        return None
    mon.start()
    return mon
