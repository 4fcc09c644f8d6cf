"""linspace compiles as the eager kernel's program (float32: its GpSimd program (compiler/factories.py): PyTorch's decomposition
(iota, compare, two multiply-adds, select) took 1.46 us against the eager kernel's 1.18 (benches/compiled_vs_eager_specs.py); bfloat16 and float16: CPU's
rounding of every operation to the dtype, which the decomposition (float32, one rounding) missed by up to 12 ULP).
Device times are the simulated clock's (deterministic)."""

from __future__ import annotations

import pytest
import torch

from device_impl import engine
from device_impl.compiler import breakdown
from support import device_ns

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _compiled(fn, *inputs: torch.Tensor):
    """A warm compiled call's output (CPU), device time and step kinds, Dynamo reset first."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    compiled(*inputs)
    torch.neuron.synchronize()
    with breakdown.capture() as calls:
        engine.reset_stats()
        out = compiled(*inputs)
        ns = device_ns()
    return out.cpu(), ns, [step["kind"] for executable, _ in calls for step in executable.program.steps]


def _eager(fn, *inputs: torch.Tensor):
    fn(*inputs)
    torch.neuron.synchronize()
    engine.reset_stats()
    out = fn(*inputs)
    return out.cpu(), device_ns()


@pytest.mark.parametrize("start,end,steps", [(-8, -9, 226), (0, 1, 2), (-10.5, 3.25, 513), (3, 3, 7)])
def test_float32_linspace_is_the_eager_kernels_program(start, end, steps):
    """One step of the eager kernel's program: CPU's bits (its two halves' fused multiply-adds), no more device
    time than eager."""
    def fn():
        return torch.linspace(start, end, steps, device="neuron")

    want = torch.linspace(start, end, steps)
    eager, eager_ns = _eager(fn)
    got, ns, kinds = _compiled(fn)
    assert kinds == ["linspace"], kinds
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    assert torch.equal(got.view(torch.int32), eager.view(torch.int32))
    assert ns <= eager_ns, (ns, eager_ns)


def test_a_linspace_read_by_other_ops_feeds_them():
    x = torch.randn(2, 129, generator=torch.Generator().manual_seed(0))

    def fn(a):
        return a * torch.linspace(-1, 1, 129, device=a.device) + 1

    got, _, kinds = _compiled(fn, x.to("neuron"))
    assert "linspace" in kinds, kinds
    torch.testing.assert_close(got, fn(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8],
                         ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("start,end,steps", [(5, -5, 153), (0, 10, 7), (3, 250, 300)])
def test_every_dtypes_linspace_is_the_eager_kernels_program(dtype, start, end, steps):
    """The other dtypes are cut too: CPU's bits (bfloat16/float16 round every operation to the dtype: the
    decomposition's one float32 rounding was up to 12 ULP off CPU's near zero)."""
    if dtype == torch.uint8 and min(start, end) < 0:
        pytest.skip("a negative linspace of uint8 wraps on CPU as on the device; not this test's point")

    def fn():
        return torch.linspace(start, end, steps, dtype=dtype, device="neuron")

    want = torch.linspace(start, end, steps, dtype=dtype)
    eager, _ = _eager(fn)
    got, _, kinds = _compiled(fn)
    assert kinds == ["linspace"], kinds
    assert torch.equal(got, want) and torch.equal(eager, want)


@pytest.mark.parametrize("steps", [0, 1], ids=["empty", "one"])
def test_empty_and_one_step_linspaces_keep_their_decomposition(steps):
    """Steps 0 and 1 (an empty result, a fill) are not cut: their results are CPU's as before."""
    def fn():
        return torch.linspace(-8, 9, steps, device="neuron")

    got, _, kinds = _compiled(fn)
    assert "linspace" not in kinds, kinds
    torch.testing.assert_close(got, torch.linspace(-8, 9, steps), atol=0, rtol=0)
