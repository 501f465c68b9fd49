"""Inflight's engine: continuous batching over a paged KV cache on Hugging Face models."""
from .config import DEFAULT_MODEL, EngineConfig
from .events import StepEntry, StepEvent
from .llm_engine import LLMEngine
from .request import RequestOutput, RequestStatus, SamplingParams

__all__ = ["DEFAULT_MODEL", "EngineConfig", "LLMEngine", "RequestOutput", "RequestStatus", "SamplingParams",
           "StepEntry", "StepEvent"]
