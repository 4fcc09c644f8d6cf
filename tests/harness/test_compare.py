"""Meta tests of harness.compare: each criterion the comparator claims, shown to accept and to reject."""

from __future__ import annotations

import math

import pytest
import torch

from harness import compare as cmp

NEURON = "neuron"


def dev(values, dtype=torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype).to(NEURON)


def cpu(values, dtype=torch.float32) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def test_default_tolerances_are_torch_testings():
    assert cmp.DEFAULT_TOLERANCE[torch.float32] == (1.3e-6, 1e-5)
    assert cmp.DEFAULT_TOLERANCE[torch.float16] == (1e-3, 1e-5)
    assert cmp.DEFAULT_TOLERANCE[torch.bfloat16] == (1.6e-2, 1e-5)


@pytest.mark.parametrize("dtype,inside,outside", [
    (torch.float32, 1.0 + 1e-6, 1.0 + 1e-4),
    (torch.bfloat16, 1.0078125, 1.03125),  # one bf16 ULP at 1.0 is inside rtol 1.6e-2; four are not
    (torch.float16, 1.0009765625, 1.0078125),
])
def test_tolerance_per_dtype(dtype, inside, outside):
    expected = cpu([1.0, 2.0], dtype)
    assert cmp.compare(dev([inside, 2.0], dtype), expected).ok
    result = cmp.compare(dev([outside, 2.0], dtype), expected)
    assert not result.ok and "1 of 2 elements outside" in result.message
    assert cmp.failure_kind(result.message) == "output: values"


def test_tolerance_override_is_used():
    expected = cpu([1.0])
    assert not cmp.compare(dev([1.001]), expected).ok
    assert cmp.compare(dev([1.001]), expected, (1e-2, 0.0)).ok


def test_nan_positions_must_match():
    assert cmp.compare(dev([float("nan"), 1.0]), cpu([float("nan"), 1.0])).ok
    moved = cmp.compare(dev([1.0, float("nan")]), cpu([float("nan"), 1.0]))
    assert not moved.ok and "NaN at different positions" in moved.message
    dropped = cmp.compare(dev([0.0]), cpu([float("nan")]))
    assert cmp.failure_kind(dropped.message) == "output: nan"


def test_infinities_must_match_in_sign():
    assert cmp.compare(dev([float("inf")]), cpu([float("inf")])).ok
    assert "infinities differ" in cmp.compare(dev([float("-inf")]), cpu([float("inf")])).message
    assert not cmp.compare(dev([3e38]), cpu([float("inf")])).ok


def test_overflow_equal_accepts_early_overflow_only_near_the_max():
    assert cmp.compare(dev([3e38]), cpu([float("inf")]), overflow_equal=True).ok
    assert not cmp.compare(dev([1e30]), cpu([float("inf")]), overflow_equal=True).ok
    assert not cmp.compare(dev([-3e38]), cpu([float("inf")]), overflow_equal=True).ok


def test_sign_of_zero():
    assert cmp.compare(dev([-0.0, 0.0]), cpu([-0.0, 0.0])).ok
    wrong = cmp.compare(dev([0.0, 0.0]), cpu([-0.0, 0.0]))
    assert not wrong.ok and cmp.failure_kind(wrong.message) == "output: zero sign"
    assert cmp.compare(dev([0.0, 0.0]), cpu([-0.0, 0.0]), zero_sign=False).ok


