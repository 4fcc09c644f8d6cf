"""Reproducers: a failing case as a self-contained script (plain torch + ``import device_impl``).

The script rebuilds the inputs exactly (values as literals, the layout as
the same view code), runs the spec's expression on CPU and on the device,
and makes the checks the runner made, in the runner's order and with the
comparator's criteria (tolerances, NaN positions, infinities, sign of zero,
ULP bound, the float64-reference criterion, aliasing, inputs after the call,
gradients). Its assertion messages are worded as the harness's, so
``harness.compare.failure_kind`` of a stored failure and of the reproducer's
``AssertionError`` agree: running it alone fails the same way the case did.
"""

from __future__ import annotations

import inspect
import re
from typing import Sequence
from harness.cases import Case
from harness.compare import DEFAULT_TOLERANCE, FP64_MULTIPLIER, Comparison
from harness.specs import OpSpec
from harness import values
from harness.values import LAYOUT_CODE, dtype_named, literal, strided_layout

# The checks, as source. Mirrors harness.compare.compare_tensor and harness.runner._check;
# tests/harness/test_reproducers.py runs reproducers of planted bugs to keep the two in step.
_CHECKER = '''
def ulp(a, b):
    view = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}.get(a.dtype)
    finite = torch.isfinite(a) & torch.isfinite(b)
    if view is None or not finite.any():
        return 0
    bits = torch.iinfo(view).bits

    def ordered(x):
        i = x.contiguous().view(view).to(torch.int64)
        return torch.where(i < 0, -(i & ((1 << (bits - 1)) - 1)), i)

    return int((ordered(a) - ordered(b)).abs()[finite].max())


def check(actual, expected, where="output", reference=None, max_ulp=None, zero_sign=True, overflow_equal=False,
          tolerance=TOLERANCE, order=None, strides=None):
    """None if the device result matches CPU's, else what differs (worded as the harness). ``order``: per tensor,
    the masks of a sum of products' order-dependent positions (see orders()), or None. ``strides`` (default
    STRIDES, where the script sets it): once the values pass, the significant strides must be CPU's (see layout())."""
    problem = check_values(actual, expected, where, reference, max_ulp, zero_sign, overflow_equal, tolerance, order)
    if problem or not (globals().get("STRIDES", False) if strides is None else strides):
        return problem
    return layout(actual, expected, where)


def layout(actual, expected, where="output", alternative=None):
    """None if every tensor's strides are CPU's in the dims of size > 1 (tensors of two elements or more), or
    ``alternative``'s (the meta kernels' results, meta_side()), as harness.compare.compare_strides; else what
    differs."""
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        others = alternative if isinstance(alternative, (tuple, list)) and len(alternative) == len(expected) \
            else [None] * len(expected)
        for i, (a, e, m) in enumerate(zip(actual, expected, others)):
            problem = layout(a, e, f"{where}[{i}]", m)
            if problem:
                return problem
        return None
    if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)) or actual.numel() < 2 or \
            actual.layout != torch.strided or expected.layout != torch.strided:
        return None

    def differ(other):
        return any(n > 1 and a != e for n, a, e in zip(other.shape, actual.stride(), other.stride()))

    if not differ(expected):
        return None
    other = isinstance(alternative, torch.Tensor) and tuple(alternative.shape) == tuple(actual.shape)
    if other and not differ(alternative):
        return None
    meta = f", meta kernels {tuple(alternative.stride())}" if other else ""
    return f"{where}: strides {tuple(actual.stride())} != CPU {tuple(expected.stride())}{meta} " \
           f"(size {tuple(expected.shape)}; dims of size > 1 compared)"


_META = []


def meta_side():
    """(results, gradients) of the call on meta tensors of the inputs' layouts (harness.runner._MetaSide): the
    layout ATen's meta and structured kernels give every device but CPU, accepted beside CPU's; None for what
    does not run on meta."""
    if not _META:
        outputs = gradients = None
        try:
            tensors = inputs("meta")
            outputs = evaluate("meta", tensors)
            gradients = grads(outputs, tensors, "meta")
        except Exception:
            pass
        _META.append((outputs, gradients))
    return _META[0]


def check_values(actual, expected, where="output", reference=None, max_ulp=None, zero_sign=True,
                 overflow_equal=False, tolerance=TOLERANCE, order=None):
    """check() without the layout."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return f"{where}: structure differs ({type(actual).__name__} vs {type(expected).__name__})"
        refs = reference if isinstance(reference, (tuple, list)) else [None] * len(expected)
        orders = order if isinstance(order, list) else [None] * len(expected)
        for i, (a, e, r, o) in enumerate(zip(actual, expected, refs, orders)):
            problem = check_values(a, e, f"{where}[{i}]", r, max_ulp, zero_sign, overflow_equal, tolerance, o)
            if problem:
                return problem
        return None
    if not isinstance(expected, torch.Tensor):
        same = actual == expected or (actual != actual and expected != expected)
        return None if same else f"{where}: {actual!r} != CPU {expected!r}"
    if not isinstance(actual, torch.Tensor):
        return f"{where}: expected a tensor, got {type(actual).__name__}"
    if actual.device.type != torch.device(DEVICE).type:
        return f"{where}: result on {actual.device}, expected on {DEVICE}"
    if actual.dtype != expected.dtype:
        return f"{where}: dtype {actual.dtype} != CPU {expected.dtype}"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"{where}: shape {tuple(actual.shape)} != CPU {tuple(expected.shape)}"
    got, exp = actual.detach().cpu(), expected.detach()
    if not (exp.is_floating_point() or exp.is_complex()):
        bad = int((got != exp).sum())
        return f"{where}: {bad} of {exp.numel()} elements differ (exact comparison)" if bad else None
    if exp.is_complex():
        ref = None if reference is None else torch.view_as_real(reference)
        return check_values(torch.view_as_real(actual.resolve_conj()), torch.view_as_real(exp.resolve_conj()), where,
                            ref, None, zero_sign, False, tolerance)
    if overflow_equal:
        big = torch.finfo(exp.dtype).max / 2
        near = (torch.isinf(got) & (exp.double().abs() > big) & (torch.sign(got) == torch.sign(exp))) | \\
            (torch.isinf(exp) & (got.double().abs() > big) & (torch.sign(got) == torch.sign(exp)))
        got = torch.where(near, exp, got)
    if isinstance(order, tuple) and tuple(order[0].shape) == tuple(exp.shape):
        overflow, must_overflow, underflow, spurious_nan, ref = order
        lost = int((must_overflow & torch.isfinite(got)).sum())
        if lost:
            return f"{where}: {lost} finite value(s) where CPU and the float64 result overflow"
        free = overflow | (underflow & (got == 0) & (exp == 0))
        if spurious_nan is not None and spurious_nan.any():
            rtol, atol = tolerance or DEFAULT_TOLERANCE.get(exp.dtype, (1.3e-6, 1e-5))
            g64 = got.double()
            follows = torch.isnan(got) | (torch.isinf(ref) & (g64 == ref)) | (
                torch.isfinite(ref) & torch.isfinite(got) & ((g64 - ref).abs() <= atol + rtol * ref.abs()))
            wrong = int((spurious_nan & ~follows).sum())
            if wrong:
                return f"{where}: NaN at different positions ({wrong} where CPU is NaN, its float64 result is not " \\
                       f"and the device agrees with neither)"
            free = free | spurious_nan
        got = torch.where(free, exp, got)
    if not torch.equal(torch.isnan(got), torch.isnan(exp)):
        return f"{where}: NaN at different positions ({int(torch.isnan(got).sum())} on device, " \\
               f"{int(torch.isnan(exp).sum())} on CPU)"
    inf_a, inf_e = torch.isinf(got), torch.isinf(exp)
    if not torch.equal(inf_a, inf_e) or not torch.equal(got[inf_a], exp[inf_e]):
        return f"{where}: infinities differ"
    zeros = (exp == 0) & (got == 0)
    if isinstance(zero_sign, torch.Tensor):  # where zero signs are compared (the spec's zero_ties: all but ties)
        try:
            zeros = zeros & torch.broadcast_to(zero_sign, zeros.shape)
        except RuntimeError:
            zeros = zeros & False
        zero_sign = True
    if zero_sign and zeros.any():
        bad = int((torch.signbit(got[zeros]) != torch.signbit(exp[zeros])).sum())
        if bad:
            return f"{where}: {bad} zero(s) with the wrong sign (-0.0 vs 0.0)"
    distance = ulp(got, exp)
    if max_ulp is not None and distance > max_ulp:
        return f"{where}: {distance} ULP from CPU where at most {max_ulp} is allowed (correctly rounded op)"
    rtol, atol = tolerance or DEFAULT_TOLERANCE.get(exp.dtype, (1.3e-6, 1e-5))
    finite = torch.isfinite(exp)
    diff = (got.double() - exp.double()).abs()[finite]
    outside = int((diff > atol + rtol * exp.double().abs()[finite]).sum())
    if not outside:
        return None
    if reference is not None:
        ref = reference.detach().double()[finite]
        device_rmse = float(((got.double()[finite] - ref) ** 2).mean()) ** 0.5 if ref.numel() else 0.0
        cpu_rmse = float(((exp.double()[finite] - ref) ** 2).mean()) ** 0.5 if ref.numel() else 0.0
        if device_rmse <= FP64_MULTIPLIER * cpu_rmse + atol:
            return None
    return f"{where}: {outside} of {exp.numel()} elements outside rtol={rtol:g} atol={atol:g}, {distance} ULP"


def shares(outputs, inputs):
    outs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    return [(i, j) for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.numel()
            for j, x in enumerate(inputs) if x.numel() and o.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()]


def differentiable(out):
    return [o for o in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]


def grads(out, leaves, device, rounded_like=None):
    """Gradients of sum(out * cotangent), the cotangent seeded as the harness seeds it; ``rounded_like`` (CPU's
    outputs, for the float64 reference) rounds it to their dtypes first, as CPU's is."""
    outs = differentiable(out)
    leaves = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
    if not outs or not leaves:
        return None
    like = differentiable(rounded_like) if rounded_like is not None else []
    rounding = [o.dtype for o in like] if len(like) == len(outs) else [o.dtype for o in outs]
    g = torch.Generator().manual_seed(SEED)
    cot = [place(torch.randn(o.shape, generator=g, dtype=torch.float32).to(r).to(o.dtype), COTANGENT_LAYOUT, device)
           for o, r in zip(outs, rounding)]
    got = torch.autograd.grad(outs, leaves, cot, allow_unused=True)
    return [torch.zeros_like(x) if gr is None else gr for x, gr in zip(leaves, got)]


def host(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    return type(value)(host(v) for v in value) if isinstance(value, (tuple, list)) else value


def widened():
    """The CPU inputs in float64 (the reference the float64 criterion judges against)."""
    return [x.detach().double().requires_grad_(x.requires_grad) if x.is_floating_point() else x
            for x in inputs("cpu")]


def evaluate(device, tensors):
    torch.manual_seed(SEED)
    return call(device, *tensors)


def error_parity(cpu_error, dev_error):
    if cpu_error is not None and dev_error is not None:
        assert isinstance(dev_error, type(cpu_error)), (
            f"CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:200]}; device raised "
            f"{type(dev_error).__name__}: {str(dev_error)[:200]}")
    elif cpu_error is not None:
        raise AssertionError(f"CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:300]}; the device returned "
                             f"a result")
    else:
        raise AssertionError(f"the device raised {type(dev_error).__name__}: {str(dev_error)[:300]}; CPU "
                             f"returned a result")
'''

