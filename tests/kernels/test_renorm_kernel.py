"""renorm runs on the device (no CPU fallback): every p (1, 2, a fraction, inf) and dim, zero slices, NaN norms,
maxnorm 0 and a norm exactly equal to maxnorm (factor 1, bit-identical), bfloat16/float16's factor rounded to the
dtype, non-contiguous and expanded inputs, out= and in place, and CPU's errors (p <= 0, maxnorm < 0, one
dimension, integer input, dim out of range)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.kernels.diff import check

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
TOL = {torch.float32: (1e-5, 1e-6), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (1e-3, 1e-3)}


def _x(dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(5, 7, 3, generator=torch.Generator().manual_seed(0)).to(dtype)
    x[1] = 0
    x[2, 0, 0] = float("nan")
    return x


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("p", [1, 2, 3.5, math.inf])
def test_renorm_every_p_and_dim(p, dtype):
    x = _x(dtype)
    for dim in (0, 1, -1):
        for maxnorm in (0.0, 0.7, 1e3):
            check(torch.renorm, x, p, dim, maxnorm, tol=TOL[dtype])


@pytest.mark.parametrize("dtype", FLOATS)
def test_renorm_layouts_out_and_in_place(dtype):
    x = _x(dtype)
    check(lambda t: torch.renorm(t.transpose(0, 2), 2, 0, 0.7), x, tol=TOL[dtype])
    check(lambda t: torch.renorm(t[:, :1].expand(5, 4, 3), 2, 1, 0.7), x, tol=TOL[dtype])
    check(lambda t: t.clone().renorm_(2, 1, 0.7), x, tol=TOL[dtype])
    check(lambda t: torch.renorm(t, 2, 1, 0.7, out=torch.empty(0, dtype=dtype, device=t.device)), x, tol=TOL[dtype])


def test_renorm_norm_equal_to_maxnorm_keeps_the_slice():
    """The inf-norm is exact: a slice whose norm equals maxnorm keeps factor 1, not maxnorm / (norm + 1e-7)."""
    x = torch.tensor([[3.0, -4.0], [0.6, 0.8], [0.0, -0.0]])
    for maxnorm in (4.0, 0.8, 1.0):
        check(torch.renorm, x, math.inf, 0, maxnorm, tol=(0, 0))
    check(torch.renorm, x, 2, 0, 5.0, tol=(0, 0))  # 3-4-5: the 2-norm is exact here too


@pytest.mark.parametrize("args", [(torch.ones(3), 2, 0, 1.0), (torch.ones(3, 2), 0, 0, 1.0), (torch.ones(3, 2), -1, 0, 1.0),
                                  (torch.ones(3, 2), 2, 0, -1.0), (torch.ones(3, 2, dtype=torch.int64), 2, 0, 1.0),
                                  (torch.ones(3, 2), 2, 5, 1.0)])
def test_renorm_errors(args):
    check(torch.renorm, *args)


def test_renorm_empty():
    check(torch.renorm, torch.ones(0, 3), 2, 0, 1.0)
    check(torch.renorm, torch.ones(0, 3), math.inf, 1, 1.0)  # the inf-norm over an empty dim: CPU's RuntimeError
    check(torch.renorm, torch.ones(3, 0), math.inf, 0, 1.0)
    check(torch.renorm, torch.ones(0, 3), math.inf, 0, 1.0)  # the empty dim kept: an empty result


def test_renorm_out_dtype_is_exact():
    check(lambda t: torch.renorm(t, 2, 0, 1.0, out=torch.empty(0, dtype=torch.float16, device=t.device)),
          torch.ones(3, 2))
