"""Bit shifts, gcd/lcm, nextafter, frexp and sinc run on device kernels (no CPU fallback) with CPU's bits at the
edges CPU defines: shift counts negative or at least the bit width, gcd/lcm of zeros, negatives and the dtype's
minimum, nextafter between zeros of both signs and from infinities, frexp of subnormals and specials, sinc at
zero and tiny x; out=, in-place, broadcast (stride 0) and non-contiguous operands; CPU's exception classes."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.diff import check

INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _counts(dtype: torch.dtype, n: int = 33) -> torch.Tensor:
    bits = torch.iinfo(dtype).bits
    edges = [-1, 0, 1, bits - 1, bits, bits + 1, 2 * bits, -bits, 3, 5, 2]
    return torch.tensor((edges * n)[:n], dtype=torch.int64).to(dtype)


def _shifted(dtype: torch.dtype, rows: int = 7, n: int = 33) -> torch.Tensor:
    info = torch.iinfo(dtype)
    x = torch.randint(info.min, info.max, (rows, n), generator=torch.Generator().manual_seed(0),
                      dtype=torch.int64).to(dtype)
    x[0, :4] = torch.tensor([info.min, info.max, 0, 1]).to(dtype)
    return x


SHIFTS = {
    "bitwise_left_shift": torch.bitwise_left_shift, "bitwise_right_shift": torch.bitwise_right_shift,
    "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
}


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name", SHIFTS)
def test_shift_counts_out_of_range_give_cpus_result(name, dtype):
    fn = SHIFTS[name]
    x, counts = _shifted(dtype), _counts(dtype)
    check(fn, x, counts)  # counts broadcast along the rows (stride 0)
    check(fn, x.t().contiguous().t(), counts.expand(7, 33))  # column-major and expanded
    for count in (-1, 3, 8, 70):
        check(fn, x, count)


@pytest.mark.parametrize("left", [True, False])
def test_shift_forms_in_place_out_and_scalar_first(left):
    name = "bitwise_left_shift" if left else "bitwise_right_shift"
    x, counts = _shifted(torch.int32), _counts(torch.int32)
    check(lambda a, b: getattr(a.clone(), name + "_")(b), x, counts)
    check(lambda a, b: a.clone().__ilshift__(b) if left else a.clone().__irshift__(b), x, counts)
    check(lambda a, b: getattr(torch, name)(a, b, out=torch.empty(0, dtype=torch.int64, device=a.device)),
          x, counts)
    check(lambda b: getattr(torch, name)(-5, b), counts)
    check(lambda a, b: getattr(torch, name)(a, b), torch.tensor([1, 2], dtype=torch.int8),
          torch.tensor([9, 70]))  # promoted to int64: a count of 9 is in range there
    check(lambda a: getattr(torch, name)(a, 3), torch.tensor([True, False]))  # int64


@pytest.mark.parametrize("fn", [torch.bitwise_left_shift, torch.gcd, torch.lcm, torch.nextafter])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bool, torch.int32])
def test_refused_dtypes_raise_cpus_error(fn, dtype):
    check(fn, torch.ones(3, dtype=dtype), torch.ones(3, dtype=dtype))
    check(torch.frexp, torch.ones(3, dtype=dtype))


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("name", ["gcd", "lcm"])
def test_gcd_lcm_of_zeros_negatives_and_the_minimum(name, dtype):
    fn = getattr(torch, name)
    info = torch.iinfo(dtype)
    low = info.min
    a = torch.tensor([0, 0, 6, -6, low, low, 4, -4, 7, 12, info.max, 3], dtype=torch.int64).to(dtype)
    b = torch.tensor([0, 5, 4, 4, 0, low, -6, 0, -1, 18, 3, low], dtype=torch.int64).to(dtype)
    check(fn, a, b)
    x = torch.randint(max(low, -50), min(info.max, 50), (6, 9), generator=torch.Generator().manual_seed(1),
                      dtype=torch.int64).to(dtype)
    check(fn, x, x[:1])  # broadcast
    check(fn, x.t(), x.t().flip(0))  # non-contiguous
    check(lambda p, q: getattr(p.clone(), name + "_")(q), x, x.flip(1))
    check(lambda p, q: fn(p, q, out=torch.empty(0, dtype=dtype, device=p.device)), x, x.flip(0))


@pytest.mark.parametrize("dtype", FLOATS)
def test_nextafter_ties_zeros_and_specials(dtype):
    inf, nan = float("inf"), float("nan")
    a = torch.tensor([0.0, -0.0, 0.0, -0.0, 1.0, inf, -inf, nan, 1.0, 3.0, 1e-40, 1.0], dtype=dtype)
    b = torch.tensor([-0.0, 0.0, 1.0, -1.0, 1.0, 0.0, 0.0, 1.0, nan, inf, 0.0, 2.0], dtype=dtype)
    check(torch.nextafter, a, b)
    x = torch.randn(5, 12, generator=torch.Generator().manual_seed(2)).to(dtype)
    check(torch.nextafter, x.t(), b[:5])  # non-contiguous, broadcast
    check(lambda p, q: p.clone().nextafter_(q), x, b)
    check(lambda p, q: torch.nextafter(p, q, out=torch.empty(0, dtype=dtype, device=p.device)), x, x)


@pytest.mark.parametrize("dtype", FLOATS)
def test_frexp_of_subnormals_and_specials(dtype):
    x = torch.tensor([0.0, -0.0, 1.0, 3.0, -0.75, float("inf"), -float("inf"), float("nan"), 1e-40, -3e-39,
                      6e-8, 65504.0], dtype=torch.float32).to(dtype)
    check(torch.frexp, x)
    y = torch.randn(6, 9, generator=torch.Generator().manual_seed(3)).to(dtype) * 1e-3
    check(torch.frexp, y.t())
    check(lambda t: torch.frexp(t, out=(torch.empty(0, dtype=dtype, device=t.device),
                                        torch.empty(0, dtype=torch.int32, device=t.device))), y)
    check(lambda t: torch.frexp(t, out=(torch.empty(0, dtype=dtype, device=t.device),
                                        torch.empty(0, dtype=torch.int64, device=t.device))), y)  # RuntimeError


@pytest.mark.parametrize("dtype", FLOATS + (torch.int64, torch.bool))
def test_sinc_at_zero_and_tiny_values(dtype):
    tiny = torch.tensor([0.0, -0.0, 1e-45, 1e-30, -1e-20, 1e-8, 2e-4, 0.5, 1.0, -3.0, 1e30, float("inf"),
                         float("nan")])
    x = tiny.to(dtype) if dtype.is_floating_point else torch.arange(-6, 7).to(dtype)
    exact = check(torch.sinc, x, tol=(1.3e-6, 1e-5) if dtype == torch.float32 else None)
    if dtype.is_floating_point:
        assert exact.cpu()[:3].eq(1).all()  # sinc(+-0) and sinc of the smallest subnormal are exactly 1
    y = torch.randn(5, 7, generator=torch.Generator().manual_seed(4)).to(dtype) if dtype.is_floating_point else \
        torch.arange(35).reshape(5, 7).to(dtype)
    check(torch.sinc, y.t(), tol=(1.3e-6, 1e-5) if dtype == torch.float32 else None)
    if dtype.is_floating_point:
        check(lambda t: t.clone().sinc_(), y)