_ORDER = '''

def magnitude():
    """The magnitude bound of this sum of products (as harness.runner._Bounds): the call in float64 on |x| of
    the finite inputs (non-finite ones as 0), and its gradients with |cotangent| as drawn in the case's dtype."""
    xs = [torch.where(torch.isfinite(x), x, torch.zeros_like(x)).detach().double().abs().requires_grad_(
          x.requires_grad) if x.is_floating_point() else x for x in inputs("cpu")]
    out = evaluate("cpu", xs)
    outs = [o for o in (out if isinstance(out, (tuple, list)) else [out])
            if isinstance(o, torch.Tensor) and o.requires_grad and o.is_floating_point()]
    leaves = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
    if not outs or not leaves:
        return out, None
    g = torch.Generator().manual_seed(SEED)
    cot = [place(torch.randn(o.shape, generator=g, dtype=torch.float32).to(DTYPE).to(o.dtype).abs(), COTANGENT_LAYOUT,
                 "cpu") for o in outs]
    got = torch.autograd.grad(outs, leaves, cot, allow_unused=True)
    return out, [torch.zeros_like(x) if gr is None else gr for x, gr in zip(leaves, got)]


def orders(bound, expected, reference):
    """(overflow, must_overflow, underflow, spurious_nan, reference) per tensor (as
    harness.compare.OrderDependent.of)."""
    if isinstance(expected, (tuple, list)):
        bounds = bound if isinstance(bound, (tuple, list)) and len(bound) == len(expected) else [None] * len(expected)
        refs = reference if isinstance(reference, (tuple, list)) and len(reference) == len(expected) \\
            else [None] * len(expected)
        return [orders(b, e, r) for b, e, r in zip(bounds, expected, refs)]
    if not (isinstance(expected, torch.Tensor) and isinstance(bound, torch.Tensor) and expected.is_floating_point()
            and tuple(bound.shape) == tuple(expected.shape)):
        return None
    top = torch.finfo(expected.dtype).max
    bound = bound.detach().double()
    overflow = bound > top
    spurious = ref = None
    if isinstance(reference, torch.Tensor) and tuple(reference.shape) == tuple(expected.shape):
        ref = reference.detach().double()
        info = torch.finfo(expected.dtype)  # rounds to an infinity (harness.compare.overflow_threshold)
        beyond = ~torch.isfinite(ref) | (ref.abs() >= info.max + math.ldexp(info.eps, math.frexp(info.max)[1] - 2))
        spurious = torch.isnan(expected.detach()) & ~torch.isnan(ref) & ~overflow
    else:
        beyond = torch.ones_like(overflow)
    return (overflow, overflow & ~torch.isfinite(expected.detach()) & beyond,
            bound < torch.finfo(torch.float32).smallest_normal, spurious, ref)
'''

