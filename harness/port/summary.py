"""The terminal summary of a port-check report: one screen, the three answers in numbers.

A number that rests on estimated signatures is printed with a leading ``~``
(the legend says so); counts are exact and never carry it.
"""

from __future__ import annotations

from typing import Any

from harness.port.device import NOT_AVAILABLE


def _pct(value: float | None, estimated: bool = False) -> str:
    return "—" if value is None else ("~" if estimated else "") + f"{value:.1%}"


def _num(value: float | None, fmt: str = ".3g", estimated: bool = False) -> str:
    if value is None:
        return "—"
    return ("~" if estimated else "") + format(value, fmt)


def _ops_line(ops: dict[str, Any]) -> list[str]:
    tiers = ops["by_tier"]
    lines = [f"   {ops['distinct_ops']} distinct ops, {ops['calls_per_forward']} calls per forward "
             f"({ops['forward']['batch']}x{ops['forward']['seq_len']}): {tiers['native']} native, "
             f"{tiers['decomposed']} decomposed, {tiers['fallback']} CPU fallback, {tiers['unsupported']} unsupported"
             + (f", {tiers['unknown']} tier unknown ({NOT_AVAILABLE})" if tiers.get("unknown") else "")]
    counts = {e["op"]: e["count"] for e in ops["ops"]}
    for label, key in (("CPU fallback", "fallback"), ("unsupported", "unsupported"), ("custom ops", "custom")):
        names = ops[key]
        if names:
            shown = ", ".join(f"{n} x{counts[n]}" for n in names[:6]) + (" ..." if len(names) > 6 else "")
            lines.append(f"   {label}: {shown}")
        elif key == "custom":
            lines.append("   custom ops: none")
    compiled = ops.get("compiled_fallbacks_by_op")
    if isinstance(compiled, dict):
        lines.append("   compiled mode: " + (", ".join(f"{op} made {n} graph(s) run eagerly" for op, n in
                                                     compiled.items()) or "every graph lowered (no eager fallback)"))
    return lines


def lines(report: dict[str, Any]) -> list[str]:
    trace, method, model = report["trace"], report["method"], report["model"]
    seq = trace["seq_len"]
    out = [f"port-check {model['spec']} — {model['description']}, {model['parameters']:,} parameters",
           f"trace {trace['source']}: {trace['requests']} requests, seq_len {seq['min']}..{seq['max']} "
           f"(p50 {seq['p50']}, p95 {seq['p95']}), {trace['distinct_lengths']} distinct lengths; warm-up = first "
           f"{trace['warmup_requests']} requests ({method['warmup_fraction']:.0%})",
           f"replay: {method['measured_signatures']} signatures compiled and run, {method['estimated_signatures']} "
           f"estimated (~: interpolated in tokens), {method['replay_seconds']:.0f} s; compile stall = "
           f"{method['compile_stall']}"]
    compiler = report["replay"]["compiler"]
    if isinstance(compiler, dict):
        hits = compiler.get("cache_hits_by_source") or {}
        out.append(f"   compiler this run: {compiler['graphs']} graphs, {compiler['compiles']} compiled, "
                   f"{compiler['cache_hits']} NEFF cache hits ({', '.join(f'{k} {v}' for k, v in hits.items())}), "
                   f"{compiler['recompiles']} recompiles, {compiler['compile_seconds']:.1f} s compiling")
    shape = report["shape_stability"]
    out.append("")
    out.append("1. Shape stability (counts exact)     signatures compiles recompiles  compile s  "
               "served-by-NEFF  nobody-tested  stalls after warm-up")
    raw = shape["raw"]
    out.append(f"   {'raw shapes (batch, seq_len)':34s} {raw['distinct_signatures']:10d} {raw['compiles']:8d} "
               f"{raw['recompiles']:10d} {'':>10s}  {_pct(raw['served_by_compiled_after_warmup']):>14s}  "
               f"{_pct(raw['nobody_tested']):>13s}")
    for row in shape["policies"]:
        est = row["compile_seconds_estimated_share"] > 0
        stall = _num(row["stall_seconds_after_warmup"], ".3g", row["stall_seconds_estimated_share"] > 0)
        over = f"  ({row['overflow']} too long)" if row["overflow"] else ""
        out.append(f"   {row['policy'][:34]:34s} {row['distinct_signatures']:10d} {row['compiles']:8d} "
                   f"{row['recompiles']:10d} {_num(row['compile_seconds'], '.3g', est):>10s}  "
                   f"{_pct(row['served_by_compiled_after_warmup']):>14s}  {_pct(row['nobody_tested']):>13s}  "
                   f"{row['stall_requests']:5d} = {stall} s{over}")
    out.append("")
    out.append("2. Operator dependence")
    out.extend(_ops_line(report["operators"]))
    out.append("")
    out.append("3. Batch configuration               padded  p50 ms  p95 ms  served p95 ms  TensorE  useful  "
               "goodput tok/s  Pareto")
    for row in report["batch"]["policies"]:
        if not row.get("available"):
            out.append(f"   {row['policy'][:34]:34s} {_pct(row['padded_fraction']):>7s}  {row.get('reason', '')}")
            continue
        est = row["estimated_share"] > 0
        served = row["served_latency_ms"] or {}
        out.append(f"   {row['policy'][:34]:34s} {_pct(row['padded_fraction']):>7s} "
                   f"{_num(row['latency_ms']['p50'], '.3g', est):>7s} {_num(row['latency_ms']['p95'], '.3g', est):>7s} "
                   f"{_num(served.get('p95'), '.4g', est):>14s} {_pct(row['tensor_util'], est):>8s} "
                   f"{_pct(row['useful_util'], est):>7s} {_num(row['goodput_tokens_per_s'], ',.0f', est):>14s}  "
                   f"{'yes' if row['pareto'] else ''}")
    rec = report["batch"]["recommendation"]
    out.append(f"   Recommended: {rec['reason'] if rec['policy'] else '— ' + rec['reason']}")
    out.append(f"   (rule: {rec['rule']})")
    c = report["correctness"]
    out.append("")
    err = "—" if c["max_abs_err"] is None else f"{c['max_abs_err']:.2g}"
    out.append(f"Correctness: {c['passed']}/{c['checked']} sampled requests match CPU eager on their real tokens "
               f"(max abs err {err}; rtol {c['rtol']:g}, atol {c['atol']:g})"
               + ("" if c["passed"] == c["checked"] else " — MISMATCHES: " + ", ".join(
                   f"{f['batch']}x{f['length']} ({f['reason']})" for f in c["failures"][:4])))
    missing = report["environment"]["not_available"]
    if missing:
        out.append("Not available on this device: " + "; ".join(f"{k} ({v})" for k, v in missing.items()))
    out.append("~ = rests on estimated signatures (interpolated in tokens between measured ones)")
    return out