def test_sign_of_zero_compared_off_the_tie_positions():
    """OpSpec.zero_ties: a mask of where zero signs are compared (broadcast to the result); a result it does not
    broadcast to (a gradient, a flag) is compared without zero signs."""
    fixed = torch.tensor([True, False])
    assert cmp.compare(dev([-0.0, 0.0]), cpu([-0.0, -0.0]), zero_sign=fixed).ok  # position 1 is a tie
    wrong = cmp.compare(dev([0.0, -0.0]), cpu([-0.0, -0.0]), zero_sign=fixed)
    assert not wrong.ok and cmp.failure_kind(wrong.message) == "output: zero sign"
    assert not cmp.compare(dev([[0.0, 0.0]]), cpu([[-0.0, 0.0]]), zero_sign=fixed).ok  # broadcast to (1, 2)
    assert cmp.compare(dev([0.0, 0.0, 0.0]), cpu([-0.0, 0.0, 0.0]), zero_sign=fixed).ok


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.uint8, torch.bool])
def test_integers_and_bools_are_exact(dtype):
    values = [1, 0, 1] if dtype == torch.bool else [1, 2, 3]
    assert cmp.compare(dev(values, dtype), cpu(values, dtype), (1.0, 1.0)).ok
    other = [1, 1, 1] if dtype == torch.bool else [1, 2, 4]
    result = cmp.compare(dev(other, dtype), cpu(values, dtype), (1.0, 1.0))  # a tolerance does not apply
    assert not result.ok and "exact comparison" in result.message


def test_dtype_shape_and_device_are_checked():
    expected = cpu([1.0, 2.0])
    assert "dtype" in cmp.compare(dev([1.0, 2.0], torch.float64), expected).message
    assert "shape" in cmp.compare(dev([[1.0, 2.0]]), expected).message
    on_host = cmp.compare(cpu([1.0, 2.0]), expected, device=NEURON)
    assert not on_host.ok and cmp.failure_kind(on_host.message) == "output: device"
    assert cmp.compare(dev([1.0, 2.0]), expected, device=NEURON).ok
    assert cmp.compare(dev([1.0, 2.0]), expected, device="neuron:0").ok  # the type is compared


def test_ulp_distance():
    one = torch.tensor([1.0])
    assert cmp.ulp_distance(one, one) == 0
    assert cmp.ulp_distance(torch.nextafter(one, torch.tensor([2.0])), one) == 1
    tiny = torch.tensor([1e-45])  # the smallest float32 denormal: one ULP above +0.0
    assert cmp.ulp_distance(tiny, torch.tensor([0.0])) == 1
    assert cmp.ulp_distance(-tiny, tiny) == 2  # across zero, -0.0 and +0.0 counted as one point
    assert cmp.ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0])) == 0
    bf = torch.tensor([1.0, 1.0078125], dtype=torch.bfloat16)
    assert cmp.ulp_distance(bf[1:], bf[:1]) == 1
    assert cmp.ulp_distance(torch.tensor([float("nan"), 1.0]), torch.tensor([5.0, 1.0])) == 0  # finite only


def test_ulp_is_reported_and_bounded_by_max_ulp():
    expected = torch.tensor([1.0, 2.0], dtype=torch.bfloat16)
    one_off = torch.tensor([1.0078125, 2.0], dtype=torch.bfloat16).to(NEURON)
    passing = cmp.compare(one_off, expected)
    assert passing.ok and passing.ulp == 1
    strict = cmp.compare(one_off, expected, max_ulp=0)
    assert not strict.ok and cmp.failure_kind(strict.message) == "output: ulp"
    assert cmp.compare(one_off, expected, max_ulp=1).ok


def test_errors_are_reported_for_passing_cases():
    result = cmp.compare(dev([1.0, 2.0 + 2e-6]), cpu([1.0, 2.0]))
    assert result.ok and result.max_abs == pytest.approx(2e-6, rel=0.2) and result.max_rel > 0 and result.ulp > 0


def test_fp64_reference_criterion():
    """Outside the tolerance, a result passes if its RMSE against float64 is at most 3x CPU's own."""
    reference = torch.tensor([1.0, 2.0], dtype=torch.float64)
    expected = cpu([1.0 + 1e-3, 2.0])  # CPU itself is off by 1e-3
    close = dev([1.0 - 1e-3, 2.0])  # as far from the truth, on the other side: outside CPU's tolerance
    assert not cmp.compare(close, expected).ok
    judged = cmp.compare(close, expected, reference=reference)
    assert judged.ok and judged.criterion.startswith("fp64 reference")
    far = dev([1.0 + 1e-2, 2.0])  # ten times CPU's error
    assert not cmp.compare(far, expected, reference=reference).ok