_VALUES = '''
    problem = check(actual, expected, max_ulp=MAX_ULP, zero_sign=OUTPUT_ZERO_SIGN, overflow_equal=OVERFLOW_EQUAL,
                    strides=False)
    reference = evaluate("cpu", widened()) if problem and (FP64_REFERENCE or SUM_OF_PRODUCTS) else None
    if problem and FP64_REFERENCE:
        problem = check(actual, expected, reference=reference, max_ulp=MAX_ULP, zero_sign=OUTPUT_ZERO_SIGN,
                        overflow_equal=OVERFLOW_EQUAL, strides=False)
    if problem and SUM_OF_PRODUCTS:
        problem = check(actual, expected, reference=reference if FP64_REFERENCE else None, max_ulp=MAX_ULP,
                        zero_sign=OUTPUT_ZERO_SIGN, overflow_equal=OVERFLOW_EQUAL,
                        order=orders(magnitude()[0], expected, reference), strides=False)
    if not problem and STRIDES and layout(actual, expected):  # CPU's layout, or the meta kernels'
        problem = layout(actual, expected, alternative=meta_side()[0])
    assert not problem, problem
    assert shares(actual, dev_in) == shares(expected, cpu_in), (
        f"aliasing differs: outputs sharing storage with inputs (output, input) CPU {shares(expected, cpu_in)}, "
        f"device {shares(actual, dev_in)}")
    for i, (d, c) in enumerate(zip(dev_in, cpu_in)):
        problem = check(d, c, f"input x{i} after the call", zero_sign=ZERO_SIGN)
        assert not problem, problem
'''

