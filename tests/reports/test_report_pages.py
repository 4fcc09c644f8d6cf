"""The four report pages rendered from the fixture store: their numbers, failure rows and escaping."""

from __future__ import annotations

import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_fixture import HOSTILE, REPRO_MUL

from reports import cli

ROOT = Path(__file__).resolve().parents[2]


class Tables(HTMLParser):
    """Text of every cell of every <table id=...>, and of every element with an id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "table":
            self._table = attrs.get("id", f"table{len(self.tables)}")
            self.tables[self._table] = []
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._table is not None:
            self.tables[self._table][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def parse(path: Path) -> Tables:
    tables = Tables()
    tables.feed(path.read_text(encoding="utf-8"))
    return tables


@pytest.fixture(scope="module")
def built(report_fixture):
    report = cli.build(report_fixture.store, report_fixture.out, report_fixture.build)
    return report_fixture, report


def test_writes_the_four_pages_linked_from_the_index(built):
    fixture, _ = built
    for page in cli.PAGES:
        assert (fixture.out / page).stat().st_size > 1000, page
    index = (fixture.out / "index.html").read_text()
    for page in cli.PAGES[1:]:
        assert f'href="{page}"' in index


def test_hostile_op_names_are_escaped_everywhere(built):
    fixture, _ = built
    for page in cli.PAGES:
        text = (fixture.out / page).read_text()
        assert "<script>" not in text, f"{page} contains an unescaped <script>"
        assert "\"&'" not in text, f"{page} contains unescaped quotes"
    conformance = (fixture.out / "conformance.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in conformance
    assert "&#34;&amp;&#39;" in conformance  # the hostile message, escaped
    performance = (fixture.out / "performance.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in performance  # a benchmark case name in table and chart


def test_environment_comes_from_the_runs_shown(built):
    fixture, _ = built
    rows = parse(fixture.out / "index.html").tables["environment"]
    header, body = rows[0], rows[1:]
    ids = {int(r[0]) for r in body}
    assert ids == {fixture.runs["eager_previous"], fixture.runs["eager"], fixture.runs["adaptive"],
                   fixture.runs["opinfo"]}  # never the unfinished run
    by_id = {int(r[0]): dict(zip(header, r)) for r in body}
    current = by_id[fixture.runs["eager"]]
    assert current["torch"] == "2.13.0+cpu" and current["torch-mlir"] == "20261001"
    assert current["python"] == "3.11.2" and current["git sha"] == "0123456789abcdef"
    assert current["machine"] == "x86_64 Linux test-box"
    assert "eager (current)" in current["shown as"]


def test_matrix_cells_show_tier_and_verdict(built):
    fixture, report = built
    rows = parse(fixture.out / "conformance.html").tables["conformance-matrix"]
    header = rows[0]
    cols = {name: i for i, name in enumerate(header)}
    by_op = {r[0]: r for r in rows[1:] if len(r) == len(header)}
    assert by_op["mul"][cols["float32 · eager"]] == "F 1"       # fell back to CPU
    assert by_op["add"][cols["float32 · eager"]] == "N 1"       # native
    assert by_op["add"][cols["bfloat16 · eager"]] == "N 1"
    assert by_op["sort"][cols["float32 · eager"]] == "D 1"      # decomposed
    assert by_op[HOSTILE][cols["float32 · adaptive"]] == "N 1"
    html = (fixture.out / "conformance.html").read_text()
    cells = report["conformance"]["matrix"]
    mul = next(op for fam in cells["families"] for op in fam["ops"] if op["op"] == "mul")
    verdicts = {c.verdict for c in mul["cells"] if c}
    assert verdicts == {"fail", "pass"}  # eager failed, adaptive passed
    assert 'class="v-fail" title="1 fail; tier fallback"' in html


def test_pass_rates_by_family_and_mode(built):
    fixture, _ = built
    rows = parse(fixture.out / "conformance.html").tables["pass-rate-table"]
    table = {(r[0], r[1]): r for r in rows[1:]}
    # eager pointwise: 2 add pass, mul fail, hostile fail -> 2 / 4
    assert table[("pointwise", "eager")][2:] == ["4", "2", "2", "0", "0", "0", "50.0%"]
    # eager indexing: 1 xfail + 1 skip -> 0 / 1 (skips excluded, xfail counts against)
    assert table[("indexing", "eager")][2:] == ["2", "0", "0", "1", "0", "1", "0.0%"]
    assert table[("pointwise", "adaptive")][-1] == "100.0%"


def test_failures_are_listed_with_reproducers(built):
    fixture, report = built
    html = (fixture.out / "conformance.html").read_text()
    assert report["conformance"]["failure_count"] == 3  # mul, the hostile op, and the OpInfo gelu sample
    assert "values differ: max abs 0.0015" in html
    assert "from an unfinished run" not in html
    escaped_repro = REPRO_MUL.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace(
        '"', "&#34;").replace("'", "&#39;")
    assert escaped_repro in html
    assert "# opinfo gelu sample 2" in html
    assert html.count('class="failure"') == 3


def test_pytest_failures_outside_the_store_are_shown(built):
    fixture, report = built
    rows = parse(fixture.out / "conformance.html").tables["pytest-outcomes"]
    assert rows[1] == ["eager", "3", "1", "1", "0", "1", "0", "12.5"]
    html = (fixture.out / "conformance.html").read_text()
    assert "opsuite.test_indexing::test_indexing[eager-index_put]" in html
    assert "FlakyFailure: &lt;script&gt;x&lt;/script&gt;" in html
    assert any("pytest opsuite eager: 1 failed" in line for line in cli.summary(report))


def test_error_statistics_per_op_and_dtype(built):
    fixture, _ = built
    rows = parse(fixture.out / "conformance.html").tables["error-stats"]
    table = {(r[0], r[1]): r[2:] for r in rows[1:]}
    assert table[("mul", "float32")] == ["2", "0.0015", "0.003", "1.5e+03"]  # eager 1.5e-3 and adaptive 0
    assert table[("add", "bfloat16")][1] == "0.00391"


def test_opinfo_sweep_and_coverage(built):
    fixture, report = built
    conf = report["conformance"]
    assert conf["opinfo"]["ops"] == 2 and conf["opinfo"]["samples"] == 4
    assert conf["opinfo"]["rate"] == pytest.approx(0.75)
    html = (fixture.out / "conformance.html").read_text()
    assert "4 samples" in html and "75.0%" in html
    assert conf["coverage"]["by_tier"] == {"native": 2, "fallback": 1}
    assert conf["coverage"]["exercised"] == 3  # add, mul and sort were reached by cases
    rows = parse(fixture.out / "conformance.html").tables["coverage-table"]
    assert ["aten::mul.Tensor", "fallback", "cpu fallback", "yes"] in rows


def test_trend_against_the_previous_run(built):
    fixture, report = built
    trend = report["conformance"]["trends"]["eager"]
    assert trend["previous"] == fixture.runs["eager_previous"]
    assert [c["op"] for c in trend["new_failures"]] == sorted(["mul", HOSTILE])
    assert trend["rate_before"] == 1.0 and trend["rate_now"] == pytest.approx(1 / 3)
    assert report["conformance"]["trends"]["adaptive"]["previous"] is None
    html = (fixture.out / "conformance.html").read_text()
    assert f"Run {fixture.runs['eager']} against run {fixture.runs['eager_previous']}" in html


def test_performance_puts_modes_side_by_side_with_ratios(built):
    fixture, report = built
    rows = parse(fixture.out / "performance.html").tables["modes-table"]
    matmul = next(r for r in rows if r[0] == "matmul_128")
    # cpu 1 ms; eager 5 ms = 5x; adaptive 2.5 ms = 2.5x; compiled failed (its error is listed)
    assert matmul[1:] == ["fp32", "1 ms", "5 ms", "5×", "2.5 ms", "2.5×", "failed", ""]
    hostile = next(r for r in rows if r[0] == HOSTILE)
    assert hostile[1:] == ["bf16", "200 µs", "2 ms", "10×", "not run", "", "skipped", ""]
    failed = parse(fixture.out / "performance.html").tables["failed-benchmarks"]
    assert failed[1] == ["matmul_128", "fp32", "compiled", f"BackendCompilerFailed: {HOSTILE}"]
    perf = report["performance"]
    assert perf["geomeans"]["eager"] == pytest.approx((5 * 10) ** 0.5)
    html = (fixture.out / "performance.html").read_text()
    assert "compiled</b> skipped: torch.compile backend" in html
    assert html.count("<svg") >= 3 and "ratio-chart" in html and "device-chart" in html
    device = parse(fixture.out / "performance.html").tables["device-table"]
    assert ["matmul_128", "fp32", "eager", "7 µs", "1", "25.0%", "—", "192 KiB", "0", "1 MiB", "—", "—"] in device


def test_timeline_lanes_and_download(built):
    fixture, report = built
    (program,) = report["timeline"]["programs"]
    assert [lane["name"] for lane in program["lanes"]] == ["kernels", "DMA", "tensorE"]
    assert program["span_us"] == 10.0
    assert (fixture.out / "traces" / "mm_test.json").exists()
    html = (fixture.out / "timeline.html").read_text()
    assert 'href="traces/mm_test.json" download' in html
    assert html.count("<rect") == 3


def test_summary_is_one_screen_of_numbers(built):
    _, report = built
    lines = cli.summary(report)
    assert len(lines) <= 30
    text = "\n".join(lines)
    assert "2 pass, 2 fail, 1 xfail, 0 xpass, 1 skip (40.0% pass)" in text
    assert "failures listed with reproducers: 3" in text
    assert "3 overloads: 2 native, 1 fallback" in text


def test_the_cli_reads_only_the_store_and_build(report_fixture, tmp_path):
    """`python -m reports` runs without torch, device_impl or harness (they are not even importable here)."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    for name in ("torch", "device_impl", "harness"):
        (blocker / f"{name}.py").write_text(f"raise ImportError('reports imported {name}')\n")
    code = ("import sys; from reports import cli; "
            f"sys.exit(cli.main(['--store', {str(report_fixture.store)!r}, '--out', {str(tmp_path / 'out')!r}]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "index.html").exists()
    assert done.stdout.startswith("neuronsim report:")


def test_a_missing_store_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["--store", str(tmp_path / "nothing.sqlite"), "--out", str(tmp_path / "out")]) == 2
    assert "no results store" in capsys.readouterr().err


