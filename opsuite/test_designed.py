"""Designed coverage: every op spec's covering design (harness.design), in every profile.

One test per designed case; its id names the case's coordinates (``mul-float32-special-expanded-129``:
spec, dtype, value domain, layout on the device, free-axis size, and the error input if any), so
``pytest opsuite/test_designed.py -k mul-float32-special-expanded-129`` runs that case alone. The
random exploration of each spec (test_<family>.py, Hypothesis) runs beside these.
"""

import pytest

from harness import design
from harness.pytest_plugin import check_designed

CASES = design.all_cases()


@pytest.mark.opsuite
@pytest.mark.opsuite_design
@pytest.mark.parametrize("designed", CASES, ids=[d.id for d in CASES])
def test_designed(harness_session, designed, mode, request):
    check_designed(harness_session, designed, mode, request.node.nodeid)