_GRADS = '''
    try:
        cpu_grads, dev_grads = grads(expected, cpu_in, "cpu"), grads(actual, dev_in, DEVICE)
    except Exception as e:
        raise AssertionError(f"backward raised {type(e).__name__}: {str(e)[:300]}")
    if cpu_grads is not None:
        problem = check(dev_grads, cpu_grads, "gradient", zero_sign=ZERO_SIGN, strides=False)
        if problem:
            wide = widened()
            reference = grads(evaluate("cpu", wide), wide, "cpu", rounded_like=expected)
            if check(dev_grads, cpu_grads, "gradient", reference, zero_sign=ZERO_SIGN, strides=False) is None:
                problem = None
            elif SUM_OF_PRODUCTS and check(dev_grads, cpu_grads, "gradient", reference, zero_sign=ZERO_SIGN,
                                           order=orders(magnitude()[1], cpu_grads, reference), strides=False) is None:
                problem = None
        if not problem and STRIDES and layout(dev_grads, cpu_grads, "gradient"):  # CPU's layout, or the meta kernels'
            problem = layout(dev_grads, cpu_grads, "gradient", meta_side()[1])
        assert not problem, problem
'''

_PROPERTIES = '''
    exp_leaves = expected if isinstance(expected, (tuple, list)) else [expected]
    act_leaves = actual if isinstance(actual, (tuple, list)) else [actual]
    assert len(exp_leaves) == len(act_leaves), "structure differs"
    for i, (a, e) in enumerate(zip(act_leaves, exp_leaves)):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor) and a.dtype == e.dtype and a.shape == e.shape, (
                f"output[{i}]: {getattr(a, 'dtype', type(a))} {tuple(getattr(a, 'shape', ()))} vs CPU {e.dtype} "
                f"{tuple(e.shape)}")
    again = evaluate(DEVICE, dev_in)
    problem = check(again, host(actual), "repeat with the same seed", tolerance=(0.0, 0.0), strides=False)
    assert not problem, problem
    problem = layout(actual, expected) if STRIDES else None  # noqa: F821 - the script's constant
    assert not problem, problem
'''

