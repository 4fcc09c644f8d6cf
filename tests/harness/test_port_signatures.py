"""Port-check's arithmetic: policies resolved against a trace, each policy's padding and masks, exact shape-stability
counts (compiles, recompiles, warm-up, shapes nobody tested), sampling and interpolation, the Pareto front and the
recommendation rule. No compilation here: these are the numbers the report must get exactly right."""

from __future__ import annotations

import pytest
import torch

from harness.port import answers, estimate, signatures
from harness.port.models import PortModel, pad_inputs
from harness.port.traces import Request


def _trace(*lengths: int, batch: int = 1) -> list[Request]:
    return [Request(n, batch) for n in lengths]


def test_policies_resolve_against_the_trace():
    trace = _trace(*range(1, 1001))
    names = [p.name for p in signatures.resolve(signatures.DEFAULT_POLICIES, trace)]
    # buckets:auto = p25, p50, p75, p90, p99, max rounded up to 128; max = the longest rounded up to 128
    assert names == ["none", "multiple:128", "pow2", "buckets:256,512,768,1024", "max:1024"]
    assert [p.name for p in signatures.resolve(["max:4096", "pow2", "pow2:1"], trace)] == ["max:4096", "pow2"]
    with pytest.raises(ValueError, match="unknown bucketing policy 'zigzag'"):
        signatures.resolve(["zigzag"], trace)


@pytest.mark.parametrize("spec, expected", [
    ("none", [100, 120, 256]),
    ("multiple:128", [128, 128, 256]),
    ("pow2", [128, 128, 256]),
    ("buckets:auto", [128, 128, 256]),
    ("max", [256, 256, 256]),
])
def test_each_policy_pads_ids_and_masks_to_its_bucket(spec, expected):
    shapes = torch.neuron.shapes
    trace = _trace(100, 120, 256)
    policy = signatures.resolve([spec], trace)[0]
    sigs = signatures.signatures(trace, policy)
    assert [s[1] for s in sigs] == expected
    port = PortModel(torch.nn.Identity(), lambda b, n: {"input_ids": torch.arange(1, n + 1).repeat(b, 1),
                                                        "attention_mask": torch.ones(b, n, dtype=torch.int64)})
    for request, (batch, length) in zip(trace, sigs):
        real = port.make_inputs(2, request.seq_len)
        padded = pad_inputs(port, real, request.seq_len, length, shapes)
        assert padded["input_ids"].shape == (2, length)
        assert torch.equal(padded["input_ids"][:, :request.seq_len], real["input_ids"])
        assert (padded["input_ids"][:, request.seq_len:] == 0).all()
        assert padded["attention_mask"].sum().item() == 2 * request.seq_len  # 1 on real tokens only
        assert (padded["attention_mask"][:, request.seq_len:] == 0).all()


def test_tensors_without_input_ids_are_padded_along_the_sequence_dimension():
    shapes = torch.neuron.shapes
    port = PortModel(torch.nn.Identity(), lambda b, n: {"x": torch.ones(b, n, 8), "scale": torch.ones(8)})
    padded = pad_inputs(port, port.make_inputs(3, 5), 5, 16, shapes)
    assert padded["x"].shape == (3, 16, 8) and padded["x"][:, 5:].abs().sum() == 0
    assert padded["scale"].shape == (8,)  # not a sequence tensor: left alone


def test_overflowing_requests_are_counted_not_served():
    trace = _trace(100, 300, 600)
    policy = signatures.resolve(["buckets:128,512"], trace)[0]
    sigs = signatures.signatures(trace, policy)
    assert sigs == [(1, 128), (1, 512), None]
    assert signatures.stability(sigs, 0)["overflow"] == 1
    assert signatures.padded_fraction(trace, sigs) == pytest.approx(1 - 400 / 640)


def test_three_lengths_under_multiple_of_128():
    """The issue's known answer: 3 distinct lengths, 2 buckets -> 2 compiles, 1 recompile, exact padding."""
    trace = _trace(100, 120, 256, 100, 120, 256, 100, 100, 120, 256)
    policy = signatures.resolve(["multiple:128"], trace)[0]
    sigs = signatures.signatures(trace, policy)
    s = signatures.stability(sigs, signatures.warmup_count(len(trace), 0.1))
    assert (s["distinct_signatures"], s["compiles"], s["recompiles"]) == (2, 2, 1)
    real, served = 4 * 100 + 3 * 120 + 3 * 256, 7 * 128 + 3 * 256
    assert signatures.padded_fraction(trace, sigs) == pytest.approx(1 - real / served)
    raw = signatures.stability(signatures.signatures(trace, None), 1)
    assert (raw["distinct_signatures"], raw["compiles"], raw["recompiles"]) == (3, 3, 2)
    # programs per signature multiply the counts (a model with one graph break compiles 2 per signature)
    assert signatures.stability(sigs, 1, programs_per_signature=2)["compiles"] == 4


