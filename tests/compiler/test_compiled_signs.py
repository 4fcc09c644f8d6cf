"""copysign, signbit and hypot compile (compiler/opaque.py ``_exact_elementwise``): torch-mlir imports copysign
and signbit as bitcasts nothing lowers, and hypot as nothing it converts, so their graphs ran eagerly. Cut and
spliced back as VectorE's one ALU op, they fuse with their neighbours and keep every sign bit, a NaN's too."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import device_impl.compiler as compiler

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _signed(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Normal values with both zeros, both infinities and NaNs of both signs."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    nan = torch.tensor(float("nan"))
    cases = torch.stack([torch.tensor(0.0), torch.tensor(-0.0), torch.tensor(float("inf")),
                         torch.tensor(float("-inf")), nan, -nan])
    x.view(-1)[:6] = cases[:x.numel()]
    return x.to(dtype)


def _compiled(fn, *inputs: torch.Tensor) -> torch.Tensor:
    torch._dynamo.reset()
    before = compiler.stats()["fallbacks"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # an eager fallback would warn
        out = torch.compile(fn, backend="neuron", dynamic=False)(*[t.to("neuron") for t in inputs])
    assert compiler.stats()["fallbacks"] == before
    return out.cpu()


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.view({torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16,
                   torch.bool: torch.uint8}[t.dtype]).numpy()


CASES = {
    "copysign": lambda x, y: torch.copysign(x, y),
    "copysign_fused": lambda x, y: torch.copysign(x * 2, y) + 1,
    "signbit": lambda x, y: torch.signbit(x),
    "signbit_fused": lambda x, y: torch.signbit(x - y) | (x > 1),
    "hypot": lambda x, y: torch.hypot(x, y),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_sign_ops_compile_with_cpus_bits(name, dtype):
    x, y = _signed(3, 513, dtype=dtype), _signed(3, 513, dtype=dtype).flip(-1).contiguous()
    fn = CASES[name]
    got, want = _compiled(fn, x, y), fn(x, y)
    eager = fn(x.to("neuron"), y.to("neuron")).cpu()
    assert np.array_equal(_bits(got), _bits(eager))  # the eager kernel's bits
    # CPU's values (hypot: float32's rounded once, CPU's libm's or SLEEF's: within an ULP) and every sign bit,
    # copysign's NaNs' included (a bfloat16/float16 NaN's payload is not kept through float32, in eager as here;
    # the sign of a NaN that arithmetic made is no one's contract)
    torch.testing.assert_close(got, want, equal_nan=True)
    if got.dtype.is_floating_point:
        signed = torch.ones_like(want, dtype=torch.bool) if name == "copysign" else ~want.isnan()
        assert torch.equal(torch.signbit(got)[signed], torch.signbit(want)[signed])


BROADCASTS = [  # (op, x shape, y shape): the sweep's copysign (a 0-d x) and hypot ([2, 1]) cases among them
    ("copysign", (), (2, 2, 513)),
    ("copysign", (2, 2, 513), (513,)),
    ("copysign", (2, 1, 513), (2, 3, 1)),
    ("hypot", (2, 513), (2, 1)),
    ("hypot", (1,), (3, 513)),
]


@pytest.mark.parametrize("name,x_shape,y_shape", BROADCASTS, ids=[f"{c[0]}-{len(c[1])}d-{len(c[2])}d" for c in BROADCASTS])
def test_broadcasting_sign_ops_compile_with_cpus_bits(name, x_shape, y_shape):
    """A broadcast operand is broadcast where the op is spliced back (opaque._BROADCAST_KINDS): expanded in the
    FX graph instead, it came back from the import as the unexpanded input, which the fused group then read as
    if it had the result's size."""
    x = _signed(*x_shape) if x_shape else torch.tensor(-0.0)
    y = _signed(*y_shape).flip(-1).contiguous()
    fn = getattr(torch, name)
    got, want = _compiled(fn, x, y), fn(x, y)
    assert np.array_equal(_bits(got), _bits(fn(x.to("neuron"), y.to("neuron")).cpu()))
    torch.testing.assert_close(got, want, equal_nan=True)
    if name == "copysign":
        assert torch.equal(torch.signbit(got), torch.signbit(want))
