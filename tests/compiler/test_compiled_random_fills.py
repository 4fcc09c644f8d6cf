"""A compiled graph with an in-place random fill runs as Dynamo traced it (backend.strided_random_fill): random
ops never compile, and AOTAutograd's functional graph, run eagerly instead, filled a fresh tensor and copied it
back into the input (or ran bernoulli_(p)'s functional decomposition): device work eager does not do (issue 21's
spec sweep, benches/compiled_vs_eager_specs.py: random_inplace_views 3.04x, bernoulli_tensor 1.32x eager)."""

from __future__ import annotations

import warnings

import pytest
import torch

from device_impl._core import C

pytestmark = pytest.mark.usefixtures("no_neff_cache")

FILLS = {
    "uniform_": lambda x: x.uniform_(2.0, 3.0),
    "normal_": lambda x: x.normal_(5.0, 1.0),
    "bernoulli_scalar": lambda x: x.bernoulli_(0.5),
    "exponential_": lambda x: x.exponential_(),
    "clone_bernoulli_tensor": lambda x: x.clone().bernoulli_(torch.full_like(x, 0.5)),
}


def _run(fn, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """A warm call's result and the device clock's advance over it, from seed 0."""
    fn(x)
    torch.neuron.synchronize()
    torch.neuron.manual_seed(0)
    before = C.device_time_ns(0)
    out = fn(x)
    torch.neuron.synchronize()
    return out.cpu(), C.device_time_ns(0) - before


@pytest.mark.parametrize("name", sorted(FILLS))
def test_an_in_place_random_fill_costs_what_eager_does(name):
    fill = FILLS[name]
    x = torch.randn(2, 1, 513).to("neuron")
    with torch.neuron.eager_mode("eager"):
        expected, eager_ns = _run(fill, x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # the graph's eager run is announced
            got, compiled_ns = _run(torch.compile(fill, backend="neuron", dynamic=False), x)
    assert torch.equal(got, expected)  # the same draws from the same generator state
    # at most eager's: the graph runs eagerly in adaptive mode (compiler/fallback.py), where a clone and its fill
    # may fuse (clone_bernoulli_tensor 8356 -> 6350 ns)
    assert compiled_ns <= eager_ns
