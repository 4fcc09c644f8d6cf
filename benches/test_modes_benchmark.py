"""pytest-benchmark: each quick case in CPU eager and every neuron mode, one group per case and dtype.

The groups put CPU eager and the neuron modes side by side, so ``ratio_vs_cpu_eager`` (conftest.py)
comes from one run. Cases are benches/cases.py's ``quick``-tagged ones plus the cases of the
one-run ratio scripts (ratios.py, elementwise_ratio.py) at their sizes when ``--bench-all`` is given.
"""

from __future__ import annotations

import pytest

from benches.cases import CASES
from benches.measure import measure
from benches.modes import BASELINE, DTYPES, MODES, ModeUnavailable, cases_tagged, open_workload

QUICK = cases_tagged("quick")
PARAMS = [pytest.param(case, dtype, id=f"{case}-{dtype}")
          for case in QUICK for dtype, torch_dtype in DTYPES.items() if torch_dtype in CASES[case].dtypes]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case,dtype", PARAMS)
def test_mode(benchmark, skipped_modes: dict, case: str, dtype: str, mode: str) -> None:
    try:
        run = open_workload(case, mode, dtype)
    except ModeUnavailable as e:
        skipped_modes.setdefault(mode, str(e))
        pytest.skip(str(e))
    try:
        benchmark.group = f"{case} {dtype}"
        benchmark.extra_info.update(case=case, mode=mode, dtype=dtype, description=CASES[case].description)
        if mode != BASELINE:
            metrics = measure(run)
            assert metrics["device_seconds"] > 0, f"{case} ran in {mode} mode without advancing the device clock"
            benchmark.extra_info.update(metrics)
        benchmark(run)
    finally:
        run.close()
