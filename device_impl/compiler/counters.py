"""Compile statistics: what the shape contract costs, measured (``device_impl.compiler.stats()``).

Counted per process since the last ``reset_stats()``:

* ``graphs``: Dynamo graphs the backend received (one per graph break, per recompile);
* ``compiles``: AOT graphs (forward, backward, inference) compiled from scratch;
* ``cache_hits``: AOT graphs served from the compile cache, by source (``memory``, ``disk``),
  and ``cache_corrupt``: cache entries found damaged and rebuilt;
* ``import_memo_hits``: graphs compiled from the StableHLO an earlier import printed (``cache.import_key``:
  the torch-mlir import skipped; every pass still runs);
* ``recompiles``: graphs compiled for a new input signature of a function already compiled, with
  ``recompiles_by_cause``: cause -> records naming the graph, the input and both shapes
  (``shape``: an input's size changed; ``dtype``; ``other``: a guard on something else);
* ``compile_seconds``: wall time spent compiling (Dynamo graph handed over to program ready);
* ``fallbacks``: graphs run eagerly because an op has no lowering, ``fallbacks_by_op``;
* ``eager_cuts``: nodes torch-mlir refuses that run as their eager kernels while the rest of their graph compiles
  (``eager_cut.py``), ``eager_cuts_by_op``;
* ``executions``: compiled programs run;
* ``programs``: per compiled program (by name, as its launch ``neff:<name>`` appears in the engine's
  statistics and traces), from the engine's statistics since their last reset (each launch's MFU and
  MBU are also in the profiler's Chrome trace, in the ``neff:`` event's args): ``launches``,
  ``device_seconds``, ``tensore_flops``, ``hbm_bytes``, ``mfu`` (TensorE flops over the launches'
  device time at the TensorE peak of the program's matmul dtype: fp32's when any matmul reads fp32)
  and ``mbu`` (HBM bytes over device time at the DMA bandwidth), issue 21's per-graph roofline figures.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

_lock = threading.Lock()


def _fresh() -> dict[str, Any]:
    return {
        "graphs": 0, "compiles": 0, "cache_hits": 0, "cache_hits_by_source": {"memory": 0, "disk": 0},
        "cache_corrupt": 0, "import_memo_hits": 0, "recompiles": 0, "recompiles_by_cause": {}, "compile_seconds": 0.0,
        "fallbacks": 0, "fallbacks_by_op": {}, "eager_cuts": 0, "eager_cuts_by_op": {}, "executions": 0,
    }


_STATS = _fresh()
# Input signatures per compiled function (Dynamo frame): the last one, to tell a recompile's cause,
# and every one seen, so a signature compiled before (served from the compile cache) is not new.
_SIGNATURES: dict[Any, list[tuple[str, tuple[int, ...], str]]] = {}
_SEEN: dict[Any, set] = {}


# program name -> True when one of its matmuls reads fp32 (TensorE's fp32 peak applies), recorded when
# the program is linked (fresh or from the cache)
_FP32_MATMULS: dict[str, bool] = {}


def matmul_linked(program: str, fp32: bool) -> None:
    """A linked program has a matmul (``fp32``: it reads fp32 operands)."""
    with _lock:
        _FP32_MATMULS[program] = _FP32_MATMULS.get(program, False) or fp32


def utilization(program: str, flops: float, hbm_bytes: float, device_ns: float) -> dict[str, float]:
    """MFU and MBU of ``program``'s launches (see the module docstring): the figures ``programs()`` and the
    profiler's Chrome trace (each ``neff:`` launch's args) both report."""
    from device_impl import engine

    platform = engine.PLATFORM
    seconds = device_ns / 1e9
    peak = (platform.fp32_tflops if _FP32_MATMULS.get(program) else platform.bf16_tflops) * 1e12
    return {"mfu": flops / (seconds * peak) if seconds else 0.0,
            "mbu": hbm_bytes / (seconds * platform.dma_bytes_per_second) if seconds else 0.0}


def programs() -> dict[str, dict[str, float]]:
    """MFU and MBU of every compiled program the engine has run since its statistics were reset."""
    from device_impl import engine

    result: dict[str, dict[str, float]] = {}
    for kernel, s in engine.stats().items():
        if not kernel.startswith("neff:"):
            continue
        name = kernel[len("neff:"):]
        result[name] = {
            "launches": int(s["launches"]), "device_seconds": s["device_ns"] / 1e9, "tensore_flops": int(s["flops"]),
            "hbm_bytes": int(s["hbm_bytes"]), **utilization(name, s["flops"], s["hbm_bytes"], s["device_ns"]),
        }
    return result


def snapshot() -> dict[str, Any]:
    with _lock:
        stats = copy.deepcopy(_STATS)
    stats["programs"] = programs()
    return stats


def reset() -> None:
    with _lock:
        _STATS.clear()
        _STATS.update(_fresh())
        _SIGNATURES.clear()
        _SEEN.clear()


def count(field: str, amount: float = 1) -> None:
    with _lock:
        _STATS[field] += amount


def cache_hit(source: str) -> None:
    with _lock:
        _STATS["cache_hits"] += 1
        _STATS["cache_hits_by_source"][source] = _STATS["cache_hits_by_source"].get(source, 0) + 1


def fallback(op: str) -> None:
    with _lock:
        _STATS["fallbacks"] += 1
        _STATS["fallbacks_by_op"][op] = _STATS["fallbacks_by_op"].get(op, 0) + 1


def eager_cut(op: str) -> None:
    """A node of a graph torch-mlir could not import that runs as its eager kernel, the rest compiled
    (compiler/eager_cut.py)."""
    with _lock:
        _STATS["eager_cuts"] += 1
        _STATS["eager_cuts_by_op"][op] = _STATS["eager_cuts_by_op"].get(op, 0) + 1


def graph_received(frame: Any, graph: str, signature: list[tuple[str, tuple[int, ...], str]]) -> None:
    """Record a Dynamo graph; a second signature for the same frame is a recompile, with its cause."""
    with _lock:
        _STATS["graphs"] += 1
        previous = _SIGNATURES.get(frame)
        _SIGNATURES[frame] = signature
        seen = _SEEN.setdefault(frame, set())
        key = tuple(signature)
        if previous is None or key in seen:
            seen.add(key)
            return
        seen.add(key)
        _STATS["recompiles"] += 1
        record: dict[str, Any] = {"graph": graph}
        cause = "other"
        by_name = {name: (shape, dtype) for name, shape, dtype in previous}
        for name, shape, dtype in signature:
            if name not in by_name:
                continue
            old_shape, old_dtype = by_name[name]
            if old_shape != shape:
                cause = "shape"
                record.update(input=name, previous=list(old_shape), shape=list(shape))
                break
            if old_dtype != dtype:
                cause = "dtype"
                record.update(input=name, previous=old_dtype, dtype=dtype)
                break
        if cause == "other":
            record["shapes"] = {name: list(shape) for name, shape, _ in signature}
        _STATS["recompiles_by_cause"].setdefault(cause, []).append(record)
