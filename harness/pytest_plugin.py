"""pytest integration: `pytest opsuite` runs every op spec against CPU eager and stores every case.

Options: ``--neuron-mode {eager,adaptive,compiled,all}`` (default eager),
``--device`` (default ``neuron``; any torch device, e.g. ``cuda``),
``--results PATH`` (default build/results.sqlite). Hypothesis profiles:
``quick`` (the default, CI: derandomized, the same cases every run), ``ci`` and
``nightly`` (random, exploring), selected with ``--hypothesis-profile``; their example
database persists under build/hypothesis, so a failure found once is replayed first next time.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from harness import coverage, modes
from harness.cases import Case
from harness.env import ROOT, environment
from harness.runner import Result, draw_case, run_case
from harness.specs import SPECS, OpSpec
from harness.store import DEFAULT_PATH, Store
from harness.xfails import XFails

_DB = DirectoryBasedExampleDatabase(str(ROOT / "build" / "hypothesis"))
_COMMON = dict(deadline=None, print_blob=True,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.function_scoped_fixture])
# quick is derandomized: CI draws the same cases on every run, so a red CI means a change broke
# something, not that Hypothesis got lucky. The exploring profiles keep the example database.
settings.register_profile("quick", max_examples=4, derandomize=True, database=None, **_COMMON)
settings.register_profile("ci", max_examples=25, database=_DB, **_COMMON)
settings.register_profile("nightly", max_examples=200, database=_DB, **_COMMON)
settings.register_profile("replay", max_examples=1, phases=[Phase.explicit, Phase.reuse], database=_DB,
                          **_COMMON)
settings.load_profile(os.environ.get("NEURONSIM_HYPOTHESIS_PROFILE", "quick"))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("neuronsim", "neuronsim differential op suite")
    group.addoption("--neuron-mode", default="eager", choices=list(modes.MODES) + ["all"],
                    help="execution mode(s) on the device under test")
    group.addoption("--device", default="neuron", help="the torch device under test (compared with CPU eager)")
    group.addoption("--results", default=str(DEFAULT_PATH), help="SQLite results store")


@dataclass
class Session:
    store: Store
    run_id: int
    xfails: XFails
    device: str
    pending: dict[str, list[Result]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    xpassed: list[str] = field(default_factory=list)
    reached: set[str] = field(default_factory=set)  # aten overloads the stored cases reached

    def record(self, test_id: str, family: str) -> list[Result]:
        """Store the results a test collected. Hypothesis replays the shrunk failing example last:
        every passing example is stored, and of the failures only that final one, not each
        intermediate shrink. Returns what was stored."""
        results = self.pending.pop(test_id, [])
        failures = [r for r in results if r.verdict in ("fail", "xpass")]
        keep = [r for r in results if r.verdict not in ("fail", "xpass")] + failures[-1:]
        for result in keep:
            self.store.add(self.run_id, result, family)
            self.counts[result.verdict] = self.counts.get(result.verdict, 0) + 1
            self.reached |= coverage.reached([result])
        self.store.commit()
        return keep


_SESSION: Session | None = None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "opsuite: a differential op-coverage test")


def _start_session(config: pytest.Config) -> Session:
    """Created when the first opsuite test runs, so `pytest tests` alone opens no results run."""
    global _SESSION
    if _SESSION is None:
        device = config.getoption("--device")
        profile = config.getoption("--hypothesis-profile", default=None) or os.environ.get(
            "NEURONSIM_HYPOTHESIS_PROFILE", "quick")
        store = Store(Path(config.getoption("--results")))
        _SESSION = Session(store, store.start_run("opsuite", environment(device), profile), XFails.load(), device)
    return _SESSION


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "mode" in metafunc.fixturenames and "harness_session" in metafunc.fixturenames:
        chosen = metafunc.config.getoption("--neuron-mode")
        metafunc.parametrize("mode", list(modes.MODES) if chosen == "all" else [chosen])


@pytest.fixture(scope="session")
def harness_session(request: pytest.FixtureRequest) -> Session:
    return _start_session(request.config)


def check_spec(session: Session, spec: OpSpec, mode: str, data, test_id: str) -> None:
    """Draw one case of ``spec``, run it, remember the result, and fail the example if it failed."""
    check_case(session, draw_case(data, spec, mode, session.device), test_id)


def check_case(session: Session, case: Case, test_id: str) -> Result:
    """Run one case, remember its result for the store, and turn its verdict into the test's
    outcome: pytest's skip, xfail or fail (with the reproducer), or return the result."""
    spec = SPECS[case.spec]
    mode = case.mode
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Operator '.*' executed via CPU fallback")
        warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
        result = run_case(case, session.xfails)
    session.pending.setdefault(test_id, []).append(result)
    if result.verdict == "skip":
        pytest.skip(result.message)
    if result.verdict == "xpass":
        session.xpassed.append(f"{spec.name} [{case.dtype}, {mode}]: {result.xfail_reason}")
    if result.verdict == "xfail":
        pytest.xfail(result.xfail_reason)
    if result.verdict == "fail":
        # pytrace=False: the verdict and its reproducer are the report, not the harness's frames
        pytest.fail(f"{spec.name} [{case.dtype}, {mode}] {result.message}\n"
                    f"expression: {result.expression}\n--- reproducer ---\n{result.reproducer}", pytrace=False)
    return result


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if _SESSION is None or report.when != "call":
        return
    family = item.module.__name__.replace("test_", "") if item.module else ""
    _SESSION.record(item.nodeid, family)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _SESSION is None:
        return
    tr = terminalreporter
    counts = ", ".join(f"{v} {k}" for k, v in sorted(_SESSION.counts.items()))
    tr.write_sep("-", f"neuronsim opsuite run {_SESSION.run_id}: {counts or 'no cases'}; store {_SESSION.store.path}")
    if _SESSION.reached:
        report = coverage.Coverage(coverage.table_ops(_SESSION.device), _SESSION.reached)
        tr.write_line(report.line())
        if report.missing_core:
            tr.write_line(f"core overloads no case reached: {', '.join(report.missing_core)}")
    for entry in _SESSION.xfails.stale():
        tr.write_line(f"xfails.toml entry matched nothing (stale?): {entry.op} "
                      f"dtype={entry.dtype} mode={entry.mode}: {entry.reason}")
    for line in sorted(set(_SESSION.xpassed)):
        tr.write_line(f"expected failure now passes (remove the xfails.toml entry): {line}")


def pytest_unconfigure(config: pytest.Config) -> None:
    global _SESSION
    if _SESSION is not None:
        _SESSION.store.finish_run(_SESSION.run_id)
        _SESSION.store.close()
        _SESSION = None
