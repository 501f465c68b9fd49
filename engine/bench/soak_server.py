"""The server that `engine.bench.soak` drives: the app's routes over one EngineService, in its own
process (so its memory is measured alone), in room mode, with injected step faults.

    python -m engine.bench.soak_server --port P --token T [--model M] [--fault-rate 0.002]

Step faults exist only here and in tests: `EngineService.step_fault` is never set by the app.
"""
from __future__ import annotations

import argparse
import random
import threading

import uvicorn

from ..access import Access
from ..config import EngineConfig
from ..service import EngineService
from ..api.server import create_app

WS_MAX_BYTES = 2 * 1000 * 1000  # as Streamlit's server.maxMessageSize in .streamlit/config.toml


class StepFaults:
    """Raises in a step with probability `rate`: the engine must end the affected requests with
    finish_reason "error", free their blocks and keep serving."""

    def __init__(self, rate: float, seed: int = 0):
        self.rate, self.rng, self.count = rate, random.Random(seed), 0
        self._lock = threading.Lock()

    def __call__(self, lane: str) -> None:
        with self._lock:
            hit = self.rng.random() < self.rate
            self.count += hit
        if hit:
            raise RuntimeError(f"injected step fault #{self.count} on {lane}")


def build_service(model: str | None, token: str, api_key: str, fault_rate: float, device: str = "cpu",
                  **engine_fields) -> EngineService:
    cfg = EngineConfig(model=model, device=device, **engine_fields)
    svc = EngineService(cfg, strategies=("continuous", "static"),
                        access=Access(room=True, token=token, api_key=api_key))
    svc.wait_ready(900)
    svc.step_fault = StepFaults(fault_rate) if fault_rate > 0 else None
    return svc


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--api-key", default="soak-viewer-key")
    ap.add_argument("--model", default=None)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--fault-rate", type=float, default=0.002)
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--num-kv-blocks", type=int, default=None)
    args = ap.parse_args(argv)
    svc = build_service(args.model, args.token, args.api_key, args.fault_rate, args.device,
                        max_model_len=args.max_model_len, num_kv_blocks=args.num_kv_blocks)
    print("soak server ready", flush=True)
    try:
        uvicorn.run(create_app(svc), host="127.0.0.1", port=args.port, log_level="warning",
                    ws_max_size=WS_MAX_BYTES)
    finally:
        svc.stop()


if __name__ == "__main__":
    main()
