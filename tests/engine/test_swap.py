"""Swap preemption (preemption_mode="swap"): a preempted request's KV blocks go to a host pool and come
back when it resumes, instead of being recomputed. Greedy outputs equal generate()'s, no device or host
block is lost, a full host pool falls back to recompute (said in the reason), and an abort frees the
host blocks of a swapped-out request."""
from __future__ import annotations

import pytest
import torch

from engine.kv import KVPool
from engine.kv.pool import KVShape, kv_bytes_per_token, kv_shape
from engine.kv.block_mover import BlockMover
from engine.kv.transfer import HANDOFF, SWAP_IN, SWAP_OUT, BlockMove, copy_blocks
from engine.request import RequestStatus
from engine.scheduler import waits
from engine_helpers import check_host_pool, greedy, make_engine, mixed_prompts, run_checked
from scheduler_helpers import TOKEN, request, rows, scheduler, step
from tiny_models import FAMILIES, reference_greedy


def three_requests(num_host_blocks: int):
    """Three requests of 2 prompt tokens in 4 blocks of 2: the first decode step preempts the newest."""
    s = scheduler(num_blocks=4, block_size=2, max_num_batched_tokens=64, preemption_mode="swap",
                  num_host_blocks=num_host_blocks)
    for rid, max_tokens in enumerate((2, 5, 5)):
        s.add(request(rid, prompt_len=2, max_tokens=max_tokens))
    step(s)
    return s


def test_a_swapped_request_resumes_where_it_was_without_recomputing():
    s = three_requests(num_host_blocks=8)
    table = list(s.cache.block_tables[2])
    out = step(s)
    assert out.preempted == [2] and [(m.direction, m.request_id, m.src) for m in out.moves] == [
        (SWAP_OUT, 2, table)]
    victim = s.waiting[0]
    assert (victim.status, victim.num_computed_tokens, victim.num_preemptions) == (RequestStatus.WAITING, 2, 1)
    assert s.cache.host_tables[2] == out.moves[0].dst and 2 not in s.cache.block_tables
    assert out.waits[2]["kv"] == waits.SWAPPED and waits.SWAPPED in waits.say(out.waits[2])
    # request 0 finished: request 2 comes back into device blocks and decodes its next token at once
    out = step(s)
    assert rows(out) == [(1, "decode", 1, 0), (2, "decode", 1, 0)]
    back = out.moves[0]
    assert (back.direction, back.request_id, back.src) == (SWAP_IN, 2, table and back.src)
    assert back.dst == s.cache.block_tables[2][:len(back.dst)] and not s.cache.host_tables
    assert s.recomputed_tokens == 0 and victim.output_token_ids == [TOKEN, TOKEN]
    check_host_pool(s.cache)


def test_a_full_host_pool_falls_back_to_recompute_and_says_so():
    # blocks of 1 token: three prompts of 2 take 6 of 8 blocks; their decodes need 3 more, so the newest
    # goes, and its 2 blocks do not fit a host pool of 1
    s = scheduler(num_blocks=8, block_size=1, max_num_batched_tokens=64, preemption_mode="swap", num_host_blocks=1)
    for rid, max_tokens in enumerate((2, 5, 5)):
        s.add(request(rid, prompt_len=2, max_tokens=max_tokens))
    step(s)
    out = step(s)
    assert out.preempted == [2] and not out.moves
    assert out.waits[2]["kv"] == waits.DROPPED_HOST_FULL and s.waiting[0].num_computed_tokens == 0
    while s.has_work():
        step(s)
    assert s.recomputed_tokens >= 2  # its prompt at least, computed twice
    check_host_pool(s.cache)
    assert not s.cache.host_tables and s.cache.host.num_free == 1


def test_recompute_mode_says_the_kv_was_dropped():
    s = scheduler(num_blocks=4, block_size=2, max_num_batched_tokens=64)
    for rid, max_tokens in enumerate((2, 5, 5)):
        s.add(request(rid, prompt_len=2, max_tokens=max_tokens))
    step(s)
    out = step(s)
    assert out.waits[2]["kv"] == waits.DROPPED and not out.moves


