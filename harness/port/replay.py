"""The replay: compile and run each signature that must be measured, once, in compiled mode.

For each chosen signature (batch, padded length) the replay takes a real request
of the trace that maps to it, builds its inputs (``make_inputs``), pads them to
the signature (``models.pad_inputs``), and calls the ``torch.compile(backend=...,
dynamic=False)`` model once. That one call gives everything:

* the compile: the device's compiler counters before and after (programs
  compiled, served from the NEFF cache — memory or disk — recompiles, compile
  seconds, graphs that fell back to eager);
* the simulated device latency: two timed events around the call (the compile
  is host work and does not advance the device clock; inputs are on the device
  before the first event);
* TensorE utilization: TensorE busy time / device time over the kernels of the
  call (the engine's counters);
* correctness: the output on the real positions against CPU eager on the
  unpadded request, within ``rtol``/``atol``.

Before the first signature a trivial function is compiled once so the
compiler's one-time imports are not charged to the first signature.
"""

from __future__ import annotations

import copy
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from harness.port.device import DeviceProbe, bucketing, tensor_busy
from harness.port.models import PortModel, output_tensor, pad_inputs
from harness.port.signatures import Signature

COUNTERS = ("graphs", "compiles", "cache_hits", "recompiles", "compile_seconds", "fallbacks", "executions")


@dataclass(frozen=True)
class Target:
    signature: Signature
    seq_len: int  # the real length of the request replayed at this signature


def _delta(before: dict | None, after: dict | None) -> dict[str, Any] | None:
    if before is None or after is None:
        return None
    out: dict[str, Any] = {k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS}
    sources = {}
    for source, n in (after.get("cache_hits_by_source") or {}).items():
        sources[source] = n - (before.get("cache_hits_by_source") or {}).get(source, 0)
    out["cache_hits_by_source"] = sources
    fallbacks = {}
    for op, n in (after.get("fallbacks_by_op") or {}).items():
        extra = n - (before.get("fallbacks_by_op") or {}).get(op, 0)
        if extra:
            fallbacks[op] = extra
    out["fallbacks_by_op"] = fallbacks
    return out


def _neff_source(delta: dict[str, Any] | None) -> str:
    if delta is None:
        return "unknown"
    hits = {s: n for s, n in delta["cache_hits_by_source"].items() if n}
    if delta["compiles"] and not hits:
        return "compiled"
    if hits and not delta["compiles"]:
        return "cache:" + "+".join(sorted(hits))
    if hits:
        return "compiled+cache:" + "+".join(sorted(hits))
    return "none"


def compare(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> dict[str, Any]:
    """|actual - expected| <= atol + rtol * |expected| everywhere (NaNs must match), with the worst errors."""
    actual, expected = actual.detach().double(), expected.detach().double()
    if actual.shape != expected.shape:
        return {"ok": False, "reason": f"shape {list(actual.shape)} != CPU {list(expected.shape)}",
                "max_abs_err": None, "max_rel_err": None}
    nan_ok = torch.equal(actual.isnan(), expected.isnan())
    a, e = actual.nan_to_num(0.0), expected.nan_to_num(0.0)
    err = (a - e).abs()
    ok = bool(nan_ok and (err <= atol + rtol * e.abs()).all())
    worst = float(err.max()) if err.numel() else 0.0
    rel = float((err / e.abs().clamp_min(1e-12)).max()) if err.numel() else 0.0
    return {"ok": ok, "reason": "" if ok else ("NaN positions differ" if not nan_ok else "values differ"),
            "max_abs_err": worst, "max_rel_err": rel}


def _prime(device: torch.device, backend: str) -> None:
    fn = torch.compile(lambda x: x * 2 + 1, backend=backend, dynamic=False)
    fn(torch.ones(2, device=device)).cpu()


def replay(port: PortModel, targets: Sequence[Target], device: str | torch.device = "neuron",
           backend: str = "neuron", rtol: float = 1e-3, atol: float = 1e-3,
           progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Compile and run each target once; returns per-signature measurements and the compiler's totals."""
    device = torch.device(device)
    probe = DeviceProbe(device)
    shapes = bucketing()
    say = progress or (lambda message: print(message, file=sys.stderr, flush=True))
    started = time.perf_counter()
    reference = copy.deepcopy(port.model).eval()
    model = port.model.to(device).eval()
    torch._dynamo.reset()
    _prime(device, backend)
    probe.reset_compiler_stats()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    measurements: dict[Signature, dict[str, Any]] = {}
    limit = max(len(targets) + 8, 64)
    with torch._dynamo.config.patch(recompile_limit=limit, accumulated_recompile_limit=max(limit, 256)), \
            torch.no_grad():
        for i, target in enumerate(targets):
            batch, length = target.signature
            inputs = dict(port.make_inputs(batch, target.seq_len))
            padded = pad_inputs(port, inputs, target.seq_len, length, shapes)
            on_device = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in padded.items()}
            probe.synchronize()
            before = probe.compiler_stats()
            probe.reset_engine_stats()
            record: dict[str, Any] = {"batch": batch, "length": length, "tokens": batch * length,
                                      "request_seq_len": target.seq_len, "measured": True}
            t0 = time.perf_counter()
            try:
                with probe.timed() as timer:
                    output = compiled(**on_device)
                got = output_tensor(output).cpu()
            except Exception as error:  # a signature that does not compile or run is reported, not fatal
                record.update(error=f"{type(error).__name__}: {str(error).splitlines()[0][:400] if str(error) else ''}",
                              first_call_seconds=time.perf_counter() - t0)
                measurements[target.signature] = record
                say(f"  [{i + 1}/{len(targets)}] {batch}x{length}: FAILED {record['error']}")
                continue
            record["first_call_seconds"] = time.perf_counter() - t0
            delta = _delta(before, probe.compiler_stats())
            engine = tensor_busy(probe.engine_stats())
            record.update(
                compile=delta,
                compile_seconds=None if delta is None else delta["compile_seconds"],
                programs=None if delta is None else delta["graphs"],
                neff=_neff_source(delta),
                device_ms=timer["ms"],
                tensor_busy_ns=None if engine is None else engine[0],
                engine_device_ns=None if engine is None else engine[1],
                flops=None if engine is None else engine[2],
                tensor_util=None if not engine or not engine[1] else engine[0] / engine[1],
            )
            expected = output_tensor(reference(**inputs))
            record["check"] = compare(got.narrow(1, 0, target.seq_len), expected, rtol, atol)
            measurements[target.signature] = record
            compile_s = "n/a" if record["compile_seconds"] is None else f"{record['compile_seconds']:.2f} s"
            device_ms = "n/a" if record["device_ms"] is None else f"{record['device_ms']:.3f} ms"
            say(f"  [{i + 1}/{len(targets)}] {batch}x{length} (request {target.seq_len}): {record['neff']}, "
                f"compile {compile_s}, device {device_ms}, first call {record['first_call_seconds']:.1f} s"
                + ("" if record["check"]["ok"] else f", MISMATCH vs CPU ({record['check']['reason']})"))
    totals = probe.compiler_stats()
    return {
        "measurements": measurements,
        "compiler": None if totals is None else {k: totals.get(k) for k in COUNTERS + ("cache_hits_by_source",
                                                                                     "fallbacks_by_op")},
        "wall_seconds": time.perf_counter() - started,
        "rtol": rtol, "atol": atol,
        "missing": probe.missing,
    }
