"""Which Triton kernel variants this process compiled, counted per thread.

Triton's JIT compiles a kernel once per variant (its constexprs, launch options and what it specialises
the other arguments on) and keeps it in a cache; a launch that misses the cache compiles there and then,
in the launching thread. On an H100 those misses fell inside a first measured run (TTFT p50 3.86 s against
0.20 s warm), so the engine warms up (engine/model/warmup.py) and counts the misses after it.

On a GPU the JIT reports each miss through its post-compile hook. Under TRITON_INTERPRET=1 nothing is
compiled, so each launch of our kernels is keyed with the JIT's own binder (the function a GPU launch
calls to build its cache key): the CPU tests count the misses a GPU would have.
"""
from __future__ import annotations

import threading
import time

_lock = threading.Lock()
_local = threading.local()
_variants: dict[tuple, float] = {}  # (kernel name, cache key) -> when first met (time.monotonic)
_tracked: list = []  # the kernels whose compiles are counted


def compiled_in_this_thread() -> int:
    """JIT cache misses this thread has met so far (an engine steps in one thread: the difference of two
    readings is what its steps compiled)."""
    return getattr(_local, "misses", 0)


def variants() -> list[str]:
    """The kernel variants this process compiled, by kernel name, in order."""
    with _lock:
        return [name for name, _ in _variants]


def _met(name: str, key) -> None:
    with _lock:
        if (name, key) in _variants:
            return
        _variants[name, key] = time.monotonic()
    _local.misses = compiled_in_this_thread() + 1


def _on_compile(*, key, fn, **_):
    _met(fn.name, key)


def _keyed_launches(kernel):
    """A pre-run hook that keys each interpreted launch as the JIT would."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import JITFunction, create_function_from_signature
    jit = JITFunction(kernel.fn, do_not_specialize=kernel.kwargs.get("do_not_specialize"))
    binder = create_function_from_signature(jit.signature, jit.params, BaseBackend)

    def keyed(*args, **kwargs):
        _, specialization, options = binder(*args, **kwargs)
        _met(kernel.fn.__name__, (tuple(specialization), tuple(sorted(options.items()))))
    return keyed


def track(*kernels) -> None:
    """Count the compiles of these kernels (call once, where they are defined)."""
    import triton
    _tracked.extend(kernels)
    if type(kernels[0]).__name__ == "InterpretedFunction":
        for kernel in kernels:
            kernel.add_pre_run_hook(_keyed_launches(kernel))
        return
    names = {k.fn.__name__ for k in kernels}
    chained = triton.knobs.runtime.jit_post_compile_hook

    def hook(**kw):
        if kw["fn"].name in names:
            _on_compile(**kw)
        return chained(**kw) if chained else None
    triton.knobs.runtime.jit_post_compile_hook = hook


def forget() -> None:
    """Forget every variant met, as a process that compiled nothing yet (tests): on a GPU the JIT's own
    caches of our kernels go too, so their next launches miss (and load from Triton's disk cache)."""
    with _lock:
        _variants.clear()
        for kernel in _tracked:
            if hasattr(kernel, "device_caches"):
                kernel.device_caches.clear()
