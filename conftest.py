"""Root conftest: the harness's pytest plugin (options --neuron-mode, --device, --results; Hypothesis profiles).

Native kernels run under the host-compute guard in every test session (set before anything imports
torch, whose entry point loads the device): a kernel reaching a torch CPU kernel raises.

``--cpu-onednn off`` turns oneDNN off for the whole session (``torch.backends.mkldnn.enabled = False``),
so CPU eager — the oracle — takes its native kernels, as on a host or build without oneDNN; together with
``ATEN_CPU_CAPABILITY=default|avx2`` and ``ONEDNN_MAX_CPU_ISA=AVX2`` (an AVX2-only host's oneDNN) it makes
host variation testable on any machine (``make test-hosts``).
"""

import os

os.environ.setdefault("NEURONSIM_ASSERT_NO_CPU", "1")

pytest_plugins = ["harness.pytest_plugin"]


def pytest_addoption(parser):
    parser.addoption("--cpu-onednn", choices=("on", "off"), default="on",
                     help="off: torch.backends.mkldnn.enabled = False for the session (CPU's native kernels)")


def pytest_configure(config):
    if config.getoption("--cpu-onednn") == "off":
        import torch  # noqa: PLC0415  (after the environment above is set)

        torch.backends.mkldnn.enabled = False


def pytest_report_header(config):
    import torch  # noqa: PLC0415

    return (f"CPU oracle: capability {torch.backends.cpu.get_cpu_capability()}, oneDNN "
            f"{'on' if torch.backends.mkldnn.enabled else 'off'}"
            f"{', ONEDNN_MAX_CPU_ISA=' + os.environ['ONEDNN_MAX_CPU_ISA'] if 'ONEDNN_MAX_CPU_ISA' in os.environ else ''}")
