"""BenchConfig: what every strategy of one benchmark run shares (model, device, memory, limits)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..config import EngineConfig, default_device, default_model

OUR_STRATEGIES = ("continuous", "static", "dynamic")
PEER_STRATEGIES = ("hf-generate", "hf-cb")
ALL_STRATEGIES = OUR_STRATEGIES + PEER_STRATEGIES


@dataclass
class BenchConfig:
    """Knobs shared by all strategies. num_kv_blocks / kv_cache_memory_gb set the KV memory
    budget (None: the engine's default, 1 GiB on CPU); peers get the same number of slots.
    warmup_requests: requests run (and discarded) before the measured run. threads: torch CPU
    threads for every strategy (None: torch's default, one per core)."""
    model: str | None = None
    device: str | None = None
    dtype: str = "auto"
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory_gb: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    static_batch_size: int = 8
    static_max_wait_s: float = 0.5
    warmup_requests: int = 2
    threads: int | None = None
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None

    def __post_init__(self):
        if self.model is None:
            self.model = default_model()
        if self.device is None:
            self.device = default_device()
        if not isinstance(self.warmup_requests, int) or self.warmup_requests < 0:
            raise ValueError(f"warmup_requests must be an integer >= 0, got {self.warmup_requests!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise ValueError(f"threads must be None or an integer >= 1, got {self.threads!r}")
        self.engine_config("continuous")  # validates the shared fields now, not mid-benchmark

    def engine_config(self, strategy: str) -> EngineConfig:
        return EngineConfig(model=self.model, strategy=strategy, device=self.device, dtype=self.dtype,
                            block_size=self.block_size, num_kv_blocks=self.num_kv_blocks,
                            kv_cache_memory_gb=self.kv_cache_memory_gb,
                            max_model_len=self.max_model_len, max_num_seqs=self.max_num_seqs,
                            max_num_batched_tokens=self.max_num_batched_tokens,
                            static_batch_size=self.static_batch_size, static_max_wait_s=self.static_max_wait_s)

    def to_dict(self) -> dict:
        return asdict(self)
