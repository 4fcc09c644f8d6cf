"""nn.Modules of PyTorch's ModuleInfo database (common_modules.module_db) on the device against CPU
(harness.modules): forward and backward with parameter gradients in train and eval, state_dict round trip.

Marker ``contract``, depth from ``--contract``: smoke (the default run) each module's first input in
float32; quick its first 2 inputs; full every input in float32 and bfloat16. Results go to the store
with ``source = 'module'`` and the check in ``check_name``.
"""

import pytest

from harness import modes
from harness import modules as mods
from harness.pytest_plugin import CONTRACT_DEPTHS, contract_dtypes, report_results

MODULES = mods.module_db()
PAIRS = [(info, check) for info in MODULES for check in mods.CHECKS]


@pytest.mark.contract
@pytest.mark.parametrize("info,check", PAIRS, ids=[f"{mods.name_of(i)}-{c}" for i, c in PAIRS])
def test_module(harness_session, info, check, mode, request):
    unavailable = modes.get(mode).available(harness_session.device)
    if unavailable:
        pytest.skip(unavailable)
    depth = request.config.getoption("--contract") or "smoke"
    settings = CONTRACT_DEPTHS[depth]
    dtypes = contract_dtypes(lambda d: mods.supports(info, d), depth, key="module_dtypes")
    results = mods.run_check(info, check, dtypes, harness_session.device, settings["module_samples"], mode,
                             harness_session.xfails)
    report_results(harness_session, results, request.node.nodeid, f"{mods.name_of(info)} {check}")
