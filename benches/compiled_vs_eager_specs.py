"""Every op spec, compiled against eager: the ops whose compiled device time exceeds the hand-written kernel's.

Usage: python benches/compiled_vs_eager_specs.py [--spec NAME ...] [--dtype float32|bfloat16] [--size CLASS]
                                                 [--csv PATH]

Issue 21: "every op's compiled device time <= its eager kernel's (a benchmark lists any op where it is not)".
``compiled_vs_eager_ops.py`` answers that for the benchmark table's dozen single-op workloads; this sweeps the
op suite's specs (harness.specs.SPECS, ~340 ops), one case each: the spec's first designed cell
(harness.design's cell model) in the dtype asked for: a contiguous layout, a normal value domain, 513 along the
free axis (``--size``: 129, 513 or 2049: a whole tile and one more), no error input. For each it runs the
spec's call on neuron in eager, adaptive and compiled mode (``torch.compile(backend="neuron",
dynamic=False)`` over the call as a function of its tensors, as the op suite's compiled mode does) and reads
one warm call's simulated device time off the core's clock (deterministic). The baseline is the better of eager
and adaptive, as in ``compiled_vs_eager_ops.py``.

A spec is listed as

* ``LOSES`` where compiled's device time exceeds the baseline's;
* ``cpu-fallback`` where eager or adaptive ran an op through the counted CPU fallback (the device has no kernel
  for it; compiled mode then computes it the same way, so the times compare nothing);
* ``eager-graph`` where compiled ran its graph eagerly (``compiler.stats()["fallbacks"]``: an op without a
  lowering) and took no longer than the baseline: its time is eager's kernels, not a program, and the
  compiler's coverage gap;
* ``eager-graph-LOSES`` where it ran eagerly and took longer: the graph AOTAutograd decomposed runs its
  pieces as eager kernels, which can cost far more than the one kernel eager calls (isin as a searchsorted
  and its neighbours: 98x). The user who compiles loses, so this counts as a loss;
* ``n/a`` where CPU refuses every case tried in the dtype (``pick_case``: the first designed cell's, then the
  other value domains' and edges' cells of the size class: clamp's draw with both bounds None, normal with a
  negative std take another cell; bitwise ops of a float dtype, avg_pool3d of bfloat16 have none), with CPU's
  reason: nothing to compare, not a failure;
* ``error`` where a mode raised on a case CPU accepts (a device bug the op suite reports);
* ``zero`` where no mode launched anything (a view, a metadata op: nothing to compare).

The exit status is 1 when any spec loses. Slow (a compile per spec): about 10-20 minutes for every spec
on two cores; not part of any test run.
"""

from __future__ import annotations

import argparse
import csv
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))

import threads  # noqa: E402,F401  (one BLAS thread for the simulator: before torch loads numpy)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import device_impl  # noqa: E402,F401  (registers the neuron device)
from device_impl import dispatch  # noqa: E402
from device_impl import compiler  # noqa: E402
from device_impl._core import C  # noqa: E402
from harness import design  # noqa: E402
from harness.specs import SPECS  # noqa: E402
from harness.values import materialize  # noqa: E402

DEVICE = "neuron"
BASELINE_MODES = ("eager", "adaptive")
SIZES = ("tile-128", "tile-512", "tile-2048")
DEFAULT_SIZE = "tile-512"


def pick_cell(name: str, dtype: str, size: str = DEFAULT_SIZE) -> design.Cell | None:
    """The case to time for spec ``name``: ``dtype``, the dtype's first design domain (``normal`` for floats),
    contiguous, the size class's last edge along the free axis (one past a whole tile: a partial tile too), no
    error input; the spec's design decides only whether it takes tensors at all. None when the spec does not
    run in ``dtype``."""
    spec = SPECS[name]
    if dtype not in spec.dtypes:
        return None
    tensors = any(c.layout != design.NO_TENSOR for c in design.design(name))
    domain = design.design_domains(dtype)[0] if tensors else design.NO_TENSOR
    layout = "contiguous" if tensors else design.NO_TENSOR
    return design.Cell(dtype, domain, layout, size, design.SIZE_EDGES[size][-1])


