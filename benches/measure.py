"""What one call of a prepared workload costs on the simulated device, read from the device's counters.

Wall time is the front ends' job (asv ``time_*``, pytest-benchmark); this module measures the
rest for one call, after the warm-up: simulated device time (the core's clock), kernel launches,
TensorE busy time and utilization, TensorE flops, HBM bytes, CPU-fallback op calls, peak device
memory (torch.neuron.max_memory_allocated), graphs compiled by further calls (recompiles, compiled
mode) and the workload's own facts (padded-token fraction).
"""

from __future__ import annotations

import gc
import sys
import traceback
from typing import Any, Iterable

import torch

from benches.modes import DTYPES, NEURON_MODES, ModeUnavailable, Prepared, open_workload
from device_impl import dispatch, engine
from device_impl._core import C

RECOMPILE_CALLS = 3  # calls after the warm-up whose new graphs count as recompiles

METRICS = ("device_seconds", "launches", "tensore_busy_seconds", "tensore_utilization", "tensore_flops",
           "hbm_bytes", "fallback_ops", "device_peak_bytes", "recompiles", "padded_fraction", "warmup_seconds")


def _engine_totals() -> dict[str, float]:
    totals = {"launches": 0.0, "device_ns": 0.0, "tensor_busy_ns": 0.0, "flops": 0.0, "hbm_bytes": 0.0}
    for kernel in engine.stats().values():
        for key in totals:
            totals[key] += kernel.get(key, 0.0)
    return totals


def _graphs_compiled() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def measure(prepared: Prepared) -> dict[str, Any]:
    """The metrics of one call of ``prepared`` (a neuron mode), plus recompiles over a few more calls."""
    device = torch.device(prepared.mode.device)
    if device.type != "neuron":
        raise ModeUnavailable(f"{prepared.mode.name} runs on {device.type}: no simulated device to measure")
    index = device.index or 0
    torch.neuron.synchronize()
    # The peak is relative to what is live now: garbage cycles left by earlier workloads (a model, its
    # optimizer, Dynamo's frames) still hold device tensors until a collection runs, and when one runs
    # depends on how many objects the process allocated before. Collect them, and keep the collector
    # out of the measured call, so device_peak_bytes is the same number for the same code (asv flags any
    # change in it: in one asv continuous of two identical commits, train_step compiled bf16 read 7.11 MB
    # once and 6.47 MB the other time).
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _measure_call(prepared, index)
    finally:
        if collecting:
            gc.enable()


def _measure_call(prepared: Prepared, index: int) -> dict[str, Any]:
    """``measure`` of one call, after the collector has run: the counters around it, then recompiles."""
    before = _engine_totals()
    dispatch.reset_stats()
    torch.neuron.reset_peak_memory_stats(index)
    clock = C.device_time_ns(index)
    prepared()
    device_ns = C.device_time_ns(index) - clock
    peak = torch.neuron.max_memory_allocated(index)
    fallbacks = dispatch.fallback_count()
    after = _engine_totals()
    delta = {key: after[key] - before[key] for key in after}
    facts = {name: float(fact()) for name, fact in prepared.facts.items()}
    recompiles = None
    if prepared.mode.name == "compiled":
        graphs = _graphs_compiled()
        for _ in range(RECOMPILE_CALLS):
            prepared()
        recompiles = _graphs_compiled() - graphs
    return {
        "device_seconds": device_ns / 1e9,
        "launches": int(delta["launches"]),
        "tensore_busy_seconds": delta["tensor_busy_ns"] / 1e9,
        # the engine's own definition (LaunchReport.utilization): busy time over device time
        "tensore_utilization": delta["tensor_busy_ns"] / device_ns if device_ns else 0.0,
        "tensore_flops": int(delta["flops"]),
        "hbm_bytes": int(delta["hbm_bytes"]),
        "fallback_ops": int(fallbacks),
        "device_peak_bytes": int(peak),
        "recompiles": recompiles,
        "padded_fraction": facts.get("padded_fraction"),
        "warmup_seconds": prepared.warmup_seconds,
    }


