"""torch.profiler on neuron: a range per engine launch, its simulated device time, one Chrome trace.

device_impl.profiler hooks engine launches (engine.core's launch observer); these tests fail if
the hook, the device-time attachment or the trace merge is removed.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import device_impl.profiler as neuron_profiler
from device_impl import engine

ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def _compile_backend_available() -> bool:
    from torch._dynamo.backends.registry import lookup_backend

    try:
        lookup_backend("neuron")
    except Exception:  # noqa: BLE001 - InvalidBackend, or a registration that fails to load
        return False
    return True


def _ops(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (torch.relu(a @ b) + 1).sum()


def _inputs(device: str = "neuron") -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(64, 48, generator=g).to(device), torch.randn(48, 32, generator=g).to(device)


def test_each_launch_is_a_range_inside_its_op():
    a, b = _inputs()
    with profile(activities=ACTIVITIES) as prof:
        _ops(a, b)
    pairs = neuron_profiler.matched_events(prof)
    assert [launch.kernel for launch, _ in pairs] == ["mm", "relu", "add", "sum"]
    for launch, event in pairs:
        assert event.name == f"neuron::{launch.kernel}"
        parents = []
        parent = event.cpu_parent
        while parent is not None:
            parents.append(parent.name)
            parent = parent.cpu_parent
        assert f"aten::{launch.kernel}" in parents, (launch.kernel, parents)


def test_device_time_is_the_engines_simulated_time():
    a, b = _inputs()
    engine.reset_stats()
    with profile(activities=ACTIVITIES) as prof:
        _ops(a, b)
    simulated = engine.stats()
    launches = neuron_profiler.launches(prof)
    assert {x.kernel for x in launches} == set(simulated)
    for kernel, totals in simulated.items():
        recorded = [x for x in launches if x.kernel == kernel]
        assert len(recorded) == totals["launches"]
        assert sum(x.device_ns for x in recorded) == pytest.approx(totals["device_ns"])
        assert sum(x.flops for x in recorded) == totals["flops"]
    assert all(x.device_ns > 0 and x.device == 0 for x in launches)


def test_key_averages_table_gets_neuron_device_columns():
    a, b = _inputs()
    with profile(activities=ACTIVITIES) as prof:
        _ops(a, b)
    pairs = neuron_profiler.attach_device_time(prof)
    neuron_profiler.attach_device_time(prof)  # idempotent
    table = prof.key_averages().table(sort_by="device_time_total", row_limit=20)
    assert "Self NEURON" in table and "NEURON total" in table
    averages = {avg.key: avg for avg in prof.key_averages()}
    mm = next(launch for launch, _ in pairs if launch.kernel == "mm")
    assert averages["neuron::mm"].self_device_time_total == pytest.approx(mm.device_ns / 1000)
    # the op that launched the kernel carries it in its total, not as self time
    assert averages["aten::relu"].device_time_total == pytest.approx(
        next(x for x, _ in pairs if x.kernel == "relu").device_ns / 1000)
    assert averages["aten::relu"].self_device_time_total == 0
    total = sum(avg.self_device_time_total for avg in prof.key_averages())
    assert total == pytest.approx(sum(x.device_ns for x, _ in pairs) / 1000)


def test_device_time_by_op():
    a, b = _inputs()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        _ops(a, b)
    by_op = neuron_profiler.device_time_by_op(prof)
    assert set(by_op) == {"aten::mm", "aten::relu", "aten::add", "aten::sum"}
    assert all(v["launches"] == 1 and v["device_us"] > 0 for v in by_op.values())
    assert "aten::mm" in neuron_profiler.device_time_table(prof)


def test_backward_launches_on_the_autograd_thread_are_captured():
    a, b = _inputs()
    a.requires_grad_(True)
    with profile(activities=ACTIVITIES) as prof:
        with record_function("train_step"):
            _ops(a, b).backward()
    pairs = neuron_profiler.matched_events(prof)
    kernels = [launch.kernel for launch, _ in pairs]
    assert kernels.count("mm") >= 2  # forward, and the gradient of a
    assert len({launch.tid for launch, _ in pairs}) >= 1
    names = {e.name for e in prof.events()}
    assert "train_step" in names


def test_legacy_autograd_profiler():
    a, b = _inputs()
    with torch.autograd.profiler.profile() as prof:
        _ops(a, b)
    assert [x.kernel for x in neuron_profiler.launches(prof)] == ["mm", "relu", "add", "sum"]


# --- the legacy profiler's device time: PrivateUse1 profiler stubs (csrc/profiler_stubs.cpp) -------------


def _matmul_inputs(device: str = "neuron") -> tuple[torch.Tensor, torch.Tensor]:
    # large enough that the legacy profiler's whole-microsecond resolution is well under 5% of its time
    g = torch.Generator().manual_seed(1)
    return torch.randn(512, 512, generator=g).to(device), torch.randn(512, 256, generator=g).to(device)


def _legacy_profile(fn, *args):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autograd.profiler.profile(use_device="neuron") as prof:
            fn(*args)
        averages = {avg.key: avg for avg in prof.key_averages()}
    return prof, averages, [str(w.message) for w in caught]


def test_legacy_profiler_with_use_device_neuron_records_device_time_without_warnings():
    a, b = _matmul_inputs()
    prof, averages, warned = _legacy_profile(_ops, a, b)
    assert warned == []  # without the stubs: "PrivateUse1 used in profiler but not enabled" per op
    assert prof.use_device == "neuron"
    for avg in averages.values():  # without the stubs: garbage, around -2e17
        assert avg.device_time_total >= 0 and avg.self_device_time_total >= 0, avg.key
    for op in ("aten::mm", "aten::relu", "aten::add", "aten::sum"):
        assert averages[op].device_time_total > 0, op
    assert "NEURON total" in prof.key_averages().table(sort_by="device_time_total")


def test_legacy_device_time_matches_the_engine_and_the_kineto_trace():
    a, b = _matmul_inputs()
    engine.reset_stats()
    legacy_prof, legacy, _ = _legacy_profile(torch.mm, a, b)
    simulated_us = engine.stats()["mm"]["device_ns"] / 1000
    # the op the user called (its out= kernel is an inner aten::mm event, so key_averages sums both)
    outer = [e for e in legacy_prof.function_events if e.name == "aten::mm" and e.cpu_parent is None]
    assert len(outer) == 1
    assert outer[0].device_time_total == pytest.approx(simulated_us, abs=1.0)  # whole µs
    with profile(activities=ACTIVITIES) as prof:
        torch.mm(a, b)
    neuron_profiler.attach_device_time(prof)
    kineto = {avg.key: avg for avg in prof.key_averages()}
    assert kineto["aten::mm"].device_time_total > 0
    assert legacy["aten::mm"].device_time_total == pytest.approx(kineto["aten::mm"].device_time_total, rel=0.05)


def test_legacy_device_time_counts_the_core_the_op_ran_on():
    if torch.neuron.device_count() < 2:
        pytest.skip("needs two NeuronCores")
    a, b = _matmul_inputs("neuron:1")
    _, legacy, _ = _legacy_profile(torch.mm, a, b)  # recorded while neuron:0 is the current core
    assert legacy["aten::mm"].device_time_total > 0


def test_legacy_profiler_copies_take_their_modeled_time():
    x = torch.randn(1 << 16)
    _, legacy, warned = _legacy_profile(lambda t: t.to("neuron"), x)
    assert warned == []
    from device_impl.engine.constants import PLATFORM

    latency, host_rate, _, staging_rate = PLATFORM.copy_model()
    nbytes = x.numel() * 4
    assert legacy["aten::_to_copy"].device_time_total == pytest.approx(
        (latency + nbytes / host_rate + nbytes / staging_rate) / 1000, abs=1.0)


def test_no_profiler_no_records():
    a, b = _inputs()
    before = len(neuron_profiler._launches)
    _ops(a, b)
    assert len(neuron_profiler._launches) == before


def test_merged_chrome_trace(tmp_path):
    a, b = _inputs()
    c = torch.randn(8, 8, device="neuron:1")
    with neuron_profiler.profile() as prof:
        _ops(a, b)
        (c * 2).sum()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "neuron_kernel"]
    launches = {x.id: x for x in prof.launches()}
    assert len(kernels) == len(launches) == 6
    lanes = {neuron_profiler.LANE_PID_BASE + d for d in (0, 1)}
    assert {e["pid"] for e in kernels} == lanes
    names = {(e["pid"], e["args"]["name"]) for e in events if e.get("name") == "process_name" and e["pid"] in lanes}
    assert names == {(min(lanes), "neuron:0"), (max(lanes), "neuron:1")}
    hosts = {e["args"]["launch"]: e for e in events if e.get("ph") == "X" and e["name"].startswith("neuron::")}
    assert set(hosts) == set(launches)
    for k in kernels:
        launch = launches[k["args"]["launch"]]
        assert k["dur"] == pytest.approx(launch.device_ns / 1000)
        assert k["ts"] >= hosts[launch.id]["ts"]  # the device runs what the host launched
        assert hosts[launch.id]["args"]["device_ns"] == launch.device_ns
    for pid in lanes:
        lane = sorted((e for e in kernels if e["pid"] == pid), key=lambda e: e["ts"])
        assert all(x["ts"] + x["dur"] <= y["ts"] + 1e-6 for x, y in zip(lane, lane[1:]))  # one at a time
    instructions = [e for e in events if e.get("cat") in ("dma", "tensor", "vector", "scalar", "gpsimd")]
    assert any(e["cat"] == "tensor" for e in instructions)
    by_launch = {k["args"]["launch"]: k for k in kernels}
    for e in instructions:
        kernel = by_launch[e["args"]["launch"]]
        assert kernel["ts"] - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= kernel["ts"] + kernel["dur"] + 1e-6
    flows = [e for e in events if e.get("cat") == "neuron_launch"]
    assert sorted(e["ph"] for e in flows) == ["f"] * 6 + ["s"] * 6


def test_adaptive_mode_profiles_fused_programs():
    a, _ = _inputs()
    with torch.neuron.eager_mode("adaptive"):
        with profile(activities=ACTIVITIES) as prof:
            y = (a * 2 + 1) * 3
            total = y.sum().item()
    assert total == pytest.approx(((a.cpu() * 2 + 1) * 3).sum().item(), rel=1e-4)
    launches = neuron_profiler.launches(prof)
    assert launches and all(x.device_ns > 0 for x in launches)
    # the three queued elementwise ops ran as fewer launches than ops
    elementwise = [x for x in launches if x.kernel not in ("sum",)]
    assert 1 <= len(elementwise) < 3, [x.kernel for x in launches]


@pytest.mark.skipif(not _compile_backend_available(), reason="neuron compile backend not available")
def test_compiled_mode_profiles_programs():
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(48, 32), torch.nn.ReLU()).to("neuron")
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    a, _ = _inputs()
    expected = model(a)
    compiled(a)  # compile outside the profile
    with profile(activities=ACTIVITIES) as prof:
        out = compiled(a)
    torch.testing.assert_close(out.cpu(), expected.cpu(), rtol=1e-4, atol=1e-4)
    launches = neuron_profiler.launches(prof)
    assert launches and all(x.device_ns > 0 for x in launches)
    assert not {x.kernel for x in launches} & {"addmm", "mm", "relu"}, "eager kernels ran, not a compiled program"
    by_op = neuron_profiler.device_time_by_op(prof)
    assert sum(v["launches"] for v in by_op.values()) == len(launches)


@pytest.mark.skipif(not _compile_backend_available(), reason="neuron compile backend not available")
def test_the_trace_gives_each_compiled_launch_its_mfu_and_mbu(tmp_path):
    """Issue 21: MFU and MBU per compiled graph in the timeline, the same figures compiler_stats() gives."""
    torch._dynamo.reset()
    model = torch.nn.Sequential(torch.nn.Linear(48, 32), torch.nn.ReLU()).to("neuron")
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    a, _ = _inputs()
    compiled(a)
    engine.reset_stats()
    with neuron_profiler.profile() as prof:
        compiled(a)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    kernels = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "neuron_kernel"]
    (program,) = [e for e in kernels if e["name"].startswith("neff:")]
    figures = torch.neuron.compiler_stats()["programs"][program["name"][len("neff:"):]]
    assert 0 < program["args"]["mfu"] < 1 and 0 < program["args"]["mbu"] < 1
    assert program["args"]["mfu"] == pytest.approx(figures["mfu"]) and program["args"]["mbu"] == pytest.approx(figures["mbu"])
