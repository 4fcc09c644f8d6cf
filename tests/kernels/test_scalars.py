"""device_impl.kernels.scalars against the running torch: the Scalar -> dtype rules (checked conversion,
c10's overflow error and message, opmath widening, complex into real) decide exactly as CPU does.

CPU's ``fill_`` converts its value with ``Scalar::to<scalar_t>()`` (c10::checked_convert), so it is the
oracle for ``checked_convert``/``to_numpy``; ``addcmul``'s ``value`` converts to ``opmath_t``, the
oracle for ``opmath_dtype``.
"""

import math
import warnings

import numpy as np
import pytest
import torch

from device_impl.engine.dtypes import numpy_dtype
from device_impl.kernels import scalars

DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]
VALUES = [0, 1, -1, 127, 128, -128, -129, 255, 256, -255, -256, 32767, 32768, -32769, 65535, 2 ** 31 - 1, 2 ** 31,
          -2 ** 31 - 1, 2 ** 63 - 1, -2 ** 63, 2.7, -2.7, -0.5, 255.9, 256.0, -255.5, 1e10, 1e20, 9.3e18,
          math.inf, -math.inf, math.nan, 65504.0, 65520.0, 1e5, 3.38e38, 3.4e38, 3.5e38, 1e39, -1e39, 1e300,
          1j, 0.5j, 2 + 0j, complex(-3, 0), complex(1e39, 0), complex(300, 0), 2 + 1e-300j, True, False]


def _cpu(value, dtype, numel=2):
    """What CPU's fill_ makes of ``value``: ("ok", stored value) or ("raised", class, message). A
    one-element tensor takes CPU's scalar_fill instead, with its own rules."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return "ok", torch.zeros(numel, dtype=dtype).fill_(value)[0].item()
        except RuntimeError as error:
            return "raised", type(error), str(error)


def _ours(value, dtype, convert=scalars.to_numpy):
    try:
        converted = convert(value, dtype)
    except RuntimeError as error:
        return "raised", type(error), str(error)
    if dtype == torch.bool:
        return "ok", bool(converted)
    if dtype.is_floating_point and dtype != torch.float64:
        with np.errstate(over="ignore"):
            return "ok", float(np.asarray(np.float32(converted)).astype(numpy_dtype(dtype)))
    return "ok", float(converted) if dtype.is_floating_point else int(converted)


def _same(a, b) -> bool:
    if a[0] != b[0]:
        return False
    if a[0] == "raised":
        return a == b
    x, y = a[1], b[1]
    if isinstance(x, float) and math.isnan(x):
        return isinstance(y, float) and math.isnan(y)
    return type(x) is type(y) and x == y


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_checked_conversion_matches_cpu_fill(dtype):
    wrong = [(v, _cpu(v, dtype), _ours(v, dtype)) for v in VALUES if not _same(_cpu(v, dtype), _ours(v, dtype))]
    assert not wrong, wrong


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_one_element_fill_matches_cpu_scalar_fill(dtype):
    """A one-element fill_ takes CPU's scalar_fill: half and bfloat16 overflow to inf there."""
    wrong = [(v, _cpu(v, dtype, 1), _ours(v, dtype, scalars.scalar_fill)) for v in VALUES
             if not _same(_cpu(v, dtype, 1), _ours(v, dtype, scalars.scalar_fill))]
    assert not wrong, wrong


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != torch.bool], ids=str)
def test_overflow_message_names_the_c_type(dtype):
    """Each dtype's overflow reads as c10 prints it (an out-of-range value of that dtype on CPU)."""
    value = 1e39 if dtype.is_floating_point else torch.iinfo(dtype).max + 1
    if dtype == torch.float64:
        value = complex(1, 1)  # float64 holds every double; only a complex value overflows it
    cpu = _cpu(value, dtype)
    assert cpu[0] == "raised" and cpu[1] is RuntimeError, cpu
    with pytest.raises(RuntimeError) as error:
        scalars.check_fits(value, dtype)
    assert str(error.value) == cpu[2] == f"value cannot be converted to type {scalars.CTYPE_NAMES[dtype]} without " \
                                         f"overflow"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int64, torch.int8,
                                   torch.uint8], ids=str)