def candidate_cells(name: str, dtype: str, size: str = DEFAULT_SIZE) -> list[design.Cell]:
    """The cells ``pick_case`` tries, in order: ``pick_cell``'s, then the dtype's other design domains at the
    same edge, then every domain at the size class's other edges (contiguous, no error input)."""
    first = pick_cell(name, dtype, size)
    if first is None:
        return []
    if first.domain == design.NO_TENSOR:
        return [first]
    domains = design.design_domains(dtype)
    edges = design.SIZE_EDGES[size]
    cells = [first]
    for edge in (edges[-1], *reversed(edges[:-1])):
        cells.extend(design.Cell(dtype, domain, first.layout, size, edge) for domain in domains)
    return list(dict.fromkeys(cells))


def cpu_refusal(name: str, case) -> str | None:
    """Why CPU refuses the spec's call on ``case`` (its exception, one line), or None where it computes it."""
    spec = SPECS[name]
    names = [f"x{i}" for i in range(len(case.tensors))]
    scope = {"torch": torch, "F": F, "device": "cpu"}
    try:
        fn = eval(f"lambda {', '.join(names)}: {spec.render(case.params, names)}", scope)  # noqa: S307
        fn(*[materialize(t, "cpu") for t in case.tensors])
    except Exception as e:  # noqa: BLE001 - CPU's refusal is the answer
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
    return None


def pick_case(name: str, dtype: str, size: str = DEFAULT_SIZE):
    """(cell, case, None) for the first of ``candidate_cells`` whose case CPU computes, or (first cell, None,
    CPU's reason) where it refuses them all; None where the spec does not run in ``dtype``."""
    spec = SPECS[name]
    reason = None
    cells = candidate_cells(name, dtype, size)
    for cell in cells:
        case = design.designed_case(spec, cell)
        refused = cpu_refusal(name, case)
        if refused is None:
            return cell, case, None
        reason = reason or refused
    return (cells[0], None, reason) if cells else None


def _sync() -> None:
    torch.neuron.synchronize()


def _device_seconds(call: Callable[[], Any]) -> float:
    """One warm call's simulated device time: the core's clock advance over a synchronized call. The call's
    result is held until the work is synchronized, as a caller that reads it holds it: adaptive eager stores no
    output that is dead by its flush (``eager.chain.stores``), so a result dropped at once made a fused launch
    skip its output's store (masked_fill's, where's: 1.34 us against the 1.41 us that writes the result), and
    the baseline was a program that computed nothing anyone could read."""
    result = call()
    _sync()
    del result
    before = C.device_time_ns(0)
    result = call()
    _sync()
    elapsed = (C.device_time_ns(0) - before) / 1e9
    del result
    return elapsed