_MODE_RUNNER = '''

def stage_pending(values):
    """Each device input moved, in place, onto a fresh storage holding other values, which a queued device-to-device
    copy fills, so the op reads inputs whose producer is still queued (harness.modes.stage_pending, as adaptive
    mode runs a case)."""
    module = getattr(torch, torch.device(DEVICE).type)
    moved = {}
    with torch.no_grad():
        for t in values:
            if not isinstance(t, torch.Tensor) or t.device.type != torch.device(DEVICE).type:
                continue
            storage = t.untyped_storage()
            if storage.nbytes() == 0 or storage.nbytes() % t.element_size():
                continue
            fresh = moved.get(storage.data_ptr())
            if fresh is None:
                count = storage.nbytes() // t.element_size()
                old = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (count,), (1,))
                if old.dtype.is_floating_point or old.dtype.is_complex:  # values unlike the case's, settled first
                    fresh = torch.where(torch.isnan(old), torch.zeros_like(old), torch.full_like(old, float("nan")))
                else:
                    fresh = torch.logical_not(old) if old.dtype == torch.bool else torch.bitwise_not(old)
                module.synchronize()
                moved[storage.data_ptr()] = fresh
                fresh.copy_(old)
            t.set_(fresh.untyped_storage(), t.storage_offset(), t.size(), t.stride())


def run_in_mode(fn):
    """The device call in the harness's mode: eager, adaptive (queued and fused, then synchronized) or
    compiled (torch.compile with the device's backend, dynamic=False, as harness.modes.Compiled)."""
    if MODE == "eager":
        return fn()
    module = getattr(torch, torch.device(DEVICE).type)
    if MODE == "adaptive":
        previous = module.get_eager_mode()
        module.set_eager_mode("adaptive")
        try:
            stage_pending(globals().get("dev_in", ()))  # an op spec's inputs; the OpInfo sweep stages none
            out = fn()
            module.synchronize()
            return out
        finally:
            module.set_eager_mode(previous)
    if MODE == "dynamic":
        # harness.dynamic: `call` compiled once with torch.compile's default dynamic=None, called on the sequence's
        # earlier inputs first (the second call recompiles it with symbolic sizes), then on this case's
        compiled = torch.compile(call, backend=torch.device(DEVICE).type)
        for earlier in EARLIER:
            compiled(DEVICE, *earlier(DEVICE))
        torch.manual_seed(SEED)
        return compiled(DEVICE, *dev_in)
    return torch.compile(fn, backend=torch.device(DEVICE).type, dynamic=False)()
'''


# How a cotangent gets the case's layout: the harness's own functions, as source (one definition).
_PLACE = "\n\n".join(inspect.getsource(f).rstrip("\n") + "\n" for f in (
    values._numel, values.layout_applies, values.base_shape, values.apply_layout, values.place)).rstrip("\n")


def mode_runner_source() -> str:
    """``run_in_mode(fn)`` as source, for every reproducer (op specs and the OpInfo sweep); reads the
    globals MODE and DEVICE. One runner, so a reproducer runs its case exactly as the harness mode did."""
    return _MODE_RUNNER.rstrip("\n")


