"""Matrix multiplication and what builds on it (linear, attention)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.pytest_plugin import check_spec
from harness.specs import family

SPECS = family("matmul")


@pytest.mark.opsuite
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
@given(data=st.data())
def test_matmul(harness_session, spec, mode, data, request):
    check_spec(harness_session, spec, mode, data, request.node.nodeid)
