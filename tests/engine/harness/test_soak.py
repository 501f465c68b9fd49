"""The chaos and soak harness, for about 12 s on a tiny model: nothing lost, no KV block leaked, every
fuzzed input answered without a 5xx and every fuzzed upload played or refused with its reason."""
from __future__ import annotations

import json

from engine.harness.soak import run_soak


def test_soak_loses_nothing_and_leaks_no_block(tiny_llama_dir, tmp_path):
    """A disaggregated lane among them: its two engines reset by step faults mid-flight and reconfigured;
    and a remote lane whose server misbehaves in every way in turn: each of its requests ends with an error."""
    r = run_soak(0.2, str(tiny_llama_dir), rate=4.0, fault_rate=0.01, num_kv_blocks=512, config_every_s=2.0,
                 log_path=str(tmp_path / "server.log"), fuzz_every_s=0.3, uploads_every_s=1.0, split_lane=True,
                 hostile_lane=True)
    assert r["lost"] == 0, (r["lost_how"], r["unfinished_on_server"])
    assert r["kv_blocks_leaked"] == 0 and r["in_flight_after"] == 0
    assert r["completed"] > 0 and r["server_requests"] > 0 and r["monitor_skipped_events"] == 0
    assert r["errored"] > 0, "no injected step fault reached a request"
    assert r["malformed_answered"] == r["malformed_sent"]
    assert r["controls_refused"] > 0 and r["configures"] >= 2  # (the second changes the block size)
    assert r["fuzz_sent"] > 20 and r["fuzz_answered"] == r["fuzz_sent"] and r["fuzz_5xx"] == 0, r["fuzz_5xx_how"]
    assert r["uploads"] > 3 and r["uploads_failed"] == 0 and r["uploads_refused"] > 0
    # bad-gauges answers politely ("fine"): a sixth of them; the rest cross a bound and end with an error
    assert r["hostile_requests"] > 5 and r["hostile_errors"] >= r["hostile_requests"] // 2


def test_the_server_reads_any_token_the_soak_draws():
    """secrets.token_urlsafe starts with "-" one time in 64: passed as a separate argument, the server's
    parser took it for a flag and the server exited with 2 (a full run failed so)."""
    from engine.harness.soak import server_args
    from engine.harness.soak_server import parser
    for token in ("-abc", "--x", "plain_token-"):
        args = parser().parse_args(server_args("-model-dir", 8000, token, 0.01, num_kv_blocks=512, split_lane=True,
                                               hostile_url=None, uploads_every=-1.5))
        assert (args.token, args.model, args.num_kv_blocks, args.split_lane, args.uploads_every) == \
            (token, "-model-dir", 512, True, -1.5)


def test_the_heap_report_tells_python_from_native_memory(tmp_path):
    """--heap-report: the Python heap and what grew since the baseline, beside the RSS and glibc's count of
    bytes in use, freed but kept, and mmapped; a native allocation shows in malloc's count, not Python's."""
    import ctypes
    import time
    import tracemalloc

    from engine.harness.heap_watch import HeapWatch, native_memory
    before = native_memory()
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    blocks = [libc.malloc(64 * 1024) for _ in range(400)]  # 25 MiB below the mmap threshold, outside Python
    for b in blocks:
        ctypes.memset(b, 1, 64 * 1024)
    after = native_memory()
    assert after["malloc_in_use_mb"] - before["malloc_in_use_mb"] >= 24
    for b in blocks:
        libc.free(ctypes.c_void_p(b))
    watch = HeapWatch(str(tmp_path / "heap.json"), every_s=0.2, baseline_after_s=0.1)
    watch.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "heap.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    watch.halt.set()
    watch.join(5)
    (s,) = json.loads((tmp_path / "heap.json").read_text())["samples"][:1]
    assert s["python_mb"] >= 0 and s["rss_mb"] > s["malloc_in_use_mb"] > 0 and s["malloc_mmapped_mb"] >= 0
    assert not tracemalloc.is_tracing()  # halted, it stopped tracing
