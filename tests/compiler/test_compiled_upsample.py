"""Compiled upsampling against its eager kernel (compiler/opaque_resample.py, issue 21's spec sweep): a call whose
eager kernel's program is cheaper than PyTorch's decomposition is cut whole, one ``upsample`` step running that
program (the eager kernel's bits, its device time); a call whose decomposition is cheaper keeps it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from support import compiled_run, eager_run

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32).numpy()


def _randn(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)


# the sweep's cases where compiled lost (benches/compiled_vs_eager_specs.py: compiled against eager us)
WHOLE = [
    ("bicubic", torch.float32, (1, 1, 2, 513), dict(size=(5, 500), mode="bicubic", align_corners=False)),  # 43.9/39.4
    ("trilinear", torch.float32, (1, 1, 2, 2, 513), dict(size=(3, 3, 266), mode="trilinear",
                                                         align_corners=False)),  # 25.3/21.3
    ("bilinear", torch.float32, (1, 2, 9, 5), dict(size=(7, 1), mode="bilinear", align_corners=False)),  # 4.04/3.72
    ("bilinear_bf16", torch.bfloat16, (1, 2, 3, 7), dict(size=(4, 2), mode="bilinear",
                                                          align_corners=False)),  # 4.27/3.78
    ("nearest_bf16", torch.bfloat16, (1, 1, 9, 2), dict(scale_factor=1.5, mode="nearest")),  # 2.32/2.24
    ("nearest1d_bf16", torch.bfloat16, (1, 1, 513), dict(size=(57,), mode="nearest")),  # 1.83/1.72
]


@pytest.mark.parametrize("name,dtype,shape,options", WHOLE, ids=[c[0] for c in WHOLE])
def test_upsample_whose_eager_kernel_is_cheaper_compiles_to_one_step_of_it(name, dtype, shape, options):
    """Cut whole: the program is one ``upsample`` step (the eager kernel's program), its device time at most the
    eager call's and its result the eager kernel's bit for bit."""
    x = _randn(shape, dtype)

    def fn(t):
        return F.interpolate(t, **options)

    expected, eager_ns = eager_run(fn, x)
    got, compiled_ns, steps = compiled_run(fn, x)
    assert [step["kind"] for step in steps] == ["upsample"], [step["kind"] for step in steps]
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)
    # the eager kernel's bits (how near CPU's they are is the op suite's judgement: fp64_reference for the linear
    # modes, whose sums of products CPU orders its own way)
    assert got.dtype == expected.dtype and np.array_equal(_bits(got), _bits(expected))


def test_upsample_whose_decomposition_is_cheaper_keeps_it():
    """A float32 nearest resize by 0.5 of [1, 1, 3, 8] compiles to 1.97 us decomposed against the eager kernel's
    2.24: ``costed.cut_wins`` keeps the decomposition, and the call stays no slower than eager."""
    x = _randn((1, 1, 3, 8), torch.float32)

    def fn(t):
        return F.interpolate(t, scale_factor=0.5, mode="nearest")

    expected, eager_ns = eager_run(fn, x)
    got, compiled_ns, steps = compiled_run(fn, x)
    assert "upsample" not in {step["kind"] for step in steps}
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)
    assert torch.equal(got, expected)


def test_the_choice_compares_the_cut_program_with_the_decomposed_one():
    """The choice is by modelled time (``costed.cut_wins``): the call compiled alone cut whole (one step running the
    eager kernel's program: the eager launch's time less its launch overhead) against the call compiled alone
    decomposed; the decomposition where that is cheaper."""
    from device_impl.compiler import backend, costed, costing, opaque_resample  # noqa: F401 (installs the costing)
    from device_impl.engine.constants import PLATFORM

    aten = torch.ops.aten
    x = torch.empty((1, 1, 2, 513), device="neuron")
    args = (x, [5, 500], False, None)
    cut_ns = costing.call_ns(aten.upsample_bicubic2d.vec, args, {}, True)
    decomposed_ns = costing.call_ns(aten.upsample_bicubic2d.vec, args, {}, False)
    _, eager_ns = eager_run(lambda t: F.interpolate(t, size=(5, 500), mode="bicubic", align_corners=False),
                            _randn((1, 1, 2, 513), torch.float32))
    assert cut_ns == pytest.approx(eager_ns - PLATFORM.launch_overhead_ns, rel=1e-9)
    assert cut_ns < decomposed_ns
    assert opaque_resample.upsample_whole(aten.upsample_bicubic2d.vec, args, {}) is not None
    small = torch.empty((1, 1, 3, 8), device="neuron")
    assert opaque_resample.upsample_whole(aten.upsample_nearest2d.vec, (small, None, [0.5, 0.5]), {}) is None
    assert not costed.cut_wins(aten.upsample_nearest2d.vec, (small, None, [0.5, 0.5]))


def test_a_training_step_through_a_whole_upsample_takes_the_eager_kernels_gradient():
    """The cut forward keeps ATen's Autograd kernel, so the gradient is ``upsample_trilinear3d_backward`` (cut whole
    by opaque_cnn): forward and gradient both the eager kernels' bits, and no graph runs eagerly."""
    import device_impl.compiler as compiler

    x = _randn((1, 1, 2, 2, 513), torch.float32)

    def fn(t):
        return F.interpolate(t, size=(3, 3, 266), mode="trilinear", align_corners=False).square().sum()

    eager = x.to("neuron").requires_grad_()
    want = fn(eager)
    want.backward()
    before = compiler.stats()["fallbacks"]
    compiled = x.to("neuron").requires_grad_()
    got = torch.compile(fn, backend="neuron", dynamic=False)(compiled)
    got.backward()
    assert compiler.stats()["fallbacks"] == before
    assert np.array_equal(_bits(compiled.grad.cpu()), _bits(eager.grad.cpu()))
    assert np.array_equal(_bits(got.detach().cpu()), _bits(want.detach().cpu()))
