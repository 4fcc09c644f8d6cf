"""The op suite: every op spec of harness.specs, per family, against CPU eager.

The device-contract checks (opsuite/test_contract.py, opsuite/test_modules.py: marker ``contract``)
are deselected unless asked for: ``--contract [quick|full]`` or ``-m contract``.
"""

import os

# Native kernels run under the host-compute guard here too: a kernel that computed on the CPU
# would raise instead of passing silently.
os.environ.setdefault("NEURONSIM_ASSERT_NO_CPU", "1")

import torch  # noqa: E402,F401  (the torch.backends entry point registers the neuron device)


def pytest_addoption(parser):
    parser.addoption("--contract", nargs="?", const="quick", default=None, choices=("quick", "full"),
                     help="run the device-contract checks (marker 'contract': opsuite/test_contract.py, "
                          "opsuite/test_modules.py): quick (first samples, float32/bfloat16) or full")


def pytest_configure(config):
    config.addinivalue_line("markers", "contract: a device-contract check (harness.contract, harness.modules); "
                                       "deselected unless --contract or -m contract")


def contract_selected(config) -> bool:
    return bool(config.getoption("--contract")) or "contract" in (config.getoption("-m", default="") or "")


def contract_depth(config) -> str:
    return config.getoption("--contract") or "quick"


def pytest_collection_modifyitems(config, items):
    if contract_selected(config):
        return
    dropped = [item for item in items if item.get_closest_marker("contract") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker("contract") is None]
