"""pytest integration: `pytest opsuite` runs every op spec against CPU eager and stores every case.

Options: ``--neuron-mode {eager,adaptive,compiled,all}`` (default eager),
``--device`` (default ``neuron``; any torch device, e.g. ``cuda``),
``--results PATH`` (default build/results.sqlite). Hypothesis profiles:
``quick`` (the default, CI: derandomized, the same cases every run), ``ci`` and
``nightly`` (random, exploring), selected with ``--hypothesis-profile``; their example
database persists under build/hypothesis, so a failure found once is replayed first next time.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis.database import DirectoryBasedExampleDatabase

from harness import coverage, modes, runner
from harness.cases import Case
from harness.env import ROOT, environment
from harness.runner import Result, draw_case, run_case
from harness.shards import Shard
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
# A compiled-mode test under these profiles does not shrink a failure (pytest_runtest_call): every shrink step
# compiles a new graph (50-150 ms, against a few ms for an eager case), and Hypothesis shrinks until it has spent
# MAX_SHRINKING_SECONDS (300 s) of wall time. In a report's compiled shard one failing op (amp_update_scale) shrank
# for 310 s and the four failing drawn tests for 394 s of the shard's 1,112 s, and where a slow shrink stopped
# (so the stored example, and the passing cases stored on the way) depended on the machine's load. The draws are the
# same (derandomized; the generate phase does not depend on the phases after it); the first failing example is
# reported instead of a shrunk one (`--hypothesis-profile ci` shrinks).
_NO_SHRINK_PROFILES = ("quick",)
_NO_SHRINK_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target)
_PROFILE = os.environ.get("NEURONSIM_HYPOTHESIS_PROFILE", "quick")
settings.load_profile(_PROFILE)


def _pin_local_constants() -> None:
    """Hypothesis (6.131 on) mixes literals found in every local module in ``sys.modules`` into its
    draws, and re-scans whenever a module is imported. So the cases a derandomized test drew depended
    on what had been imported before it: a full run, ``-k`` on one op and CI each drew different
    cases (CI found 6 failures where a local run of the same commit found 3). The harness draws edge
    values on purpose (harness.values domains), so the pool adds nothing here; pinning it empty makes
    the quick profile draw the same cases whatever ran first. Internal API: if a Hypothesis release
    moves it, draws merely go back to depending on imports."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        return
    if callable(getattr(providers, "_get_local_constants", None)) and hasattr(providers, "Constants"):
        empty = providers.Constants()
        providers._get_local_constants = lambda: empty


_pin_local_constants()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("neuronsim", "neuronsim differential op suite")
    group.addoption("--neuron-mode", default="eager", choices=list(modes.MODES) + ["all"],
                    help="execution mode(s) on the device under test")
    group.addoption("--device", default="neuron", help="the torch device under test (compared with CPU eager)")
    group.addoption("--shard", default=None, metavar="K/N",
                    help="run only the tests of shard K of N (stable hash of the test id; for CI matrices)")
    group.addoption("--results", default=str(DEFAULT_PATH), help="SQLite results store")
    group.addoption("--opinfo", default="quick", choices=list(OPINFO_DEPTHS),
                    help="opsuite/test_opinfo.py: quick (first sample of each OpInfo, in float32 or else int64 "
                         "or bool) or full (every "
                         "sample, reference and error input, float32, bfloat16 and int64)")
    group.addoption("--check-strides", default="mode", choices=["mode", "on", "off"],
                    help="compare results' significant strides with CPU's (harness.compare.compare_strides): "
                         "mode (default: the modes held to it, harness.modes.Mode.strides_checked), on or off "
                         "for every mode (to measure a mode not held to it yet)")


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
    specs_run: set[str] = field(default_factory=set)  # op specs with at least one stored case

    def record(self, test_id: str, family: str) -> list[Result]:
        """Store the results a test collected. Hypothesis replays the shrunk failing example last:
        every passing example is stored, and of the failures only that final one, not each
        intermediate shrink. Returns what was stored."""
        results = self.pending.pop(test_id, [])
        failures = [r for r in results if r.verdict in ("fail", "xpass")]
        shrunk = [r for r in failures if r.case.source == "spec"][-1:]  # OpInfo samples are not shrunk
        keep = [r for r in results if r.verdict not in ("fail", "xpass")] + \
            [r for r in failures if r.case.source != "spec" or r in shrunk]
        for result in keep:
            self.store.add(self.run_id, result, family)
            self.counts[result.verdict] = self.counts.get(result.verdict, 0) + 1
            self.reached |= coverage.reached([result])
            if result.case.source == "spec":
                self.specs_run.add(result.case.spec)
        self.store.commit()
        return keep


