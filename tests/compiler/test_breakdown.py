"""compiler.breakdown: the per-step diagnostic behind ``benches/compiled_ratio.py --breakdown``.

``capture`` wraps ``Executable.__call__`` to record each compiled program's call; it must pass every argument the
driver gives on (an in-place program's ``into``, the outputs it writes into an input's memory), or a compiled
workload stops running inside it (TypeError, found by running the decoder block's breakdown)."""

import torch

import device_impl  # noqa: F401
from device_impl.compiler import breakdown


def test_capture_records_programs_and_passes_every_argument_on():
    torch._dynamo.reset()

    def step(x, y):
        x.add_(y)  # an in-place update: the driver hands the executable where x's new values go
        return torch.tanh(x) * 2

    x, y = torch.randn(4, 130), torch.randn(4, 130)
    expected_x = x.clone().add_(y)
    expected = torch.tanh(expected_x) * 2
    nx, ny = x.to("neuron"), y.to("neuron")
    compiled = torch.compile(step, backend="neuron", dynamic=False)
    with breakdown.capture() as calls:
        out = compiled(nx, ny)
    assert calls, "no compiled program call was recorded"
    assert torch.allclose(out.cpu(), expected, atol=1e-6)
    assert torch.equal(nx.cpu(), expected_x)
    rows = breakdown.step_figures(calls[-1][0], calls[-1][1])
    assert rows and sum(r.ns for r in rows) > 0