def test_sparse_inputs_still_render(tmp_path):
    """A store with one run, no coverage/trace/asv files, and a benchmark JSON with no CPU baseline."""
    import json

    from report_fixture import ENV, _result

    from harness.store import Store

    store = Store(tmp_path / "results.sqlite")
    run = store.start_run("opsuite", ENV, "quick")
    store.add(run, _result("add", "pass"), "pointwise")
    store.finish_run(run)
    store.close()
    (tmp_path / "benchmarks").mkdir()
    doc = {"datetime": "2026-01-01T00:00:00", "benchmarks": [
        {"group": "mlp fp32", "extra_info": {"case": "mlp", "dtype": "fp32", "mode": "compiled"},
         "stats": {"min": 1e-3, "median": 1e-3, "rounds": 3}}],
        "neuronsim": {"failed": [{"case": "mlp", "dtype": "bf16", "mode": "eager", "error": "ValueError: x"}]}}
    (tmp_path / "benchmarks" / "b.json").write_text(json.dumps(doc))
    report = cli.build(tmp_path / "results.sqlite", tmp_path / "out", tmp_path)
    for page in cli.PAGES:
        assert (tmp_path / "out" / page).exists()
    assert report["conformance"]["coverage"] is None and report["timeline"]["programs"] == []
    rows = parse(tmp_path / "out" / "performance.html").tables["modes-table"]
    assert rows[2][:2] == ["mlp", "fp32"] and rows[3][:2] == ["mlp", "bf16"]
    assert "failed" in rows[3]
    assert "No coverage JSON" in (tmp_path / "out" / "conformance.html").read_text()