def test_structure_and_scalars():
    assert cmp.compare((dev([1.0]), 3), (cpu([1.0]), 3)).ok
    assert "structure differs" in cmp.compare((dev([1.0]),), (cpu([1.0]), 3)).message
    assert cmp.compare(float("nan"), float("nan")).ok
    assert not cmp.compare(2, 3).ok
    nested = cmp.compare([dev([1.0]), dev([5.0])], [cpu([1.0]), cpu([2.0])])
    assert not nested.ok and nested.message.startswith("output[1]")


def test_error_parity():
    assert cmp.same_error(IndexError("x"), IndexError("y")).ok
    assert cmp.same_error(IndexError("x"), LookupError("y")).ok  # a subclass of CPU's class
    result = cmp.same_error(RuntimeError("x"), IndexError("y"))
    assert not result.ok and cmp.failure_kind(result.message) == "error parity"


@pytest.mark.parametrize("message,kind", [
    ("gradient[0]: 3 of 20 elements outside rtol=1e-05 atol=1e-05; max abs 1", "gradient: values"),
    ("input x1 after the call: NaN at different positions (0 on device, 1 on CPU)", "input: nan"),
    ("aliasing differs: outputs sharing storage with inputs (output, input) CPU [(0, 0)], device []", "aliasing"),
    ("CPU raised IndexError: out of range; device raised RuntimeError: no", "error parity"),
    ("output[1]: shape (2,) != CPU (3,)", "output: shape"),
    ("output: 4 of 9 elements differ (exact comparison)", "output: values"),
])
def test_failure_kind(message, kind):
    assert cmp.failure_kind(message) == kind


def test_complex_values_compared_as_pairs():
    expected = torch.tensor([1 + 2j], dtype=torch.complex64)
    assert cmp.compare(expected.clone(), expected).ok
    assert not cmp.compare(torch.tensor([1 + 3j], dtype=torch.complex64), expected).ok
    assert math.isfinite(cmp.compare(expected.clone(), expected).max_abs)


# --- sums of products: order-dependent positions (OpSpec.sum_of_products) ----------------------------

def _order(bound, expected, reference=None):
    return cmp.OrderDependent.of(torch.tensor(bound, dtype=torch.float64), expected,
                                 None if reference is None else torch.tensor(reference, dtype=torch.float64))


def test_order_dependent_overflow_position_need_not_agree():
    # position 0: every term overflows (bound beyond float32's max): CPU's blocking gave +inf, the device's NaN
    expected = cpu([float("inf"), 2.0])
    actual = dev([float("nan"), 2.0])
    assert not cmp.compare(actual, expected).ok
    order = _order([1e39, 2.0], expected, [float("nan"), 2.0])
    assert cmp.compare(actual, expected, order=order).ok
    assert cmp.compare(dev([float("-inf"), 2.0]), expected, order=order).ok


def test_order_dependent_rule_still_sees_a_dropped_nan_where_nothing_overflows():
    # position 0 holds a NaN from a NaN input (the bound of the finite terms is small): strict there
    expected = cpu([float("nan"), float("inf"), 2.0])
    order = _order([3.0, 1e39, 2.0], expected, [float("nan"), float("inf"), 2.0])
    result = cmp.compare(dev([0.0, float("nan"), 2.0]), expected, order=order)
    assert not result.ok and "NaN at different positions" in result.message
    result = cmp.compare(dev([float("nan"), float("nan"), 3.0]), expected, order=order)
    assert not result.ok and "elements outside" in result.message  # the finite, strict position too


