"""oneDNN's and ideep's primitive caches are bounded (engine/model/packed_linear.py): an engine that sees every
prompt length keeps no more memory once they are full."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine.harness.heap_watch import native_memory


_EVERY_LENGTH = """
import random, sys
from engine import EngineConfig, SamplingParams
from engine.harness.heap_watch import native_memory
from engine.llm_engine import LLMEngine
eng = LLMEngine(EngineConfig(model=sys.argv[1], device="cpu", dtype="float32", linear_backend="onednn",
                             num_kv_blocks=1024, max_model_len=512, max_num_batched_tokens=512))
rng, lengths = random.Random(0), list(range(1, 480))
random.Random(1).shuffle(lengths)
def serve(some):
    for n in some:
        eng.generate([[rng.randint(5, 200) for _ in range(n)]], SamplingParams(max_tokens=2, ignore_eos=True))
    return native_memory()["malloc_in_use_mb"]
print(serve(lengths[:60]), serve(lengths[60:]))
"""


def test_a_prompt_of_every_length_leaves_no_memory_behind(tiny_model_dirs):
    """oneDNN and ideep keep a primitive per input shape, 1,024 each by default (hundreds of MB over a long
    run that sees every prompt length): bounded at 128, memory in use stops growing once they are full. In a
    process of its own: the caches are per process."""
    if native_memory().get("malloc_in_use_mb") is None:
        pytest.skip("glibc's mallinfo2 is needed to count memory in use")
    env = {k: v for k, v in os.environ.items() if k not in ("LRU_CACHE_CAPACITY", "ONEDNN_PRIMITIVE_CACHE_CAPACITY")}
    run = subprocess.run([sys.executable, "-c", _EVERY_LENGTH, str(tiny_model_dirs["llama"])], capture_output=True,
                         text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    before, after = map(float, run.stdout.split()[-2:])
    assert after - before < 25, f"memory in use grew {after - before:.0f} MB over 419 new prompt lengths"
