"""The float32 exps the device computes where CPU's loops call exp (engine/expf.py) against the running torch.

cpu_host's probes name the function each loop calls (the ``expf.EXPF`` entry nearest CPU's bits); these
tests hold that entry to CPU's bits exactly, so a torch whose exp is neither model (another SLEEF, another
libm, a new vector exp) fails here rather than drifting a last place in the kernels that call it.
"""

import numpy as np
import pytest
import torch

from device_impl.engine import expf
from device_impl.kernels import cpu_host


@pytest.mark.parametrize("scalar", [False, True], ids=["vector", "scalar"])
def test_probed_exp_is_cpus_bit_for_bit(scalar):
    y = cpu_host._exp_probe_inputs()
    rng = np.random.default_rng(0)
    y = np.concatenate([y, rng.uniform(-110, 110, 1 << 16).astype(np.float32),
                        np.float32([np.inf, -np.inf, 88.72283, 88.72284, -103.97207, -103.97208, -104.0, 100.0])])
    y = np.concatenate([y, np.zeros(-y.size % 256, np.float32)])
    observed = cpu_host._log_softmax_backward_exp(y, scalar)
    name = cpu_host.scalar_exp() if scalar else cpu_host.vector_exp()
    model = expf.EXPF[name](y)
    differ = np.flatnonzero(model.view(np.int32) != observed.view(np.int32))
    assert differ.size == 0, (f"{name} differs from CPU's exp ({cpu_host.cpu_capability()}) at {differ.size} inputs, "
                              f"e.g. exp({y[differ[0]]!r}): {model[differ[0]]!r} vs {observed[differ[0]]!r}")


def test_capabilities_name_their_exps():
    """The names follow the kernels: DEFAULT's vector loop is libm's exp element by element; AVX2/AVX-512's is
    SLEEF's (their scalar loops libm's). Asked of torch, not assumed: this only checks the answer is coherent."""
    assert cpu_host.scalar_exp() in expf.EXPF and cpu_host.vector_exp() in expf.EXPF
    if cpu_host.cpu_capability() == "DEFAULT":
        assert cpu_host.vector_exp() == cpu_host.scalar_exp()
        assert all(cpu_host.softmax_backward_vector(d) is None for d in (torch.float32, torch.float16))
    else:
        size = cpu_host.softmax_backward_vector(torch.float32)
        assert size is None or (size & (size - 1) == 0 and size >= 4)


def _every_half_precision_value() -> np.ndarray:
    """All 2^16 float16 and all 2^16 bfloat16 bit patterns (infinities and NaN payloads included), as float32."""
    import ml_dtypes
    bits = np.arange(1 << 16, dtype=np.uint16)
    return np.concatenate([bits.view(np.float16).astype(np.float32), bits.view(ml_dtypes.bfloat16).astype(np.float32)])


def _around(x: float, k: int) -> np.ndarray:
    """The 2k float32 values nearest x (k below, k from x up), by bit pattern."""
    b = np.float32(x).view(np.int32)
    return (b + np.arange(-k, k, dtype=np.int32) * np.sign(b)).view(np.float32)


def _special_inputs() -> np.ndarray:
    """Zeros, infinities, NaN payloads (quiet, signalling, negative), denormals, FLT_MAX, and every float32
    within 2^12 patterns of the thresholds (libm's overflow 88.72283 and underflow -103.97207, SLEEF's 100
    and -104, the fast forms' ranges [-86.5, 88] and their clip points) and of 0."""
    nan_bits = np.uint32([0x7fc00000, 0xffc00000, 0x7fc00001, 0x7f800001, 0xff800001, 0x7fbfffff, 0xffffffff])
    fixed = np.concatenate([np.float32([0.0, -0.0, np.inf, -np.inf, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38,
                                        -3.4028235e38, 1.0, -1.0]), nan_bits.view(np.float32)])
    near = [_around(t, 1 << 12) for t in (88.72283, -103.97207, 100.0, -104.0, -86.5, 88.0, 1e-30, -1e-30)]
    return np.concatenate([fixed] + near)


