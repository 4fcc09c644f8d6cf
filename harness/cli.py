"""Command line of the harness.

``python -m harness run [--ops OP ...] [--families F ...] [--modes M ...] [--profile P] [--device D]``
draws cases from the op specs with Hypothesis, runs them and stores every result;
``python -m harness summary [--run ID]`` prints pass/fail/xfail counts by family, dtype and mode
from the store; ``python -m harness opinfo`` runs PyTorch's own OpInfo sweep; ``python -m harness merge``
combines shard stores; ``python -m harness compat`` runs the suites against several torch versions
(harness.compat).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections import Counter, defaultdict

from harness import modes
from harness.env import environment
from harness.store import DEFAULT_PATH, Store


def _progress(done: int, total: int, started: float, label: str) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    rate = done / max(time.perf_counter() - started, 1e-9)
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label[:40]:40s} {rate:5.1f}/s")
    sys.stderr.flush()


def cmd_run(args: argparse.Namespace) -> int:
    from hypothesis import HealthCheck, given, seed, settings
    from hypothesis import strategies as st

    from harness.runner import draw_case, run_case
    from harness.specs import SPECS
    from harness.xfails import XFails

    chosen = [s for s in SPECS.values() if (not args.ops or s.name in args.ops)
              and (not args.families or s.family in args.families)]
    unknown = set(args.ops or ()) - set(SPECS)
    if unknown:
        print(f"unknown op spec(s): {sorted(unknown)}", file=sys.stderr)
        return 2
    families = {s.family for s in SPECS.values()}
    if set(args.families or ()) - families:
        print(f"unknown famil(ies): {sorted(set(args.families) - families)}; choose from {sorted(families)}",
              file=sys.stderr)
        return 2
    mode_names = list(modes.MODES) if "all" in args.modes else args.modes
    store = Store(args.results)
    run_id = store.start_run("cli", environment(args.device), args.profile)
    xfails = XFails.load()
    examples = {"quick": 4, "ci": 25, "nightly": 200}[args.profile]
    verdicts: Counter = Counter()
    failures: list[str] = []
    started = time.perf_counter()
    jobs = [(spec, mode) for spec in chosen for mode in mode_names]
    warnings.filterwarnings("ignore", message="Operator '.*' executed via CPU fallback")
    for n, (spec, mode) in enumerate(jobs):
        _progress(n, len(jobs), started, f"{spec.name} [{mode}]")
        results = []

        # quick is derandomized, as in `pytest opsuite`: the same cases every run; --seed picks others
        @settings(max_examples=examples, deadline=None, database=None,
                  derandomize=args.profile == "quick" and args.seed is None, suppress_health_check=list(HealthCheck))
        @given(data=st.data())
        def explore(data):
            result = run_case(draw_case(data, spec, mode, args.device), xfails)
            results.append(result)
            assert result.verdict != "fail", result.message

        if args.seed is not None:
            explore = seed(args.seed)(explore)
        try:
            explore()
        except AssertionError:
            pass
        final_fail = [r for r in results if r.verdict == "fail"][-1:]
        for result in [r for r in results if r.verdict != "fail"] + final_fail:
            store.add(run_id, result, spec.family)
            verdicts[result.verdict] += 1
            if result.verdict == "fail":
                failures.append(f"{spec.name} [{result.case.dtype}, {mode}]: {result.message}")
        store.commit()
    _progress(len(jobs), len(jobs), started, "done")
    sys.stderr.write("\n")
    store.finish_run(run_id)
    print(f"run {run_id}: " + ", ".join(f"{v} {k}" for k, v in sorted(verdicts.items())) +
          f" in {time.perf_counter() - started:.1f}s; store {store.path}")
    for line in failures:
        print(f"FAIL {line}")
    store.close()
    return 1 if failures else 0


def summarize(store: Store, run_id: int | None) -> dict:
    run_id = run_id or store.latest_run()
    if run_id is None:
        return {"run": None}
    rows = store.query("SELECT family, dtypes, mode, verdict, source FROM results WHERE run_id = ?", (run_id,))
    by: dict[str, dict[str, Counter]] = {"family": defaultdict(Counter), "dtype": defaultdict(Counter),
                                         "mode": defaultdict(Counter)}
    total: Counter = Counter()
    for row in rows:
        dtype = json.loads(row["dtypes"])[0] if row["dtypes"] else "?"
        by["family"][row["family"] or row["source"]][row["verdict"]] += 1
        by["dtype"][dtype][row["verdict"]] += 1
        by["mode"][row["mode"]][row["verdict"]] += 1
        total[row["verdict"]] += 1
    return {"run": run_id, "total": dict(total),
            **{axis: {k: dict(v) for k, v in sorted(values.items())} for axis, values in by.items()}}


def cmd_summary(args: argparse.Namespace) -> int:
    store = Store(args.results)
    summary = summarize(store, args.run)
    if summary["run"] is None:
        print(f"no runs in {store.path}")
        return 1
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    verdicts = ("pass", "fail", "xfail", "xpass", "skip")
    print(f"run {summary['run']} ({store.path}): " + ", ".join(f"{summary['total'].get(v, 0)} {v}" for v in verdicts))
    for axis in ("family", "dtype", "mode"):
        print(f"\nby {axis}:")
        print(f"  {'':16s}" + "".join(f"{v:>8s}" for v in verdicts))
        for key, counts in summary[axis].items():
            print(f"  {key:16s}" + "".join(f"{counts.get(v, 0):8d}" for v in verdicts))
    return 0


def cmd_opinfo(args: argparse.Namespace) -> int:
    from harness import opinfo

    return opinfo.main(args)


def cmd_merge(args: argparse.Namespace) -> int:
    from pathlib import Path

    from harness.shards import merge

    missing = [p for p in args.stores if not Path(p).exists()]
    if missing:
        print(f"no such store(s): {', '.join(missing)}", file=sys.stderr)
        return 2
    counts = merge([Path(p) for p in args.stores], Path(args.output), join=args.join)
    print(f"merged {counts['stores']} store(s): {counts['runs']} runs, {counts['results']} results -> {args.output}")
    return 0


def cmd_cells(args: argparse.Namespace) -> int:
    store = Store(args.results)
    rows = store.cells(args.op, args.run, args.mode)
    if not rows:
        print(f"no cases of op spec {args.op!r} with cells in {store.path}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'dtype':10s} {'domain':14s} {'layout':14s} {'size':10s} {'edge':>6s} {'error':14s} {'mode':9s} "
          f"{'cases':>5s} {'designed':>8s}  verdicts")
    for r in rows:
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(r["verdicts"].items()))
        print(f"{r['dtype']:10s} {r['domain']:14s} {r['layout']:14s} {r['size']:10s} {str(r['edge']):>6s} "
              f"{str(r['error'] or ''):14s} {r['mode']:9s} {r['cases']:5d} {r['designed']:8d}  {verdicts}")
    domains = {(r["dtype"], r["domain"]) for r in rows}
    print(f"{len(rows)} cells; {len(domains)} dtype x domain pairs; layouts {sorted({r['layout'] for r in rows})}; "
          f"sizes {sorted({r['size'] for r in rows})}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (also used by tests to check documented commands without running them)."""
    parser = argparse.ArgumentParser(prog="python -m harness", description="neuronsim differential harness")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="draw and run cases from the op specs")
    run.add_argument("--ops", nargs="*", help="op spec names (default: all)")
    run.add_argument("--families", nargs="*", help="spec families (pointwise, reduction, ...)")
    run.add_argument("--modes", nargs="*", default=["eager"], choices=list(modes.MODES) + ["all"])
    run.add_argument("--profile", default="quick", choices=["quick", "ci", "nightly"])
    run.add_argument("--device", default="neuron")
    run.add_argument("--seed", type=int, default=None, help="Hypothesis seed (default: quick is derandomized, "
                     "ci and nightly random)")
    run.add_argument("--results", default=str(DEFAULT_PATH))
    run.set_defaults(func=cmd_run)
    summary = sub.add_parser("summary", help="pass/fail/xfail counts from the store")
    summary.add_argument("--run", type=int, default=None, help="run id (default: the latest)")
    summary.add_argument("--json", action="store_true")
    summary.add_argument("--results", default=str(DEFAULT_PATH))
    summary.set_defaults(func=cmd_summary)
    op = sub.add_parser("opinfo", help="PyTorch's OpInfo sweep (op_db) on the device vs CPU")
    op.add_argument("--dtypes", nargs="*", default=["float32"])
    op.add_argument("--ops", nargs="*", help="OpInfo names (default: all)")
    op.add_argument("--device", default="neuron")
    op.add_argument("--max-samples", type=int, default=None, help="per op and dtype")
    op.add_argument("--shard", default=None, metavar="K/N", help="only the ops of shard K of N (CI matrices)")
    op.add_argument("--results", default=str(DEFAULT_PATH))
    op.set_defaults(func=cmd_opinfo)
    merge = sub.add_parser("merge", help="combine shard stores into one store")
    merge.add_argument("stores", nargs="+", help="SQLite stores written by shards")
    merge.add_argument("-o", "--output", default=str(DEFAULT_PATH), help="the merged store (appended to)")
    merge.add_argument("--join", action="store_true",
                       help="the shard runs of one sweep (--shard K/N, same N and commit) become one run")
    merge.set_defaults(func=cmd_merge)
    cells = sub.add_parser("coverage-cells", help="which dtype x domain x layout x size cells an op spec's cases ran")
    cells.add_argument("--op", required=True, help="op spec name (harness.specs)")
    cells.add_argument("--run", type=int, default=None, help="run id (default: the latest with cases of the op)")
    cells.add_argument("--mode", default=None)
    cells.add_argument("--json", action="store_true")
    cells.add_argument("--results", default=str(DEFAULT_PATH))
    cells.set_defaults(func=cmd_cells)
    from harness.mutate import add_parser as add_mutate

    add_mutate(sub)
    from harness.port.cli import add_parser as add_port_check

    add_port_check(sub)
    from harness.compat.run import add_parser as add_compat

    add_compat(sub)
    return parser