def measure_spec(name: str, dtype: str, size: str = DEFAULT_SIZE) -> dict[str, Any] | None:
    """Device seconds per mode for the spec's picked case, with the verdict; None when it has no case."""
    picked = pick_case(name, dtype, size)
    if picked is None:
        return None
    cell, case, refused = picked
    spec = SPECS[name]
    if case is None:
        return {"spec": name, "dtype": dtype, "cell": cell.id, "expression": spec.call, "verdict": "n/a",
                "reason": refused}
    names = [f"x{i}" for i in range(len(case.tensors))]
    expression = spec.render(case.params, names)
    row: dict[str, Any] = {"spec": name, "dtype": dtype, "cell": cell.id, "expression": expression}
    tensors = [materialize(t, DEVICE) for t in case.tensors]
    scope = {"torch": torch, "F": F, "device": DEVICE}
    fn = eval(f"lambda {', '.join(names)}: {expression}", scope)  # noqa: S307 - the spec's own call text
    cpu_fallbacks = dispatch.fallback_count()
    try:
        for mode in BASELINE_MODES:
            with torch.neuron.eager_mode(mode):
                row[mode] = _device_seconds(lambda: fn(*tensors))
        row["cpu_fallback"] = dispatch.fallback_count() != cpu_fallbacks
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="neuron", dynamic=False)
        graph_fallbacks = compiler.stats()["fallbacks"]
        row["compiled"] = _device_seconds(lambda: compiled(*tensors))
        row["eager_graph"] = compiler.stats()["fallbacks"] != graph_fallbacks
    except Exception as e:  # noqa: BLE001 - reported per spec
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        return row
    row["baseline"], row["baseline_mode"] = min((row[m], m) for m in BASELINE_MODES)
    if row["baseline"] == 0 and row["compiled"] == 0:
        row["verdict"] = "zero"
    elif row["cpu_fallback"]:
        row["verdict"] = "cpu-fallback"
    elif row["eager_graph"]:
        row["verdict"] = "eager-graph-LOSES" if row["compiled"] > row["baseline"] else "eager-graph"
    elif row["compiled"] > row["baseline"]:
        row["verdict"] = "LOSES"
    else:
        row["verdict"] = "ok"
    return row


def _us(x: float | None) -> str:
    return f"{x * 1e6:9.2f}" if x is not None else f"{'-':>9s}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", nargs="+", metavar="NAME", help="these specs only (default: every spec)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--size", choices=SIZES, default=DEFAULT_SIZE,
                        help="the size class whose last edge the free axis gets (default: %(default)s, 513)")
    parser.add_argument("--csv", help="also write every row to this CSV file")
    args = parser.parse_args(argv)
    unknown = [s for s in args.spec or () if s not in SPECS]
    if unknown:
        parser.error(f"unknown spec(s) {unknown}")
    threads.pin_torch()
    warnings.filterwarnings("ignore")
    rows = []
    print(f"{'spec':28s} {'cell':36s} {'eager us':>9s} {'adapt us':>9s} {'compiled':>9s} {'ratio':>6s}  verdict")
    for name in args.spec or sorted(SPECS):
        row = measure_spec(name, args.dtype, args.size)
        if row is None:
            continue
        rows.append(row)
        if "error" in row:
            print(f"{name:28s} {row['cell'][:36]:36s} error: {row['error']}", flush=True)
            continue
        if row["verdict"] == "n/a":
            print(f"{name:28s} {row['cell'][:36]:36s} n/a: {row['reason']}", flush=True)
            continue
        ratio = f"{row['compiled'] / row['baseline']:6.2f}" if row["baseline"] else f"{'-':>6s}"
        print(f"{name:28s} {row['cell'][:36]:36s} {_us(row['eager'])} {_us(row['adaptive'])} "
              f"{_us(row['compiled'])} {ratio}  {row['verdict']}", flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
            writer.writeheader()
            writer.writerows(rows)
    counts: dict[str, int] = {}
    for row in rows:
        verdict = "error" if "error" in row else row["verdict"]
        counts[verdict] = counts.get(verdict, 0) + 1
    print(f"\n{len(rows)} specs in {args.dtype}: " + ", ".join(f"{v} {n}" for v, n in sorted(counts.items())))
    lost = [r for r in rows if r.get("verdict") in ("LOSES", "eager-graph-LOSES")]
    for r in sorted(lost, key=lambda r: r["baseline"] / r["compiled"]):
        ratio = f"{r['compiled'] / r['baseline']:.2f}x" if r["baseline"] else "eager launches nothing"
        print(f"  {r['verdict']} {r['spec']}: compiled {r['compiled'] * 1e6:.2f} us > {r['baseline_mode']} "
              f"{r['baseline'] * 1e6:.2f} us ({ratio})  {r['expression']}")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
