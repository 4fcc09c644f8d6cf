"""Registering a kernel family for every overload PyTorch will route to it.

A family kernel is written once as ``compute(out, args)`` (``args`` maps the
schema's argument names to values). ``register_family`` then registers it
for the ``out=`` overloads, and for the functional and in-place overloads
unless PyTorch already routes those to the out= kernel through its own
composite kernels (structured ops: the C++ meta function computes shape,
dtype and overlap checks, allocates the output and calls our out= kernel).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from device_impl.dispatch.table import HOOKS, TABLE
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels.common import check_exact_dtype, check_out, check_same_dtype, resize_output

_has = torch._C._dispatch_has_kernel_for_dispatch_key


def qualified(packet: str, overload: str) -> str:
    return f"aten::{packet}" if overload == "default" else f"aten::{packet}.{overload}"


def in_dispatcher(op: str) -> bool:
    """TorchScript-only overloads (``mul.left_t``) have schemas but no dispatcher entry."""
    try:
        _has(op, "CPU")
    except RuntimeError:
        return False
    return True


def routed_by_composite(op: str) -> bool:
    """True when PyTorch's own composite kernel of ``op`` calls another overload for our backend.

    Explicit composites (structured functional/in-place variants) call our out= kernel
    after a C++ meta function. Implicit composites decompose into several ops with
    intermediates rounded to the tensor's dtype; for backward formulas, which are never
    differentiated again, a direct kernel is both faster and as accurate as CPU's fused
    one, so those are registered directly (a direct kernel bypasses the decomposition).
    """
    if _has(op, "CompositeImplicitAutograd"):  # wins over explicit composites for a backend without a kernel
        return not op.split("::")[1].split(".")[0].endswith("_backward")
    return _has(op, "CompositeExplicitAutogradNonFunctional") or _has(op, "CompositeExplicitAutograd")


@dataclass(frozen=True)
class Binder:
    """Maps a call's positional and keyword arguments to the schema's names, with defaults."""

    names: tuple[str, ...]
    defaults: tuple[Any, ...]
    out_names: tuple[str, ...]

    @classmethod
    def of(cls, overload: torch._ops.OpOverload) -> "Binder":
        names, defaults, outs = [], [], []
        for a in overload._schema.arguments:
            if a.alias_info is not None and a.alias_info.is_write and a.kwarg_only:
                outs.append(a.name)
                continue
            names.append(a.name)
            defaults.append(a.default_value if a.has_default_value() else None)
        return cls(tuple(names), tuple(defaults), tuple(outs))

    def __post_init__(self) -> None:
        object.__setattr__(self, "_initial", dict(zip(self.names, self.defaults)))  # copied by every bind

    def bind(self, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        bound = self._initial.copy()
        bound.update(zip(self.names, args))
        bound.update(kwargs)
        return bound


Compute = Callable[[torch.Tensor, dict[str, Any]], None]
Meta = Callable[[dict[str, Any]], tuple[tuple[int, ...], torch.dtype, Sequence[Any]]]
Promotes = Callable[[dict[str, Any]], torch.dtype]


# How an out= tensor's dtype is judged, per packet, where it is not TensorIterator's default (the result
# dtype must be castable to out's). "same": ATen builds the op with check_all_same_dtype (its
# build_borrowing_unary_op and the activations' meta functions), so out must have the input's dtype
# ("Found dtype Float but expected Long"), checked before the kernel's own dtype refusals.
# "exact": ATen's generated out= wrapper of a functional kernel, or an explicit check ("Expected out
# tensor to have dtype ..."). tests/kernels/test_out_dtype.py checks this table against the live CPU.
OUT_DTYPE_RULES: dict[str, str] = {
    **dict.fromkeys(("abs", "neg", "bitwise_not", "ceil", "floor", "round", "trunc", "sign", "hardtanh", "elu",
                     "gelu", "leaky_relu", "silu", "softplus", "hardshrink", "frac", "sgn", "mish"), "same"),
    **dict.fromkeys(("isnan", "isinf", "relu", "zero", "isin", "mm", "addmm", "bmm", "baddbmm", "where",
                     "dot", "vdot", "addmv", "addbmm", "linalg_cross",
                     "nan_to_num", "isposinf", "isneginf", "signbit", "heaviside"), "exact"),
}


# out= overloads whose out must have the result's dtype, as TensorIterator's check_all_same_dtype judges it ("Found
# dtype Half but expected Float"), where the packet's other out= overloads cast: CPU's Scalar clamps build a borrowing
# unary op over self promoted with the bound (clamp_max.out(int8 x, 0.5, out=<float16>) raises; clamp_max.Tensor_out
# casts into any out).
OUT_SAME_RESULT_DTYPE: frozenset[str] = frozenset({"aten::clamp.out", "aten::clamp_min.out", "aten::clamp_max.out"})


# Packets whose out= tensor, when the call resizes it, takes the strides TensorIterator computes from the inputs
# (channels_last inputs give a channels_last out), as CPU's structured out= kernels do (``set_output_raw_strided``),
# besides every elementwise kernel's (``_ti_strided``); elsewhere a resized out is contiguous. Where it matters: a kernel that follows CPU's loop over the out
# (``elementwise.loop._vector_split``: which elements CPU's vector lambda computes) sees the loop CPU runs.
TI_OUT_STRIDES: frozenset[str] = frozenset({"elu_backward", "softshrink", "hardshrink_backward", "softshrink_backward",
                                            "hardtanh_backward"})


# Overloads whose CPU result is contiguous though their family's TensorIterator would lay it as the operands: their
# structured meta sets the output with no strides (pow.Scalar: ``set_output_raw_strided(0, exp.sizes(), {}, ...)``;
# CPU's ``pow(2.0, x)`` of a channels-last x is contiguous, ``pow(torch.tensor(2.0), x)`` channels-last).
CONTIGUOUS_RESULTS: frozenset[str] = frozenset({"aten::pow.Scalar_out"})


def _ti_strided(packet: str, compute: Compute) -> bool:
    """Whether a resized out= of ``packet`` takes TensorIterator's strides: every elementwise kernel's (CPU's are
    TensorIterator loops: ``sin(h, out=torch.empty(0))`` of a channels-last h is channels-last, and so is the
    functional ``abs``/``logical_not``/``isinf`` that ATen routes through out=) and ``TI_OUT_STRIDES``'."""
    fn = compute
    while isinstance(fn, functools.partial):
        fn = fn.func
    return packet in TI_OUT_STRIDES or getattr(fn, "__module__", "").startswith(_ELEMENTWISE_PACKAGE)


