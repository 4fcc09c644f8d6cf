"""The wide runners' transposing copies (kernels/contiguous.py): the same bits as numpy's one-call copy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from device_impl.kernels.contiguous import COPY_COLUMNS, ONE_COPY_ELEMENTS, fp32_contiguous


def _raw(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32)


@pytest.mark.parametrize("shape", [(8, 128, 128), (1, 2, 2, 128, 128), (3, 64, 97), (130, 33), (2, 16, 16)])
@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_a_slab_copy_is_numpys_copy_bit_for_bit(shape, dtype):
    """Transposed (strided last axis), sliced and contiguous views, above and below the slab thresholds, with
    NaN, infinities and -0.0 among the values: every bit as ``np.ascontiguousarray(view, float32)``."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal(shape).astype(np.float32)
    flat = base.reshape(-1)
    flat[::7], flat[1::11], flat[2::13] = np.nan, -np.inf, -0.0
    base = base.astype(dtype)
    views = [base, base.swapaxes(-1, -2), base.swapaxes(-1, -2)[..., 1:], base[..., ::2]]
    for view in views:
        expected = np.ascontiguousarray(view, dtype=np.float32)
        for copy in (False, True):
            got = fp32_contiguous(view, copy=copy)
            assert got.dtype == np.float32 and got.flags.c_contiguous and got.shape == view.shape
            assert np.array_equal(_raw(got), _raw(expected))
            if copy:
                assert not np.shares_memory(got, view)
    assert any(v.size > ONE_COPY_ELEMENTS and v.shape[-1] > COPY_COLUMNS and v.strides[-1] != v.itemsize
               for v in views) or base.size <= ONE_COPY_ELEMENTS  # the slab path is exercised where it can be

