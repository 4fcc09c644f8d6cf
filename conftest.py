"""Root conftest: the harness's pytest plugin (options --neuron-mode, --device, --results; Hypothesis profiles).

Native kernels run under the host-compute guard in every test session (set before anything imports
torch, whose entry point loads the device): a kernel reaching a torch CPU kernel raises.
"""

import os

os.environ.setdefault("NEURONSIM_ASSERT_NO_CPU", "1")

pytest_plugins = ["harness.pytest_plugin"]
