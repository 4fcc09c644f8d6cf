"""``python -m reports``: write build/reports/{index,conformance,performance,timeline,compat}.html and print a summary.

Reads the results store and files under build/ only (pytest-benchmark JSON, asv results, traces,
coverage JSON); never imports torch, device_impl or harness.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from reports import compat, conformance, data, performance, port, render, timeline

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("index.html", "conformance.html", "performance.html", "timeline.html", "compat.html")


def _run_rows(conn, selection: data.Selection) -> list[dict[str, Any]]:
    roles: dict[int, list[str]] = {}
    for mode, run_id in selection.current.items():
        roles.setdefault(run_id, []).append(f"{mode} (current)")
    for mode, run_id in selection.previous.items():
        roles.setdefault(run_id, []).append(f"{mode} (previous, for the trend)")
    if selection.opinfo is not None:
        roles.setdefault(selection.opinfo, []).append("OpInfo sweep")
    table = data.runs(conn)
    rows = []
    for record in table.to_dict("records"):
        if record["id"] in roles:
            rows.append({**record, "role": ", ".join(roles[record["id"]])})
    return rows


def build(store: Path, out: Path, build_dir: Path, traces: list[str] | None = None) -> dict[str, Any]:
    """Render the four pages; returns what they show (for the summary and for tests)."""
    out.mkdir(parents=True, exist_ok=True)
    env = render.environment()
    with data.connect(store) as conn:
        conf = conformance.build(conn, build_dir / "coverage.json", build_dir / "junit")
        runs = _run_rows(conn, conf["selection"])
        compat_session = compat.latest(conn)
    perf = performance.build(build_dir / "benchmarks", build_dir / "asv" / "results", build_dir / "asv-html", out)
    lanes = timeline.build(build_dir / "traces", out, traces)
    common = {"generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "store": str(store),
              "build": str(build_dir)}
    port_page = port.write(env, out / "port.json", out / "port.html", **common)  # when port-check wrote its JSON
    render.write(env, "index.html", out / "index.html", page="index.html", conformance=conf, performance=perf,
                 timeline=lanes, runs=runs, compat=compat_session, port=port_page, **common)
    render.write(env, "conformance.html", out / "conformance.html", page="conformance.html", c=conf, **common)
    render.write(env, "performance.html", out / "performance.html", page="performance.html", p=perf, **common)
    render.write(env, "timeline.html", out / "timeline.html", page="timeline.html", t=lanes, **common)
    render.write(env, "compat.html", out / "compat.html", page="compat.html", compat=compat_session, **common)
    return {"conformance": conf, "performance": perf, "timeline": lanes, "runs": runs, "out": out,
            "compat": compat_session}


def _cut_words(cut: dict[str, Any]) -> str:
    """A cut run in words: "run 7 ran 48 of 2,104 tests (interrupted)"."""
    return (f"run {cut['run']} ran {cut['tests_run']:,} of {cut['tests_collected']:,} tests"
            + (f" ({cut['stopped']})" if cut["stopped"] else ""))


def summary(report: dict[str, Any]) -> list[str]:
    """One screen of text: what the pages say, in numbers."""
    conf, perf, lanes = report["conformance"], report["performance"], report["timeline"]
    lines = [f"neuronsim report: {report['out'] / 'index.html'}"]
    for mode, totals in conf["mode_totals"].items():
        run = conf["selection"].current[mode]
        lines.append(f"  conformance {mode:9s} run {run}: {totals['pass']} pass, {totals['fail']} fail, "
                     f"{totals['xfail']} xfail, {totals['xpass']} xpass, {totals['skip']} skip "
                     f"({render.percent(totals['rate'])} pass)")
        if mode in conf["cut"]:
            lines.append(f"    CUT SHORT: {_cut_words(conf['cut'][mode])}; these figures cover only those tests")
        trend = conf["trends"].get(mode, {})
        if trend.get("previous") is not None:
            lines.append(f"    vs run {trend['previous']}: {render.percent(trend['rate_before'])} -> "
                         f"{render.percent(trend['rate_now'])} on {trend['common']} common (op, dtype); "
                         f"{len(trend['new_failures'])} new failures, {len(trend['fixed'])} fixed")
    for mode, result in conf["pytest"].items():
        if result["failed"]:
            counts = result["counts"]
            lines.append(f"  pytest opsuite {mode}: {counts['failed']} failed, {counts['errors']} errors of "
                         f"{counts['tests']} tests (see conformance.html#pytest)")
    if conf["opinfo"]:
        o = conf["opinfo"]
        lines.append(f"  OpInfo sweep run {conf['selection'].opinfo}: {o['ops']} ops, {o['samples']} samples, "
                     f"{o['counts']['fail']} fail, {render.percent(o['rate'])} pass")
    lines.append(f"  failures listed with reproducers: {conf['failure_count']}")
    if conf.get("mutation"):
        m = conf["mutation"]
        if m["meaningful"]:
            lines.append(f"  mutation score run {m['run']}: {m['caught']} of {m['judged']} mutants caught "
                         f"({render.percent(m['score'])}) over {m['ops']} kernels; " +
                         ", ".join(f"{r['class']} {render.percent(r['score'])}" for r in m["classes"]))
        else:
            lines.append(f"  mutation score run {m['run']}: not meaningful: {m['unreached_kernels']} kernels reached "
                         f"by no stored case (op-suite run {_cut_words(m['source_cut'])}); over the reached kernels "
                         f"{m['reached_caught']} of {m['reached_judged']} caught "
                         f"({render.percent(m['reached_score'])})")
    if conf["coverage"]:
        cov = conf["coverage"]
        tiers = ", ".join(f"{n} {t}" for t, n in cov["by_tier"].items())
        lines.append(f"  core ATen opset (torch {cov['torch']}): {cov['total']} overloads: {tiers}; "
                     f"{cov['exercised']} reached by the cases")
    if perf["groups"]:
        geo = ", ".join(f"{m} {render.ratio(g)}" for m, g in perf["geomeans"].items())
        lines.append(f"  benchmarks ({len(perf['groups'])} case/dtype groups, best time / CPU eager, geomean): {geo}")
        for group in perf["groups"][:8]:
            cells = []
            for mode in performance.NEURON_MODES:
                entry = group["modes"].get(mode)
                if entry:
                    cells.append(f"{mode} {render.ratio(entry.get('ratio_vs_cpu_eager'))} "
                                 f"(device {render.seconds(entry.get('device_seconds'))})")
            lines.append(f"    {group['case'] + ' ' + group['dtype']:28s} " + "; ".join(cells))
        for mode, reason in perf["skipped"].items():
            lines.append(f"  {mode} skipped: {reason[:110]}")
    else:
        lines.append("  benchmarks: no pytest-benchmark JSON under build/benchmarks")
    if perf["asv_runs"]:
        lines.append(f"  asv: {len(perf['asv_runs'])} result file(s), latest commit {perf['asv_latest']['commit']}; "
                     f"HTML {'at ' + perf['asv_html'] if perf['asv_link'] else 'not published'}")
    for diff in (report.get("compat") or {}).get("diffs", []):
        lines.append(f"  compat torch {diff['base']} -> {diff['new']}: {len(diff['newly_failing'])} newly failing, "
                     f"{len(diff['newly_passing'])} newly passing, {len(diff['api_changes'])} API changes"
                     + (" (REGRESSED)" if diff["regressed"] else ""))
    for program in lanes["programs"][:3]:
        busiest = max(program["lanes"][1:] or program["lanes"], key=lambda lane: lane["utilization"])
        lines.append(f"  timeline {program['name']}: {program['span_us']:.2f} us, busiest lane {busiest['name']} "
                     f"{render.percent(busiest['utilization'])}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports", description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=ROOT / "build" / "results.sqlite", help="results store")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "reports", help="output directory")
    parser.add_argument("--build", type=Path, default=None,
                        help="directory with benchmarks/, asv/results/, asv-html/, traces/, coverage.json "
                             "(default: the store's directory)")
    parser.add_argument("--trace", action="append", default=None, metavar="NAME",
                        help="trace(s) under BUILD/traces to draw (default: all)")
    args = parser.parse_args(argv)
    build_dir = args.build or args.store.parent
    try:
        report = build(args.store, args.out, build_dir, args.trace)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(summary(report)))
    return 0
