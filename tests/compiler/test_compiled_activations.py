"""Activations whose eager kernel is one ScalarE instruction compile as that instruction (compiler/activations.py):
silu, gelu, log2 and log10 of float32 tensors, and silu and gelu of bfloat16/float16 ones. Each was a formula of two or three passes (x * sigmoid(x),
log(x) / log(2), x * 0.5 * (1 + erf(x / sqrt(2)))), one VectorE instruction on the last tile more than the eager
kernel: compiled lost to eager by 0.06-0.07 us (benches/compiled_vs_eager_specs.py). Device times are the simulated
clock's (deterministic)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from device_impl.kernels import cpu_host
from support import compiled_run, eager_run

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _input(*shape: int, positive: bool = False) -> torch.Tensor:
    """Normal values (times 4: silu's and gelu's tails), zeros of both signs, NaN and infinities among them."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)) * 4
    flat = x.view(-1)
    flat[:5] = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf")])
    return x.abs() if positive else x


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def _steps(fn, x: torch.Tensor) -> tuple[torch.Tensor, int, list]:
    torch._dynamo.reset()
    got, ns, steps = compiled_run(fn, x)
    return got, ns, [(s["kind"], [op["op"] for op in s.get("ops", [])]) for s in steps]


ACTIVATIONS = [
    ("silu", F.silu, False),
    ("gelu", F.gelu, False),
    ("log2", torch.log2, True),
    ("log10", torch.log10, True),
]


@pytest.mark.parametrize("name,fn,positive", ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
@pytest.mark.parametrize("shape", [(513,), (3, 2, 513)], ids=["513", "3x2x513"])
def test_a_float32_activation_is_the_eager_kernels_one_instruction(name, fn, positive, shape):
    """One fused step evaluating the activation itself (no sigmoid and multiply, log and divide, erf and its
    affine steps), the eager kernel's bits (zero signs, NaN, infinities), no more device time than eager."""
    if name == "gelu" and cpu_host.onednn_gelu(torch.empty(shape), "none"):
        pytest.skip("CPU runs oneDNN's gelu here: the eager kernel issues its four instructions, as compiled does")
    x = _input(*shape, positive=positive)
    eager, eager_ns = eager_run(fn, x)
    got, ns, steps = _steps(fn, x.to("neuron"))
    assert steps == [("fused", [name])], steps
    assert torch.equal(_bits(got), _bits(eager))
    torch.testing.assert_close(got, fn(x), equal_nan=True)  # CPU, within float32's tolerance
    assert ns <= eager_ns, (ns, eager_ns)


def test_a_cut_activation_fuses_with_its_neighbours():
    """The spliced op is an elementwise op like any: silu(x) * y + log2(|y|) is one fused group."""
    x, y = _input(2, 513), _input(2, 513, positive=True) + 0.5

    def fn(a, b):
        return F.silu(a) * b + torch.log2(b)

    torch._dynamo.reset()
    got, _, raw = compiled_run(fn, x, y)
    kinds = [(s["kind"], [op["op"] for op in s.get("ops", [])]) for s in raw]
    assert len(kinds) == 1 and kinds[0][0] == "fused", kinds
    assert "silu" in kinds[0][1] and "log2" in kinds[0][1], kinds
    assert "logistic" not in kinds[0][1] and "divide" not in kinds[0][1], kinds
    torch.testing.assert_close(got, fn(x, y), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("name,fn", [("silu", F.silu), ("gelu", F.gelu)], ids=["silu", "gelu"])
def test_a_reduced_float_activation_is_the_eager_kernels_one_instruction(name, fn, dtype):
    """bfloat16/float16 silu and gelu too: legalize's opmath widens the call into the float32 one, which is cut;
    its converts are the group's load and store, so the activation reads the narrow tile and rounds once to the
    dtype, as the eager kernel's activation on that tile: its bits, no more device time (bfloat16 at 513
    elements, before: silu 1.60 us against eager's 1.54, as ``x * sigmoid(x)``; gelu 1.53 against 1.33, as
    numerics' erf formula)."""
    x = _input(3, 513).to(dtype)
    if name == "gelu" and cpu_host.onednn_gelu(x, "none"):
        pytest.skip("CPU runs oneDNN's gelu here: the eager kernel issues its four instructions, as compiled does")
    eager, eager_ns = eager_run(fn, x)
    got, ns, steps = _steps(fn, x.to("neuron"))
    assert len(steps) == 1 and steps[0][0] == "fused", steps
    assert [op for op in steps[0][1] if op != "convert"] == [name], steps
    assert torch.equal(got.view(torch.int16), eager.view(torch.int16))
    torch.testing.assert_close(got, fn(x), equal_nan=True)  # CPU, within the dtype's tolerance
    assert ns <= eager_ns, (ns, eager_ns)


def test_silu_trains_through_the_cut():
    """A training graph: the forward's silu cut whole, its backward (silu_backward, decomposed) unchanged."""
    x = _input(4, 129)
    fn = torch.compile(lambda a: F.silu(a).sum(), backend="neuron", dynamic=False)
    torch._dynamo.reset()
    a = x.to("neuron").requires_grad_()
    fn(a).backward()
    b = x.clone().requires_grad_()
    F.silu(b).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), b.grad, equal_nan=True)