def _dense(t: torch.Tensor) -> bool:
    """ATen's ``is_non_overlapping_and_dense`` (torch's own rule, ``torch._prims_common``)."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false

    return is_non_overlapping_and_dense_or_false(t)


def _cast_layout(t: torch.Tensor, common: torch.dtype | None) -> torch.Tensor:
    """``t`` as CPU's TensorIterator sees it once it promotes its inputs (``promote_inputs_to_common_dtype``: an
    input of another dtype is replaced by ``input.to(common)`` before the output's strides are computed): a
    meta proxy of that cast, whose layout is ``_to_copy``'s (a dense input keeps its strides; an expanded or
    overlapping one becomes dense, so ``ge`` of an expanded uint8 and a float32 operand is laid out as the cast
    copy, not the expanded view). ``t`` itself where nothing is cast or the cast keeps its strides."""
    if common is None or t.dtype == common or t.dim() == 0 or _dense(t):
        return t
    proxy = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")
    return proxy.to(common)


def promotes_to_result(meta: Meta) -> Promotes:
    """``register_family``'s ``promotes`` for a binary family whose iterator's common dtype is its result dtype
    (``build_borrowing_binary_op``/``binary_float_op``: fmax, copysign, hypot, gcd, the shifts, ...; not the
    comparisons, whose result is bool): ``meta``'s dtype."""
    return lambda args: meta(args)[1]


def _ti_restride(out: torch.Tensor, operands: Sequence[Any], common: torch.dtype | None = None) -> None:
    """Give a just-resized, contiguous ``out`` TensorIterator's output strides for ``operands`` (metadata only).

    Every operand takes part, a broadcast one expanded to the output's shape (stride 0 where it broadcasts), as
    TensorIterator sees its operands: a transposed (5, 3) beside an overlapping (3, 5, 3) decides the order of
    the dims it has (CPU's result of their sum is (1, 9, 3); left out, the order was the overlapping one's alone).
    ``common``: the dtype CPU's iterator promotes its inputs to (``register_family``'s ``promotes``), each
    operand of another dtype taking part as its cast copy (``_cast_layout``); None where it casts none."""
    from torch._prims_common import compute_elementwise_output_strides

    if out.dim() < 2:
        return
    shape = tuple(out.shape)
    tensors = []
    for t in operands:
        if isinstance(t, torch.Tensor) and t.dim() <= len(shape):
            t = _cast_layout(t, common)
            try:
                tensors.append(t if tuple(t.shape) == shape else t.expand(shape))
            except RuntimeError:  # not broadcastable to the result (an operand the meta passes along): no say
                continue
    if not tensors:
        return
    strides = tuple(compute_elementwise_output_strides(*tensors))
    if strides != tuple(out.stride()):
        out.as_strided_(tuple(out.shape), strides)