@pytest.mark.parametrize("name", sorted(expf.EXPF))
def test_fast_exps_keep_the_references_bits(name):
    """expf_sleef_u10/expf_libm compute their step-by-step references' bits by other operations (blocks, a
    table, exact steps as plain operations, a magic-constant rounding, a fast range and a clipped one):
    every float16/bfloat16 value, uniform and random-bit float32 inputs, the special inputs, and blocks that
    mix fast inputs with NaNs and out-of-range ones or hold the fast range's ends alone (the exhaustive scan
    over all 2^32 inputs is benches/expf_exhaustive.py)."""
    fast, reference = {"sleef_u10": (expf.expf_sleef_u10, expf._sleef_u10_reference),
                       "libm": (expf.expf_libm, expf._libm_reference)}[name]
    rng = np.random.default_rng(1)
    mixed = rng.standard_normal(3 * expf._EXP_BLOCK + 5).astype(np.float32)
    mixed[::97] = rng.uniform(-120, 120, mixed[::97].size)
    mixed[5::1001] = np.nan
    mixed[7::1003] = -np.inf
    mixed[-3 * expf._EXP_BLOCK // 2:] = np.abs(mixed[-3 * expf._EXP_BLOCK // 2:])  # a block with no NaN
    lo, hi = {"sleef_u10": (expf._SLEEF_FAST_LO, expf._SLEEF_FAST_HI),
              "libm": (expf._GLIBC_UNDERFLOW, expf._GLIBC_OVERFLOW)}[name]
    inside = np.concatenate([_around(lo, 1 << 14), _around(hi, 1 << 14)])
    inside = inside[(inside >= lo) & (inside <= hi)]  # blocks with no input beyond the fast range, up to its ends
    for x in (_every_half_precision_value(), rng.uniform(-110, 110, 1 << 16).astype(np.float32),
              rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32),
              _special_inputs(), mixed, inside):
        got, want = fast(x), reference(x)
        differ = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
        assert differ.size == 0, (f"{name}: {differ.size} inputs differ, e.g. exp({x[differ[0]]!r}) = "
                                  f"{got[differ[0]]!r}, the reference {want[differ[0]]!r}")
    x = rng.standard_normal((3, 5, 7)).astype(np.float32)
    for v in (x, x[:, ::2, 1:], np.float32(0.5), x[:0]):  # shapes, strides, 0-d, empty
        got = fast(v)
        assert got.shape == np.shape(v) and got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), reference(v).view(np.uint32))


def test_fma32_fused_keeps_the_references_bits():
    """fma32_fused (blocks, a two-reduction boundary test) against ``_fma32_fused_reference`` where it
    matters: double sums on a float32 midpoint that are inexact (a * b just off half an ULP of c), sums in
    float32's denormal range, a NaN in a block with denormal-range sums (the test's reductions skip NaNs),
    the special values, and the broadcasting shapes the kernels pass."""
    rng = np.random.default_rng(2)
    n = 1 << 17
    a = (1 + rng.integers(1, 1 << 23, n) * 2.0 ** -23).astype(np.float32)
    b = (2.0 ** -24 / a.astype(np.float64)).astype(np.float32)
    c = rng.choice(np.float32([1.0, -1.0, 1.5, 0.75]), n)
    s = a.astype(np.float64) * b + c
    on_midpoint = (s.view(np.int64) & ((1 << 29) - 1)) == 1 << 28
    assert np.count_nonzero(on_midpoint & (s - c != a.astype(np.float64) * b)) > 1000  # the case is exercised
    tiny = (rng.standard_normal(n) * 2.0 ** -70).astype(np.float32)
    tiny_b = (rng.standard_normal(n) * 2.0 ** -60).astype(np.float32)
    tiny_c = (rng.standard_normal(n) * 2.0 ** -130).astype(np.float32)
    with_nan = tiny.copy()
    with_nan[::999] = np.nan
    sp = np.float32([0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38, 1, -1])
    grid = [np.tile(g.ravel(), 10) for g in np.meshgrid(sp, sp, sp, indexing="ij")]
    e = rng.standard_normal((128, 512)).astype(np.float32)
    t = rng.standard_normal((128, 1)).astype(np.float32)
    rows = (1 << 17) // 2048  # the same cases with an operand broadcast along a row (double in the blocks)
    cases = [(a, b, c), (tiny, tiny_b, tiny_c), (with_nan, tiny_b, tiny_c), tuple(grid),
             (a.reshape(rows, 2048), b.reshape(rows, 2048), np.float32([[1.0]] * rows)),
             (tiny.reshape(rows, 2048), tiny_b[:rows, None], tiny_c.reshape(rows, 2048)),
             (with_nan.reshape(rows, 2048), np.broadcast_to(tiny_b[:rows, None], (rows, 2048)), tiny_c[:2048]),
             (rng.standard_normal(n).astype(np.float32),) * 3, (-e, np.broadcast_to(t, e.shape), e), (-e, t, e),
             (rng.standard_normal((3, 40000)).astype(np.float32), np.float32(2), rng.standard_normal(40000)),
             (np.float32(1.5), np.float32(2), np.float32(3)), (a[:0], b[:0], c[:0])]
    for x, y, z in cases:
        got, want = expf.fma32_fused(x, y, z), expf._fma32_fused_reference(x, y, z)
        assert got.shape == want.shape and got.dtype == want.dtype == np.float32
        differ = np.flatnonzero(got.view(np.uint32).ravel() != want.view(np.uint32).ravel())
        assert differ.size == 0, f"{differ.size} of {got.size} differ"
