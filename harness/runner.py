"""Running one case: the same expression on CPU eager and on the device, then every check.

Checks, in order: error parity (if either side raised); outputs (values,
dtype, shape, device); aliasing parity (which outputs share storage with
which inputs); inputs after the call (in-place and out= effects); gradients
for differentiable specs (falling back to the float64-reference criterion,
as backward formulas compound roundings). A spec with ``check="properties"`` (random ops)
compares shape, dtype and device, the spec's invariant (what every draw satisfies: values in
range, an in-place call written through to its view) against CPU's, and that the device
repeats itself under the same seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness import compare as cmp
from harness import modes, repro, twins
from harness.cases import Case
from harness.specs import SPECS, OpSpec
from harness.values import dtype_named, materialize, place, strided_layout

F = torch.nn.functional


@dataclass
class Result:
    case: Case
    verdict: str  # pass, fail, skip, xfail, xpass
    message: str = ""
    comparison: cmp.Comparison | None = None
    cpu_ms: float = 0.0
    device_ms: float = 0.0
    expression: str = ""
    device_ops: dict[str, dict[str, int]] = field(default_factory=dict)
    xfail_reason: str = ""
    reproducer: str = ""
    called: list[str] = field(default_factory=list)  # aten overloads the expression (and its backward) called
    design_id: str = ""  # the designed case's id (harness.design), "" for a drawn one
    check: str = ""  # the device-contract check (harness.contract, harness.modules), "" for a differential case

    @property
    def fallback_ops(self) -> list[str]:
        return sorted(op for op, c in self.device_ops.items() if c.get("fallback"))

    @property
    def passed(self) -> bool:
        return self.verdict in ("pass", "xfail", "skip")


def _device_module(device: str):
    return getattr(torch, torch.device(device).type, None)


def _reset_stats(device: str) -> None:
    reset = getattr(_device_module(device), "reset_dispatch_stats", None)
    if callable(reset):
        reset()


def _stats(device: str) -> dict[str, dict[str, int]]:
    stats = getattr(_device_module(device), "dispatch_stats", None)
    return stats() if callable(stats) else {}


def manual_seed(seed: int, device: str) -> None:
    """What ``torch.manual_seed`` does for the two generators a case uses (CPU's and the device's),
    without its cost: it also seeds every lazily initialised accelerator module, recording a stack
    trace for each (about 1 ms a call, three calls a case)."""
    torch.random.default_generator.manual_seed(seed)
    seed_device = getattr(_device_module(device), "manual_seed_all", None) if device != "cpu" else None
    if callable(seed_device):
        seed_device(seed)


def _namespace(tensors: list[torch.Tensor], device: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"torch": torch, "F": F, "device": device}
    ns.update({f"x{i}": t for i, t in enumerate(tensors)})
    return ns


def _evaluate(expression: str, tensors: list[torch.Tensor], mode: modes.Mode | None, device: str):
    ns = _namespace(tensors, device)
    started = time.perf_counter()
    if mode is None:
        value = eval(expression, ns)  # noqa: S307 - the expression is the spec's own call text
    else:
        value = mode.run(lambda: eval(expression, ns), device)  # noqa: S307
    return value, (time.perf_counter() - started) * 1e3


def _storage_aliases(outputs: Any, inputs: list[torch.Tensor]) -> list[tuple[int, int]]:
    leaves = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    pairs = []
    for i, out in enumerate(leaves):
        if not isinstance(out, torch.Tensor) or out.numel() == 0:
            continue
        for j, inp in enumerate(inputs):
            if inp.numel() and out.untyped_storage().data_ptr() == inp.untyped_storage().data_ptr():
                pairs.append((i, j))
    return pairs


def _differentiable(outputs: Any) -> list[torch.Tensor]:
    return [o for o in (outputs if isinstance(outputs, (tuple, list)) else [outputs])
            if isinstance(o, torch.Tensor) and o.requires_grad and o.dtype.is_floating_point]


def _grads(spec: OpSpec, outputs: Any, inputs: list[torch.Tensor], device: str, seed: int,
           magnitude: torch.dtype | None = None, rounded_like: Any = None, layout: str = "contiguous"):
    """Gradients of sum(out * cotangent) w.r.t. inputs requiring grad (cotangent seeded, same on both sides).
    ``magnitude`` (the case's dtype): |cotangent| as drawn in that dtype, in the outputs' dtype (float64), for a
    sum of products' magnitude bound. ``rounded_like`` (CPU's outputs, for the float64 reference): each
    cotangent rounded to that output's dtype first, so the reference differentiates the very cotangent CPU
    and the device do (drawn in float64 directly, a bf16 mm gradient's reference moved by up to 2^-9 of
    its magnitude bound: 3.397e38, which rounds to inf in bf16, where the exact 3.391e38 rounds to 3.3895e38).
    ``layout`` (the case's, ``strided_layout``): the cotangents are made on ``device`` with its strides
    (``values.place``), so a backward kernel meets a strided gradient as a user's ``sum().backward()`` gives it."""
    leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
    outs = _differentiable(outputs)
    if not leaves or not outs:
        return None
    like = _differentiable(rounded_like) if rounded_like is not None else []
    rounding = [o.dtype for o in like] if len(like) == len(outs) else [magnitude or o.dtype for o in outs]
    g = torch.Generator().manual_seed(seed)
    cotangents = [torch.randn(o.shape, generator=g, dtype=torch.float32).to(r).to(o.dtype) for o, r in zip(outs, rounding)]
    if magnitude is not None:
        cotangents = [c.abs() for c in cotangents]
    cotangents = [place(c, layout, device) for c in cotangents]
    grads = torch.autograd.grad(outs, leaves, cotangents, allow_unused=True)
    return [torch.zeros_like(leaf) if gr is None else gr for leaf, gr in zip(leaves, grads)]


class _Recorder(TorchDispatchMode):
    """Notes every aten overload dispatched while active (and calls it unchanged)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(func.name())
        return func(*args, **(kwargs or {}))


def called_ops(spec: OpSpec, case: Case, expression: str, seed: int) -> list[str]:
    """The aten overloads ``expression`` calls, forward and backward, as 'aten::name.overload'.

    Recorded in a separate, untimed CPU evaluation with fresh inputs: the device run is never
    wrapped in a dispatch mode, and the CPU timing stays that of plain eager. Which overloads an
    expression reaches above the backend does not depend on the device; what the device's kernels
    reach below that is in ``Result.device_ops`` (the dispatch counters).
    """
    tensors = [materialize(t, "cpu") for t in case.tensors]
    recorder = _Recorder()
    try:
        with recorder:
            manual_seed(seed, "cpu")
            value, _ = _evaluate(expression, tensors, None, "cpu")
            if spec.grad:
                _grads(spec, value, tensors, "cpu", seed, layout=strided_layout(case.tensors))
    except Exception:  # noqa: BLE001 - an expression that raises still called what it called
        pass
    return sorted(recorder.ops)


def _fp64_reference(spec: OpSpec, case: Case, expression: str) -> Any:
    tensors = [materialize(t, "cpu") for t in case.tensors]
    widened = [t.detach().double() if t.dtype.is_floating_point else t for t in tensors]
    try:
        value, _ = _evaluate(expression, widened, None, "cpu")
    except Exception:  # noqa: BLE001 - no reference, no second criterion
        return None
    return value


def cpu_side(case: Case, expression: str, result: Result) -> tuple[list, list, int, Any, Exception | None]:
    """A case's inputs on CPU and on its device, its seed, and CPU's answer: (cpu_inputs, device_inputs, seed,
    expected, cpu_error), CPU's exception kept as the error parity check's side (``result.cpu_ms`` is set)."""
    cpu_inputs = [materialize(t, "cpu") for t in case.tensors]
    device_inputs = [materialize(t, case.device) for t in case.tensors]
    seed = sum(t.seed for t in case.tensors) % (2**31)
    expected = cpu_error = None
    try:
        manual_seed(seed, "cpu")
        expected, result.cpu_ms = _evaluate(expression, cpu_inputs, None, "cpu")
    except Exception as e:  # noqa: BLE001 - error parity is a check
        cpu_error = e
    return cpu_inputs, device_inputs, seed, expected, cpu_error


# Whether results' strides are compared with CPU's: None follows the case's mode (``Mode.strides_checked``);
# True/False for every mode (pytest's ``--check-strides on|off``, to measure a mode not yet held to it).
STRIDES: bool | None = None


def strides_checked(case: Case) -> bool:
    """Whether this case's results, out=/in-place results, twins and gradients are held to CPU's strides."""
    if STRIDES is not None:
        return STRIDES
    # harness.dynamic's cases (mode "dynamic") are compiled calls
    return modes.get("compiled" if case.mode == "dynamic" else case.mode).strides_checked


def run_case(case: Case, xfails=None) -> Result:
    spec = SPECS[case.spec]
    mode = modes.get(case.mode)
    names = [f"x{i}" for i in range(len(case.tensors))]
    expression = spec.render(case.params, names)
    result = Result(case, "pass", expression=expression)
    unavailable = mode.available(case.device)
    if unavailable:
        result.verdict, result.message = "skip", unavailable
        return result
    cpu_inputs, device_inputs, seed, expected, cpu_error = cpu_side(case, expression, result)
    device_error = actual = None
    _reset_stats(case.device)
    try:
        manual_seed(seed, case.device)
        actual, result.device_ms = _evaluate(expression, device_inputs, mode, case.device)
    except Exception as e:  # noqa: BLE001
        device_error = e
    comparison = _check(spec, case, expression, cpu_error, device_error, expected, actual, cpu_inputs, device_inputs,
                        seed)
    if comparison.ok and spec.check == "values":
        comparison = comparison.merge(_check_repeats(spec, case, expression, seed, mode, cpu_error, expected,
                                                     actual, cpu_inputs))
    twin_calls: list[str] = []
    if comparison.ok and case.mode == "eager":
        twin_cmp, twin_calls = _check_twins(spec, case, expression, seed)
        comparison = comparison.merge(twin_cmp)
    # forward, backward, the determinism rerun of random ops, and the twin overloads' calls
    result.device_ops = _stats(case.device)
    result.called = sorted(set(called_ops(spec, case, expression, seed)) | set(twin_calls))
    result.comparison = comparison
    result.verdict = "pass" if comparison.ok else "fail"
    result.message = comparison.message
    if xfails is not None:
        entry = xfails.match(case, result.verdict == "fail", result.message)
        if entry is not None:
            result.xfail_reason = f"{entry.category}: {entry.reason}"
            result.verdict = "xfail" if result.verdict == "fail" else "xpass"
    if result.verdict in ("fail", "xpass"):
        result.reproducer = repro.render(spec, case, expression, comparison)
    return result


# Calls of a passing case made again, each on fresh inputs of the same sizes, strides, dtypes and values. A device
# may serve a call it has seen before from what earlier calls left behind (a recorded launch, a plan of the call's
# metadata, a compiled graph's recorded schedule), a path the first call never takes; a plan learnt from the second
# call first serves the third, so two repeats.
REPEATS = 2


def _check_repeats(spec: OpSpec, case: Case, expression: str, seed: int, mode: modes.Mode, cpu_error, expected,
                   first, cpu_inputs) -> cmp.Comparison:
    """The case's call repeated ``REPEATS`` times in its mode (``Mode.repeat``: a compiled case runs the function it
    compiled), each judged as the first call was: the same exception class where CPU raised, else a result
    bit-identical to the first call's (which passed), or one that passes the first call's checks all the same (an
    order the device may vary between calls), inputs written in place included. No gradients: the backward's own
    recurring calls are the forward's op specs' and its twins'."""
    comparison = cmp.Comparison(True)
    for k in range(REPEATS):
        inputs = [materialize(t, case.device) for t in case.tensors]
        ns = _namespace(inputs, case.device)
        actual = error = None
        try:
            manual_seed(seed, case.device)
            actual = mode.repeat(lambda: eval(expression, ns), case.device)  # noqa: S307 - the spec's own call text
        except Exception as e:  # noqa: BLE001 - error parity is a check
            error = e
        where = f"repeated call {k + 2}"
        if cpu_error is not None:
            again = cmp.same_error(error, cpu_error) if error is not None else cmp.Comparison(
                False, f"CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:200]}; the device returned a result",
                criterion="error parity")
        elif error is None and _bit_identical(actual, first):
            again = _check(spec, case, expression, None, None, expected, actual, cpu_inputs, inputs, seed,
                           grads=False, inputs_only=True)
        else:
            again = _check(spec, case, expression, None, error, expected, actual, cpu_inputs, inputs, seed,
                           grads=False)
        if not again.ok:
            return cmp.Comparison(False, f"{where} (fresh inputs of the same layout), unlike the first: "
                                         f"{again.message}", again.max_abs, again.max_rel, again.ulp,
                                  f"repeat: {again.criterion}")
    return comparison