def register_family(packet: str, compute: Compute, meta: Meta, dtypes: frozenset = COMPUTE_DTYPES,
                    overloads: Sequence[str] | None = None, recurring: Any = None,
                    promotes: Promotes | None = None) -> list[str]:
    """Register ``compute`` for the overloads of ``aten::<packet>`` (and ``<packet>_``).

    ``meta(args)`` returns (output shape, result dtype, operands that must not
    partially overlap the output). ``OUT_DTYPE_RULES`` says how an out= tensor's
    dtype is judged. ``recurring``: plans (``serve(args, kwargs)``/``learn(args, kwargs)``) that serve a
    recurring call of the ``out=`` kernel, or of the functional kernel where the plans are ``functional`` (an op
    with no out= overload: relu) (kernels/elementwise/recurring.py). ``promotes(args)``: the common dtype CPU's
    TensorIterator casts the inputs to before it lays out the result (binary, comparison and logical ops:
    ``promote_inputs_to_common_dtype``), for ``_ti_restride``; None where it casts none.
    Returns the overloads registered directly.
    """
    registered: list[str] = []
    served: list[str] = []
    rule = OUT_DTYPE_RULES.get(packet, "cast")
    functional = getattr(torch.ops.aten, packet)
    inplace = getattr(torch.ops.aten, packet + "_", None)
    names = overloads if overloads is not None else functional.overloads()
    out_ops: list[str] = []
    for ov in names:
        op = qualified(packet, ov)
        if not in_dispatcher(op):
            continue
        overload = getattr(functional, ov)
        binder = Binder.of(overload)
        if binder.out_names:
            make = _generated_out_kernel if cpu_out_is_generated(op) else _out_kernel
            extra = {"recurring": recurring} if make is _out_kernel and recurring is not None else {}
            if extra:  # a plan is made only for dtypes the table passes to the kernel (its wrapper serves first)
                recurring.dtypes = dtypes
            TABLE.native(op, dtypes=dtypes)(_sourced(make(op, binder, compute, meta, rule,
                                                          restride=_ti_strided(packet, compute)
                                                          and op not in CONTIGUOUS_RESULTS, promotes=promotes,
                                                          **extra), compute))
            registered.append(op)
            out_ops.append(op)
        elif routed_by_composite(op):
            served.append(op)
        else:
            planned = recurring is not None and getattr(recurring, "functional", False)
            if planned:
                recurring.dtypes = dtypes
            TABLE.native(op, dtypes=dtypes)(_sourced(_functional_kernel(
                op, binder, compute, meta, recurring if planned else None,
                restride=compute.__module__.startswith(_ELEMENTWISE_PACKAGE), promotes=promotes), compute))
            registered.append(op)
    if inplace is not None:
        for ov in inplace.overloads():
            if overloads is not None and ov not in overloads:
                continue
            op = qualified(packet + "_", ov)
            if not in_dispatcher(op):
                continue
            if routed_by_composite(op):
                served.append(op)
            else:
                TABLE.native(op, dtypes=dtypes)(_sourced(_inplace_kernel(op, Binder.of(getattr(inplace, ov)),
                                                                          compute, meta), compute))
                registered.append(op)
    if out_ops:
        # Composite-routed overloads reach one of the out= kernels; record the first as their server.
        for op in served:
            TABLE.serves(op, out_ops[0])
    return registered


def _sourced(kernel, compute: Compute):
    """Name the op-group module that defines ``compute`` as the wrapper's module.

    ``TABLE.native`` records ``fn.__module__`` as the lowering's source, so
    ``TABLE.lookup(op).source`` and the coverage report name the file a reader opens.
    """
    fn = compute
    while isinstance(fn, functools.partial):
        fn = fn.func
    kernel.__module__ = fn.__module__
    return kernel


def _run(op: str, compute: Compute, out: torch.Tensor, bound: dict[str, Any]) -> None:
    """Compute now, or hand the computation to adaptive eager, which queues or runs it."""
    submit = HOOKS.submit
    if submit is None:
        compute(out, bound)
    else:
        submit(op, compute, out, bound)


def _submits(kernel):
    """Mark a wrapper as ordering itself against queued work (through ``_run``); see dispatch.table.HOOKS."""
    kernel.submits = True
    return kernel


