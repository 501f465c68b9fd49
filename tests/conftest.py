"""Shared pytest fixtures: tiny random-weight models built once per session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Nothing in the test suite may touch the network / Hugging Face hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Exact greedy equality with the reference model is the fp32 oracle: engines (and the apps the tests
# start) run fp32 unless a test asks for another dtype; dtype "auto" is tested on its own
# (test_dtype_choice.py), and bf16 against its own tolerance (test_bf16_near_greedy.py).
os.environ.setdefault("INFLIGHT_DTYPE", "float32")

import pytest  # noqa: E402

# Make `import tiny_models` work regardless of pytest's rootdir/import mode.
_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

from tiny_models import FAMILIES, make_draft_model, make_tiny_model  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test (deselect with -m 'not slow')")


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> dict[str, Path]:
    """family -> directory of a saved tiny random model (llama, qwen2, qwen3, mistral, gpt2)."""
    root = tmp_path_factory.mktemp("tiny_models")
    return {family: make_tiny_model(family, root / family) for family in FAMILIES}


@pytest.fixture(scope="session")
def tiny_draft_dirs(tiny_model_dirs, tmp_path_factory) -> dict[str, Path]:
    """family -> a draft model for that family's tiny model (speculative = "draft"): its noisy copy."""
    root = tmp_path_factory.mktemp("tiny_drafts")
    return {family: make_draft_model(tiny_model_dirs[family], root / family) for family in FAMILIES}


@pytest.fixture(scope="session")
def tiny_llama_dir(tiny_model_dirs) -> Path:
    """Directory of the tiny llama model (SmolLM2-like: tied embeddings, GQA)."""
    return tiny_model_dirs["llama"]
