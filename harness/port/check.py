"""One port-check: trace + model -> the three answers as one JSON-ready dict.

How much is run (issue: replays must be fast): a policy with at most
``exact_up_to`` distinct signatures has every signature compiled and run; a
policy with more (``none`` on real traffic: hundreds) has ``sample`` of them,
evenly spaced in tokens from the smallest to the largest (``signatures.sample``),
and the rest estimated (``estimate``). A signature is run once even when
several policies share it (128 is a bucket of multiple:128, pow2 and most
bucket lists). Counts are computed from the trace and are exact.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from collections import Counter
from typing import Any, Callable, Sequence

import torch

from harness.port import answers, operators, replay, signatures
from harness.port.device import NOT_AVAILABLE, USES, DeviceProbe
from harness.port.estimate import percentile
from harness.port.models import PortModel, load
from harness.port.signatures import DEFAULT_POLICIES, Policy, Signature, tokens
from harness.port.traces import Request, in_arrival_order

SCHEMA = "neuronsim.port/1"


def choose_targets(requests: Sequence[Request], policies: Sequence[Policy], exact_up_to: int,
                   sample: int) -> tuple[list[replay.Target], dict[str, dict[str, Any]]]:
    """Signatures to run (with the request replayed at each), and per policy which ones and why."""
    chosen: dict[Signature, int] = {}
    plan: dict[str, dict[str, Any]] = {}
    for policy in policies:
        sigs = signatures.signatures(requests, policy)
        first: dict[Signature, int] = {}
        for request, sig in zip(requests, sigs):
            if sig is not None and sig not in first:
                first[sig] = request.seq_len
        distinct = list(first)
        picked = distinct if len(distinct) <= exact_up_to else signatures.sample(distinct, sample)
        plan[policy.name] = {"distinct": len(distinct), "selected": len(picked),
                             "how": "all" if len(picked) == len(distinct) else
                             f"sample of {len(picked)} evenly spaced in tokens (smallest and largest included)"}
        for sig in picked:
            chosen.setdefault(sig, first[sig])
    targets = [replay.Target(sig, seq_len) for sig, seq_len in sorted(chosen.items(), key=lambda kv: (tokens(kv[0]),
                                                                                                     kv[0]))]
    return targets, plan


def _histogram(lengths: Sequence[int], bins: int = 32) -> list[dict[str, int]]:
    lo, hi = min(lengths), max(lengths)
    width = max(1, -(-(hi - lo + 1) // bins))
    counts = Counter((n - lo) // width for n in lengths)
    return [{"low": lo + i * width, "high": lo + (i + 1) * width - 1, "requests": counts.get(i, 0)}
            for i in range(-(-(hi - lo + 1) // width))]


def trace_summary(requests: Sequence[Request], source: str, warmup: int) -> dict[str, Any]:
    lengths = [r.seq_len for r in requests]
    arrivals = [r.arrival_s for r in requests if r.arrival_s is not None]
    return {
        "source": source, "requests": len(requests), "real_tokens": sum(r.tokens for r in requests),
        "seq_len": {"min": min(lengths), "p50": percentile(lengths, 50), "p95": percentile(lengths, 95),
                    "p99": percentile(lengths, 99), "max": max(lengths)},
        "batches": {str(b): n for b, n in sorted(Counter(r.batch for r in requests).items())},
        "distinct_lengths": len(set(lengths)),
        "arrival_span_s": (max(arrivals) - min(arrivals)) if arrivals else None,
        "warmup_requests": warmup,
        "histogram": _histogram(lengths),
    }


def _correctness(measurements: dict[Signature, dict[str, Any]], rtol: float, atol: float) -> dict[str, Any]:
    checks = [m for m in measurements.values() if "check" in m]
    errors = [m["check"]["max_abs_err"] for m in checks if m["check"].get("max_abs_err") is not None]
    return {
        "checked": len(checks), "passed": sum(1 for m in checks if m["check"]["ok"]),
        "max_abs_err": max(errors) if errors else None, "rtol": rtol, "atol": atol,
        "failures": [{"batch": m["batch"], "length": m["length"], "request_seq_len": m["request_seq_len"],
                      **m["check"]} for m in checks if not m["check"]["ok"]],
        "how": "one request per measured signature: compiled output on its real positions vs CPU eager on the "
               "unpadded request",
    }


@dataclass(frozen=True)
class Settings:
    """How a port-check runs (the CLI's options)."""

    policies: tuple[str, ...] = DEFAULT_POLICIES
    warmup_fraction: float = 0.1
    device: str = "neuron"
    backend: str = "neuron"
    exact_up_to: int = 16
    sample: int = 10
    compile_stall: float | None = None
    rtol: float = 1e-3
    atol: float = 1e-3


def run(model: str | PortModel, requests: Sequence[Request], source: str, settings: Settings = Settings(),
        progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Replay ``requests`` on ``model`` under each policy and answer the three questions (see harness.port)."""
    started = time.perf_counter()
    say = progress or (lambda message: None)
    if not requests:
        raise ValueError("the trace has no requests")
    requests = in_arrival_order(requests)
    resolved = signatures.resolve(settings.policies, requests)
    longest = max([r.seq_len for r in requests] + [s[1] for p in resolved for s in signatures.signatures(requests, p)
                                                   if s is not None])
    port = load(model, longest) if isinstance(model, str) else model
    targets, plan = choose_targets(requests, resolved, settings.exact_up_to, settings.sample)
    say(f"port-check {port.name}: {len(requests)} requests, {len(resolved)} policies, "
        f"{len(targets)} signatures to compile and run")
    replayed = replay.replay(port, targets, settings.device, settings.backend, settings.rtol, settings.atol,
                             progress=say)
    median = sorted(requests, key=lambda r: r.seq_len)[len(requests) // 2]
    say(f"operator dependence: one eager forward at {median.batch}x{median.seq_len}")
    probe = DeviceProbe(settings.device)
    ops = operators.dependence(port.model, port.make_inputs(median.batch, median.seq_len), settings.device, probe)
    ops["forward"] = {"batch": median.batch, "seq_len": median.seq_len}
    replayed["missing"] = sorted(set(replayed["missing"]) | set(probe.missing))
    model_info = {"spec": port.name, "description": port.description, "parameters": port.parameters,
                  **({"config": port.details} if port.details else {})}
    report = assemble(requests, source, resolved, plan, replayed, ops, model_info, settings)
    report["wall_seconds"] = time.perf_counter() - started
    return report


def assemble(requests: Sequence[Request], source: str, resolved: Sequence[Policy], plan: dict[str, dict[str, Any]],
             replayed: dict[str, Any], ops: dict[str, Any], model_info: dict[str, Any],
             settings: Settings) -> dict[str, Any]:
    """The report from what was measured (``replay.replay``'s result and ``operators.dependence``'s)."""
    warmup = signatures.warmup_count(len(requests), settings.warmup_fraction)
    compiled_fallbacks = (replayed["compiler"] or {}).get("fallbacks_by_op") if replayed["compiler"] else None
    ops["compiled_fallbacks_by_op"] = compiled_fallbacks if compiled_fallbacks is not None else NOT_AVAILABLE
    costs = answers.Costs(replayed["measurements"], settings.compile_stall)
    rows = answers.per_policy(requests, resolved, warmup, costs)
    for row in rows:
        row["measured"] = plan[row["policy"]]
    raw = signatures.stability(signatures.signatures(requests, None), warmup, costs.programs_per_signature())
    raw["stall_requests"] = len(raw["stall_requests"])
    front = answers.pareto(rows)
    for row in rows:
        row["pareto"] = row["policy"] in front
    recommendation = answers.recommend(rows, front)
    measured = replayed["measurements"]
    all_sigs = sorted({s for p in resolved for s in signatures.signatures(requests, p) if s is not None},
                      key=lambda s: (tokens(s), s))
    table = []
    for sig in all_sigs:
        entry = {"batch": sig[0], "length": sig[1], "tokens": tokens(sig), "measured": sig in measured}
        if sig in measured:
            m = measured[sig]
            entry.update({k: m.get(k) for k in ("compile_seconds", "device_ms", "tensor_util", "neff", "programs",
                                                "first_call_seconds", "request_seq_len", "flops", "error")})
            entry["check_ok"] = m["check"]["ok"] if "check" in m else None
        else:
            entry["estimated"] = True
            for name in ("compile_seconds", "device_ms"):
                entry[name] = costs.value(sig, name)[0]
            busy, device_ns = costs.value(sig, "tensor_busy_ns")[0], costs.value(sig, "engine_device_ns")[0]
            entry["tensor_util"] = busy / device_ns if busy is not None and device_ns else None
        table.append(entry)
    missing = replayed["missing"]
    return {
        "schema": SCHEMA,
        "created": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "environment": {"torch": torch.__version__, "python": platform.python_version(), "device": settings.device,
                        "backend": settings.backend, "machine": platform.machine(),
                        "not_available": {name: USES[name] for name in missing}},
        "model": model_info,
        "trace": trace_summary(requests, source, warmup),
        "method": {
            "warmup_fraction": settings.warmup_fraction, "exact_up_to": settings.exact_up_to,
            "sample": settings.sample, "policies": list(settings.policies),
            "measured_signatures": len(measured), "signatures": len(all_sigs),
            "estimated_signatures": len(all_sigs) - sum(1 for s in all_sigs if s in measured),
            "estimation": "piecewise-linear in tokens (batch x length) between measured signatures; marked estimated",
            "estimation_check": costs.quality(),
            "compile_stall": "measured compile seconds per signature" if settings.compile_stall is None else
            f"{settings.compile_stall:g} s per new signature (--compile-stall)",
            "utilization": "TensorE busy time / device time (engine counters), summed over requests; useful: "
                           "weighted by real tokens / padded tokens",
            "latency": "simulated device time of one execution of the request's signature (timed events)",
            "recommendation_rule": answers.RECOMMENDATION_RULE,
            "replay_seconds": replayed["wall_seconds"],
        },
        "replay": {"compiler": replayed["compiler"] if replayed["compiler"] is not None else NOT_AVAILABLE},
        "shape_stability": {"raw": raw, "programs_per_signature": costs.programs_per_signature(),
                            "policies": [{"policy": r["policy"], **r["shape"]} for r in rows]},
        "operators": ops,
        "batch": {"policies": [{"policy": r["policy"], "pareto": r["pareto"], "feasible": r["feasible"],
                                **r["batch"]} for r in rows],
                  "pareto": front, "recommendation": recommendation},
        "policies": [{"policy": r["policy"], "spec": r["spec"], "measured": r["measured"],
                      "signatures": r["signatures"]} for r in rows],
        "signatures": table,
        "correctness": _correctness(measured, settings.rtol, settings.atol),
    }
