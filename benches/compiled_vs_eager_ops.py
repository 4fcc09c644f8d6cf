"""Does the compiler ever lose to the hand-written kernel? Compiled vs eager device time of each single op.

Usage: python benches/compiled_vs_eager_ops.py [--case CASE ...] [--dtype fp32 bf16] [--all]

Issue 21: "a compiler should never lose to the hand-written kernel of the op it contains". For each
single-op case of benches/cases.py (tag ``ops``; by default the ones sized for two shared cores, tag
``quick`` or ``asv``; ``--all`` adds the large ones), in each dtype the case defines, this measures
one call's simulated device time (benches/measure.py: the core's clock, deterministic) in neuron
eager, adaptive eager and compiled mode, and HBM bytes. The baseline is the better of eager and
adaptive: a chain of ops is a chain of launches in eager mode, and adaptive eager runs it as one
fused tile program made of the same kernels, so the faster of the two is what hand-written kernels
achieve. Every row whose compiled time exceeds that baseline is listed as a loss at the end, and the
exit status is 1 when there is one (so a script or CI step can fail on it).

``losses()`` is the same comparison as data, for asv (benches/bench_ops.py's
``track_compiled_losses``) or a test.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Iterable

sys.path.insert(0, str(Path(__file__).parent.parent))

from benches.cases import CASES  # noqa: E402
from benches.measure import measure_case  # noqa: E402
from benches.modes import DTYPES  # noqa: E402

BASELINE_MODES = ("eager", "adaptive")


def single_op_cases(include_large: bool = False) -> list[str]:
    """The single-op cases: tag ``ops``; only those sized for two shared cores unless ``include_large``."""
    return [name for name, case in CASES.items() if "ops" in case.tags
            and (include_large or "quick" in case.tags or "asv" in case.tags)]


def compare(cases: Iterable[str], dtypes: Iterable[str]) -> list[dict]:
    """One row per (case, dtype) the case defines: device seconds and HBM bytes per mode, and the verdict."""
    rows = []
    for case in cases:
        for dtype in dtypes:
            if DTYPES[dtype] not in CASES[case].dtypes:
                continue
            row: dict = {"case": case, "dtype": dtype}
            for mode in (*BASELINE_MODES, "compiled"):
                m = measure_case(case, mode, dtype)
                if "unavailable" in m or "error" in m:
                    row[mode] = None
                    row[f"{mode}_error"] = m.get("unavailable") or m.get("error")
                    continue
                row[mode] = m["device_seconds"]
                row[f"{mode}_bytes"] = m["hbm_bytes"]
            baselines = [(row[m], m) for m in BASELINE_MODES if row.get(m) is not None]
            row["baseline"], row["baseline_mode"] = min(baselines) if baselines else (None, None)
            row["loses"] = (row.get("compiled") is not None and row["baseline"] is not None
                            and row["compiled"] > row["baseline"])
            rows.append(row)
    return rows


def losses(rows: list[dict]) -> list[dict]:
    """The rows where compiled mode's device time exceeds the better eager mode's."""
    return [r for r in rows if r["loses"]]


def _us(x: float | None) -> str:
    return f"{x * 1e6:9.2f}" if x is not None else f"{'-':>9s}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="+", choices=sorted(CASES))
    parser.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    parser.add_argument("--all", action="store_true", help="include the large single-op cases")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    rows = compare(args.case or single_op_cases(args.all), args.dtype)
    print(f"{'case':24s} {'dtype':5s} {'eager us':>9s} {'adapt us':>9s} {'compiled':>9s} {'ratio':>6s} "
          f"{'eager MB':>9s} {'comp MB':>8s}")
    for r in rows:
        ratio = f"{r['compiled'] / r['baseline']:6.2f}" if r.get("compiled") and r["baseline"] else f"{'-':>6s}"
        eb = r.get(f"{r['baseline_mode']}_bytes") if r["baseline_mode"] else None
        cb = r.get("compiled_bytes")
        print(f"{r['case']:24s} {r['dtype']:5s} {_us(r['eager'])} {_us(r['adaptive'])} {_us(r['compiled'])} "
              f"{ratio} {eb / 1e6 if eb else 0:9.3f} {cb / 1e6 if cb else 0:8.3f}"
              f"{'  LOSES' if r['loses'] else ''}")
        for mode in (*BASELINE_MODES, "compiled"):
            if r.get(f"{mode}_error"):
                print(f"    {mode}: {r[f'{mode}_error'][:200]}")
    lost = losses(rows)
    print(f"\ncompiled slower than the better eager mode: {len(lost)} of {len(rows)}")
    for r in lost:
        print(f"  {r['case']} {r['dtype']}: compiled {r['compiled'] * 1e6:.2f} us > "
              f"{r['baseline_mode']} {r['baseline'] * 1e6:.2f} us")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
