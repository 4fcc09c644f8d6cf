"""The op suite: every op spec of harness.specs, per family, against CPU eager.

The device-contract checks (opsuite/test_contract.py, opsuite/test_modules.py: marker ``contract``)
run in every default run at the ``smoke`` depth (each op's and module's first sample, float32);
``--contract quick|full`` runs more of them, ``--contract off`` (or ``-m "not contract"``) none.
"""

import gc
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


# Python's cyclic collector, tuned for a long run of small cases. At collection's end the process holds torch, Dynamo,
# torch-mlir and the designed table: several million long-lived objects that every full collection walked again,
# while a case allocates tens of thousands (Dynamo's trace, fake tensors, FX graphs) and so set off collections all
# through it. Frozen (``gc.freeze``: kept out of every later collection) and with a larger first-generation threshold,
# 313 warm designed softmax/sigmoid/tanh cases in compiled mode took 15.7-16.5 CPU s instead of 17.3-17.4 s
# (alternating runs; freezing before pytest itself starts gave 13.8-14.6 s, most likely pytest's and the plugins'
# start-up, paid once per process). Cycles are still collected, only less often; nothing in the op suite waits on one.
GC_THRESHOLDS = (50_000, 50, 100)


def _freeze_what_is_alive() -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


_freeze_what_is_alive()  # torch is imported: collection (12.5k designed cases) runs with it frozen


def pytest_collection_finish(session):
    _freeze_what_is_alive()  # and the collected tests, the designed table, Dynamo


def contract_depth(config) -> str:
    return config.getoption("--contract") or "smoke"


def pytest_collection_modifyitems(config, items):
    if contract_depth(config) != "off":
        return
    dropped = [item for item in items if item.get_closest_marker("contract") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if item.get_closest_marker("contract") is None]
