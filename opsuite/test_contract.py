"""PyTorch's device contract, per OpInfo and check (harness.contract): out= (values, wrong device, wrong
dtype, wrong shape), variant consistency, in-place rules and error inputs, against CPU eager.

Marker ``contract``, depth from ``--contract``: smoke (the default run) each op's first sample in
float32 (else int64 or bool), out_values in bfloat16 too; quick the first sample in float32 and bfloat16; full every sample in
float32 and bfloat16 (else int64 or bool). Results go to the store with ``source = 'contract'`` and the check in
``check_name``; expected differences are ``source = "contract"`` entries of opsuite/xfails.toml.
"""

import pytest

from harness import contract, modes, opinfo
from harness.pytest_plugin import CONTRACT_DEPTHS, contract_dtypes, report_results

OPS = opinfo.op_db()
PAIRS = [(op, check) for op in OPS for check in contract.CHECKS if contract.applies(op, check) is None]


@pytest.mark.contract
@pytest.mark.parametrize("op,check", PAIRS, ids=[f"{opinfo.full_name(o)}-{c}" for o, c in PAIRS])
def test_contract(harness_session, op, check, mode, request):
    unavailable = modes.get(mode).available(harness_session.device)
    if unavailable:
        pytest.skip(unavailable)
    depth = request.config.getoption("--contract") or "smoke"
    dtypes = contract_dtypes(lambda d: op.supports_dtype(d, "cpu"), depth, check=check)
    results = contract.run_check(op, check, dtypes, harness_session.device, CONTRACT_DEPTHS[depth]["max_samples"],
                                 mode, harness_session.xfails)
    report_results(harness_session, results, request.node.nodeid, f"{opinfo.full_name(op)} {check}")
