"""compat.html from a compat session in the store: versions, newly failing/passing cases grouped by op and cause with
reproducers, API changes, and escaping of what upstream messages and op names contain."""

from __future__ import annotations

import shutil

from report_fixture import HOSTILE

from harness.compat import diff as compat_diff
from harness.store import Store
from reports import cli


def _row(op, verdict, message="", reproducer=""):
    return {"source": "spec", "op": op, "mode": "eager", "dtypes": '["float32"]', "shapes": "[[3]]",
            "layouts": "", "domains": "", "expression": "", "verdict": verdict, "message": message,
            "reproducer": reproducer, "run_id": 1}


def _session() -> dict:
    base = [_row("add", "pass"), _row(HOSTILE, "pass"), _row("exp", "fail", "values differ at 3 positions")]
    new = [_row("add", "fail", "dtype float16 != float32", reproducer="import torch  # <b>add</b>"),
           _row(HOSTILE, "fail", "message with <i>markup</i>"), _row("exp", "pass")]
    d = compat_diff.diff_results(base, new, "2.13.0", "2.14.1")
    compat_diff.diff_environment(d, {"install": "ok", "build": "ok", "import": "ok"},
                                 {"install": "ok", "build": "ok", "import": "ok"})
    compat_diff.diff_apis(d, {"apis": {"torch.library.get_kernel": {"group": "dispatch", "why": "w", "value": "a"}},
                              "core_overloads": ["aten::add.Tensor"]},
                          {"apis": {"torch.library.get_kernel": {"group": "dispatch", "why": "w", "value": "missing"}},
                           "core_overloads": ["aten::add.Tensor", "aten::new_op"]})
    return {"tag": "nightly-1", "targets": ["2.13.0", "2.14.1"], "diffs": [compat_diff.to_json(d)]}


def test_compat_page_shows_the_latest_session(report_fixture, tmp_path):
    store_path = tmp_path / "results.sqlite"
    shutil.copy(report_fixture.store, store_path)
    store = Store(store_path)
    store.record_compat("older", {"tag": "older", "targets": ["a", "b"], "diffs": []})
    store.record_compat("nightly-1", _session())
    store.close()
    report = cli.build(store_path, tmp_path / "reports", report_fixture.build)
    html = (tmp_path / "reports" / "compat.html").read_text()
    assert "nightly-1" in html and "older" not in html
    assert "torch 2.13.0 → 2.14.1" in html and "regressed" in html
    assert "newly failing" in html and "dtype float16 != float32" in html
    assert "import torch  # &lt;b&gt;add&lt;/b&gt;" in html  # the reproducer, escaped
    assert HOSTILE not in html and "&lt;script&gt;" in html
    assert "<i>markup</i>" not in html
    assert "torch.library.get_kernel" in html and "aten::new_op" in html
    index = (tmp_path / "reports" / "index.html").read_text()
    assert 'href="compat.html"' in index and "2 newly failing" in index
    summary = "\n".join(cli.summary(report))
    assert "compat torch 2.13.0 -> 2.14.1: 2 newly failing, 1 newly passing, 1 API changes (REGRESSED)" in summary


def test_compat_page_without_a_session(report_fixture, tmp_path):
    cli.build(report_fixture.store, tmp_path / "reports", report_fixture.build)
    assert "No compat session in the store" in (tmp_path / "reports" / "compat.html").read_text()
