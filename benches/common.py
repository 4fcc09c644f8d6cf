"""asv suites over the case table: one class per kind of benchmark, parameterised by (case, mode, dtype).

The suites are abstract (asv skips abstract classes); ``bench_ops.py`` and ``bench_models.py``
make them concrete by naming their cases in ``params`` and, for the track suites, by defining
``setup_cache`` (asv keys a cache by the module and line that define it, so each suite module
defines its own). A combination that cannot run (a mode not built yet, a dtype the case does not
define) is skipped: its ``setup`` raises NotImplementedError. Nothing here times or counts anything
the workload did not do.

Budget (two shared cores): a full ``asv run`` should take minutes, so timing is deliberate:
setup builds and warms the workload once per process (memoised: asv re-runs setup between
samples, and building a model is not what is timed), calibrates ``number`` so a sample lasts
about ``sample_time``, then takes 3 to 10 samples within 2 s.
"""

from __future__ import annotations

import abc
import math
import time
from typing import Any

from benches.measure import lookup, measure_all
from benches.modes import DTYPES, MODES, NEURON_MODES, REGISTRY, ModeUnavailable, Prepared, open_workload

DTYPE_NAMES = tuple(DTYPES)
_PREPARED: dict[tuple[str, str, str], Prepared] = {}
_NUMBER: dict[tuple[str, str, str], int] = {}

# Ask once, here: asv forks every benchmark from a server that imported this module, so each fork
# inherits the answer instead of importing every Dynamo backend again (about 2 s a process).
for _mode in MODES:
    REGISTRY[_mode].unavailable()


def prepared(case: str, mode: str, dtype: str) -> Prepared:
    """The workload of this combination, built and warmed once per process."""
    key = (case, mode, dtype)
    if key not in _PREPARED:
        _PREPARED[key] = open_workload(case, mode, dtype)
    return _PREPARED[key]


def calls_per_sample(run: Prepared, sample_time: float, limit: int = 1000) -> int:
    """Calls that fill ``sample_time``, from one steady-state call (CPU ops take µs, neuron ones ms)."""
    started = time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    return max(1, min(limit, math.ceil(sample_time / max(seconds, 1e-9))))


class TimeSuite(abc.ABC):
    """``time_run``: wall seconds per call, every mode including the CPU eager baseline."""

    param_names = ["case", "mode", "dtype"]
    sample_time = 0.05
    repeat = (3, 10, 2.0)  # at least 3 samples, at most 10, stop adding after 2 s
    warmup_time = 0.0      # setup already ran the warm-up call (and the compile, in compiled mode)
    rounds = 1
    timeout = 180          # building + warming a model on the simulator, compiling, then sampling

    @property
    @abc.abstractmethod
    def params(self) -> tuple:
        """(case names, modes, dtypes)."""

    def setup(self, case: str, mode: str, dtype: str) -> None:
        key = (case, mode, dtype)
        self.run = prepared(*key)
        if key not in _NUMBER:  # asv re-runs setup between samples: calibrate once
            _NUMBER[key] = calls_per_sample(self.run, self.sample_time)
        self.number = _NUMBER[key]

    def time_run(self, case: str, mode: str, dtype: str) -> None:
        self.run()


class PeakMemSuite(abc.ABC):
    """``peakmem_run``: the process's peak resident memory (asv measures it) around one call."""

    param_names = ["case", "mode", "dtype"]
    timeout = 180

    @property
    @abc.abstractmethod
    def params(self) -> tuple:
        """(case names, modes, dtypes)."""

    def setup(self, case: str, mode: str, dtype: str) -> None:
        self.run = prepared(case, mode, dtype)

    def peakmem_run(self, case: str, mode: str, dtype: str) -> None:
        self.run()


class TrackSuite(abc.ABC):
    """``track_*``: the device's counters for one call, measured once per suite in ``setup_cache``.

    Subclasses define ``setup_cache`` (returning ``measure_all(their cases)``) and ``params``.
    """

    param_names = ["case", "mode", "dtype"]
    timeout = 60
    requires = "device_seconds"  # the metric whose absence skips a combination (in setup, as asv wants)

    @property
    @abc.abstractmethod
    def params(self) -> tuple:
        """(case names, neuron modes, dtypes)."""

    def setup(self, results: dict, case: str, mode: str, dtype: str) -> None:
        self.key = (case, mode, dtype)
        lookup(results, self.key, self.requires)  # skips (or fails) the combination before any track_

    def value(self, results: dict, metric: str) -> Any:
        return lookup(results, self.key, metric)


def measure_suite(cases: list[str]) -> dict:
    """What a suite's ``setup_cache`` returns: every neuron mode and dtype of ``cases``."""
    return measure_all(cases, NEURON_MODES, DTYPE_NAMES)


def track(metric: str, unit: str, doc: str):
    """A ``track_`` method reading ``metric`` from the suite's cache (one definition per metric)."""

    def method(self, results: dict, case: str, mode: str, dtype: str) -> Any:
        return self.value(results, metric)

    method.unit = unit
    method.__doc__ = doc
    return method


__all__ = ["DTYPE_NAMES", "MODES", "NEURON_MODES", "ModeUnavailable", "PeakMemSuite", "TimeSuite", "TrackSuite",
           "calls_per_sample", "measure_suite", "prepared", "track"]
