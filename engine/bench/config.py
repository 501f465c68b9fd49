"""BenchConfig: the engine configuration every lane starts from, plus the benchmark's own knobs."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..config import STRATEGIES, EngineConfig
from ..telemetry.cost import check_price, default_price_per_hour

OUR_STRATEGIES = STRATEGIES
PEER_STRATEGIES = ("hf-generate", "hf-cb")
ALL_STRATEGIES = OUR_STRATEGIES + PEER_STRATEGIES
# an auto|on|off command-line switch -> its EngineConfig value (cuda_graphs, torch_compile)
SWITCH = {"auto": None, "on": True, "off": False}


@dataclass
class BenchConfig:
    """engine: the base engine configuration. Lanes are variations of it; the peers take its model,
    device, dtype, block size, limits and KV memory budget (hf-cb gets as many KV slots as our first
    lane). warmup_requests: requests run (and discarded) before each measured run. threads: torch CPU
    threads for every lane and peer (None: torch's default, one per core). price_per_hour: dollars per
    device hour, for each result's cost per million output tokens (engine/telemetry/cost.py)."""
    engine: EngineConfig = field(default_factory=EngineConfig)
    warmup_requests: int = 2
    threads: int | None = None
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    price_per_hour: float = field(default_factory=default_price_per_hour)

    def __post_init__(self):
        if not isinstance(self.engine, EngineConfig):
            raise ValueError(f"engine must be an EngineConfig, got {type(self.engine).__name__}")
        if not isinstance(self.warmup_requests, int) or self.warmup_requests < 0:
            raise ValueError(f"warmup_requests must be an integer >= 0, got {self.warmup_requests!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be None or an integer >= 1, got {self.threads!r}")
        self.price_per_hour = check_price(self.price_per_hour)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BenchConfig:
        return cls(**{**d, "engine": EngineConfig(**d["engine"])})
