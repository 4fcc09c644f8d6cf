"""The op suite covers the device's lowering table (issue 4, acceptance 1).

After every op spec has run (this test is ordered last), every core ATen overload the device's table
serves (native or decomposed) must have been reached by some case: called by a spec's expression
or its backward (recorded on CPU) or run as a device kernel (the dispatch counters). The table is
asked through ``torch.<device>``; overloads outside the core set are reported, not required.
"""

import pytest

from harness.pytest_plugin import table_coverage


@pytest.mark.opsuite_coverage
def test_every_core_overload_of_the_table_is_reached(harness_session, request):
    report = table_coverage(harness_session)
    print(report.line())
    assert report.core_in_table, "the device table serves no core overload: nothing to cover"
    assert not report.missing_core, f"no op spec reaches these core overloads: {report.missing_core}"