def _out_kernel(op: str, binder: Binder, compute: Compute, meta: Meta, rule: str = "cast", restride: bool = False,
                recurring: Any = None, promotes: Promotes | None = None):
    out_name = binder.out_names[0]
    exact, same = rule == "exact", rule == "same"
    same_result = op in OUT_SAME_RESULT_DTYPE
    serve = recurring.serve if recurring is not None else None
    learn = recurring.learn if recurring is not None else None

    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        bound = binder.bind(args, kwargs)
        out = bound.pop(out_name)
        if same:  # before the op's own dtype refusals, as CPU's meta function
            check_same_dtype(out, bound["self"].dtype)
        shape, dtype, operands = meta(bound)
        resized = restride and tuple(out.shape) != tuple(shape)
        check_out(out, shape, dtype, operands, exact_dtype=exact, same_dtype=same_result)
        if resized:
            _ti_restride(out, operands, promotes(bound) if promotes is not None else None)
        submit = HOOKS.submit  # _run, inlined: every out= call
        if submit is None:
            compute(out, bound)
            if learn is not None:
                learn(args, kwargs)
        else:
            submit(op, compute, out, bound)
        return out

    if serve is not None:  # a recurring call from its plan (kernels/elementwise/recurring.py), asked by the
        kernel.serve = serve  # table's wrapper before its checks (dispatch/table.py); else the path above
    return _submits(kernel)


def cpu_out_is_generated(op: str) -> bool:
    """Whether CPU serves out= overload ``op`` with the out= wrapper torchgen generates around the functional
    op (tag ``generated``, a CompositeExplicitAutograd kernel and none for CPU: ``add.Scalar_out``,
    ``remainder.Scalar_Tensor_out``; not ``fmod.Scalar_out``, a hand-written composite that keeps
    TensorIterator's cast rule): asked of the running torch, not listed."""
    packet, _, variant = op.split("::", 1)[1].partition(".")
    overload = getattr(getattr(torch.ops.aten, packet), variant or "default")
    return (torch.Tag.generated in overload.tags
            and not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU")
            and torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeExplicitAutograd"))


def _generated_out_kernel(op: str, binder: Binder, compute: Compute, meta: Meta, rule: str = "cast",
                          restride: bool = False, promotes: Promotes | None = None):
    """An out= overload as torchgen's generated wrapper computes it: the functional result first (so its
    errors come first: an unsupported dtype is NotImplementedError before any out= check), then out resized
    and required to have exactly the result's dtype (``copy_arg``: "Expected out tensor to have dtype ..."),
    then the result copied in."""
    out_name = binder.out_names[0]

    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        bound = binder.bind(args, kwargs)
        out = bound.pop(out_name)
        shape, dtype, operands = meta(bound)
        result = torch.empty(shape, dtype=dtype, device=out.device)
        _run(op, compute, result, bound)
        if tuple(out.shape) != tuple(shape):
            resize_output(out, shape)
        check_exact_dtype(out, dtype)
        out.copy_(result)
        return out

    return _submits(kernel)


# The package whose families' functional results take TensorIterator's strides (``_functional_kernel``).
_ELEMENTWISE_PACKAGE = "device_impl.kernels.elementwise."


def _functional_kernel(op: str, binder: Binder, compute: Compute, meta: Meta, recurring: Any = None,
                       restride: bool = False, promotes: Promotes | None = None):
    """The kernel of a functional overload with no out= overload (relu, hardtanh, where.self, isnan, ...).
    ``restride``: an elementwise op, whose CPU result is TensorIterator's output, laid out as its operands
    (``relu`` of a transposed or channels-last tensor is transposed or channels-last: ``_ti_restride``); the
    result of any other (``mm.dtype``, ``dot``) is contiguous."""
    learn = recurring.learn if recurring is not None else None

    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        bound = binder.bind(args, kwargs)
        shape, dtype, operands = meta(bound)
        like = next(o for o in operands if isinstance(o, torch.Tensor) and o.device.type == "neuron")
        out = torch.empty(shape, dtype=dtype, device=like.device)
        if restride and len(shape) > 1:
            _ti_restride(out, operands, promotes(bound) if promotes is not None else None)
        submit = HOOKS.submit  # _run, inlined: every functional call
        if submit is None:
            compute(out, bound)
            if learn is not None:
                learn(args, kwargs, out)
        else:
            submit(op, compute, out, bound)
        return out

    if recurring is not None:  # recurring calls served from plans (kernels/elementwise/recurring.py), asked by
        kernel.serve = recurring.serve  # the table's wrapper (dispatch/table.py) before its checks
    return _submits(kernel)


# In-place ops that write one value to every element: ATen builds their TensorIterator with
# check_mem_overlap(false) (fill_out in Fill.cpp; zero_ is fill_(0)), so self may overlap itself (an expanded view).
WRITES_ONE_VALUE = frozenset({"fill_", "zero_"})


def _inplace_kernel(op: str, binder: Binder, compute: Compute, meta: Meta):
    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        bound = binder.bind(args, kwargs)
        self = bound["self"]
        shape, dtype, operands = meta(bound)
        if tuple(shape) != tuple(self.shape):
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(shape)}")
        check_out(self, shape, dtype, [o for o in operands if o is not self],
                  internal_overlap=op.split("::", 1)[1].split(".")[0] not in WRITES_ONE_VALUE)
        _run(op, compute, self, bound)
        return self

    return _submits(kernel)
