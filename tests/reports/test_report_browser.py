"""The rendered reports in headless Chromium: no console errors, and the matrix and charts are on screen.

Chromium is Debian's `chromium`; the set-up installs it with apt-get when /usr/bin/chromium is
missing and skips, saying why, only where it cannot be installed.
"""

from __future__ import annotations

import pytest
from headless_chromium import Browser, ensure_installed

from reports import cli

VISIBLE = """(() => {{
  const nodes = [...document.querySelectorAll({selector!r})];
  return nodes.map(n => {{ const r = n.getBoundingClientRect(); const s = getComputedStyle(n);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; }});
}})()"""


@pytest.fixture(scope="module")
def browser():
    reason = ensure_installed()
    if reason:
        pytest.skip(reason)
    chromium = Browser()
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def pages(report_fixture):
    cli.build(report_fixture.store, report_fixture.out, report_fixture.build)
    return report_fixture.out


def visible(browser: Browser, selector: str) -> list[bool]:
    return browser.evaluate(VISIBLE.format(selector=selector))


def test_index_renders_without_errors(browser, pages, tmp_path):
    browser.load((pages / "index.html").as_uri())
    assert browser.problems() == []
    assert browser.evaluate("document.title").startswith("Overview")
    assert all(visible(browser, "#headline .card")) and len(visible(browser, "#headline .card")) == 5
    rows = browser.evaluate("document.querySelectorAll('#environment tr').length")
    assert rows == 5  # header + the four runs shown
    links = browser.evaluate("[...document.querySelectorAll('header a')].map(a => a.getAttribute('href'))")
    assert links == list(cli.PAGES)
    (tmp_path / "index.png").write_bytes(browser.screenshot())


def test_conformance_matrix_and_chart_are_visible(browser, pages, tmp_path):
    browser.load((pages / "conformance.html").as_uri())
    assert browser.problems() == []
    assert visible(browser, "#conformance-matrix") == [True]
    cells = browser.evaluate("[...document.querySelectorAll('#conformance-matrix td.v-fail')].length")
    assert cells == 2  # mul and the hostile op, eager float32
    assert visible(browser, "#pass-rate-chart") == [True]
    bars = visible(browser, "#pass-rate-chart rect")
    assert len(bars) == 3 and all(bars)  # pointwise eager, pointwise adaptive, indexing eager
    # the hostile op name is text, not markup: no script element came from the data
    assert browser.evaluate("document.querySelectorAll('script').length") == 0
    assert browser.evaluate("document.body.innerText.includes('<script>alert(1)</script>')")
    png = browser.screenshot()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    (tmp_path / "conformance.png").write_bytes(png)


def test_performance_and_timeline_charts_are_visible(browser, pages):
    browser.load((pages / "performance.html").as_uri())
    assert browser.problems() == []
    for chart in ("#ratio-chart", "#device-chart", "#utilization-chart"):
        assert visible(browser, chart) == [True], chart
        assert any(visible(browser, f"{chart} rect")), chart
    browser.load((pages / "timeline.html").as_uri())
    assert browser.problems() == []
    assert visible(browser, "#timeline-1 rect") == [True, True, True]


def test_a_broken_page_is_reported(browser, tmp_path):
    """The checks above can fail: a page with a script error and a missing image is caught."""
    page = tmp_path / "broken.html"
    page.write_text("<html><body><img src='missing.png'><script>undefinedFunction()</script></body></html>")
    browser.load(page.as_uri())
    problems = browser.problems()
    assert any("undefinedFunction" in p or "exception" in p for p in problems), problems
    assert any("missing.png" in p for p in problems), problems