def test_aborting_a_swapped_out_request_frees_its_host_blocks():
    s = three_requests(num_host_blocks=8)
    step(s)
    victim = s.waiting[0]
    assert s.cache.host_tables[2]
    s.finish(victim, "abort", 0.0)
    assert not s.cache.host_tables and s.cache.host.num_free == 8 and not s.waiting
    check_host_pool(s.cache)


def test_copy_blocks_moves_every_layers_k_and_v_and_counts_the_bytes():
    shape = KVShape(num_layers=2, kv_heads=2, head_dim=4)
    dev, host = (KVPool(shape, 6, 3, torch.float32, torch.device("cpu")) for _ in range(2))
    for t in dev.k + dev.v:
        t.copy_(torch.randn(t.shape))
    nbytes = copy_blocks([(dev, host)], [4, 1], [0, 5])
    assert nbytes == 2 * 2 * 2 * (3 * 2 * 4) * 4  # blocks x (K, V) x layers x values per block x bytes
    for a, b in zip(dev.k + dev.v, host.k + host.v):
        assert torch.equal(b[0], a[4]) and torch.equal(b[5], a[1]) and not b[1:5].any()


def test_block_mover_runs_moves_in_order_and_counts_each_direction():
    """A step's moves run in the scheduler's order (a block one frees may be the next one's destination);
    a hand-off copies out of the prefill half's pools; each direction's totals add up."""
    shape = KVShape(num_layers=1, kv_heads=1, head_dim=2)
    dev, host, sender = (KVPool(shape, 4, 2, torch.float32, torch.device("cpu")) for _ in range(3))
    for pool, base in ((dev, 0), (sender, 100)):
        for t in pool.k + pool.v:
            t.copy_(base + torch.arange(t.numel(), dtype=torch.float32).view(t.shape))
    mover = BlockMover([dev], [host])
    mover.senders = [sender]
    first = dev.k[0][2].clone()
    swapped, handoffs = mover.run([BlockMove(SWAP_OUT, 1, [2], [3]), BlockMove(HANDOFF, 2, [0], [2]),
                                   BlockMove(SWAP_IN, 3, [3], [1])])
    block = 2 * 2 * 2 * 4  # K and V x tokens x values x bytes
    assert torch.equal(host.k[0][3], first) and torch.equal(dev.k[0][1], first)  # out, then back in elsewhere
    assert torch.equal(dev.k[0][2], sender.k[0][0])  # the freed block took the hand-off
    assert (swapped.blocks, swapped.bytes) == (2, 2 * block)
    assert [h[:3] for h in handoffs] == [[2, 1, block]]
    assert {d: (t.blocks, t.bytes) for d, t in mover.moved.items()} == {
        SWAP_OUT: (1, block), SWAP_IN: (1, block), HANDOFF: (1, block)}
    assert mover.num_host_blocks == 4 and BlockMover([dev], []).num_host_blocks == 0


def block_bytes(model_dir, block_size: int = 4) -> int:
    """One KV block's bytes at fp32 (make_engine's block size)."""
    from transformers import AutoConfig
    return kv_bytes_per_token(kv_shape(AutoConfig.from_pretrained(model_dir)), torch.float32) * block_size


@pytest.mark.parametrize("family, setting", [(f, "swap") for f in FAMILIES] + [
    (f, s) for f in ("llama", "qwen3") for s in ("tiny host pool", "prefix cache", "ngram drafts", "draft model")])
