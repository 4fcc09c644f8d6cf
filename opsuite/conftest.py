"""The op suite: every op spec of harness.specs, per family, against CPU eager."""

import os

# Native kernels run under the host-compute guard here too: a kernel that computed on the CPU
# would raise instead of passing silently.
os.environ.setdefault("NEURONSIM_ASSERT_NO_CPU", "1")

import torch  # noqa: E402,F401  (the torch.backends entry point registers the neuron device)