_SESSION: Session | None = None


@dataclass
class Progress:
    """How far this process's session got, for the run row (``Store.set_progress``/``finish_run``): a run cut by a
    time budget (``make report`` stops each mode with SIGINT) ran fewer tests than it collected, and the reports
    must not show its figures as a whole run's. ``collected``: the session's selected tests (an xdist worker
    collects the whole session's, and runs the share the controller hands it); ``run``: tests this process
    finished; ``stopped``: why the session ended early, where pytest says (interrupted, or -x/--maxfail's reason)."""

    collected: int | None = None
    run: int = 0
    stopped: str | None = None
    written: float = float("-inf")  # time.monotonic() of the last progress write


_PROGRESS = Progress()

# How much of op_db test_opinfo.py runs: the default run stays short; the full sweep is also
# `python -m harness opinfo`.
OPINFO_DEPTHS: dict[str, dict] = {
    "quick": {"dtypes": ["float32", "int64", "bool"], "first_dtype_only": True, "max_samples": 1,
              "reference": False, "errors": False},
    "full": {"dtypes": ["float32", "bfloat16", "int64"], "first_dtype_only": False, "max_samples": None,
             "reference": True, "errors": True},
}


def pytest_configure(config: pytest.Config) -> None:
    global _PROFILE
    config.addinivalue_line("markers", "opsuite: a differential op-coverage test")
    config.addinivalue_line("markers", "opsuite_coverage: checks what the session's cases reached; runs last")
    config.addinivalue_line("markers", "opsuite_design: a designed case (harness.design); runs after the "
                                       "random exploration, before the OpInfo sweep")
    config.addinivalue_line("markers", "opsuite_dynamic: harness.dynamic's check (one function compiled with the "
                                       "default dynamic=None, called at three sizes); runs with the designed cases")
    _PROFILE = config.getoption("--hypothesis-profile", default=None) or _PROFILE


def _restore_profile() -> None:
    if settings.get_current_profile_name() != _PROFILE:
        settings.load_profile(_PROFILE)