def test_shapes_nobody_tested_and_served_by_compiled_neff():
    # warm-up = first 10% = 1 request (length 100); 256 appears only in the last 90%
    trace = _trace(100, 100, 256, 100, 256, 256, 100, 120, 100, 100)
    raw = signatures.stability(signatures.signatures(trace, None), signatures.warmup_count(10, 0.1))
    assert raw["requests_after_warmup"] == 9
    assert raw["nobody_tested"] == pytest.approx(4 / 9)  # three 256s and one 120
    assert raw["compiles_after_warmup"] == 2 and raw["stall_requests"] == [2, 7]
    assert raw["served_by_compiled_after_warmup"] == pytest.approx(1 - 2 / 9)
    policy = signatures.resolve(["multiple:128"], trace)[0]
    bucketed = signatures.stability(signatures.signatures(trace, policy), 1)
    assert bucketed["nobody_tested"] == pytest.approx(3 / 9)  # 120 shares 100's bucket; 256 is still new
    maxed = signatures.stability(signatures.signatures(trace, signatures.resolve(["max"], trace)[0]), 1)
    assert maxed["nobody_tested"] == 0 and maxed["served_by_compiled_after_warmup"] == 1


def test_warmup_fraction_is_checked():
    assert signatures.warmup_count(1000, 0.1) == 100
    with pytest.raises(ValueError, match="warm-up fraction"):
        signatures.warmup_count(10, 1.0)


def test_sample_is_evenly_spaced_and_keeps_both_ends():
    sigs = [(1, n) for n in range(1, 301)]
    picked = signatures.sample(sigs, 4)
    assert picked == [(1, 1), (1, 101), (1, 200), (1, 300)]
    assert signatures.sample(sigs[:3], 4) == sigs[:3]
    with pytest.raises(ValueError, match="at least 2"):
        signatures.sample(sigs, 1)


def test_interpolation_and_its_self_check():
    points = [(100.0, 1.0), (200.0, 3.0), (400.0, 7.0)]
    assert estimate.interpolate(points, 150) == pytest.approx(2.0)
    assert estimate.interpolate(points, 300) == pytest.approx(5.0)
    assert estimate.interpolate(points, 50) == 1.0 and estimate.interpolate(points, 500) == 7.0
    check = estimate.leave_one_out(points)  # 200 from (100, 1) and (400, 7): 3.0, exact on a line
    assert check["points"] == 1 and check["max_rel_error"] == pytest.approx(0.0)
    assert estimate.percentile([5, 1, 3, 2, 4], 50) == 3 and estimate.percentile([5, 1, 3, 2, 4], 95) == 5


def _measured(length: int, ms: float, compile_s: float = 1.0) -> dict:
    return {"batch": 1, "length": length, "device_ms": ms, "tensor_busy_ns": ms * 5e5, "engine_device_ns": ms * 1e6,
            "compile_seconds": compile_s, "programs": 1}


def test_costs_are_measured_or_marked_estimated():
    costs = answers.Costs({(1, 100): _measured(100, 1.0), (1, 300): _measured(300, 3.0)})
    assert costs.value((1, 100), "device_ms") == (1.0, False)
    assert costs.value((1, 200), "device_ms") == (pytest.approx(2.0), True)
    assert answers.Costs({}, compile_stall=60.0).value((1, 7), "compile_seconds") == (60.0, False)


def test_batch_answer_latency_utilization_and_goodput():
    trace = _trace(64, 64, 128, 64)  # warm-up 1 request: 64
    costs = answers.Costs({(1, 64): _measured(64, 1.0, compile_s=2.0), (1, 128): _measured(128, 2.0, compile_s=2.0)})
    policy = signatures.resolve(["none"], trace)[0]
    sigs = signatures.signatures(trace, policy)
    shape = answers.shape_answer(trace, sigs, 1, costs, 1)
    assert shape["compile_seconds"] == 4.0 and shape["stall_seconds_after_warmup"] == 2.0
    batch = answers.batch_answer(trace, sigs, 1, costs, shape)
    assert batch["latency_ms"]["p50"] == 1.0 and batch["latency_ms"]["p95"] == 2.0
    assert batch["served_latency_ms"]["p95"] == pytest.approx(2002.0)  # the 128 request waits for its compile
    assert batch["tensor_util"] == pytest.approx(0.5) and batch["useful_util"] == pytest.approx(0.5)
    # 256 real tokens after warm-up / (4 ms of device time + 2 s of stall)
    assert batch["goodput_tokens_per_s"] == pytest.approx(256 / 2.004)
    padded = signatures.signatures(trace, signatures.resolve(["max:128"], trace)[0])
    useful = answers.batch_answer(trace, padded, 1, costs, answers.shape_answer(trace, padded, 1, costs, 1))
    assert useful["tensor_util"] == pytest.approx(0.5) and useful["useful_util"] == pytest.approx(0.5 * 320 / 512)


def _row(name, p95, useful, goodput, feasible=True):
    return {"policy": name, "feasible": feasible, "shape": {"distinct_signatures": 2, "compiles_after_warmup": 0},
            "batch": {"available": True, "served_latency_ms": {"p95": p95}, "useful_util": useful,
                      "goodput_tokens_per_s": goodput, "padded_fraction": 0.1}}


def test_pareto_front_and_the_recommendation_rule():
    rows = [_row("none", 900.0, 0.30, 100.0), _row("multiple:128", 1.0, 0.20, 5000.0),
            _row("pow2", 2.0, 0.15, 4000.0),  # dominated by multiple:128 (slower and less useful)
            _row("max:2048", 0.5, 0.10, 3000.0), _row("buckets:128", 0.1, 0.9, 9e9, feasible=False)]
    front = answers.pareto(rows)
    assert front == ["none", "multiple:128", "max:2048"]
    rec = answers.recommend(rows, front)
    assert rec["policy"] == "multiple:128"
    assert "5,000 real tokens/s" in rec["reason"] and "next: max:2048" in rec["reason"]
    assert answers.recommend(rows, [])["policy"] is None
