"""The benchmark layer the performance report is built from: modes, skips, measured counters, ratios."""

from __future__ import annotations

import pytest
import torch

from benches import measure, modes
from benches.cases import CASES
from benches.ratios_table import add_ratios


def test_every_asv_case_is_in_the_shared_table_with_both_dtypes():
    from benches.bench_models import MODELS
    from benches.bench_ops import OPS

    assert set(OPS) == {"matmul_128", "matmul_256", "elementwise_chain_64k", "softmax_256x512", "layer_norm_256x512",
                        "attention_4x128x64"}
    assert set(MODELS) == {"mlp", "decoder_block", "llama_forward", "llama_decode_static", "train_step"}
    for name in OPS + MODELS:
        assert CASES[name].dtypes == (torch.float32, torch.bfloat16)
    assert all(CASES[m].compile_scope == "module" for m in MODELS)


def test_compiled_mode_skips_while_no_backend_is_registered(monkeypatch):
    import torch._dynamo

    compiled = modes.REGISTRY["compiled"]
    monkeypatch.setattr(compiled, "_answer", [])
    monkeypatch.setattr(torch._dynamo, "list_backends", lambda exclude_tags=(): ["inductor", "eager"])
    with pytest.raises(NotImplementedError, match="backend 'neuron' is not registered"):
        modes.open_workload("matmul_128", "compiled", "fp32")
    monkeypatch.setattr(compiled, "_answer", [])
    monkeypatch.setattr(torch._dynamo, "list_backends", lambda exclude_tags=(): ["inductor", "neuron"])
    assert compiled.unavailable() is None


def test_a_compiler_that_says_not_available_skips_but_other_errors_fail(monkeypatch):
    compiled = modes.REGISTRY["compiled"]
    monkeypatch.setattr(compiled, "_answer", [None])

    def compile_with(error):
        def fake_compile(obj, **kwargs):
            def run(*args, **kw):
                raise error
            return run
        return fake_compile

    monkeypatch.setattr(torch, "compile", compile_with(RuntimeError("the neuron compiler is not available yet")))
    with pytest.raises(modes.ModeUnavailable):
        modes.open_workload("matmul_128", "compiled", "fp32")
    monkeypatch.setattr(torch, "compile", compile_with(ValueError("cannot reshape array")))
    with pytest.raises(ValueError, match="cannot reshape"):
        modes.open_workload("matmul_128", "compiled", "fp32")


def test_a_dtype_the_case_does_not_define_is_skipped():
    with pytest.raises(modes.ModeUnavailable, match="defined for"):
        modes.open_workload("add_1k", "eager", "bf16")


def test_measure_reads_the_device_counters_of_one_call():
    prepared = modes.open_workload("matmul_128", "eager", "bf16")
    try:
        metrics = measure.measure(prepared)
    finally:
        prepared.close()
    assert metrics["device_seconds"] > 0
    assert metrics["launches"] == 1
    assert 0 < metrics["tensore_utilization"] <= 1
    assert metrics["hbm_bytes"] >= 3 * 128 * 128 * 2  # two bf16 operands read, one result written
    assert metrics["fallback_ops"] == 0
    assert metrics["device_peak_bytes"] >= 3 * 128 * 128 * 2
    assert metrics["recompiles"] is None and metrics["padded_fraction"] is None


def test_padded_fraction_is_read_from_the_mask():
    prepared = modes.open_workload("llama_forward", "eager", "fp32")
    try:
        metrics = measure.measure(prepared)
    finally:
        prepared.close()
    assert metrics["padded_fraction"] == pytest.approx(1 - (11 + 23) / 64)


def test_cpu_eager_has_no_device_to_measure_and_lookup_skips_or_fails():
    prepared = modes.open_workload("matmul_128", "cpu-eager", "fp32")
    try:
        with pytest.raises(modes.ModeUnavailable):
            measure.measure(prepared)
    finally:
        prepared.close()
    results = {("a", "eager", "fp32"): {"unavailable": "no"}, ("b", "eager", "fp32"): {"error": "boom"},
               ("c", "eager", "fp32"): {"device_seconds": 2.0, "recompiles": None}}
    with pytest.raises(NotImplementedError):
        measure.lookup(results, ("a", "eager", "fp32"), "device_seconds")
    with pytest.raises(RuntimeError, match="boom"):
        measure.lookup(results, ("b", "eager", "fp32"), "device_seconds")
    with pytest.raises(NotImplementedError):
        measure.lookup(results, ("c", "eager", "fp32"), "recompiles")
    assert measure.lookup(results, ("c", "eager", "fp32"), "device_seconds") == 2.0


def test_ratios_are_taken_within_a_group_against_cpu_eager():
    def bench(group, mode, best):
        return {"group": group, "extra_info": {"case": group.split()[0], "dtype": "fp32", "mode": mode},
                "stats": {"min": best}}

    benchmarks = [bench("mm fp32", "cpu-eager", 2e-3), bench("mm fp32", "eager", 8e-3),
                  bench("mm fp32", "adaptive", 4e-3), bench("add fp32", "eager", 1.0)]
    (row,) = add_ratios(benchmarks)
    assert row["ratio"] == {"cpu-eager": 1.0, "eager": 4.0, "adaptive": 2.0}
    assert benchmarks[1]["extra_info"]["ratio_vs_cpu_eager"] == 4.0
    assert "ratio_vs_cpu_eager" not in benchmarks[3]["extra_info"]  # no baseline in its group
