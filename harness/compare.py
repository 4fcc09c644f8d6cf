"""Comparing a device result with CPU eager's.

Floating point: ``torch.testing`` default tolerances per dtype (DESIGN.md
section 4) unless the op's spec records an override with its reason; NaN
must sit at the same positions, infinities must match in sign and so must
zeros (-0.0 is not 0.0 where CPU distinguishes them). Integers
and bools: exact. Always: same shape, same dtype, result on the device.
Ops that accumulate (reductions, matmul) may instead pass the float64
criterion: against a float64 CPU reference, the device's error is no more
than 3x CPU's own (RMSE), as torch._dynamo.utils.same judges.

Sums of products (matmul, convolution, fold; a spec's ``sum_of_products``) have positions
whose outcome is the summation order's or the host's, not the op's: where the magnitude bound
(the op in float64 on the absolute values of the finite inputs) exceeds the dtype's largest
finite value, which of +inf, -inf or NaN an overflowing accumulation ends in depends on the
blocking; where it lies below float32's smallest normal, so does the sign of a zero (BLAS sums
from +0.0, MKL returns a single product as is, oneDNN's bf16 kernels flush subnormals).
``OrderDependent`` marks them; there the device need not agree, except that it must overflow
where CPU does and the float64 result rounds to an infinity too (not merely exceeds the largest
finite value: between it and half a unit beyond, round-to-nearest gives that finite value, so an
accumulation that never leaves the range is correctly rounded there, while one whose float32 partial
sum overflowed on the way is not wrong either). Every other position is strict.

Every comparison reports max absolute error, max relative error and the
ULP distance, so the store keeps how close a passing case was.

Layout: a result's strides are CPU eager's (``significant_strides_differ``: only dims of size > 1,
tensors of two elements or more, as ``torch._prims_common.compare_significant_strides``), for every
output, out=/in-place result and gradient; the next op's loop, a ``.view`` that works or raises, and a
user's ``data_ptr`` arithmetic all see the layout, so a device that returns contiguous results where
CPU keeps a channels-last or transposed operand's layout is not CPU's PyTorch. Checked once the values
pass (a wrong value is the worse news). Where the strides are not CPU's, the meta kernels' pass too
(``compare_strides``' ``alternative``: the layout ATen's structured kernels give every device but CPU, as
FakeTensor predicts it; CPU's TensorIterator alone casts a mixed-dtype operand before laying out the result).
Off unless asked (``strides=True``): harness.runner asks for the
modes held to it (``harness.modes.Mode.strides_checked``); the OpInfo sweep and module checks do not yet.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch

DEFAULT_TOLERANCE = {  # torch.testing defaults: (rtol, atol)
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
}
FP64_MULTIPLIER = 3.0

_INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16,
             torch.float64: torch.int64}


@dataclass
class Comparison:
    ok: bool
    message: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    ulp: int | None = None
    criterion: str = ""

    def merge(self, other: "Comparison") -> "Comparison":
        def worst(a, b):
            return b if a is None else a if b is None else max(a, b)

        return Comparison(self.ok and other.ok, "; ".join(m for m in (self.message, other.message) if m),
                          worst(self.max_abs, other.max_abs), worst(self.max_rel, other.max_rel),
                          worst(self.ulp, other.ulp), self.criterion or other.criterion)


@dataclass
class OrderDependent:
    """Order-dependent positions of one result of a sum of products (see the module docstring).

    ``overflow``: the magnitude bound exceeds the dtype's largest finite value; ``must_overflow``:
    of those, where CPU's result is not finite and the float64 result is not finite or rounds to an
    infinity in the dtype (``overflow_threshold``; the device must not be finite there). Where the
    float64 result lies between the largest finite value and that threshold, the correctly rounded
    answer is the largest finite value, and whether a kernel reaches it depends on its order: in
    torch 2.13's bf16 mm backward, ATen's native kernel and oneDNN's AVX2 one add a term of 3.55e38
    to a float32 accumulator first and overflow (inf), oneDNN's AVX-512 kernel and the device sum
    to 3.391e38 and round to 3.3895e38; ``underflow``: the bound is below float32's
    smallest normal (a zero's sign is not compared there); ``spurious_nan``: elsewhere, CPU's result is NaN
    but its float64 result (``reference``) is not: CPU's kernel multiplied an infinite weight by a
    zero that is no term of the sum (oneDNN's AVX-512 backward-data kernels do on a strided grid;
    its AVX2 ones and ATen's native kernels do not), so the device may be NaN there or agree with
    the float64 result."""

    overflow: torch.Tensor
    must_overflow: torch.Tensor
    underflow: torch.Tensor
    spurious_nan: torch.Tensor | None = None
    reference: torch.Tensor | None = None

    @staticmethod
    def of(bound: torch.Tensor, expected: torch.Tensor, reference: torch.Tensor | None) -> "OrderDependent":
        """From the magnitude bound, CPU's result and (optional) the float64 result, all of one shape."""
        top = torch.finfo(expected.dtype).max
        bound = bound.detach().double()
        overflow = bound > top
        beyond = torch.ones_like(overflow) if reference is None else \
            ~torch.isfinite(reference.detach()) | (reference.detach().double().abs() >= overflow_threshold(
                expected.dtype))
        spurious = None if reference is None else \
            torch.isnan(expected.detach()) & ~torch.isnan(reference.detach()) & ~overflow
        return OrderDependent(overflow, overflow & ~torch.isfinite(expected.detach()) & beyond,
                              bound < torch.finfo(torch.float32).smallest_normal, spurious,
                              None if reference is None else reference.detach().double())


def overflow_threshold(dtype: torch.dtype) -> float:
    """The smallest magnitude that rounds to an infinity in ``dtype`` (round to nearest even): its largest
    finite value plus half a unit in the last place (a tie rounds up: the largest value's last bit is odd)."""
    info = torch.finfo(dtype)
    return info.max + math.ldexp(info.eps, math.frexp(info.max)[1] - 2)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> int:
    """Largest distance in units of the last place between finite, equal-dtype float tensors."""
    view = _INT_VIEW.get(a.dtype)
    if view is None or a.numel() == 0:
        return 0
    finite = torch.isfinite(a) & torch.isfinite(b)
    if not finite.any():
        return 0
    bits = torch.iinfo(view).bits

    def ordered(x: torch.Tensor) -> torch.Tensor:
        i = x.contiguous().view(view).to(torch.int64)
        return torch.where(i < 0, -(i & ((1 << (bits - 1)) - 1)), i)

    return int((ordered(a) - ordered(b)).abs()[finite].max())


def _errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    a, e = actual.double(), expected.double()
    finite = torch.isfinite(a) & torch.isfinite(e)
    if not finite.any():
        return 0.0, 0.0
    diff = (a - e).abs()[finite]
    rel = diff / e.abs()[finite].clamp_min(torch.finfo(torch.float64).tiny)
    return float(diff.max()), float(rel.max())


def significant_strides_differ(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether two tensors of one shape lay out their elements differently: a stride differs in a dim of size
    > 1 (a size-1 dim's stride never addresses a second element; a tensor of fewer than two elements has no
    layout). ``torch._prims_common.compare_significant_strides``' rule, written out (a private helper)."""
    if actual.numel() < 2 or actual.layout != torch.strided or expected.layout != torch.strided:
        return False
    return any(n > 1 and a != e for n, a, e in zip(expected.shape, actual.stride(), expected.stride()))


def compare_strides(actual: torch.Tensor, expected: torch.Tensor, where: str = "output",
                    alternative: Any = None) -> Comparison:
    """The layout check alone (shapes already equal): a failure names both strides and the shape. ``alternative``:
    the same result from PyTorch's meta kernels (``harness.runner``), whose strides pass too: they are the layout
    every device but CPU gets from ATen's own structured kernels (CPU's TensorIterator alone casts an operand of
    another dtype before it lays out the result: ``ge`` of an expanded uint8 and a float32 tensor), and what
    FakeTensor predicts for torch.compile's graphs."""
    if not significant_strides_differ(actual, expected):
        return Comparison(True)
    other = isinstance(alternative, torch.Tensor) and tuple(alternative.shape) == tuple(actual.shape)
    if other and not significant_strides_differ(actual, alternative):
        return Comparison(True, criterion="layout: the meta kernels'")
    meta = f", meta kernels {tuple(alternative.stride())}" if other else ""
    return Comparison(False, f"{where}: strides {tuple(actual.stride())} != CPU {tuple(expected.stride())}{meta} "
                             f"(size {tuple(expected.shape)}; dims of size > 1 compared)", criterion="layout")


def compare_layouts(actual: Any, expected: Any, where: str = "output", alternative: Any = None) -> Comparison:
    """``compare_strides`` over a structure of tensors (tuples/lists; anything else passes): for results whose
    values another criterion judged (gradients by the float64 reference). ``alternative``: the meta kernels'
    results in the same structure, or None (``compare_strides``)."""
    if isinstance(expected, torch.Tensor):
        if isinstance(actual, torch.Tensor) and tuple(actual.shape) == tuple(expected.shape):
            return compare_strides(actual, expected, where, alternative)
        return Comparison(True)
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        others = alternative if isinstance(alternative, (tuple, list)) and len(alternative) == len(expected) \
            else [None] * len(expected)
        for i, (a, e, m) in enumerate(zip(actual, expected, others)):
            layout = compare_layouts(a, e, f"{where}[{i}]", m)
            if not layout.ok:
                return layout
    return Comparison(True)


def compare_tensor(actual: torch.Tensor, expected: torch.Tensor, tolerance: tuple[float, float] | None,
                   reference: torch.Tensor | None = None, where: str = "output", overflow_equal: bool = False,
                   zero_sign: bool | torch.Tensor = True, device: str | None = None, max_ulp: int | None = None,
                   order: OrderDependent | None = None, strides: bool = False) -> Comparison:
    """``actual`` is the device result, ``expected`` CPU's; ``reference`` (optional) a float64 CPU result.

    ``strides``: once the values pass, the significant strides must be CPU's too (``compare_strides``).
    Other arguments: ``_compare_values``."""
    judged = _compare_values(actual, expected, tolerance, reference, where, overflow_equal, zero_sign, device,
                             max_ulp, order)
    if judged.ok and strides:
        layout = compare_strides(actual, expected, where)
        if not layout.ok:
            return Comparison(False, layout.message, judged.max_abs, judged.max_rel, judged.ulp, layout.criterion)
    return judged


def _compare_values(actual: torch.Tensor, expected: torch.Tensor, tolerance: tuple[float, float] | None,
                    reference: torch.Tensor | None = None, where: str = "output", overflow_equal: bool = False,
                    zero_sign: bool | torch.Tensor = True, device: str | None = None, max_ulp: int | None = None,
                    order: OrderDependent | None = None) -> Comparison:
    """``actual`` is the device result, ``expected`` CPU's; ``reference`` (optional) a float64 CPU result.

    ``device``: the device ``actual`` must be on (its type is compared; None skips the check).
    ``overflow_equal`` (a per-op override): an infinity on one side equals a same-signed finite value
    beyond half the dtype's range on the other, for ops whose CPU kernels overflow early.
    ``zero_sign=False`` (a per-op, per-dtype override): +0.0 equals -0.0, for ops where CPU's own
    sign of a zero depends on which of its loops (vector body or scalar tail) computed it; or a bool tensor
    (``OpSpec.zero_ties``), true where zero signs are compared: broadcast to the result (a result it does not
    broadcast to is compared without zero signs), so only the positions whose sign is the loop's are free.
    ``max_ulp`` (a per-op, per-dtype override): for correctly rounded ops (one IEEE rounding of an
    exact result, as a product of two bfloat16 values), finite values may differ by at most this
    many units in the last place. The dtype tolerances alone admit a one-ULP error in bfloat16
    (rtol 1.6e-2 is about four ULP), so a kernel that truncates instead of rounding to nearest
    even passes them; this criterion does not let it.
    ``order`` (a sum of products, ``OpSpec.sum_of_products``): positions where the device need not
    agree with CPU (``OrderDependent``)."""
    if not isinstance(actual, torch.Tensor):
        return Comparison(False, f"{where}: expected a tensor, got {type(actual).__name__}")
    if device is not None and actual.device.type != torch.device(device).type:
        return Comparison(False, f"{where}: result on {actual.device}, expected on {device}")
    if actual.dtype != expected.dtype:
        return Comparison(False, f"{where}: dtype {actual.dtype} != CPU {expected.dtype}")
    if tuple(actual.shape) != tuple(expected.shape):
        return Comparison(False, f"{where}: shape {tuple(actual.shape)} != CPU {tuple(expected.shape)}")
    got = actual.detach().cpu()
    exp = expected.detach()
    if not (exp.dtype.is_floating_point or exp.dtype.is_complex):
        if torch.equal(got, exp):
            return Comparison(True, criterion="exact")
        bad = int((got != exp).sum())
        return Comparison(False, f"{where}: {bad} of {exp.numel()} elements differ (exact comparison)",
                          criterion="exact")
    view = _INT_VIEW.get(exp.dtype)
    if view is not None and torch.equal(got.view(view), exp.view(view)):
        # Bit-identical (NaN payloads aside, which CPU does not promise): every criterion below
        # passes, and the fast path keeps a large designed case from paying for each of them.
        rtol, atol = tolerance if tolerance is not None else DEFAULT_TOLERANCE.get(exp.dtype, (1.3e-6, 1e-5))
        return Comparison(True, "", 0.0, 0.0, 0, f"rtol={rtol:g} atol={atol:g} (bit-identical)")
    if exp.dtype.is_complex:
        return _compare_values(torch.view_as_real(got.resolve_conj()), torch.view_as_real(exp.resolve_conj()),
                               tolerance, None if reference is None else torch.view_as_real(reference), where,
                               zero_sign=zero_sign)
    if overflow_equal:
        big = torch.finfo(exp.dtype).max / 2
        near = (torch.isinf(got) & (exp.double().abs() > big) & (torch.sign(got) == torch.sign(exp))) | \
            (torch.isinf(exp) & (got.double().abs() > big) & (torch.sign(got) == torch.sign(exp)))
        got = torch.where(near, exp, got) if near.any() else got
    if order is not None and tuple(order.overflow.shape) == tuple(exp.shape):
        lost = order.must_overflow & torch.isfinite(got)
        if lost.any():
            return Comparison(False, f"{where}: {int(lost.sum())} finite value(s) where CPU and the float64 result "
                                     f"overflow")
        free = order.overflow | (order.underflow & (got == 0) & (exp == 0))
        if order.spurious_nan is not None and order.spurious_nan.any():
            ref, g64 = order.reference, got.double()
            rtol, atol = tolerance if tolerance is not None else DEFAULT_TOLERANCE.get(exp.dtype, (1.3e-6, 1e-5))
            follows = torch.isnan(got) | (torch.isinf(ref) & (g64 == ref)) | (
                torch.isfinite(ref) & torch.isfinite(got) & ((g64 - ref).abs() <= atol + rtol * ref.abs()))
            wrong = order.spurious_nan & ~follows
            if wrong.any():
                return Comparison(False, f"{where}: NaN at different positions ({int(wrong.sum())} where CPU is NaN, "
                                         f"its float64 result is not and the device agrees with neither)")
            free = free | order.spurious_nan
        got = torch.where(free, exp, got) if free.any() else got
    nan_a, nan_e = torch.isnan(got), torch.isnan(exp)
    if not torch.equal(nan_a, nan_e):
        return Comparison(False, f"{where}: NaN at different positions ({int(nan_a.sum())} on device, "
                                 f"{int(nan_e.sum())} on CPU)")
    inf_a, inf_e = torch.isinf(got), torch.isinf(exp)
    if not torch.equal(inf_a, inf_e) or not torch.equal(got[inf_a], exp[inf_e]):
        return Comparison(False, f"{where}: infinities differ")
    zeros = (exp == 0) & (got == 0)
    if isinstance(zero_sign, torch.Tensor):
        try:
            zeros = zeros & torch.broadcast_to(zero_sign.to(torch.bool), zeros.shape)
        except RuntimeError:  # a result of another shape (a flag, a gradient): no position is known to be fixed
            zeros = torch.zeros_like(zeros)
        zero_sign = True
    if zero_sign and zeros.any() and not torch.equal(torch.signbit(got[zeros]), torch.signbit(exp[zeros])):
        bad = int((torch.signbit(got[zeros]) != torch.signbit(exp[zeros])).sum())
        return Comparison(False, f"{where}: {bad} zero(s) with the wrong sign (-0.0 vs 0.0)")
    max_abs, max_rel = _errors(got, exp)
    ulp = ulp_distance(got, exp)
    if max_ulp is not None and ulp > max_ulp:
        return Comparison(False, f"{where}: {ulp} ULP from CPU where at most {max_ulp} is allowed (correctly "
                                 f"rounded op); max abs {max_abs:.3g}, max rel {max_rel:.3g}", max_abs, max_rel, ulp,
                          f"max {max_ulp} ULP")
    rtol, atol = tolerance if tolerance is not None else DEFAULT_TOLERANCE.get(exp.dtype, (1.3e-6, 1e-5))
    finite = ~(nan_e | inf_e)
    diff = (got.double() - exp.double()).abs()[finite]
    limit = atol + rtol * exp.double().abs()[finite]
    if bool((diff <= limit).all()):
        return Comparison(True, "", max_abs, max_rel, ulp, f"rtol={rtol:g} atol={atol:g}")
    if reference is not None:
        ref = reference.detach().double()[finite]
        device_rmse = math.sqrt(float(((got.double()[finite] - ref) ** 2).mean())) if ref.numel() else 0.0
        cpu_rmse = math.sqrt(float(((exp.double()[finite] - ref) ** 2).mean())) if ref.numel() else 0.0
        if device_rmse <= FP64_MULTIPLIER * cpu_rmse + atol:
            return Comparison(True, "", max_abs, max_rel, ulp,
                              f"fp64 reference: device RMSE {device_rmse:.3g} <= {FP64_MULTIPLIER:g} x CPU {cpu_rmse:.3g}")
    worst = int(torch.argmax(diff - limit)) if diff.numel() else 0
    return Comparison(False, f"{where}: {int((diff > limit).sum())} of {exp.numel()} elements outside rtol={rtol:g} "
                             f"atol={atol:g}; max abs {max_abs:.3g}, max rel {max_rel:.3g}, {ulp} ULP "
                             f"(worst at flat index {worst})", max_abs, max_rel, ulp, f"rtol={rtol:g} atol={atol:g}")


def compare(actual: Any, expected: Any, tolerance: tuple[float, float] | None = None, reference: Any = None,
            where: str = "output", overflow_equal: bool = False, zero_sign: bool | torch.Tensor = True,
            device: str | None = None,
            max_ulp: int | None = None, order: Any = None, strides: bool = False) -> Comparison:
    """Recursive over tuples/lists; Python scalars compared exactly (NaN equal to NaN). ``order``: an
    ``OrderDependent`` per tensor, in ``expected``'s structure (or None); ``strides``: compare_tensor's."""
    if isinstance(expected, torch.Tensor):
        return compare_tensor(actual, expected, tolerance, reference if isinstance(reference, torch.Tensor) else None,
                              where, overflow_equal, zero_sign, device, max_ulp,
                              order if isinstance(order, OrderDependent) else None, strides)
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return Comparison(False, f"{where}: structure differs ({type(actual).__name__} vs {type(expected).__name__})")
        result = Comparison(True)
        refs = reference if isinstance(reference, (tuple, list)) else [None] * len(expected)
        orders = order if isinstance(order, (tuple, list)) else [None] * len(expected)
        for i, (a, e, r, o) in enumerate(zip(actual, expected, refs, orders)):
            result = result.merge(compare(a, e, tolerance, r, f"{where}[{i}]", overflow_equal, zero_sign, device,
                                          max_ulp, o, strides))
        return result
    if isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected) and math.isnan(actual):
        return Comparison(True, criterion="exact")
    if actual == expected:
        return Comparison(True, criterion="exact")
    if isinstance(expected, float) and isinstance(actual, float) and tolerance is not None:
        rtol, atol = tolerance
        if abs(actual - expected) <= atol + rtol * abs(expected):
            return Comparison(True, criterion=f"rtol={rtol:g} atol={atol:g}")
    return Comparison(False, f"{where}: {actual!r} != CPU {expected!r}")


def same_error(device_error: BaseException, cpu_error: BaseException) -> Comparison:
    """Error parity: the device raises the exception class CPU raises (or a subclass of it)."""
    if isinstance(device_error, type(cpu_error)):
        return Comparison(True, criterion="error parity")
    return Comparison(False, f"CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:200]}; device raised "
                             f"{type(device_error).__name__}: {str(device_error)[:200]}", criterion="error parity")


# What went wrong, from a failure message's first clause: (kind, pattern). The reproducer's checks
# (harness.repro) word their assertions the same way, so a stored failure and its reproducer run on
# their own can be shown to fail the same way.
_WHAT = (
    ("error parity", r"\braised\b|did not raise"),
    ("aliasing", r"^aliasing differs"),
    ("structure", r"structure differs|expected a tensor"),
    ("device", r": result on "),
    ("dtype", r": dtype "),
    ("shape", r": shape "),
    ("strides", r": strides \(.*\) != CPU "),
    ("nan", r"NaN at different positions"),
    ("inf", r"infinities differ|finite value\(s\) where CPU and the float64 result overflow"),
    ("zero sign", r"zero\(s\) with the wrong sign"),
    ("ulp", r"ULP from CPU where at most"),
    ("values", r"elements outside|elements differ|!= CPU"),
)


def failure_kind(message: str) -> str:
    """``where: what`` of a failure message ("gradient: values", "output: nan", "error parity")."""
    head = message.split("; ")[0]
    what = next((kind for kind, pattern in _WHAT if re.search(pattern, head)), "other")
    if what in ("error parity", "aliasing"):
        return what
    where = head.split(":", 1)[0].split("[", 1)[0].strip()
    where = "input" if where.startswith("input") else where
    return f"{where}: {what}"
