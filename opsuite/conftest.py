"""The op suite: every op spec of harness.specs, per family, against CPU eager.

The device-contract checks (opsuite/test_contract.py, opsuite/test_modules.py: marker ``contract``)
run in every default run at the ``smoke`` depth (each op's and module's first sample, float32);
``--contract quick|full`` runs more of them, ``--contract off`` (or ``-m "not contract"``) none.
"""

import os

# Native kernels run under the host-compute guard here too: a kernel that computed on the CPU
# would raise instead of passing silently.
os.environ.setdefault("NEURONSIM_ASSERT_NO_CPU", "1")

import torch  # noqa: E402,F401  (the torch.backends entry point registers the neuron device)


def pytest_addoption(parser):
    parser.addoption("--contract", nargs="?", const="quick", default="smoke", choices=("off", "smoke", "quick", "full"),
                     help="depth of the device-contract checks (marker 'contract': opsuite/test_contract.py, "
                          "opsuite/test_modules.py): smoke (default: first sample, float32), quick (first "
                          "samples, float32/bfloat16), full (every sample, float32/bfloat16), off")


def pytest_configure(config):
    config.addinivalue_line("markers", "contract: a device-contract check (harness.contract, harness.modules); "
                                       "depth set by --contract (smoke by default; off deselects them)")


def contract_depth(config) -> str:
    return config.getoption("--contract") or "smoke"


def pytest_collection_modifyitems(config, items):
    if contract_depth(config) != "off":
        return
    dropped = [item for item in items if item.get_closest_marker("contract") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker("contract") is None]