def test_order_dependent_position_must_overflow_where_cpu_and_float64_do():
    expected = cpu([float("inf"), float("inf")])
    order = _order([1e39, 1e39], expected, [5e38, 1.0])  # position 1: the exact sum is in range
    assert cmp.compare(dev([float("nan"), 7.0]), expected, order=order).ok
    result = cmp.compare(dev([3.0e38, 7.0]), expected, order=order)
    assert not result.ok and "1 finite value(s) where CPU and the float64 result overflow" in result.message
    assert cmp.failure_kind(result.message) == "output: inf"


def test_a_float64_result_that_rounds_to_the_largest_finite_value_need_not_overflow():
    # bf16 mm backward (issue 16): exact 3.391e38 lies between bf16's max (3.3895e38) and the rounding
    # threshold (3.3962e38); ATen's native and oneDNN's AVX2 kernels overflowed a float32 partial sum
    # (inf), oneDNN's AVX-512 kernel and the device round to max. 3.397e38 rounds to inf: strict there.
    top = torch.finfo(torch.bfloat16).max
    expected = cpu([float("inf"), float("-inf")], torch.bfloat16)
    actual = dev([top, -top], torch.bfloat16)
    order = _order([7.9e38, 7.9e38], expected, [3.391e38, -3.391e38])
    assert cmp.compare(actual, expected, order=order).ok
    assert cmp.compare(dev([float("inf"), -top], torch.bfloat16), expected, order=order).ok  # either outcome
    order = _order([7.9e38, 7.9e38], expected, [3.397e38, -3.391e38])
    result = cmp.compare(actual, expected, order=order)
    assert not result.ok and "1 finite value(s) where CPU and the float64 result overflow" in result.message


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_overflow_threshold_is_where_rounding_reaches_infinity(dtype):
    threshold = cmp.overflow_threshold(dtype)
    assert torch.finfo(dtype).max < threshold < 2 * torch.finfo(dtype).max
    assert torch.isinf(torch.tensor(threshold, dtype=torch.float32).to(dtype))
    below = math.nextafter(threshold, 0) if dtype == torch.float32 else (threshold + torch.finfo(dtype).max) / 2
    assert torch.tensor(below, dtype=torch.float64).to(dtype).item() == torch.finfo(dtype).max


def test_zero_sign_is_free_only_where_every_term_is_zero_or_subnormal():
    expected = cpu([-0.0, 0.0, 0.0])
    actual = dev([0.0, -0.0, -0.0])
    order = _order([0.0, 1e-45, 1.0], expected)  # position 2: 1 - 1 cancels: IEEE gives +0.0 in any order
    result = cmp.compare(actual, expected, order=order)
    assert not result.ok and "1 zero(s) with the wrong sign" in result.message
    assert cmp.compare(dev([0.0, -0.0, 0.0]), expected, order=order).ok


def test_order_dependent_per_tensor_in_a_structure():
    expected = [cpu([float("inf")]), cpu([1.0])]
    orders = [_order([1e39], expected[0]), _order([1.0], expected[1])]
    assert cmp.compare([dev([float("nan")]), dev([1.0])], expected, order=orders).ok
    assert not cmp.compare([dev([float("nan")]), dev([float("nan")])], expected, order=orders).ok


def test_a_nan_only_cpus_kernel_makes_may_follow_the_float64_result():
    # position 0: CPU NaN (its kernel multiplied an infinite weight by a zero that is no term), float64 -inf
    expected = cpu([float("nan"), float("nan")])
    order = _order([1.0, 1.0], expected, [float("-inf"), float("nan")])
    assert cmp.compare(dev([float("-inf"), float("nan")]), expected, order=order).ok
    assert cmp.compare(dev([float("nan"), float("nan")]), expected, order=order).ok
    result = cmp.compare(dev([float("inf"), float("nan")]), expected, order=order)
    assert not result.ok and "NaN at different positions" in result.message  # neither CPU's nor float64's
    result = cmp.compare(dev([float("-inf"), 1.0]), expected, order=order)  # NaN from a NaN input: strict
    assert not result.ok and "NaN at different positions" in result.message