def _bit_identical(a: Any, b: Any) -> bool:
    """Whether two device results hold the same bits (NaN payloads and zero signs included) in the same metadata."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride() or a.device != b.device:
            return False
        x, y = a.detach().cpu(), b.detach().cpu()
        if x.is_complex():
            x, y = torch.view_as_real(x.resolve_conj()), torch.view_as_real(y.resolve_conj())
        if x.is_floating_point() and x.element_size() in (2, 4, 8):
            bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
            x, y = x.contiguous().view(bits), y.contiguous().view(bits)
        return torch.equal(x, y)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_bit_identical(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a == b or (a != a and b != b))


def _check_twins(spec: OpSpec, case: Case, expression: str, seed: int) -> tuple[cmp.Comparison, list[str]]:
    """The twin overloads (``harness.twins``) of every call the expression and its backward make on the
    device, judged with the spec's tolerance for the case's dtype. Eager mode only: a twin is a direct
    aten call, the same in every mode."""
    inputs = [materialize(t, case.device) for t in case.tensors]

    def run() -> None:
        manual_seed(seed, case.device)
        value, _ = _evaluate(expression, inputs, None, case.device)
        if spec.grad:
            _grads(spec, value, inputs, case.device, seed, layout=strided_layout(case.tensors))

    tolerance, max_ulp = spec.tolerance.get(case.dtype), spec.max_ulp.get(case.dtype)
    zero_sign = _output_zero_sign(spec, case, _zero_sign(spec, case))
    strides = strides_checked(case)

    def judge(actual: Any, expected: Any) -> cmp.Comparison:
        if spec.check == "properties":  # a random op's twin: its shape, dtype and strides, never its values
            same = _same_properties(actual, expected)
            return cmp.compare_layouts(actual, expected, "twin") if same.ok and strides else same
        return cmp.compare(actual, expected, tolerance, overflow_equal=spec.overflow_equal, zero_sign=zero_sign,
                           device=case.device, max_ulp=max_ulp, where="twin", strides=strides)

    return twins.check(twins.record(run, case.device), case.device, judge)


def _same_properties(actual: Any, expected: Any) -> cmp.Comparison:
    got = actual if isinstance(actual, (tuple, list)) else [actual]
    want = expected if isinstance(expected, (tuple, list)) else [expected]
    if len(got) != len(want):
        return cmp.Comparison(False, f"twin: {len(got)} results, CPU {len(want)}")
    for i, (a, e) in enumerate(zip(got, want)):
        if isinstance(e, torch.Tensor) and (not isinstance(a, torch.Tensor) or a.shape != e.shape
                                            or a.dtype != e.dtype):
            what = f"{a.dtype} {list(a.shape)}" if isinstance(a, torch.Tensor) else type(a).__name__
            return cmp.Comparison(False, f"twin result {i}: {what}, CPU {e.dtype} {list(e.shape)}")
    return cmp.Comparison(True, criterion="twin: properties")


_SPEC_ERRORS = (SyntaxError, NameError)  # raised by a malformed call text, never by an op


def _check(spec, case, expression, cpu_error, device_error, expected, actual, cpu_inputs, device_inputs, seed,
           grads: bool = True, inputs_only: bool = False) -> cmp.Comparison:
    """The case's verdict from both sides' answers. ``grads``: judge the gradients too; ``inputs_only``: the
    results are known to pass (bit-identical to a passing call's), so only the inputs after the call are judged."""
    if isinstance(cpu_error, _SPEC_ERRORS):
        # Not error parity: the call text itself is broken, and both sides raising the same
        # SyntaxError would otherwise pass every case of the spec without running the op.
        return cmp.Comparison(False, f"harness: the spec's expression {expression!r} is invalid "
                                     f"({type(cpu_error).__name__}: {cpu_error})", criterion="spec")
    if cpu_error is not None or device_error is not None:
        if cpu_error is not None and device_error is not None:
            return cmp.same_error(device_error, cpu_error)
        if cpu_error is not None:
            return cmp.Comparison(False, f"CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:300]}; the device "
                                         f"returned a result", criterion="error parity")
        return cmp.Comparison(False, f"the device raised {type(device_error).__name__}: {str(device_error)[:300]}; "
                                     f"CPU returned a result", criterion="error parity")
    tolerance = spec.tolerance.get(case.dtype)
    if inputs_only:
        return _inputs_after(spec, case, cpu_inputs, device_inputs, tolerance, cmp.Comparison(True))
    if spec.check == "properties":
        return _check_properties(spec, case, expression, expected, actual, cpu_inputs, device_inputs, seed)
    zero_sign = _zero_sign(spec, case)
    out_sign = _output_zero_sign(spec, case, zero_sign)
    max_ulp = spec.max_ulp.get(case.dtype)
    device = case.device
    strides = strides_checked(case)
    meta = _MetaSide(spec, case, expression, seed)
    comparison = cmp.compare(actual, expected, tolerance, overflow_equal=spec.overflow_equal, zero_sign=out_sign,
                             device=device, max_ulp=max_ulp)
    reference = None
    if not comparison.ok and (spec.fp64_reference or spec.sum_of_products):
        reference = _fp64_reference(spec, case, expression)
    if not comparison.ok and spec.fp64_reference and reference is not None:
        comparison = cmp.compare(actual, expected, tolerance, reference, overflow_equal=spec.overflow_equal,
                                 zero_sign=out_sign, device=device, max_ulp=max_ulp)
    bounds = _Bounds(spec, case, expression, seed)
    if not comparison.ok and spec.sum_of_products:
        comparison = cmp.compare(actual, expected, tolerance, reference if spec.fp64_reference else None,
                                 overflow_equal=spec.overflow_equal, zero_sign=out_sign, device=device,
                                 max_ulp=max_ulp, order=_orders(bounds.output(), expected, reference))
    if comparison.ok and strides:  # the layout, whichever criterion passed the values: CPU's or the meta kernels'
        layout = cmp.compare_layouts(actual, expected)
        if not layout.ok:
            layout = cmp.compare_layouts(actual, expected, alternative=meta.outputs())
        if not layout.ok:
            comparison = cmp.Comparison(False, layout.message, comparison.max_abs, comparison.max_rel, comparison.ulp,
                                        layout.criterion)
    cpu_alias = _storage_aliases(expected, cpu_inputs)
    device_alias = _storage_aliases(actual, device_inputs)
    if cpu_alias != device_alias:
        comparison = comparison.merge(cmp.Comparison(
            False, f"aliasing differs: outputs sharing storage with inputs (output, input) CPU {cpu_alias}, "
                   f"device {device_alias}"))
    comparison = _inputs_after(spec, case, cpu_inputs, device_inputs, tolerance, comparison)
    if grads and spec.grad and comparison.ok:
        try:
            layout = strided_layout(case.tensors)
            cpu_grads = _grads(spec, expected, cpu_inputs, "cpu", seed, layout=layout)
            device_grads = _grads(spec, actual, device_inputs, case.device, seed, layout=layout)
        except Exception as e:  # noqa: BLE001 - a backward that raises on one side only is a failure
            return comparison.merge(cmp.Comparison(False, f"backward raised {type(e).__name__}: {str(e)[:300]}"))
        if cpu_grads is not None:
            grad_cmp = cmp.compare(device_grads, cpu_grads, tolerance, where="gradient", device=device,
                                   zero_sign=zero_sign, strides=False)
            # Backward formulas are compositions of ops, each rounded to the dtype on both sides, so a
            # one-ULP difference in an intermediate can grow; gradients are judged by the float64
            # criterion when the tolerance alone fails.
            if not grad_cmp.ok:
                grad_cmp.ok = _grad_within_fp64(spec, case, expression, device_grads, cpu_grads, tolerance, seed,
                                                bounds if spec.sum_of_products else None, expected)
            if grad_cmp.ok and strides:  # the layout, whichever criterion passed the values
                layout = cmp.compare_layouts(device_grads, cpu_grads, "gradient")
                if not layout.ok:
                    layout = cmp.compare_layouts(device_grads, cpu_grads, "gradient", meta.gradients())
                grad_cmp = grad_cmp if layout.ok else layout
            comparison = comparison.merge(grad_cmp)
    return comparison


class _MetaSide:
    """The case's call on meta tensors of its inputs' shapes, strides and dtypes, made when first asked (a layout
    CPU's differs from): its results' and gradients' strides are the layout ATen's meta and structured kernels give
    every device but CPU, which the layout check accepts beside CPU's (``harness.compare.compare_strides``). None
    where the call does not run on meta (a data-dependent op, a host read, a missing meta kernel)."""

    def __init__(self, spec: OpSpec, case: Case, expression: str, seed: int) -> None:
        self.spec, self.case, self.expression, self.seed = spec, case, expression, seed
        self._done, self._outputs, self._gradients = False, None, None

    def _run(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            inputs = [materialize(t, "meta") for t in self.case.tensors]
            self._outputs, _ = _evaluate(self.expression, inputs, None, "meta")
        except Exception:  # noqa: BLE001 - no meta answer: CPU's layout alone is the check
            return
        if self.spec.grad:
            try:
                self._gradients = _grads(self.spec, self._outputs, inputs, "meta", self.seed,
                                         layout=strided_layout(self.case.tensors))
            except Exception:  # noqa: BLE001 - as above, for the gradients alone
                self._gradients = None

    def outputs(self) -> Any:
        self._run()
        return self._outputs

    def gradients(self) -> Any:
        self._run()
        return self._gradients


def _inputs_after(spec: OpSpec, case: Case, cpu_inputs, device_inputs, tolerance, comparison: cmp.Comparison
                  ) -> cmp.Comparison:
    """``comparison`` merged with the inputs after the call (an in-place op's writes) against CPU's."""
    zero_sign = _zero_sign(spec, case)
    for i, (c, d) in enumerate(zip(cpu_inputs, device_inputs)):
        after = cmp.compare_tensor(d, c, tolerance, where=f"input x{i} after the call", zero_sign=zero_sign,
                                   device=case.device, strides=strides_checked(case))
        if not after.ok:
            comparison = comparison.merge(after)
    return comparison


def _output_zero_sign(spec: OpSpec, case: Case, zero_sign: bool) -> bool | torch.Tensor:
    """Where the results' zero signs are compared: ``zero_sign``, or, for a spec whose ignored zero sign is CPU's
    loop's only at ties (``OpSpec.zero_ties``), every position but those (a bool tensor, harness.compare); False
    where the tie expression cannot be evaluated."""
    if zero_sign or not spec.zero_ties:
        return zero_sign
    names = [f"x{i}" for i in range(len(case.tensors))]
    try:
        with torch.no_grad():
            ties, _ = _evaluate(spec.render(case.params, names, spec.zero_ties),
                                [materialize(t, "cpu") for t in case.tensors], None, "cpu")
        return ~torch.as_tensor(ties, dtype=torch.bool)
    except Exception:  # noqa: BLE001 - no tie positions known: none fixed (CPU raises for this input)
        return False


def _zero_sign(spec: OpSpec, case: Case) -> bool:
    """Whether -0.0 and 0.0 are told apart: not where the spec says its float dtype's zero sign is
    CPU's loop position, whichever operand brought that dtype (maximum of a bool and a float32)."""
    return not ({case.dtype} | {t.dtype for t in case.tensors}) & set(spec.ignore_zero_sign)


class _Bounds:
    """The magnitude bound of a sum of products (OpSpec.sum_of_products), computed on first use: the
    expression in float64 on the absolute values of the finite inputs (non-finite ones as 0), and its
    gradients with the absolute value of the cotangent ``_grads`` draws (so, for each output and each
    gradient, the sum of the absolute values of the terms it sums)."""

    def __init__(self, spec, case, expression, seed) -> None:
        self.spec, self.case, self.expression, self.seed = spec, case, expression, seed
        self._value: Any = None
        self._grads: Any = None
        self._done = False

    def _compute(self) -> None:
        if self._done:
            return
        self._done = True
        tensors = []
        for t in self.case.tensors:
            x = materialize(t, "cpu").detach()
            if x.dtype.is_floating_point:
                x = torch.where(torch.isfinite(x), x, torch.zeros_like(x)).double().abs()
                x.requires_grad_(t.requires_grad)
            tensors.append(x)
        try:
            if self.spec.magnitude:  # the bound has its own expression (OpSpec.magnitude); no gradient bounds
                names = [f"x{i}" for i in range(len(tensors))]
                self._value, _ = _evaluate(self.spec.render(self.case.params, names, self.spec.magnitude), tensors,
                                           None, "cpu")
                return
            value, _ = _evaluate(self.expression, tensors, None, "cpu")
            self._value = value
            if self.spec.grad:
                self._grads = _grads(self.spec, value, tensors, "cpu", self.seed, magnitude=dtype_named(self.case.dtype),
                                     layout=strided_layout(self.case.tensors))
        except Exception:  # noqa: BLE001 - no bound, every position stays strict
            pass

    def output(self) -> Any:
        self._compute()
        return self._value

    def grads(self) -> Any:
        self._compute()
        return self._grads


def _orders(bound: Any, expected: Any, reference: Any) -> Any:
    """``OrderDependent`` per tensor of ``expected`` (the same structure), or None where unknown."""
    if isinstance(expected, torch.Tensor):
        ok = isinstance(bound, torch.Tensor) and tuple(bound.shape) == tuple(expected.shape) and \
            expected.dtype.is_floating_point
        ref = reference if isinstance(reference, torch.Tensor) and tuple(reference.shape) == tuple(expected.shape) \
            else None
        return cmp.OrderDependent.of(bound, expected, ref) if ok else None
    if isinstance(expected, (tuple, list)):
        bounds = bound if isinstance(bound, (tuple, list)) and len(bound) == len(expected) else [None] * len(expected)
        refs = reference if isinstance(reference, (tuple, list)) and len(reference) == len(expected) \
            else [None] * len(expected)
        return [_orders(b, e, r) for b, e, r in zip(bounds, expected, refs)]
    return None


def _grad_within_fp64(spec, case, expression, device_grads, cpu_grads, tolerance, seed, bounds=None,
                      cpu_outputs=None) -> bool:
    tensors = []
    for t in case.tensors:
        x = materialize(t, "cpu")
        if x.dtype.is_floating_point:
            x = x.detach().double().requires_grad_(t.requires_grad)
        tensors.append(x)
    try:
        value, _ = _evaluate(expression, tensors, None, "cpu")
        reference = _grads(spec, value, tensors, "cpu", seed, rounded_like=cpu_outputs,
                           layout=strided_layout(case.tensors))
    except Exception:  # noqa: BLE001
        return False
    zero_sign = _zero_sign(spec, case)
    if reference is not None and cmp.compare(device_grads, cpu_grads, tolerance, reference, "gradient",
                                             zero_sign=zero_sign).ok:
        return True
    if bounds is None:
        return False
    order = _orders(bounds.grads(), cpu_grads, reference)
    return cmp.compare(device_grads, cpu_grads, tolerance, reference, "gradient", zero_sign=zero_sign, order=order).ok


def _invariant(spec: OpSpec, case: Case, inputs: list[torch.Tensor], out: Any) -> Any:
    """The spec's invariant evaluated over the inputs after the call and the result (on their device)."""
    text = spec.render(case.params, [f"x{i}" for i in range(len(inputs))], spec.invariant)
    ns = _namespace(inputs, case.device if inputs and not inputs[0].is_cpu else "cpu")
    ns["out"] = out
    return eval(text, ns)  # noqa: S307 - the spec's own predicate text


def _check_properties(spec, case, expression, expected, actual, cpu_inputs, device_inputs, seed
                      ) -> cmp.Comparison:
    """Random ops: same structure, shapes, dtypes (and strides, ``strides_checked``); the spec's invariant holds as it does on CPU (a predicate every
    draw satisfies: the op's range, the in-place write through a view); on the device, the same seed gives the
    same values."""
    exp_leaves = expected if isinstance(expected, (tuple, list)) else [expected]
    act_leaves = actual if isinstance(actual, (tuple, list)) else [actual]
    if len(exp_leaves) != len(act_leaves):
        return cmp.Comparison(False, "structure differs")
    for i, (a, e) in enumerate(zip(act_leaves, exp_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.dtype != e.dtype or a.shape != e.shape:
                return cmp.Comparison(False, f"output[{i}]: {getattr(a, 'dtype', type(a))} "
                                             f"{tuple(getattr(a, 'shape', ()))} vs CPU {e.dtype} {tuple(e.shape)}")
    if spec.invariant:
        held = cmp.compare(_invariant(spec, case, device_inputs, actual), _invariant(spec, case, cpu_inputs, expected),
                           (0.0, 0.0), where=f"invariant {spec.invariant}")
        if not held.ok:
            return held
    manual_seed(seed, case.device)
    again, _ = _evaluate(expression, device_inputs, None, case.device)
    def to_host(value):
        if isinstance(value, torch.Tensor):
            return value.detach().cpu()
        return type(value)(to_host(v) for v in value) if isinstance(value, (tuple, list)) else value

    repeat = cmp.compare(again, to_host(actual), (0.0, 0.0), where="repeat with the same seed")
    if not repeat.ok:
        return repeat
    layout = cmp.compare_layouts(actual, expected) if strides_checked(case) else cmp.Comparison(True)
    return layout if not layout.ok else cmp.Comparison(True, criterion="properties + determinism")


def draw_case(data, spec: OpSpec, mode: str = "eager", device: str = "neuron") -> Case:
    """Draw one case of ``spec`` with Hypothesis (``data`` is st.data())."""
    from hypothesis import strategies as st

    dtype = data.draw(st.sampled_from(spec.dtypes), label="dtype")
    tensors, params = spec.draw(data, dtype)
    return Case(spec.name, dtype, tuple(tensors), params, mode, device)


__all__ = ["Result", "run_case", "draw_case", "dtype_named"]
