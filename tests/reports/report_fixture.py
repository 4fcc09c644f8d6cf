"""Data for the report tests: a small results store and build/ folder to render the reports from.

The store is written through harness.store.Store (the harness's own API), with runs in two modes,
a previous eager run for the trend, an OpInfo sweep, and op names chosen to break HTML that is
not escaped. Beside it: a coverage JSON, a pytest-benchmark JSON and a Chrome trace, the files
`make report` leaves under build/.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.cases import Case
from harness.compare import Comparison
from harness.runner import Result
from harness.store import Store
from harness.values import TensorSpec

HOSTILE = "<script>alert(1)</script>"
QUOTES = "\"&'"
ENV = {"torch": "2.13.0+cpu", "torch_mlir": "20261001", "python": "3.11.2", "neuronsim": "0.1.0",
       "git_sha": "0123456789abcdef", "machine": "x86_64 Linux test-box", "device": "neuron"}


def _result(op: str, verdict: str, mode: str = "eager", dtype: str = "float32", tier: str = "native",
            source: str = "spec", max_abs: float | None = 0.0, reproducer: str = "", message: str = "",
            xfail: str = "") -> Result:
    case = Case(spec=op, dtype=dtype, tensors=(TensorSpec((4, 4), dtype),), mode=mode, source=source)
    overload = {"sort": "aten::sort"}.get(op, f"aten::{op}.Tensor" if op.isidentifier() else "aten::add.Tensor")
    counts = {"native": 0, "decomposed": 0, "fallback": 0}
    counts[tier] = 1
    comparison = None if verdict == "skip" else Comparison(verdict == "pass", message, max_abs,
                                                           None if max_abs is None else max_abs * 2,
                                                           None if max_abs is None else int(max_abs * 1e6))
    return Result(case, verdict, message=message, comparison=comparison, expression=f"torch.{op}(x0)",
                  device_ops={overload: counts}, reproducer=reproducer, xfail_reason=xfail, called=[overload])


@dataclass
class Fixture:
    store: Path
    build: Path
    out: Path
    runs: dict[str, int]


REPRO_MUL = "import torch\nx = torch.ones(4, device='neuron')\nassert (x * 2).sum() == 8  # <b>mul & \"quotes\"</b>\n"
REPRO_HOSTILE = f"# reproducer for {HOSTILE}\nprint({QUOTES!r})\n"


def write_store(path: Path) -> dict[str, int]:
    store = Store(path)
    runs = {}
    # run 1: the previous eager run (mul passed then)
    runs["eager_previous"] = rid = store.start_run("opsuite", ENV, "quick")
    for result in (_result("add", "pass"), _result("mul", "pass"), _result(HOSTILE, "pass")):
        store.add(rid, result, "pointwise")
    store.finish_run(rid)
    # run 2: the current eager run
    runs["eager"] = rid = store.start_run("opsuite", ENV, "quick")
    for result in (
        _result("add", "pass", max_abs=1e-7),
        _result("add", "pass", dtype="bfloat16", max_abs=3.90625e-3),
        _result("mul", "fail", tier="fallback", max_abs=1.5e-3, reproducer=REPRO_MUL,
                message="values differ: max abs 0.0015"),
        _result(HOSTILE, "fail", reproducer=REPRO_HOSTILE, message=f"bad name {QUOTES}"),
        _result("sort", "xfail", tier="decomposed", xfail="numerics: stable sort ties"),
        _result("sort", "skip", dtype="int64", max_abs=None, message="no int64 sort yet"),
    ):
        store.add(rid, result, "pointwise" if result.case.spec != "sort" else "indexing")
    store.finish_run(rid)
    # run 3: adaptive, everything passes
    runs["adaptive"] = rid = store.start_run("opsuite", ENV, "quick")
    for op in ("add", "mul", HOSTILE):
        store.add(rid, _result(op, "pass", mode="adaptive"), "pointwise")
    store.finish_run(rid)
    # run 4: an unfinished run (still running elsewhere): never shown
    runs["unfinished"] = rid = store.start_run("opsuite", ENV, "quick")
    store.add(rid, _result("add", "fail", message="from an unfinished run"), "pointwise")
    store.commit()
    # run 5: the OpInfo sweep
    runs["opinfo"] = rid = store.start_run("opinfo", ENV, "float32")
    for i in range(3):
        store.add(rid, _result("abs", "pass", source="opinfo"), "opinfo")
    store.add(rid, _result("nn.functional.gelu", "fail", source="opinfo", message="sample 2: values differ",
                           reproducer="# opinfo gelu sample 2\n"), "opinfo")
    store.finish_run(rid)
    store.close()
    return runs


def write_build(build: Path) -> None:
    (build / "benchmarks").mkdir(parents=True)
    (build / "traces").mkdir()
    coverage = {"torch": "2.13.0+cpu", "summary": {"core_overloads": 3, "native": 2, "fallback": 1},
                "core": {"aten::add.Tensor": {"tier": "native", "source": "kernels.elementwise"},
                         "aten::mul.Tensor": {"tier": "fallback", "source": "cpu fallback"},
                         "aten::sort": {"tier": "native", "source": "kernels.indexing"}}}
    (build / "coverage.json").write_text(json.dumps(coverage))
    benchmarks = []
    for case, dtype, times in (("matmul_128", "fp32", {"cpu-eager": 1e-3, "eager": 5e-3, "adaptive": 2.5e-3}),
                               (HOSTILE, "bf16", {"cpu-eager": 2e-4, "eager": 2e-3})):
        for mode, best in times.items():
            info = {"case": case, "dtype": dtype, "mode": mode, "description": f"{case} {QUOTES}"}
            if mode != "cpu-eager":
                info.update(device_seconds=7e-6, tensore_utilization=0.25, hbm_bytes=196608, fallback_ops=0,
                            launches=1, device_peak_bytes=1 << 20, recompiles=None, padded_fraction=None,
                            warmup_seconds=0.1)
            benchmarks.append({"group": f"{case} {dtype}", "name": f"test_mode[{case}-{dtype}-{mode}]",
                               "extra_info": info, "stats": {"min": best, "median": best * 1.1, "rounds": 5}})
    doc = {"datetime": "2026-01-02T03:04:05", "commit_info": {"id": "abc123"}, "benchmarks": benchmarks,
           "neuronsim": {"skipped": {"compiled": "torch.compile backend 'neuron' is not registered yet"},
                         "failed": [{"case": "matmul_128", "dtype": "fp32", "mode": "compiled", "when": "call",
                                     "error": f"BackendCompilerFailed: {HOSTILE}"}]}}
    (build / "benchmarks" / "pytest-benchmark-20260102T030405.json").write_text(json.dumps(doc))
    trace = {"traceEvents": [
        {"name": "mm", "cat": "kernel", "ph": "X", "pid": 0, "tid": 0, "ts": 0.0, "dur": 10.0,
         "args": {"hbm_bytes": 1024, "flops": 4096, "instructions": 3}},
        {"name": "dma_load", "cat": "dma", "ph": "X", "pid": 0, "tid": 1, "ts": 0.0, "dur": 4.0, "args": {}},
        {"name": "matmul", "cat": "tensor", "ph": "X", "pid": 0, "tid": 2, "ts": 4.0, "dur": 5.0, "args": {}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "DMA"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 2, "args": {"name": "tensorE"}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "kernels"}},
    ], "displayTimeUnit": "ns"}
    (build / "traces" / "mm_test.json").write_text(json.dumps(trace))
    (build / "junit").mkdir()
    (build / "junit" / "opsuite-eager.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="3" time="12.5">'
        '<testcase classname="opsuite.test_pointwise" name="test_pointwise[eager-add]" time="1.0"/>'
        '<testcase classname="opsuite.test_indexing" name="test_indexing[eager-index_put]" time="2.0">'
        '<failure message="hypothesis.errors.FlakyFailure: &lt;script&gt;x&lt;/script&gt;">trace</failure></testcase>'
        '<testcase classname="opsuite.test_spatial" name="test_spatial[eager-rfft]" time="0.5">'
        '<skipped type="pytest.xfail" message="numerics"/></testcase></testsuite></testsuites>')