def measure_case(case: str, mode: str, dtype: str) -> dict[str, Any]:
    """Metrics of one combination; ``{"unavailable": reason}`` when the mode or dtype cannot run."""
    try:
        prepared = open_workload(case, mode, dtype)
    except ModeUnavailable as e:
        return {"unavailable": str(e)}
    try:
        return measure(prepared)
    finally:
        prepared.close()


def measure_all(cases: Iterable[str], modes: Iterable[str] = NEURON_MODES,
                dtypes: Iterable[str] = tuple(DTYPES)) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every combination, one process, one measured call each (asv's setup_cache for the track_ benchmarks).

    A combination that raises is kept as ``{"error": text}``, so one broken case does not hide the
    others; its track_ benchmarks then fail (not skip) in setup with that text.
    """
    results: dict[tuple[str, str, str], dict[str, Any]] = {}
    for case in cases:
        for mode in modes:
            for dtype in dtypes:
                try:
                    results[(case, mode, dtype)] = measure_case(case, mode, dtype)
                except Exception as e:  # noqa: BLE001 - reported per combination
                    traceback.print_exc(file=sys.stderr)
                    results[(case, mode, dtype)] = {"error": f"{type(e).__name__}: {e}"}
    return results


def lookup(results: dict[tuple[str, str, str], dict[str, Any]], key: tuple[str, str, str],
           metric: str) -> float:
    """One metric of one combination for a track_ benchmark: skips what cannot run, fails what broke."""
    entry = results.get(key)
    if entry is None:
        raise ModeUnavailable(f"{key} was not measured")
    if "unavailable" in entry:
        raise ModeUnavailable(entry["unavailable"])
    if "error" in entry:
        raise RuntimeError(f"{key} failed when measured: {entry['error']}")
    value = entry[metric]
    if value is None:
        raise ModeUnavailable(f"{metric} does not apply to {key[0]} in {key[1]} mode")
    return value



def compile_seconds(case: str, dtype: str, warm: bool) -> float:
    """Seconds the first call spends compiling in compiled mode: cold (empty NEFF cache) or warm.

    The first call of a freshly compiled workload traces, compiles and runs once; the compile
    seconds are that call minus a steady-state call. Cold uses an empty cache directory
    (TORCH_NEURONX_NEFF_CACHE_DIR); warm then drops the in-process state (Dynamo's code, the
    compiler's linked programs) and compiles the same case again, which the on-disk cache should serve.
    """
    import os
    import tempfile
    import time

    import torch._dynamo

    with tempfile.TemporaryDirectory(prefix="neuronsim-neff-") as cache_dir:
        saved = os.environ.get("TORCH_NEURONX_NEFF_CACHE_DIR")
        os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = cache_dir
        try:
            rounds = 2 if warm else 1
            first = steady = 0.0
            for _ in range(rounds):
                _forget_compiled()
                prepared = open_workload(case, "compiled", dtype)
                try:
                    started = time.perf_counter()
                    prepared()
                    steady = time.perf_counter() - started
                    first = prepared.warmup_seconds
                finally:
                    prepared.close()
            return max(first - steady, 0.0)
        finally:
            if saved is None:
                os.environ.pop("TORCH_NEURONX_NEFF_CACHE_DIR", None)
            else:
                os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = saved


def _forget_compiled() -> None:
    """Drop what this process remembers of compiled programs, and re-read the compiler's settings."""
    import importlib

    import torch._dynamo

    torch._dynamo.reset()
    compiler = importlib.import_module("device_impl.compiler")
    clear = getattr(compiler, "clear_cache", None)
    if callable(clear):
        clear()
    try:
        backend = importlib.import_module("device_impl.compiler.backend")
    except ImportError:
        return
    reload = getattr(backend, "reload_settings", None)
    if callable(reload):
        reload()
