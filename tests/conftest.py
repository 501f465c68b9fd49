"""Shared pytest fixtures (tiny random-weight models built once per session) and the test tiers: each test is
marked by what it needs, read from its module (TIERS), and a test that needs none of it is `fast`."""

from __future__ import annotations

import os
import re
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

# Make `import tiny_models` work regardless of pytest's rootdir/import mode. Appended, not put first:
# tests/engine/ (the engine's tests, no __init__.py) must never shadow the engine package itself.
_TESTS_DIR = str(Path(__file__).resolve().parent)
if _TESTS_DIR not in sys.path:
    sys.path.append(_TESTS_DIR)

from tiny_models import FAMILIES, make_draft_model, make_tiny_model  # noqa: E402


# marker -> what in a test module's source says its tests need it (default_model is marked by hand)
TIERS = {
    "browser": r"playwright|live_replay|browser_helpers",
    "app": r"running_app\(|app_fixture\(|serve\(create_app|AppTest|uvicorn",
    "service": r"make_service\(|service_fixture\(|EngineService\(|get_service\(",
    "soak": r"harness\.soak|harness import soak|hostile_remote|harness\.fuzz|harness import fuzz|heap_watch",
    "kernels": r"TRITON_INTERPRET",
}
NEEDS = {**{k: f"needs {k}" for k in TIERS}, "browser": "drives Chromium (Playwright)",
         "app": "runs the Streamlit pages or a real HTTP / socket server",
         "service": "runs an EngineService (engine threads) on a tiny model",
         "soak": "the soak harness, a hostile server or the fuzzer",
         "kernels": "runs the Triton kernels (in the interpreter on a CPU: slow)",
         "default_model": "loads the real default model (SmolLM2-135M-Instruct)"}


def pytest_configure(config):
    import gc
    gc.freeze()  # the imports so far (torch, transformers, ...) live as long as the run: collections skip them
    import tiers
    tiers.FAST = config.option.markexpr.strip() == "fast"  # property tests draw fewer examples (tiers.py)
    for name, what in NEEDS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    config.addinivalue_line("markers", "fast: needs none of the above (pytest -m fast: the inner loop)")


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """pytest's own loop over the tests, run with room on CPython's frame stack (tests/roomy_stack.py)."""
    from roomy_stack import run_roomy
    pm = session.config.pluginmanager
    # pytest's own loop alone: not this hook again, nor the wrappers already around this call
    skip = [i.plugin for i in pm.hook.pytest_runtestloop.get_hookimpls()
            if i.function is pytest_runtestloop or i.wrapper or i.hookwrapper]
    loop = pm.subset_hook_caller("pytest_runtestloop", skip)
    return run_roomy(lambda: loop(session=session))


def pytest_collection_modifyitems(config, items):
    needs: dict[str, set[str]] = {}
    for item in items:
        path = str(item.path)
        if path not in needs:
            text = item.path.read_text(encoding="utf-8")
            needs[path] = {name for name, pattern in TIERS.items() if re.search(pattern, text)}
        for name in needs[path]:
            item.add_marker(name)
        if not any(item.get_closest_marker(name) for name in NEEDS):
            item.add_marker("fast")


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