def test_greedy_with_swap_matches_generate(tiny_model_dirs, family, setting):
    """A tight pool that preempts often: outputs equal generate()'s when the KV goes to the host pool and
    back (with a host pool of 2 blocks, some preemptions fall back to recompute). With the model as its
    own draft model, every draft is accepted: the draft model's pool went to the host and back too."""
    prompts, max_tokens = mixed_prompts(10)
    max_tokens = [m + 10 for m in max_tokens]
    kw = {"swap": {}, "tiny host pool": {"swap_space_gb": 2 * block_bytes(tiny_model_dirs[family]) / 2 ** 30},
          "prefix cache": {"enable_prefix_caching": True}, "ngram drafts": {"speculative": "ngram"},
          "draft model": {"speculative": "draft", "speculative_model": str(tiny_model_dirs[family])}}[setting]
    eng = make_engine(tiny_model_dirs[family], num_kv_blocks=20, max_model_len=64, max_num_batched_tokens=12,
                      preemption_mode="swap", **kw)
    outs, events = run_checked(eng, prompts, [greedy(m) for m in max_tokens])
    assert [o.output_token_ids for o in outs] == reference_greedy(tiny_model_dirs[family], prompts, max_tokens)
    preempted = [w for ev in events for rid in ev.preempted for w in [ev.waits[rid]]]
    assert preempted and eng.mover.moved[SWAP_OUT].blocks == eng.mover.moved[SWAP_IN].blocks > 0
    if setting == "draft model":
        entries = [e for ev in events for e in ev.entries if e.drafted]
        assert entries and all(e.accepted == e.drafted for e in entries)
    if setting == "tiny host pool":
        assert {w["kv"] for w in preempted} == {waits.SWAPPED, waits.DROPPED_HOST_FULL}
        assert eng.scheduler.recomputed_tokens > 0
    else:
        assert {w["kv"] for w in preempted} == {waits.SWAPPED} and eng.scheduler.recomputed_tokens == 0


@pytest.mark.parametrize("bad, field", [({"preemption_mode": "spill"}, "preemption_mode"),
                                        ({"swap_space_gb": 0}, "swap_space_gb"),
                                        ({"swap_space_gb": True}, "swap_space_gb"),
                                        ({"swap_space_gb": 1e9}, "swap_space_gb")])
def test_bad_settings_name_the_field(bad, field):
    from engine.config import EngineConfig
    with pytest.raises(ValueError, match=f"EngineConfig.{field} must be"):
        EngineConfig(model="m", **bad)


def test_step_events_carry_the_swaps_and_the_host_pool(tiny_model_dirs):
    """The wire form: each step's copies as [request id, "out" | "in", blocks], their bytes and seconds, and
    the host pool's tables; it passes the contract's check (recordings keep it); a lane without a host
    pool sends none of it."""
    from engine.events import StepMessage
    from engine.events_check import check_event
    prompts, max_tokens = mixed_prompts(10)
    eng = make_engine(tiny_model_dirs["llama"], num_kv_blocks=20, max_model_len=64, max_num_batched_tokens=12,
                      preemption_mode="swap", swap_space_gb=64 * block_bytes(tiny_model_dirs["llama"]) / 2 ** 30)
    _, events = run_checked(eng, prompts, [greedy(m + 10) for m in max_tokens])
    wires = [StepMessage(event=ev, lane="swap").to_dict(key=True) for ev in events]  # (with the tables whole)
    for ev, w in zip(events, wires):
        check_event(w)
        check_event(StepMessage(event=ev, lane="swap").to_dict())  # (as sent: the KV changes only)
        assert w["host"]["num_blocks"] == 64 and w["host"]["same_ram"] is True  # a CPU device
    swaps = [s for w in wires for s in w["swaps"]]
    assert {d for _, d, _ in swaps} == {SWAP_OUT, SWAP_IN}
    assert sum(n for _, _, n in swaps) == eng.mover.moved[SWAP_OUT].blocks + eng.mover.moved[SWAP_IN].blocks
    assert sum(w["swap_bytes"] for w in wires) == eng.mover.moved[SWAP_OUT].bytes + eng.mover.moved[SWAP_IN].bytes
    out_step = next(w for w in wires if any(d == SWAP_OUT for _, d, _ in w["swaps"]))
    rid = next(r for r, d, _ in out_step["swaps"] if d == SWAP_OUT)
    assert str(rid) in out_step["host"]["block_tables"] and str(rid) not in out_step["kv"]["block_tables"]
    with pytest.raises(ValueError, match="swaps"):
        check_event({**wires[0], "swaps": [[1, "sideways", 2]]})
    plain = make_engine(tiny_model_dirs["llama"])
    plain.add_request([5, 6, 7], greedy(2))
    assert not {"swaps", "swap_bytes", "host"} & plain.step().to_dict().keys()