def test_strides_compared_only_where_significant():
    """The layout check (``strides=True``): a transposed CPU result against a contiguous device one fails with a
    kind of its own, naming both strides; strides of size-1 dims, and tensors of fewer than two elements, are
    not compared (torch._prims_common.compare_significant_strides' rule)."""
    expected = torch.arange(12.0).reshape(3, 4).t()  # (4, 3), strides (1, 4)
    contiguous = dev(expected.contiguous().tolist())
    assert cmp.compare(contiguous, expected).ok  # off unless asked
    wrong = cmp.compare(contiguous, expected, strides=True)
    assert not wrong.ok and cmp.failure_kind(wrong.message) == "output: strides", wrong.message
    assert "(3, 1) != CPU (1, 4)" in wrong.message
    assert cmp.compare(contiguous.t().contiguous().t(), expected, strides=True).ok
    nested = cmp.compare([dev([1.0]), contiguous], [cpu([1.0]), expected], strides=True)
    assert cmp.failure_kind(nested.message) == "output: strides" and "output[1]" in nested.message
    column = torch.arange(4.0).reshape(4, 1)  # strides (1, 1)
    assert cmp.compare(dev(column.tolist()).as_strided((4, 1), (1, 9)), column, strides=True).ok
    assert cmp.compare(dev([[5.0]]).as_strided((1, 1), (3, 7)), torch.tensor([[5.0]]), strides=True).ok
    empty = torch.empty(0, 3)
    assert cmp.compare(dev(empty.tolist()).reshape(0, 3).as_strided((0, 3), (1, 5)), empty, strides=True).ok
    worse = cmp.compare(dev((expected + 1).contiguous().tolist()), expected, strides=True)  # values first
    assert cmp.failure_kind(worse.message) == "output: values"
    assert cmp.compare_layouts((contiguous, 1), (expected, 1), "gradient").message.startswith("gradient[0]: strides")


@pytest.mark.parametrize("message, kind", [
    ("output: strides (3, 1) != CPU (1, 4) (size (4, 3); dims of size > 1 compared)", "output: strides"),
    ("gradient[1]: strides (3, 1) != CPU (1, 4) (size (4, 3); dims of size > 1 compared)", "gradient: strides"),
    ("input x1 after the call: strides (1, 2) != CPU (2, 1) (size (2, 2); dims of size > 1 compared)",
     "input: strides"),
])
def test_strides_failure_kind(message, kind):
    assert cmp.failure_kind(message) == kind


def test_layout_accepts_the_meta_kernels_strides_beside_cpus():
    """Where a result's strides are not CPU's, the meta kernels' pass too (``alternative``): they are what ATen's
    meta and structured kernels give a device other than CPU and what FakeTensor predicts for torch.compile (CPU
    alone casts a mixed-dtype operand before laying out the result); a layout that is neither still fails, naming
    both oracles' strides."""
    expected = torch.arange(12.0).reshape(3, 4).t()  # CPU's (4, 3), strides (1, 4)
    contiguous = dev(expected.contiguous().tolist())  # strides (3, 1)
    meta = torch.empty((4, 3), device="meta")  # the meta kernels' answer: contiguous
    assert not cmp.compare_strides(contiguous, expected).ok
    accepted = cmp.compare_strides(contiguous, expected, alternative=meta)
    assert accepted.ok and accepted.criterion == "layout: the meta kernels'"
    neither = cmp.compare_strides(contiguous, expected, alternative=meta.t().contiguous().t())
    assert not neither.ok and "!= CPU (1, 4), meta kernels (1, 4)" in neither.message
    assert cmp.failure_kind(neither.message) == "output: strides"
    nested = cmp.compare_layouts((dev([1.0, 2.0]), contiguous), (cpu([1.0, 2.0]), expected), "gradient",
                                 (torch.empty(2, device="meta"), meta))
    assert nested.ok
    assert not cmp.compare_layouts((dev([1.0, 2.0]), contiguous), (cpu([1.0, 2.0]), expected), "gradient", None).ok
