"""The upstream suite: PyTorch's own OpInfo database (op_db) on the device against CPU eager.

Every OpInfo is one test. By default (``--opinfo quick``) each runs its first float32 sample,
so `pytest opsuite` stays short; ``--opinfo full`` runs every sample, reference input and error
input in float32, bfloat16 and int64 (as ``python -m harness opinfo`` does). Results go to the
same store as the op specs' cases, with ``source = 'opinfo'``; expected differences are
``source = "opinfo"`` entries of opsuite/xfails.toml.
"""

import pytest

from harness import opinfo
from harness.pytest_plugin import check_opinfo

OPS = opinfo.op_db()


@pytest.mark.opsuite
@pytest.mark.parametrize("op", OPS, ids=[opinfo.full_name(o) for o in OPS])
def test_opinfo(harness_session, op, mode, request):
    check_opinfo(harness_session, op, mode, request.node.nodeid, request.config.getoption("--opinfo"))
