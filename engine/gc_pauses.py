"""Python's full collections, kept short while engines serve.

A full (generation 2) collection walks every object the process tracks: in a process with an engine
loaded, torch, transformers and Streamlit that is about 470,000 objects and a quarter of a second, during
which every engine thread stands still. It comes whenever the objects that outlived younger
collections grow by a quarter (step events in the hub's ring, requests, text), so at a GPU's pace about
every few hundred steps: a lane that steps every 5 ms stalls for 50 of its steps. Objects that live as
long as the process (modules, weights, tokenizers, a loaded engine) are moved out of the collector's
sight once they exist (`gc.freeze`), as vLLM does after it loads; a full collection then walks only
what came after (`python -m engine.bench.gc_pauses`; docs/benchmark.md). Reference counting
still frees frozen objects; only cyclic garbage among them waits, for `collect_dropped`.
"""
from __future__ import annotations

import gc
import threading
from collections.abc import Callable


# One freeze or collection at a time: a lane's freeze between another's unfreeze and its collection would
# leave that lane's dropped engine frozen for good.
_LOCK = threading.Lock()


def freeze_long_lived() -> None:
    """Everything tracked now lives long: later collections skip it (call it once an engine is loaded).
    What is garbage already goes first (walking only what came since the last freeze), so that no cycle
    left by the loading holds the engine once it is dropped."""
    with _LOCK:
        gc.collect()
        gc.freeze()


def collect_dropped(dropped: Callable[[], object | None] | None = None) -> None:
    """Collect the cyclic garbage made since the last freeze, then freeze what lives on. dropped: a weak
    reference to an engine just let go. Reference counting frees an engine once nothing holds it, but the
    first one a process loads is also held by cycles its imports left (torch.fx keeps their frames), which
    were frozen with it: only then is everything unfrozen and walked (a quarter of a second), so that its
    memory goes back."""
    with _LOCK:
        gc.collect()  # (frozen objects are not walked: this costs what came since)
        if dropped is not None and dropped() is not None:
            gc.unfreeze()
            gc.collect()
        gc.freeze()
