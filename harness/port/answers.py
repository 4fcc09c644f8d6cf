"""The three answers, from the trace, the policies and the replay's measurements (plain arithmetic, no torch).

1. Shape stability (exact, ``signatures.stability``) plus compile seconds: the
   sum over a policy's distinct signatures of each one's compile seconds, and the
   stall users feel: compile seconds of the signatures first seen after warm-up.
   ``compile_stall=S`` replaces measured compile seconds by S per new signature
   (the real Neuron compiler stalls "about a minute on every new sequence length").
2. Operator dependence comes from ``operators.dependence`` as is.
3. Batch configuration, per policy:

   * padded-token fraction (exact);
   * device latency p50/p95 over requests (simulated device time of the
     request's signature), and served latency p50/p95 after warm-up, which adds
     the compile stall to the request that first brings a new signature;
   * TensorE utilization = TensorE busy time / device time, summed over the
     requests; useful utilization counts only the real tokens' share of it
     (busy time x real tokens / padded tokens: padding keeps TensorE busy on
     nothing);
   * goodput = real tokens after warm-up / (device seconds + compile stall
     seconds after warm-up).

   The Pareto front is over (served p95 latency: lower is better, useful
   utilization: higher is better) among policies that serve every request.
   RECOMMENDATION_RULE says how one policy is picked from it.

Numbers built on an estimated signature carry ``estimated_share`` (the share of
requests, or of signatures, that used an estimate): counts never do.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from harness.port.estimate import curve, interpolate, leave_one_out, percentile
from harness.port.signatures import Policy, Signature, padded_fraction, signatures, stability, tokens
from harness.port.traces import Request

RECOMMENDATION_RULE = ("among Pareto-optimal policies (served p95 latency vs useful TensorE utilization) that serve "
                       "every request, the one with the highest goodput: real tokens per second of device time "
                       "plus compile stalls after warm-up")
FIELDS = ("device_ms", "tensor_busy_ns", "engine_device_ns", "compile_seconds")


def _ok(m: dict[str, Any] | None) -> bool:
    return m is not None and "error" not in m


class Costs:
    """Per-signature costs: measured where the replay ran it, else interpolated in tokens (estimated)."""

    def __init__(self, measurements: dict[Signature, dict[str, Any]], compile_stall: float | None = None):
        self.measurements = measurements
        self.compile_stall = compile_stall
        self.curves: dict[str, list[tuple[float, float]]] = {}
        for name in FIELDS:
            points: dict[float, list[float]] = {}
            for sig, m in measurements.items():
                if _ok(m) and m.get(name) is not None:
                    points.setdefault(float(tokens(sig)), []).append(float(m[name]))
            self.curves[name] = curve(points)

    def value(self, sig: Signature, name: str) -> tuple[float | None, bool]:
        """(value, estimated) of one cost of a signature; (None, False) when nothing was measured."""
        if name == "compile_seconds" and self.compile_stall is not None:
            return self.compile_stall, False
        m = self.measurements.get(sig)
        if m is not None:
            return (m.get(name) if _ok(m) else None), False
        points = self.curves[name]
        if not points:
            return None, False
        return interpolate(points, float(tokens(sig))), True

    def failed(self, sig: Signature) -> str | None:
        m = self.measurements.get(sig)
        return m.get("error") if m is not None and "error" in m else None

    def programs_per_signature(self) -> int:
        counts = Counter(m["programs"] for m in self.measurements.values() if _ok(m) and m.get("programs"))
        return counts.most_common(1)[0][0] if counts else 1

    def quality(self) -> dict[str, Any]:
        return {name: leave_one_out(self.curves[name]) for name in ("device_ms", "compile_seconds")}


def _sum(values: Sequence[float | None]) -> float | None:
    return None if any(v is None for v in values) else float(sum(values))  # type: ignore[arg-type]


def _share(flags: Sequence[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def shape_answer(requests: Sequence[Request], sigs: Sequence[Signature | None], warmup: int, costs: Costs,
                 programs: int) -> dict[str, Any]:
    """Question 1 for one policy: exact counts plus compile seconds (measured or estimated)."""
    out = stability(sigs, warmup, programs)
    distinct = sorted({s for s in sigs if s is not None}, key=lambda s: (tokens(s), s))
    compile_costs = {s: costs.value(s, "compile_seconds") for s in distinct}
    out["compile_seconds"] = _sum([v for v, _ in compile_costs.values()])
    out["compile_seconds_estimated_share"] = _share([e for _, e in compile_costs.values()])
    stall_sigs = [sigs[i] for i in out["stall_requests"]]
    out["stall_seconds_after_warmup"] = _sum([compile_costs[s][0] for s in stall_sigs])  # type: ignore[index]
    out["stall_seconds_estimated_share"] = _share([compile_costs[s][1] for s in stall_sigs])  # type: ignore[index]
    out["failed_signatures"] = [{"batch": s[0], "length": s[1], "error": costs.failed(s)} for s in distinct
                                if costs.failed(s)]
    out["stall_requests"] = len(out["stall_requests"])
    return out


def batch_answer(requests: Sequence[Request], sigs: Sequence[Signature | None], warmup: int, costs: Costs,
                 shape: dict[str, Any]) -> dict[str, Any]:
    """Question 3 for one policy: padding, latency, utilization, goodput."""
    latencies, estimated, served_after = [], [], []
    busy_sum = useful_sum = device_sum = 0.0
    utilization_known = True
    device_s_after = 0.0
    real_after = 0
    seen: set[Signature] = set()
    for index, (request, sig) in enumerate(zip(requests, sigs)):
        if sig is None:
            continue
        latency, est = costs.value(sig, "device_ms")
        busy, est_busy = costs.value(sig, "tensor_busy_ns")
        device_ns, _ = costs.value(sig, "engine_device_ns")
        if latency is None:
            return {"available": False, "reason": costs.failed(sig) or "device latency not available on this device",
                    "padded_fraction": padded_fraction(requests, sigs)}
        latencies.append(latency)
        estimated.append(est or est_busy)
        if busy is None or not device_ns:
            utilization_known = False
        else:
            busy_sum += busy
            device_sum += device_ns
            useful_sum += busy * request.tokens / tokens(sig)
        if index < warmup:
            seen.add(sig)
            continue
        stall_ms = 0.0
        if sig not in seen:
            seen.add(sig)
            compile_s, _ = costs.value(sig, "compile_seconds")
            stall_ms = 1000.0 * (compile_s or 0.0)
        served_after.append(latency + stall_ms)
        device_s_after += latency / 1000.0
        real_after += request.tokens
    stall_s = shape.get("stall_seconds_after_warmup") or 0.0
    busy_time = device_s_after + stall_s
    return {
        "available": True,
        "padded_fraction": padded_fraction(requests, sigs),
        "latency_ms": {"p50": percentile(latencies, 50), "p95": percentile(latencies, 95),
                       "mean": sum(latencies) / len(latencies)},
        "served_latency_ms": {"p50": percentile(served_after, 50), "p95": percentile(served_after, 95)}
        if served_after else None,
        "tensor_util": busy_sum / device_sum if utilization_known and device_sum else None,
        "useful_util": useful_sum / device_sum if utilization_known and device_sum else None,
        "device_seconds_after_warmup": device_s_after,
        "goodput_tokens_per_s": real_after / busy_time if busy_time > 0 else None,
        "estimated_share": _share(estimated),
    }


def pareto(rows: list[dict[str, Any]]) -> list[str]:
    """Names of the policies no other policy beats on both served p95 (lower) and useful utilization (higher)."""
    points = [(r["policy"], r["batch"]["served_latency_ms"]["p95"], r["batch"]["useful_util"]) for r in rows
              if r["feasible"] and r["batch"].get("available") and r["batch"].get("served_latency_ms")
              and r["batch"].get("useful_util") is not None]
    front = []
    for name, latency, util in points:
        dominated = any(lat <= latency and u >= util and (lat < latency or u > util)
                        for other, lat, u in points if other != name)
        if not dominated:
            front.append(name)
    return front


def recommend(rows: list[dict[str, Any]], front: list[str]) -> dict[str, Any]:
    """Apply RECOMMENDATION_RULE; the reason is one sentence with the numbers that decided it."""
    candidates = [r for r in rows if r["policy"] in front and r["batch"].get("goodput_tokens_per_s")]
    if not candidates:
        return {"policy": None, "rule": RECOMMENDATION_RULE,
                "reason": "no policy serves every request with measured latency and utilization"}
    ranked = sorted(candidates, key=lambda r: -r["batch"]["goodput_tokens_per_s"])
    best = ranked[0]
    b, s = best["batch"], best["shape"]
    runner = (f" (next: {ranked[1]['policy']} at {ranked[1]['batch']['goodput_tokens_per_s']:,.0f} tok/s)"
              if len(ranked) > 1 else "")
    reason = (f"{best['policy']} is Pareto-optimal (served p95 {b['served_latency_ms']['p95']:.3g} ms, useful "
              f"TensorE utilization {b['useful_util']:.1%}) and has the best goodput, "
              f"{b['goodput_tokens_per_s']:,.0f} real tokens/s after warm-up{runner}, with "
              f"{s['distinct_signatures']} signatures, {s['compiles_after_warmup']} compiles after warm-up and "
              f"{b['padded_fraction']:.1%} padding.")
    return {"policy": best["policy"], "reason": reason, "rule": RECOMMENDATION_RULE}


def per_policy(requests: Sequence[Request], policies: Sequence[Policy], warmup: int,
               costs: Costs) -> list[dict[str, Any]]:
    programs = costs.programs_per_signature()
    rows = []
    for policy in policies:
        sigs = signatures(requests, policy)
        shape = shape_answer(requests, sigs, warmup, costs, programs)
        batch = batch_answer(requests, sigs, warmup, costs, shape)
        counts = Counter(s for s in sigs if s is not None)
        rows.append({
            "policy": policy.name, "spec": policy.spec,
            "feasible": shape["overflow"] == 0 and not shape["failed_signatures"],
            "shape": shape, "batch": batch,
            "signatures": [{"batch": s[0], "length": s[1], "requests": n} for s, n in
                           sorted(counts.items(), key=lambda kv: (tokens(kv[0]), kv[0]))],
        })
    return rows
