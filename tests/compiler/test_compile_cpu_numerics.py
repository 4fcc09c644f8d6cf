"""Compiled graphs compute what CPU eager computes where torch-mlir's lowering or a decomposition rounds, promotes
or orders differently (the op suite's compiled mode, numerics group: promotion, zero signs, NaN/inf positions).

Each test failed before its rewrite or decomposition (device_impl/compiler/numerics.py)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _compiled(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", dynamic=False)(*[a.to("neuron") for a in args])


def _same_bits(fn, *args):
    """Compiled on neuron and eager on CPU agree bit for bit: values, NaN and infinity positions, zero signs."""
    got, want = _compiled(fn, *args).cpu(), fn(*args)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    if want.is_floating_point():
        zeros = want == 0  # the sign of zero (a NaN's sign bit is no part of its value)
        assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros]))


@pytest.mark.parametrize("op", [torch.le, torch.lt, torch.ge, torch.gt, torch.eq, torch.ne],
                         ids=lambda op: op.__name__)
@pytest.mark.parametrize("other", [1, 200], ids=["uint8-1", "uint8-200"])
def test_signed_and_unsigned_compare_in_atens_promoted_dtype(op, other):
    """int8 against a 0-d uint8 compares in int8 (a 0-d tensor does not widen a dimensioned one): 200 is -56.
    torch-mlir compared both as unsigned, so -1 <= 1 was False (op suite le int8 int_edges)."""
    a = torch.tensor([-128, -56, -1, 0, 1, 2, 127], dtype=torch.int8)
    _same_bits(op, a, torch.tensor(other, dtype=torch.uint8))
    _same_bits(op, a, torch.tensor([other] * 7, dtype=torch.uint8))  # int16 both sides