@pytest.mark.parametrize("value", [1e39, 70000.0, 1j, 2 + 0j, 300, -1, 2.7], ids=repr)
def test_opmath_widening_matches_cpu_addcmul(dtype, value):
    """addcmul converts ``value`` to opmath_t: a float16 op takes 70000 (float32 holds it), float32
    refuses 1e39, an int8 op checks against int8 itself."""
    x = torch.zeros(2, dtype=dtype)
    try:
        torch.addcmul(x, x, x, value=value)
        cpu = None
    except RuntimeError as error:
        cpu = str(error)
    if cpu is not None and "without overflow" not in cpu:
        pytest.skip(f"CPU refuses before converting: {cpu}")
    try:
        scalars.check_fits(value, scalars.opmath_dtype(dtype))
        ours = None
    except RuntimeError as error:
        ours = str(error)
    assert ours == cpu


def test_complex_into_real_and_bool():
    with pytest.raises(RuntimeError, match="type float without overflow"):
        scalars.checked_convert(1j, torch.float32)
    assert scalars.checked_convert(complex(3, 0), torch.int8) == 3
    assert scalars.checked_convert(1j, torch.bool) is True  # bool: either part nonzero
    assert scalars.checked_convert(1j, torch.complex64) == 1j
    assert scalars.checked_convert(-1, torch.uint8) == 255 and scalars.checked_convert(-2.5, torch.int8) == -2


def test_wrap_int64():
    assert scalars.wrap_int64(2 ** 63) == -2 ** 63
    assert scalars.wrap_int64(-2 ** 63 - 1) == 2 ** 63 - 1
    assert scalars.wrap_int64(5) == 5


# --- the kernels that convert through this module, against CPU ------------------------------------

def _outcome(fn, device):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return ("ok", fn(device).cpu())
        except Exception as e:  # noqa: BLE001  (the class and message are the result)
            return ("raised", type(e), str(e))


def _same_on_device(fn):
    cpu, dev = _outcome(fn, "cpu"), _outcome(fn, "neuron")
    if cpu[0] == "ok" and dev[0] == "ok":
        torch.testing.assert_close(dev[1], cpu[1], rtol=0, atol=0, equal_nan=True)
    else:
        assert cpu == dev
    return cpu


OPMATH_VALUES = [2, 2.7, -1, 300, 2 ** 40, 2 ** 63, 1e39, -1e39, math.inf, 2 + 0j, 1j, complex(300, 0), True]


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("value", OPMATH_VALUES, ids=str)
def test_addcmul_value_converts_as_cpu(dtype, value):
    """elementwise.ternary._opmath_scalar is checked_convert into opmath_dtype: CPU's messages ('int64_t'), complex
    values with a zero imaginary part accepted (addcmul(value=2+0j) on 1 + 1*0.5 gives 2.0 as on CPU)."""
    def run(device):
        x = torch.tensor([1, 2, 3], device=device).to(dtype)
        return torch.addcmul(x, x, x, value=value)

    _same_on_device(run)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("value", [0.5, 1e39, 2 + 0j, 1j, 3])
def test_addcdiv_and_lerp_scalars_convert_as_cpu(dtype, value):
    _same_on_device(lambda d: torch.addcdiv(torch.ones(3, device=d, dtype=dtype), torch.ones(3, device=d, dtype=dtype),
                                  torch.full((3,), 2.0, device=d, dtype=dtype), value=value))
    _same_on_device(lambda d: torch.lerp(torch.zeros(3, device=d, dtype=dtype), torch.ones(3, device=d, dtype=dtype), value))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool, torch.float32,
                                   torch.bfloat16, torch.float16])
@pytest.mark.parametrize("value", [0, -1, 300, -256, 2.7, 1e5, 1e39, math.inf, math.nan, 2 + 0j, 1j, True])
def test_constant_pad_value_converts_as_cpu(dtype, value):
    """shape.moves._fill_value is scalars.to_numpy: constant_pad_nd's value stores and raises as CPU's fill_."""
    _same_on_device(lambda d: torch.nn.functional.pad(torch.zeros((2, 2), device=d, dtype=dtype), (1, 1), value=value))
