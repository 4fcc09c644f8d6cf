"""Pointwise ops whose compiled form is the eager kernel's passes (compiler/pointwise.py; issue 21's spec sweep,
benches/compiled_vs_eager_specs.py): the same bits as the eager kernel, no more VectorE passes, no more device
time."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from support import compiled_run, eager_run

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _special(*shape: int) -> torch.Tensor:
    """Normal values with the cases the formulas single out: signed zeros, infinities, NaN, 0 and 1."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    flat = x.view(-1)
    cases = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0, 0.5, 1e-7])
    flat[:8] = cases[:flat.numel()]
    return x


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int32).numpy()


def _vector_ops(steps: list[dict]) -> int:
    return sum(len(step.get("ops", ())) for step in steps)


@pytest.mark.parametrize("x_shape", [(), (3, 5, 5, 513)], ids=["scalar_x", "full_x"])
def test_heaviside_compiles_to_the_eager_kernels_three_passes(x_shape):
    """PyTorch's decomposition (x < 0 or NaN as an integer select, converted) was seven passes: 12.3 us against
    the eager kernel's 6.8 with a 0-d x. Now an equality, a compare written as float and a select over the result,
    x loaded broadcast: the eager kernel's bits (-0.0 takes values, NaN gives 0) and, for the sweep's 0-d x, no
    more device time. (Two full operands: the same three passes, but the fused group's tiling issues more
    instructions than the eager kernel's flat tiles, 4.77 against 4.51 us: not this decomposition's doing.)"""
    x = _special(*x_shape) if x_shape else torch.tensor(-0.0)
    values = _special(3, 5, 5, 513).flip(-1).contiguous()
    out, ns, steps = compiled_run(torch.heaviside, x, values)
    expected, eager_ns = eager_run(torch.heaviside, x, values)
    assert np.array_equal(_bits(out), _bits(expected))
    assert np.array_equal(_bits(out), _bits(torch.heaviside(x, values)))  # CPU's
    assert [s["kind"] for s in steps] == ["fused"] and _vector_ops(steps) == 3
    if not x_shape:
        assert ns <= eager_ns


@pytest.mark.parametrize("eps", [0.0, 1e-6, None, -0.5], ids=["eps0", "eps1e-6", "none", "negative"])
def test_logit_clamps_with_maximum_and_minimum(eps):
    """PyTorch's decomposition clamps with two compares and two selects (and clamps to [-1, 2] where eps is None):
    3.98 us against the eager kernel's 2.79. Now NaN-propagating maximum and minimum where eps >= 0 (bounds as
    the eager kernel rounds them: 1 - eps in float32), none otherwise: the eager kernel's bits."""
    x = _special(5, 2, 2, 513).sigmoid()
    x.view(-1)[8:12] = torch.tensor([-3.0, 2.5, 1.0 - 1e-7, float("nan")])
    fn = (lambda t: torch.logit(t, eps))
    out, ns, steps = compiled_run(fn, x)
    expected, eager_ns = eager_run(fn, x)
    assert np.array_equal(_bits(out), _bits(expected))
    torch.testing.assert_close(out, fn(x), equal_nan=True)  # CPU's, within log's ULP
    assert _vector_ops(steps) == (5 if eps is not None and eps >= 0 else 3)
    assert ns <= eager_ns


def _pairs(*shapes) -> list[torch.Tensor]:
    """Operands with equal infinities, equal values and NaN at the same places (where both have 16 elements)."""
    a, b = _special(*shapes[0]), _special(*shapes[1]).flip(-1).contiguous() * 3
    if a.numel() >= 16 and b.numel() >= 16:
        a.view(-1)[8:16] = torch.tensor([float("inf"), float("-inf"), 2.5, float("nan"), 0.0, -0.0, 7.0, 1e30])
        b.view(-1)[8:16] = torch.tensor([float("inf"), float("-inf"), 2.5, 1.0, -0.0, 0.0, float("nan"), -1e30])
    return [a, b]


# (op, operands, the compiled program's ops, whether it takes no more device time than the eager kernel at
# the sweep's shapes): PyTorch's forms took 14, 13, 6 (in five steps) and 6 ops
POINTWISE = [
    ("logaddexp", torch.logaddexp, [(2, 2, 513), (2, 1)], 8, True),
    ("logaddexp2", torch.logaddexp2, [(1,), (513,)], 9, True),
    ("logaddexp_same_shape", torch.logaddexp, [(4, 513), (4, 513)], 8, True),
    # a fused group over [1, 3, 513] tiles it as 3 rows of 513 where the eager kernel's flat tiles take 128
    # partitions: one pass fewer, yet 2.39 against 2.32 us (the group's tiling, not the decomposition)
    ("xlogy", torch.xlogy, [(1, 3, 513), ()], 6, False),
    ("mish", torch.nn.functional.mish, [(1, 513)], 4, True),
    # bfloat16: computed in float32 and rounded once, as the eager kernels (a convert in, one out)
    ("logaddexp_bf16", torch.logaddexp, [(2, 1, 513), (2, 1, 513)], 11, True),
    ("mish_bf16", torch.nn.functional.mish, [(3, 1, 513)], 6, True),
]


@pytest.mark.parametrize("name,fn,shapes,ops,faster", POINTWISE, ids=[c[0] for c in POINTWISE])
def test_pointwise_ops_compile_to_the_eager_kernels_passes(name, fn, shapes, ops, faster):
    """logaddexp/logaddexp2: maximum, minimum and one select of 0 where the operands are equal instead of
    PyTorch's selects and infinity test; xlogy: its operands expanded first, so a 0-d y's log fuses with the rest;
    mish: without softplus's threshold. One fused step, CPU's values (within the exp's and log's ULP)."""
    inputs = _pairs(*shapes) if len(shapes) == 2 else [_special(*shapes[0])]
    if name.endswith("_bf16"):
        inputs = [t.to(torch.bfloat16) for t in inputs]
    if name == "xlogy":
        inputs[1] = torch.tensor(0.75)
        inputs[0].view(-1)[:3] = torch.tensor([0.0, -0.0, float("nan")])
    out, ns, steps = compiled_run(fn, *inputs)
    expected, eager_ns = eager_run(fn, *inputs)
    torch.testing.assert_close(out, fn(*inputs), equal_nan=True)  # CPU's
    torch.testing.assert_close(out, expected, equal_nan=True)
    assert [s["kind"] for s in steps] == ["fused"] and _vector_ops(steps) == ops
    if faster:
        assert ns <= eager_ns


def test_xlogy_of_a_nan_y_is_nan_even_where_x_is_zero():
    x = torch.tensor([0.0, -0.0, 1.0, 0.0, 2.0])
    y = torch.tensor([float("nan"), 1.0, float("nan"), 0.0, 0.0])
    out, _, _ = compiled_run(torch.xlogy, x, y)
    torch.testing.assert_close(out, torch.xlogy(x, y), equal_nan=True)
    assert np.array_equal(_bits(out), _bits(torch.xlogy(x, y)))