def render(spec: OpSpec, case: Case, expression: str, comparison: Comparison | None = None,
           earlier: Sequence[Case] = ()) -> str:
    """The reproducer of ``case`` (``expression`` is the rendered call; ``comparison`` the verdict). ``earlier``:
    the cases of a ``harness.dynamic`` sequence called before this one (mode ``dynamic``), whose inputs the script
    passes to the same compiled function first."""
    from harness.runner import strides_checked  # the runner renders reproducers: imported at the call

    seed = sum(t.seed for t in case.tensors) % (2**31)
    names = [f"x{i}" for i in range(len(case.tensors))]
    verdict = (comparison.message if comparison else "").replace("\n", " ")
    lines = [
        f"# neuronsim reproducer: op spec {spec.name!r}, dtype {case.dtype}, mode {case.mode}, device {case.device}",
        f"# harness verdict: {verdict}".rstrip(),
        *([f"# the failing check is a twin overload of a call the expression makes (harness/twins.py): this script "
           f"runs the expression, which passed; the twin is called by the case itself: pytest opsuite -k "
           f"'{spec.name}-{case.dtype}'"] if "twin aten::" in verdict else []),
        *([f"# the failing check is the cross-device probe of a call the expression makes (harness/twins.py "
           f"check_probe: one argument moved to the host, the device must raise RuntimeError): this script runs "
           f"the expression, which passed; the probe is run by the case itself: pytest opsuite -k "
           f"'{spec.name}-{case.dtype}'"] if " on the host (" in verdict else []),
        "import math",
        "import torch",
        "import torch.nn.functional as F",
        "import device_impl  # registers the neuron device (plain `import torch` does once installed)",
        "",
        f"DEVICE = {case.device!r}",
        f"MODE = {case.mode!r}",
        f"SEED = {seed}",
        "DEFAULT_TOLERANCE = {" + ", ".join(f"{k}: {v!r}" for k, v in DEFAULT_TOLERANCE.items()) + "}  # (rtol, atol)",
        f"TOLERANCE = {spec.tolerance.get(case.dtype)!r}  # the op's override for {case.dtype}, if any",
        f"ZERO_SIGN = {not ({case.dtype} | {t.dtype for t in case.tensors}) & set(spec.ignore_zero_sign)!r}"
        "  # -0.0 and 0.0 are told apart (as harness.runner._zero_sign)",
        f"OVERFLOW_EQUAL = {spec.overflow_equal!r}",
        f"MAX_ULP = {spec.max_ulp.get(case.dtype)!r}",
        f"FP64_REFERENCE = {spec.fp64_reference!r}",
        f"SUM_OF_PRODUCTS = {spec.sum_of_products!r}  # order-dependent positions (harness.compare.OrderDependent)",
        f"DTYPE = torch.{case.dtype}",
        f"COTANGENT_LAYOUT = {strided_layout(case.tensors)!r}  # the gradients' cotangents are made in it (values.place)",
        f"FP64_MULTIPLIER = {FP64_MULTIPLIER!r}",
        f"STRIDES = {strides_checked(case)!r}  # results' strides compared with CPU's (harness.runner.strides_checked)",
        "",
        "",
        "def inputs(device):",
    ]
    for i, t in enumerate(case.tensors):
        lines.append(f"    b{i} = {literal(t)}.to(device)")
        view = LAYOUT_CODE[t.layout].format(b=f"b{i}", shape=tuple(t.shape))
        suffix = ".detach().requires_grad_()" if t.requires_grad else ""
        lines.append(f"    x{i} = {view}{suffix}")
    lines += [
        f"    return [{', '.join(names)}]",
        "",
        "",
    ]
    for k, before in enumerate(earlier):
        lines.append(f"def earlier_inputs_{k}(device):  # call {k + 1} of the sequence")
        for i, t in enumerate(before.tensors):
            lines.append(f"    b{i} = {literal(t)}.to(device)")
            view = LAYOUT_CODE[t.layout].format(b=f"b{i}", shape=tuple(t.shape))
            suffix = ".detach().requires_grad_()" if t.requires_grad else ""
            lines.append(f"    x{i} = {view}{suffix}")
        lines += [f"    return [{', '.join(names)}]", "", ""]
    if earlier:
        lines += [f"EARLIER = [{', '.join(f'earlier_inputs_{k}' for k in range(len(earlier)))}]"
                  "  # harness.dynamic: the sequence's earlier calls", "", ""]
    lines += [
        f"def call(device, {', '.join(names + [''])}):".replace(", )", ")"),
        f"    return {expression}",
        "",
        _CHECKER.rstrip("\n"),
        mode_runner_source(),
        "",
        "",
        _PLACE,
    ]
    if spec.sum_of_products:
        lines.append(_ORDER.rstrip("\n"))
    if spec.magnitude:
        bound = spec.render(case.params, names, spec.magnitude)
        lines += ["", "", "def magnitude():  # noqa: F811 - the spec's own bound expression (OpSpec.magnitude)",
                  '    """The magnitude bound per output position: the spec\'s bound expression in float64 on |x| of the',
                  '    finite inputs (non-finite ones as 0), as harness.runner._Bounds; forward only."""',
                  "    xs = [torch.where(torch.isfinite(x), x, torch.zeros_like(x)).detach().double().abs()",
                  "          if x.is_floating_point() else x for x in inputs('cpu')]",
                  f"    {', '.join(names)}, = xs",
                  f"    return {bound}, None"]
    zero_sign = not ({case.dtype} | {t.dtype for t in case.tensors}) & set(spec.ignore_zero_sign)
    try:
        ties = spec.render(case.params, names, spec.zero_ties) if spec.zero_ties and not zero_sign else ""
    except (KeyError, IndexError):  # a case without the tensors the expression names: no tie is known
        ties = ""
    if ties:
        lines += ["", "", "def output_zero_sign():",
                  '    """Where the results\' zero signs are compared: all but the ties, where CPU\'s own sign of a '
                  'zero is',
                  '    its loop\'s (the spec\'s zero_ties, as harness.runner._output_zero_sign)."""',
                  f"    {', '.join(names)}, = inputs('cpu')",
                  "    with torch.no_grad():",
                  f"        return ~torch.as_tensor({ties}, dtype=torch.bool)",
                  "", "", "OUTPUT_ZERO_SIGN = output_zero_sign()"]
    else:
        lines += ["", "", "OUTPUT_ZERO_SIGN = ZERO_SIGN  # the results' zero signs, as the inputs' and gradients'"]
    lines += [
        "",
        "",
        "cpu_in = inputs('cpu')",
        "try:",
        "    expected, cpu_error = evaluate('cpu', cpu_in), None",
        "except Exception as e:",
        "    expected, cpu_error = None, e",
    ]
    repeated = re.search(r"repeated call (\d+)", verdict)
    if repeated:  # harness.runner._check_repeats: the call made again on fresh inputs, the last one judged
        lines += [
            f"CALLS = {int(repeated.group(1))}  # the failing call is a repeat: earlier identical calls come first",
            "for _ in range(CALLS):",
            "    dev_in = inputs(DEVICE)",
            "    try:",
            "        actual, dev_error = run_in_mode(lambda: evaluate(DEVICE, dev_in)), None",
            "    except Exception as e:",
            "        actual, dev_error = None, e",
        ]
    else:
        lines += [
            "dev_in = inputs(DEVICE)",
            "try:",
            "    actual, dev_error = run_in_mode(lambda: evaluate(DEVICE, dev_in)), None",
            "except Exception as e:",
            "    actual, dev_error = None, e",
        ]
    lines += [
        "if cpu_error is not None or dev_error is not None:",
        "    error_parity(cpu_error, dev_error)",
        "else:",
    ]
    if spec.check == "properties":
        lines.append(_PROPERTIES.strip("\n"))
    else:
        lines.append(_VALUES.strip("\n"))
        if spec.grad and any(t.requires_grad for t in case.tensors):
            lines.append(_GRADS.strip("\n"))
    lines.append("print('reproducer passed: the device matches CPU for this case')")
    return "\n".join(lines) + "\n"


__all__ = ["render", "checker_source", "dtype_named"]


def checker_source() -> str:
    """The reproducers' checking functions as source (the OpInfo sweep's reproducers use them too).
    They read the globals DEVICE, DEFAULT_TOLERANCE, TOLERANCE and FP64_MULTIPLIER."""
    return _CHECKER.rstrip("\n")
