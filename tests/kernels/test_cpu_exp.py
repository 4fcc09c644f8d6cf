"""The float32 exps the device computes where CPU's loops call exp (engine/expf.py) against the running torch.

cpu_host's probes name the function each loop calls (the ``expf.EXPF`` entry nearest CPU's bits); these
tests hold that entry to CPU's bits exactly, so a torch whose exp is neither model (another SLEEF, another
libm, a new vector exp) fails here rather than drifting a last place in the kernels that call it.
"""

import numpy as np
import pytest
import torch

from device_impl.engine import expf
from device_impl.kernels import cpu_host


@pytest.mark.parametrize("scalar", [False, True], ids=["vector", "scalar"])
def test_probed_exp_is_cpus_bit_for_bit(scalar):
    y = cpu_host._exp_probe_inputs()
    rng = np.random.default_rng(0)
    y = np.concatenate([y, rng.uniform(-110, 110, 1 << 16).astype(np.float32),
                        np.float32([np.inf, -np.inf, 88.72283, 88.72284, -103.97207, -103.97208, -104.0, 100.0])])
    y = np.concatenate([y, np.zeros(-y.size % 256, np.float32)])
    observed = cpu_host._log_softmax_backward_exp(y, scalar)
    name = cpu_host.scalar_exp() if scalar else cpu_host.vector_exp()
    model = expf.EXPF[name](y)
    differ = np.flatnonzero(model.view(np.int32) != observed.view(np.int32))
    assert differ.size == 0, (f"{name} differs from CPU's exp ({cpu_host.cpu_capability()}) at {differ.size} inputs, "
                              f"e.g. exp({y[differ[0]]!r}): {model[differ[0]]!r} vs {observed[differ[0]]!r}")


def test_capabilities_name_their_exps():
    """The names follow the kernels: DEFAULT's vector loop is libm's exp element by element; AVX2/AVX-512's is
    SLEEF's (their scalar loops libm's). Asked of torch, not assumed: this only checks the answer is coherent."""
    assert cpu_host.scalar_exp() in expf.EXPF and cpu_host.vector_exp() in expf.EXPF
    if cpu_host.cpu_capability() == "DEFAULT":
        assert cpu_host.vector_exp() == cpu_host.scalar_exp()
        assert all(cpu_host.softmax_backward_vector(d) is None for d in (torch.float32, torch.float16))
    else:
        size = cpu_host.softmax_backward_vector(torch.float32)
        assert size is None or (size & (size - 1) == 0 and size >= 4)
