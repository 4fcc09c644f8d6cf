"""``python -m harness port-check MODEL (--trace FILE | --synthetic SPEC)``: the port-readiness report.

Prints the one-screen summary, writes the JSON (``build/reports/port.json`` or
``--json``) and renders ``port.html`` next to it (the ``reports`` package; also
re-rendered by ``python -m reports``, whose index links it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_JSON = ROOT / "build" / "reports" / "port.json"


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from harness.port.signatures import DEFAULT_POLICIES

    p = sub.add_parser("port-check", help="port readiness: shape stability, operator dependence, batch "
                                          "configuration on your model and traffic",
                       description=__doc__.splitlines()[0])
    p.add_argument("model", help="hf:NAME (hf:llama, hf:gpt2, hf:bert, hf:qwen2, a transformers model or config "
                                 "class; small config, random weights) or module:function returning "
                                 "(model, make_inputs) (see harness/port/models.py)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", help="request shapes: CSV with a header (seq_len[,batch][,arrival_s]) or JSONL")
    source.add_argument("--synthetic", metavar="SPEC", help="fixed|uniform|lognormal|bimodal[:k=v,...], e.g. "
                                                            "lognormal:n=1000,median=384 (harness/port/traces.py)")
    p.add_argument("--policies", nargs="+", default=list(DEFAULT_POLICIES),
                   help="bucketing policies: none, multiple:N, pow2[:MIN], buckets:a,b,c, buckets:auto, max[:L] "
                        f"(default: {' '.join(DEFAULT_POLICIES)})")
    p.add_argument("--warmup", type=float, default=0.1, help="share of the trace treated as warm-up (default 0.1)")
    p.add_argument("--device", default="neuron")
    p.add_argument("--backend", default="neuron", help="torch.compile backend (default neuron)")
    p.add_argument("--exact-up-to", type=int, default=16,
                   help="run every signature of a policy with at most this many (default 16)")
    p.add_argument("--sample", type=int, default=10,
                   help="signatures run for a policy with more; the rest are estimated (default 10)")
    p.add_argument("--compile-stall", type=float, default=None, metavar="SECONDS",
                   help="assume this compile stall per new signature instead of the measured compile seconds "
                        "(the real Neuron compiler: about 60)")
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--atol", type=float, default=1e-3)
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"JSON report (default {DEFAULT_JSON})")
    p.add_argument("--html", type=Path, default=None, help="HTML page (default: port.html next to the JSON)")
    p.add_argument("--save-trace", type=Path, default=None, help="write the trace replayed (CSV or JSONL)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=main)
    return p


def _render_html(json_path: Path, html_path: Path) -> str:
    try:
        from reports import port as port_page
    except ImportError as e:  # jinja2 missing: the JSON is still there
        return f"HTML not written ({e}); `pip install jinja2` and run `python -m reports`"
    port_page.render_file(json_path, html_path)
    return f"HTML: {html_path}"


def _finite(value):
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def main(args: argparse.Namespace) -> int:
    from harness.port import check, summary, traces
    from harness.port.models import ModelSpecError

    started = time.perf_counter()
    try:
        if args.trace:
            requests, source = traces.read(args.trace), str(args.trace)
        else:
            requests, source = traces.synthetic(args.synthetic), traces.describe_synthetic(args.synthetic)
    except traces.TraceError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.save_trace:
        traces.write(args.save_trace, requests)
    progress = None if args.quiet else (lambda message: print(message, file=sys.stderr, flush=True))
    try:
        settings = check.Settings(policies=tuple(args.policies), warmup_fraction=args.warmup, device=args.device,
                                  backend=args.backend, exact_up_to=args.exact_up_to, sample=args.sample,
                                  compile_stall=args.compile_stall, rtol=args.rtol, atol=args.atol)
        report = check.run(args.model, requests, source, settings, progress=progress)
    except (ModelSpecError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report["command"] = "python -m harness port-check " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else ""
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(_finite(report), indent=1), encoding="utf-8")
    html = args.html or args.json.with_name("port.html")
    print("\n".join(summary.lines(report)))
    print(f"JSON: {args.json}   {_render_html(args.json, html)}   ({time.perf_counter() - started:.0f} s)")
    return 0 if report["correctness"]["passed"] == report["correctness"]["checked"] else 1