@pytest.hookimpl(tryfirst=True)
def pytest_collectstart(collector: pytest.Collector) -> None:
    """@given binds the current profile when a test module is imported: restore ours before each."""
    _restore_profile()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Keep the session's Hypothesis profile. Importing torch.testing._internal (OpInfo's op_db, at
    collection or inside a test) loads PyTorch's own profile ("dev": 10 undeterministic examples, or
    "pytorch_ci" when CI is set: 50), and every test after it drew with that instead: the quick
    profile's 4 derandomized cases became 10 random ones and CI's failures stopped being reproducible.
    harness.opinfo.op_db restores the profile itself; this also covers other importers (a test module
    importing torch.testing._internal directly)."""
    _restore_profile()


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Keep this shard's tests (``--shard K/N``); coverage checks judge the whole session's results,
    so they run after every other test (and skip in a shard: the merged store is judged instead)."""
    shard_text = config.getoption("--shard", default=None)
    if shard_text:
        shard = Shard.parse(shard_text)
        kept = [item for item in items if shard.owns(item.nodeid)]
        dropped = [item for item in items if not shard.owns(item.nodeid)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    items.sort(key=_order)


def _order(item: pytest.Item) -> int:
    """Random exploration of every spec first (a short per-mode budget still reaches every op), then
    the designed cases and the automatic-dynamic-shape sequences (harness.dynamic), then PyTorch's OpInfo sweep,
    and the coverage checks last."""
    if item.get_closest_marker("opsuite_coverage") is not None:
        return 3
    if item.module is not None and item.module.__name__.endswith("test_opinfo"):
        return 2
    later = ("opsuite_design", "opsuite_dynamic")
    return 1 if any(item.get_closest_marker(m) is not None for m in later) else 0


def table_coverage(session: Session) -> coverage.Coverage:
    """What this session's stored cases reached of the device's lowering table (opsuite/test_table_coverage.py).
    Skips unless every op spec ran (a -k selection cannot cover the table)."""
    missing = sorted(set(SPECS) - session.specs_run)
    if missing:
        pytest.skip(f"{len(missing)} of {len(SPECS)} op specs did not run in this session "
                    f"(e.g. {', '.join(missing[:5])}); coverage is judged on a full `pytest opsuite`")
    table = coverage.table_ops(session.device)
    if not table:
        pytest.skip(f"{session.device} has no lowering table to cover")
    return coverage.Coverage(table, set(session.reached))


def _start_session(config: pytest.Config) -> Session:
    """Created when the first opsuite test runs, so `pytest tests` alone opens no results run."""
    global _SESSION
    if _SESSION is None:
        device = config.getoption("--device")
        profile = config.getoption("--hypothesis-profile", default=None) or os.environ.get(
            "NEURONSIM_HYPOTHESIS_PROFILE", "quick")
        store = Store(Path(config.getoption("--results")))
        env = environment(device)
        env["shard"] = config.getoption("--shard") or _xdist_part()
        if env["shard"] and not config.getoption("--shard"):
            env["shard_by"] = "xdist"  # every part collected the whole session (harness.shards joins them so)
        runner.STRIDES = {"mode": None, "on": True, "off": False}[config.getoption("--check-strides")]
        env["check_strides"] = config.getoption("--check-strides")
        _SESSION = Session(store, store.start_run("opsuite", env, profile), XFails.load(), device)
        store.set_progress(_SESSION.run_id, _PROGRESS.run, _PROGRESS.collected)
    return _SESSION


def pytest_collection_finish(session: pytest.Session) -> None:
    _PROGRESS.collected = len(session.items)


# seconds between a running session's progress writes (``pytest_runtest_logfinish``): the count must survive a
# process killed outright, but a write per test is a write transaction per test on a store pytest-xdist's workers
# share; the session's end writes the final count in any case (``pytest_unconfigure``)
PROGRESS_EVERY_S = 10.0


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    _PROGRESS.run += 1
    now = time.monotonic()
    if _SESSION is not None and now - _PROGRESS.written >= PROGRESS_EVERY_S:
        try:
            _SESSION.store.set_progress(_SESSION.run_id, _PROGRESS.run, _PROGRESS.collected)
        except sqlite3.OperationalError:  # the store busy past its timeout: the next write carries the count
            return
        _PROGRESS.written = now


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        _PROGRESS.stopped = "interrupted"
    elif session.shouldstop or session.shouldfail:
        _PROGRESS.stopped = str(session.shouldstop or session.shouldfail)


def _xdist_part() -> str:
    """A pytest-xdist worker's place among the session's workers as a shard, ``K/N`` (``gw0`` of two is 1/2), else "".
    The report splits the compiled mode over its cores with ``-n N --dist load`` (workers fed from one queue, so
    they finish together, where a fixed hash split left one shard ~100 s behind); each worker opens its own run in
    the store, and ``python -m harness merge --join`` makes the workers' runs one run of the mode, as it does for
    ``--shard K/N``."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return ""
    return f"{int(worker[2:]) + 1}/{int(count)}"


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


def check_designed(session: Session, designed, mode: str, test_id: str) -> Result:
    """Run one designed case (harness.design) in ``mode``; its cell goes into the store with it."""
    case = dataclasses.replace(designed.case, mode=mode, device=session.device)
    return check_case(session, case, test_id, design_id=designed.id)


def check_case(session: Session, case: Case, test_id: str, design_id: str = "") -> Result:
    """Run one case, remember its result for the store, and turn its verdict into the test's
    outcome: pytest's skip or fail (with the reproducer); an xfail is returned and reported as the
    test's outcome once the test has run (see pytest_runtest_makereport)."""
    spec = SPECS[case.spec]
    mode = case.mode
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Operator '.*' executed via CPU fallback")
        warnings.filterwarnings("ignore", message="An output with one or more elements was resized")
        result = run_case(case, session.xfails)
    result.design_id = design_id
    session.pending.setdefault(test_id, []).append(result)
    if result.verdict == "skip":
        pytest.skip(result.message)
    if result.verdict == "xpass":
        session.xpassed.append(f"{spec.name} [{case.dtype}, {mode}]: {result.xfail_reason}")
    # An expected failure does not raise: raising inside a Hypothesis test would make Hypothesis shrink
    # it, hundreds of cases for nothing. The test's report turns into XFAIL after it (makereport).
    if result.verdict == "fail":
        # pytrace=False: the verdict and its reproducer are the report, not the harness's frames
        pytest.fail(f"{spec.name} [{case.dtype}, {mode}] {result.message}\n"
                    f"expression: {result.expression}\n--- reproducer ---\n{result.reproducer}", pytrace=False)
    return result


def check_opinfo(session: Session, op, mode: str, test_id: str, depth: str = "quick") -> list[Result]:
    """Run one OpInfo's samples (as ``depth`` says) on the device against CPU, remember every result
    for the store, and fail the test if any sample failed (with the first failures' reproducers);
    xfail if every difference is an expected one."""
    from harness import opinfo

    unavailable = modes.get(mode).available(session.device)
    if unavailable:
        pytest.skip(unavailable)
    reason = opinfo.skip_reason(op)
    if reason:
        pytest.skip(reason)
    settings = OPINFO_DEPTHS[depth]
    dtypes = [getattr(torch, d) for d in settings["dtypes"]]
    if settings["first_dtype_only"]:  # the first dtype of the list the op supports on CPU
        dtypes = [d for d in dtypes if op.supports_dtype(d, "cpu")][:1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = opinfo.run_op(op, dtypes, session.device, settings["max_samples"], settings["reference"],
                                settings["errors"], session.xfails, mode=mode)
    session.pending.setdefault(test_id, []).extend(results)
    name = opinfo.full_name(op)
    session.xpassed += [f"{name} [{r.case.dtype}] {r.expression}: {r.xfail_reason}" for r in results
                        if r.verdict == "xpass"]
    failed = [r for r in results if r.verdict == "fail"]
    if failed:
        shown = "\n".join(f"{r.case.dtype} {r.expression}: {r.message}" for r in failed[:5])
        more = f"\n... and {len(failed) - 5} more" if len(failed) > 5 else ""
        first = next((r.reproducer for r in failed if r.reproducer), "")
        pytest.fail(f"{name}: {len(failed)} of {len(results)} samples differ from CPU\n{shown}{more}"
                    + (f"\n--- reproducer of the first ---\n{first}" if first else ""), pytrace=False)
    if any(r.verdict == "xfail" for r in results):
        pytest.xfail(next(r.xfail_reason for r in results if r.verdict == "xfail"))
    if not any(r.verdict == "pass" for r in results):
        pytest.skip(f"{name}: no sample ran ({', '.join(sorted({r.message for r in results})) or 'none generated'})")
    return results


# How much of the device-contract checks (opsuite/test_contract.py, opsuite/test_modules.py) run:
# smoke (the default), quick or full (``pytest opsuite --contract quick|full``; ``--contract off`` skips them).
CONTRACT_DEPTHS: dict[str, dict] = {
    # Every default run (`pytest opsuite`, `make report`): each op's and module's first sample, float32.
    # out_values also in bfloat16: an out= kernel registered apart from its functional op (cumprod.out,
    # index_add.out) is reached by no designed case (they call the functional op), so a result wrong only in
    # bfloat16 there would be seen by nothing else (harness.mutate's bf16_rounding class found two).
    "smoke": {"dtypes": ["float32"], "fallback_dtypes": ["int64", "bool"], "max_samples": 1,
              "module_dtypes": ["float32"], "module_samples": 1, "check_dtypes": {"out_values": ["bfloat16"]}},
    "quick": {"dtypes": ["float32", "bfloat16"], "fallback_dtypes": ["int64", "bool"], "max_samples": 1,
              "module_dtypes": ["float32"], "module_samples": 2},
    "full": {"dtypes": ["float32", "bfloat16"], "fallback_dtypes": ["int64", "bool"], "max_samples": None,
             "module_dtypes": ["float32", "bfloat16"], "module_samples": None},
}


def contract_dtypes(supports, depth: str, key: str = "dtypes", check: str | None = None) -> list[torch.dtype]:
    """The depth's dtypes the op supports on CPU (with the depth's extra dtypes for ``check``); if none, the first
    fallback dtype it supports."""
    settings = CONTRACT_DEPTHS[depth]
    names = settings[key] + [d for d in settings.get("check_dtypes", {}).get(check, []) if d not in settings[key]]
    chosen = [getattr(torch, d) for d in names if supports(getattr(torch, d))]
    if not chosen and key == "dtypes":
        chosen = [getattr(torch, d) for d in settings["fallback_dtypes"] if supports(getattr(torch, d))][:1]
    return chosen


def report_results(session: Session, results: list[Result], test_id: str, name: str) -> list[Result]:
    """Remember a check's results for the store and turn them into the test's outcome: fail with the
    first failures, xfail if every difference is an expected one, skip if nothing ran."""
    session.pending.setdefault(test_id, []).extend(results)
    session.xpassed += [f"{name} [{r.case.dtype}] {r.expression}: {r.xfail_reason}" for r in results
                        if r.verdict == "xpass"]
    failed = [r for r in results if r.verdict == "fail"]
    if failed:
        shown = "\n".join(f"{r.case.dtype} {r.expression}: {r.message}" for r in failed[:5])
        more = f"\n... and {len(failed) - 5} more" if len(failed) > 5 else ""
        pytest.fail(f"{name}: {len(failed)} of {len(results)} cases break the device contract\n{shown}{more}",
                    pytrace=False)
    if any(r.verdict == "xfail" for r in results):
        pytest.xfail(next(r.xfail_reason for r in results if r.verdict == "xfail"))
    if not any(r.verdict == "pass" for r in results):
        pytest.skip(f"{name}: nothing ran ({'; '.join(sorted({r.message for r in results})[:3]) or 'no samples'})")
    return results


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item):
    """Draw the same cases in every mode. Hypothesis's pytest plugin keys a parametrized test's
    derandomized seed (and database entry) by its node id, which includes the mode, so eager and
    adaptive drew different cases after the first and their pass sets could not be compared. Run
    inside Hypothesis's own hook (trylast: innermost), this re-keys the test by its node id with the
    mode left out, so ``--neuron-mode eager`` and ``--neuron-mode adaptive`` run identical cases."""
    inner = getattr(getattr(getattr(item, "obj", None), "hypothesis", None), "inner_test", None)
    callspec = getattr(item, "callspec", None)
    bound = None
    if inner is not None and callspec is not None and "mode" in callspec.params:
        rest = ",".join(f"{k}={getattr(v, 'name', v)}" for k, v in sorted(callspec.params.items()) if k != "mode")
        inner._hypothesis_internal_add_digest = f"{item.nodeid.split('[', 1)[0]}[{rest}]".encode()
        bound = _without_shrinking(item, callspec.params["mode"])
    try:
        yield
    finally:
        if bound is not None:
            item.obj._hypothesis_internal_use_settings = bound


def _without_shrinking(item: pytest.Item, mode: str):
    """For a compiled-mode test under a profile of ``_NO_SHRINK_PROFILES``: its settings (which Hypothesis reads when
    the test is called) without the shrink and explain phases; returns the settings to put back after the call, or
    None where nothing was changed."""
    bound = getattr(item.obj, "_hypothesis_internal_use_settings", None)
    if mode != "compiled" or _PROFILE not in _NO_SHRINK_PROFILES or bound is None:
        return None
    item.obj._hypothesis_internal_use_settings = settings(
        bound, phases=[p for p in bound.phases if p in _NO_SHRINK_PHASES])
    return bound


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if _SESSION is None or report.when != "call":
        return
    family = item.module.__name__.replace("test_", "") if item.module else ""
    stored = _SESSION.record(item.nodeid, family)
    expected = [r for r in stored if r.verdict == "xfail"]
    if report.passed and expected:
        report.outcome, report.wasxfail = "skipped", expected[0].xfail_reason


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
    stale = _SESSION.xfails.stale()
    if stale:
        tr.write_line(f"xfails.toml: {len(stale)} entries matched no case although their op ran (not drawn this "
                      f"run, or fixed: check with a larger profile): " +
                      ", ".join(f"{e.op}" + (f" [{e.source}]" if e.source != "spec" else "") for e in stale))
    for entry in _SESSION.xfails.unknown(SPECS, "spec"):
        tr.write_line(f"xfails.toml entry names no op spec: {entry.op}: {entry.reason}")
    for line in sorted(set(_SESSION.xpassed)):
        tr.write_line(f"expected failure now passes (remove the xfails.toml entry): {line}")


def pytest_unconfigure(config: pytest.Config) -> None:
    global _SESSION
    if _SESSION is not None:
        _SESSION.store.set_progress(_SESSION.run_id, _PROGRESS.run, _PROGRESS.collected)
        _SESSION.store.finish_run(_SESSION.run_id, _PROGRESS.stopped)
        _SESSION.store.close()
        _SESSION = None
