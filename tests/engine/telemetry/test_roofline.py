"""Roofline arithmetic on known configs, the device-peaks cache, and step events that carry it."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config

from engine import SamplingParams
from engine.telemetry import device_peaks as dp
from engine.event_hub import EventHub
from engine.events import DECODE, PADDING, PREFILL, StepEntry, StepMessage
from engine.telemetry.roofline import ModelCost, decode_compute_bound_batch, model_summary, step_roofline, step_work
from service_helpers import make_service
from engine.telemetry.roofline_window import RooflineWindow, model_lines
from repo_paths import ROOT

CONFIGS = ROOT / "assets" / "model_configs"


def smollm2(dtype=torch.bfloat16) -> ModelCost:
    cfg = json.loads((CONFIGS / "SmolLM2-135M-Instruct.json").read_text())
    return ModelCost.from_hf_config(LlamaConfig(**cfg), dtype)


def peaks(bytes_per_s=1e11, flops_per_s=1e13):
    return dp.DevicePeaks("test", "bf16", bytes_per_s, flops_per_s, "given", 0.0)


def test_smollm2_costs():
    c = smollm2()
    per_layer = 2 * 576 * 576 + 2 * 576 * 192 + 3 * 576 * 1536  # q, o; k, v (3 kv heads x 64); gated MLP
    assert c.linear_params == 30 * per_layer and c.lm_head_params == 49152 * 576
    assert c.linear_params + c.lm_head_params == 134_479_872  # 134.5M, less the norms
    assert c.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2 == 23_040  # bf16: 22.5 KiB per token
    assert c.weight_bytes == 134_479_872 * 2


def test_qwen2_kv_bytes_per_token_is_12_kib():
    cfg = json.loads((CONFIGS / "Qwen2.5-0.5B-Instruct.json").read_text())
    assert ModelCost.from_hf_config(Qwen2Config(**cfg), torch.bfloat16).kv_bytes_per_token == 12 * 1024


def test_step_work_counts_weights_once_and_kv_per_row():
    c = smollm2()
    decode = [StepEntry(r, DECODE, 1, 10) for r in range(4)]  # 4 rows, each now holding 10 tokens
    flops, moved = step_work(c, decode, num_sampled=4)
    assert flops == 2 * 4 * c.linear_params + 2 * 4 * c.lm_head_params + c.attention_flops(4 * 10)
    assert moved == c.weight_bytes + c.kv_bytes_per_token * (4 * 9 + 4)  # read 9 cached, write 1, per row
    one_flops, one_moved = step_work(c, decode[:1], num_sampled=1)
    assert flops / one_flops == pytest.approx(4, rel=1e-3) and moved / one_moved < 1.01  # 4x work, same bytes
    chunk = [StepEntry(9, PREFILL, 8, 8), StepEntry(9, PADDING, 2, 8)]  # a fresh 8-token chunk + 2 pad tokens
    flops, moved = step_work(c, chunk, num_sampled=1)
    keys = 36 + (2 * 6 + 3)  # causal 1+..+8; the padding sees 6 cached + 1, 2
    assert flops == 2 * 10 * c.linear_params + 2 * c.lm_head_params + c.attention_flops(keys)
    assert moved == c.weight_bytes + c.kv_bytes_per_token * (6 + 10)


def test_step_utilization_against_the_peaks():
    c = smollm2()
    ev = SimpleNamespace(entries=[StepEntry(1, DECODE, 1, 5)], sampled={1: 7}, t_start=1.0, t_end=1.01)
    r = step_roofline(c, ev, peaks())
    flops, moved = step_work(c, ev.entries, 1)
    assert r["flops"] == flops and r["bytes"] == moved and r["intensity"] == pytest.approx(flops / moved)
    assert r["mem_util"] == pytest.approx(moved / 0.01 / 1e11)
    assert r["compute_util"] == pytest.approx(flops / 0.01 / 1e13)
    assert (r["peak_bytes_per_s"], r["peak_flops_per_s"]) == (1e11, 1e13)  # the roof, for the live view
    assert "mem_util" not in step_roofline(c, ev)  # no peaks: no utilization


def test_decode_turns_compute_bound_at_the_ridge():
    c, ridge = smollm2(), 10.0
    for context in (0, 512):
        b = decode_compute_bound_batch(c, ridge, context)
        rows = [StepEntry(r, DECODE, 1, context + 1) for r in range(1000)]
        flops, moved = step_work(c, rows, 1000)
        per_row_flops, per_row_bytes = flops / 1000, (moved - c.weight_bytes) / 1000
        assert b * per_row_flops / (c.weight_bytes + b * per_row_bytes) == pytest.approx(ridge)
    assert decode_compute_bound_batch(c, ridge, 512) > decode_compute_bound_batch(c, ridge, 0)  # KV costs bytes
    # past ~26 FLOPs per byte (bf16, 512 tokens) each row's KV reads outgrow its FLOPs: never compute-bound
    assert decode_compute_bound_batch(c, 100.0, 512) is None
    s = model_summary(c, peaks())
    assert s["ridge_flops_per_byte"] == 100.0 and set(s["decode_compute_bound_batch"]) == {0, 512, 2048}


def test_peaks_measured_once_then_read_from_disk(tmp_path, monkeypatch):
    calls = []

    def fake_measure(device, dtype, linear):
        calls.append((device, linear))
        return peaks()

    monkeypatch.setattr(dp, "measure_peaks", fake_measure)
    monkeypatch.setattr(dp, "_MEMO", {})
    path = tmp_path / "peaks.json"
    first = dp.device_peaks("cpu", torch.float32, path)
    monkeypatch.setattr(dp, "_MEMO", {})  # a new process
    assert dp.device_peaks("cpu", torch.float32, path) == first and len(calls) == 1
    dp.device_peaks("cpu", torch.float32, path, linear="onednn")  # the engine's matmul: its own entry
    assert [linear for _, linear in calls] == ["torch", "onednn"]
    entry = json.loads(path.read_text())[f"{dp.device_name(torch.device('cpu'))} | torch.float32 | torch linear"]
    assert entry["method"] == "given" and entry["bytes_per_s"] == 1e11


@pytest.mark.parametrize("linear", ["torch", "onednn"])
def test_real_measurement_is_plausible(linear):
    if linear == "onednn" and not torch.backends.mkldnn.is_available():
        pytest.skip("PyTorch without oneDNN")
    p = dp.measure_peaks(torch.device("cpu"), torch.float32, linear)
    assert 1e8 < p.bytes_per_s < 1e13 and 1e8 < p.flops_per_s < 1e14 and "matmul" in p.method
    assert ("oneDNN" in p.method) == (linear == "onednn")


def test_step_events_carry_the_roofline(tiny_model_dirs):
    svc = make_service(tiny_model_dirs["llama"], strategies=("continuous",))
    try:
        cursor = svc.hub.head
        svc.submit("Hello there", SamplingParams(max_tokens=4, ignore_eos=True))[0].result(30)
        steps = [e for _, e in svc.hub.read(cursor).events if isinstance(e, StepMessage)]
        assert steps and all(s.roofline["flops"] > 0 and s.roofline["bytes"] > 0 for s in steps)
        wire = steps[-1].wire()
        assert 0 < wire["roofline"]["mem_util"] and 0 < wire["roofline"]["compute_util"]
        summary = svc.workers["continuous"].roofline.summary()
        assert summary["kv_bytes_per_token"] > 0 and summary["peaks"]["method"]
    finally:
        svc.stop()


def test_kv_page_panel_averages_recent_steps_per_lane():
    hub = EventHub()
    for util in (0.2, 0.4):
        hub.publish(StepMessage(lane="a", event=None, roofline={"mem_util": util, "compute_util": util / 10,
                                                                "intensity": 2.0, "bytes_per_s": 1e9,
                                                                "flops_per_s": 2e9}))
    hub.publish(StepMessage(lane="b", event=None, roofline=None))  # no roofline: not counted
    w = RooflineWindow()
    w.consume(hub)
    (row,) = w.table()
    assert row["lane"] == "a" and row["iterations"] == 2 and row["memory bandwidth used %"] == "30.0"
    assert row["compute used %"] == "3.0" and row["GFLOP/s"] == "2.0"
    hub.publish(StepMessage(lane="c", event=None, roofline={"intensity": 2.0, "bytes_per_s": 1e9, "flops_per_s": 2e9}))
    w.consume(hub)  # a device whose peaks were not measured: no share of them, said as '–', never 'None'
    assert w.table()[1]["memory bandwidth used %"] == "–" and w.table()[1]["FLOPs per byte"] == "2.0"
    summary = {**model_summary(smollm2(), peaks()), "peaks": {**peaks().__dict__}}
    assert "22.5 KiB per token" in model_lines(summary) and "100.0 FLOPs per byte" in model_lines(summary)


def test_report_command(tiny_llama_dir, monkeypatch):
    from engine.telemetry.roofline_report import report
    monkeypatch.setattr(dp, "device_peaks", lambda device, dtype, linear: peaks())
    lines = report(str(tiny_llama_dir), "cpu", "float32")
    assert "KiB per token" in lines[0] and "ridge 100.0 FLOPs per byte" in lines[1]
    assert "at 512 tokens of context" in lines[2]
