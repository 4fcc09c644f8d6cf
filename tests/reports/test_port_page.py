"""port.html from port-check's JSON: the three answers as tables, the SVG charts (Pareto scatter, padded fraction,
length histogram, requests per signature), estimated numbers marked, hostile names escaped, and the index link that
appears only when build/reports/port.json exists.

The JSON is assembled by harness.port.check.assemble from a known trace and fixed measurements (no compile), so the
page is tested against the schema the harness really writes."""

from __future__ import annotations

import json
import re

import pytest
from report_fixture import HOSTILE

from harness.port import check, signatures
from harness.port.cli import _finite
from harness.port.traces import Request
from reports import cli, port

LENGTHS = [100, 100, 256, 120, 256, 100, 120, 100, 300, 100] * 3


def _measurement(sig, seq_len):
    batch, length = sig
    ms = 0.02 + 1e-4 * length + 1e-7 * length ** 2
    return {"batch": batch, "length": length, "tokens": batch * length, "request_seq_len": seq_len, "measured": True,
            "device_ms": ms, "tensor_busy_ns": ms * 1e6 * 0.3, "engine_device_ns": ms * 1e6, "compile_seconds": 1.5,
            "programs": 1, "neff": "compiled", "first_call_seconds": 2.0, "flops": 1e6, "tensor_util": 0.3,
            "check": {"ok": True, "reason": "", "max_abs_err": 2e-7, "max_rel_err": 1e-6}}


def _report() -> dict:
    requests = [Request(n) for n in LENGTHS]
    settings = check.Settings(policies=("none", "multiple:128", "max"), exact_up_to=3, sample=2)
    resolved = signatures.resolve(settings.policies, requests)
    targets, plan = check.choose_targets(requests, resolved, settings.exact_up_to, settings.sample)
    measurements = {t.signature: _measurement(t.signature, t.seq_len) for t in targets}
    replayed = {"measurements": measurements, "wall_seconds": 12.0, "missing": [],
                "compiler": {"graphs": len(targets), "compiles": len(targets), "cache_hits": 0, "recompiles":
                             len(targets) - 1, "compile_seconds": 1.5 * len(targets), "fallbacks": 0, "executions":
                             len(targets), "cache_hits_by_source": {"memory": 0, "disk": 0}, "fallbacks_by_op": {}}}
    ops = {"ops": [{"op": "aten::mm", "count": 4, "custom": False, "namespace": "aten", "tier": "native",
                    "via": "native: kernels.matmul"},
                   {"op": f"mylib::{HOSTILE}", "count": 1, "custom": True, "namespace": "mylib", "tier": "unsupported",
                    "via": "raises on the device; the CPU runs it", "error": "NotImplementedError: <b>no</b>"}],
           "distinct_ops": 2, "calls_per_forward": 5, "by_tier": {"native": 1, "decomposed": 0, "fallback": 0,
                                                                  "unsupported": 1},
           "calls_by_tier": {}, "custom": [f"mylib::{HOSTILE}"], "fallback": [], "unsupported": [f"mylib::{HOSTILE}"],
           "device_calls_by_tier": {}, "tiers_from": "", "forward": {"batch": 1, "seq_len": 100}}
    model = {"spec": f"models.py:{HOSTILE}", "description": "a model whose name breaks unescaped HTML",
             "parameters": 1234}
    report = check.assemble(requests, "lengths.csv", resolved, plan, replayed, ops, model, settings)
    return json.loads(json.dumps(_finite(report)))


@pytest.fixture(scope="module")
def doc():
    return _report()


def test_the_json_the_page_reads(doc):
    assert doc["schema"] == port.SCHEMA
    rows = {r["policy"]: r for r in doc["shape_stability"]["policies"]}
    assert rows["none"]["distinct_signatures"] == 4 and rows["none"]["compile_seconds_estimated_share"] > 0
    assert rows["multiple:128"]["distinct_signatures"] == 3 and rows["max:384"]["distinct_signatures"] == 1
    assert doc["batch"]["recommendation"]["policy"] in doc["batch"]["pareto"]


def test_port_page_renders_every_answer(doc, report_fixture, tmp_path):
    out = tmp_path / "reports"
    out.mkdir()
    (out / "port.json").write_text(json.dumps(doc))
    cli.build(report_fixture.store, out, report_fixture.build)
    html = (out / "port.html").read_text()
    for anchor in ("shape-table", "ops-table", "batch-table", "signature-table", "pareto-chart", "padded-chart",
                   "length-histogram"):
        assert f'id="{anchor}"' in html, anchor
    assert html.count("<svg") >= 4  # Pareto, padded fraction, lengths, requests per signature
    recommended = doc["batch"]["recommendation"]["policy"]
    assert f'<div class="big" id="recommended">{recommended}</div>' in html
    # estimated numbers carry the mark; policy none rests on an estimated signature (120 is not run)
    none_row = re.search(r"<tr><td><code>none</code></td>.*?</tr>", html, re.S).group(0)
    assert 'class="estimated"' in none_row
    bucket_row = re.search(r"<tr[^>]*><td><code>multiple:128</code></td>.*?</tr>", html.split('id="batch-table"')[1],
                           re.S).group(0)
    assert 'class="estimated"' not in bucket_row
    assert "tier-unsupported" in html and "Pareto" in html
    assert HOSTILE not in html and "&lt;script&gt;" in html and "<b>no</b>" not in html


def test_index_links_the_page_only_when_port_check_ran(doc, report_fixture, tmp_path):
    without = tmp_path / "without"
    cli.build(report_fixture.store, without, report_fixture.build)
    assert 'href="port.html"' not in (without / "index.html").read_text()
    assert not (without / "port.html").exists()
    with_port = tmp_path / "with"
    with_port.mkdir()
    (with_port / "port.json").write_text(json.dumps(doc))
    cli.build(report_fixture.store, with_port, report_fixture.build)
    index = (with_port / "index.html").read_text()
    assert 'href="port.html"' in index and "Port readiness" in index
    assert f"recommended policy: {doc['batch']['recommendation']['policy']}" in index


def test_standalone_rendering_and_a_foreign_json(doc, tmp_path):
    (tmp_path / "port.json").write_text(json.dumps(doc))
    assert port.render_file(tmp_path / "port.json", tmp_path / "page" / "port.html").exists()
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something/else"}))
    with pytest.raises(ValueError, match="not a port-check report"):
        port.load(tmp_path / "other.json")
    assert port.load(tmp_path / "missing.json") is None
