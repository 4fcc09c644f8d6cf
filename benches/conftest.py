"""pytest-benchmark for benches/: JSON under build/benchmarks by default, and ratios to CPU eager per group.

``pytest benches --benchmark-only`` writes build/benchmarks/pytest-benchmark-<UTC time>.json (unless
``--benchmark-json`` names another file); each neuron benchmark carries ``ratio_vs_cpu_eager`` and
the simulated device's counters in ``extra_info``, and the JSON gets a ``neuronsim`` section with
the ratio table, the modes that were skipped (and why) and the benchmarks that failed (and how). The same table is printed at the end.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from benches.ratios_table import add_ratios, format_rows

ROOT = Path(__file__).resolve().parent.parent
SKIPPED = pytest.StashKey[dict]()
FAILED = pytest.StashKey[list]()
RATIOS = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[SKIPPED] = {}
    config.stash[FAILED] = []
    config.stash[RATIOS] = []
    if getattr(config.option, "benchmark_json", None) is None and not getattr(config.option, "benchmark_disable",
                                                                               False):
        out = ROOT / "build" / "benchmarks"
        out.mkdir(parents=True, exist_ok=True)
        config.option.benchmark_json = out / f"pytest-benchmark-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"


@pytest.fixture
def skipped_modes(request: pytest.FixtureRequest) -> dict[str, str]:
    """mode -> why it was skipped, collected for the JSON and the summary."""
    return request.config.stash[SKIPPED]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A benchmark that failed is kept with its error, so the report shows it beside the modes that ran."""
    outcome = yield
    report = outcome.get_result()
    params = getattr(getattr(item, "callspec", None), "params", {})
    if report.failed and call.excinfo is not None and "mode" in params:
        error = call.excinfo.value
        first_line = (str(error).strip().splitlines() or [""])[0]
        item.config.stash[FAILED].append({"case": params.get("case"), "dtype": params.get("dtype"),
                                          "mode": params["mode"], "when": report.when,
                                          "error": f"{type(error).__name__}: {first_line}"[:400]})


def pytest_benchmark_update_json(config: pytest.Config, benchmarks, output_json: dict) -> None:
    rows = add_ratios(output_json.get("benchmarks", []))
    config.stash[RATIOS] = rows
    output_json["neuronsim"] = {"ratios": rows, "skipped": dict(config.stash[SKIPPED]),
                                "failed": list(config.stash[FAILED])}


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    rows = config.stash[RATIOS] or add_ratios([b.as_dict(include_data=False) for b in session.benchmarks])
    terminalreporter.write_sep("-", "neuron mode / CPU eager, best time per call, one run")
    for line in format_rows(rows, config.stash[SKIPPED]):
        terminalreporter.write_line(line)
    for failure in config.stash[FAILED]:
        terminalreporter.write_line(f"{failure['case']} {failure['dtype']} {failure['mode']} failed: {failure['error']}")
