"""Mutation score: how many realistic kernel bugs the default op suite catches.

``python -m harness mutate [--ops OP ...] [--classes C ...] [--modes M ...] [--json FILE]``
plants, one at a time, a wrong kernel over each kernel of the device's lowering table and
reruns the part of the default op suite that reaches it; a mutant is *caught* when a case
that passes with the real kernel fails with the mutant. Results (caught / survived /
excluded per op and class, the case that caught it, why a survivor survived) go to the
results store's ``mutants`` table, which the conformance page reads.

The harness never imports the device. The table is asked through ``torch.<device>``
(``harness.coverage.table_ops``), each op keeps only if the dispatcher has a PrivateUse1
kernel for it, and a mutant is planted with PyTorch's own override mechanism: a
``torch.library.Library("aten", "IMPL")`` registration on the device's dispatch key, which
wraps the device's kernel (``torch.library.get_kernel``) and is removed again with
``_destroy()`` (the dispatcher then serves the device's kernel, as before). A mutant is the
device's kernel plus one realistic break of its inputs or outputs (``CLASSES``).

Which cases run: every part of the default op suite, as the latest eager run in the store
ran it, that passed and reached the op (called it above the backend or ran its kernel: the
store's ``overloads``/``called`` columns): the op specs' cases (designed and drawn, rebuilt
from their ``case_json``), the OpInfo sweep's samples (source ``opinfo``: the sample is
generated again from op_db under the sweep's seed), the device-contract checks (source
``contract``: out= values/device/dtype/resize, variants, in-place rules, error inputs; the
check, OpInfo, dtype and sample the run stored) and the nn.Module checks (source ``module``:
ModuleInfo's forward/backward in train and eval, state_dict). They are ordered so the cases most likely to
trigger the class run first (a cell's domain, layout or error for an op spec's case, the
check for a contract case: ``out_resize`` for out=, ``error_inputs`` for an error's class);
the first failing case catches the mutant. A mutant that cannot be caught in principle is
excluded by a rule on the op's signature, tags and dtypes (``Rule``), never by a list.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch

from harness import coverage, twins
from harness.cases import Case
from harness.compare import failure_kind
from harness.specs import SPECS
from harness.store import DEFAULT_PATH, Store

P = 128  # the tile edge of the device's partitions
INDEX_ARGS = ("index", "indices", "target")  # argument names PyTorch gives index tensors
GRAD_ARGS = ("grad_output", "grad_out", "grad")

_LOCAL = threading.local()


def overload(op: str) -> torch._ops.OpOverload:
    name = op.split("::", 1)[1]
    base, _, variant = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), variant or "default")


# --- what a mutant sees of the op --------------------------------------------------------

@dataclass
class OpFacts:
    """What the rules read: the op's schema and tags, the op specs whose cases reach it, and the
    CPU dtypes of the OpInfos/ModuleInfos whose sweep, contract or module cases reach it
    (``sweep_dtypes``; ``sweep_values``: one of them compares the op's values, not only properties
    as for a random op)."""

    op: str
    schema: Any
    tags: tuple[str, ...]
    specs: tuple[str, ...]
    sweep_dtypes: frozenset[str] = frozenset()
    sweep_values: bool = False

    @property
    def reached(self) -> bool:
        return bool(self.specs or self.sweep_dtypes)

    @property
    def dtypes(self) -> set[str]:
        return {d for s in self.specs for d in SPECS[s].dtypes} | set(self.sweep_dtypes)

    @property
    def values_compared(self) -> bool:
        return self.sweep_values or any(SPECS[s].check == "values" for s in self.specs)

    def args(self, pred: Callable[[Any], bool]) -> list[Any]:
        return [a for a in self.schema.arguments if pred(a)]

    @property
    def tensor_inputs(self) -> list[Any]:
        return self.args(lambda a: _is_tensor_type(a.type) and not _mutable(a))

    @property
    def mutable_inputs(self) -> list[Any]:
        return self.args(lambda a: _mutable(a) and not a.is_out)

    @property
    def outs(self) -> list[Any]:
        return self.args(lambda a: a.is_out)

    @property
    def allocation(self) -> bool:
        base = self.op.split("::", 1)[1].split(".")[0]
        return base.startswith(("empty", "new_empty", "resize", "_resize"))


def _is_tensor_type(t: Any) -> bool:
    text = str(t)
    return text.startswith("Tensor") or text.startswith("Optional[Tensor]") or text in (
        "List[Tensor]", "List[Optional[Tensor]]")


def _mutable(a: Any) -> bool:
    return a.alias_info is not None and a.alias_info.is_write


# --- the rules: when a class cannot be caught in principle --------------------------------

Rule = Callable[[OpFacts], str | None]  # None: the class applies; else why it cannot be caught


def _no_oracle(op: str) -> str | None:
    """Every class, for an overload no case reaches: one CPU eager cannot run (``mm.dtype``, ``_copy_from``) has no
    oracle to call it against, so a differential suite cannot judge its kernel. (One a case reaches through a
    composite op, as ``lstm_cell`` reaches ``_thnn_fused_lstm_cell`` on the device, is judged by that op's result.)"""
    if twins.cpu_has_kernel(op):
        return None
    return "CPU eager, the oracle, has no kernel for this overload (the dispatcher's CPU entry is empty)"


def _values(f: OpFacts) -> str | None:
    if not f.reached:
        return None  # no case reaches it: a coverage gap, reported as a survivor, never excluded
    if "nondeterministic_seeded" in f.tags or not f.values_compared:
        return "a random op: only its shape, dtype and determinism are compared, never its values"
    if f.allocation:
        return "an allocation (empty/resize): PyTorch leaves its values unspecified"
    return None


def _reads(f: OpFacts) -> str | None:
    """A value break needs a value the op reads: a tensor it does not only overwrite, or a Scalar."""
    if not f.reached or f.tensor_inputs or f.args(lambda a: str(a.type) == "Scalar"):
        return None
    return "the op reads no value: it only overwrites the tensor it is given (zero_, empty-like)"


def _floats(f: OpFacts) -> str | None:
    reason = _values(f) or _reads(f)
    if reason or not f.reached:
        return reason
    return None if f.dtypes & {"float32", "bfloat16", "float16"} else \
        f"no NaN-able dtype: the op runs on {', '.join(sorted(f.dtypes))} only"


def _zero_sign(f: OpFacts) -> str | None:
    reason = _floats(f)
    if reason:
        return reason
    if not f.reached:
        return None
    compared = [s for s in f.specs for d in SPECS[s].dtypes if d in ("float32", "bfloat16", "float16")
                and (d not in SPECS[s].ignore_zero_sign or SPECS[s].zero_ties)]  # zero_ties: all but the ties
    if not compared and not twins.cpu_has_kernel(f.op):
        # CPU serves the overload only through a composite of other ops (``gru_cell``'s for
        # ``_thnn_fused_gru_cell_backward``): its zero signs are that formula's, which the op specs reaching the
        # overload free with a written reason, and the OpInfo/module sweeps compare the composite's results,
        # where this kernel's zeros are summed into others (a matmul) before any comparison sees them.
        return ("CPU eager has no kernel for this overload (it computes a composite of other ops), and every op "
                "spec reaching it leaves zero signs free: the composite's formula gives other zero signs (the "
                "spec's tolerance_reason says where)")
    compared += sorted(f.sweep_dtypes & {"float32", "bfloat16", "float16"})  # OpInfo/contract compare -0.0
    return None if compared else "every op spec reaching it treats -0.0 as 0.0 (its tolerance_reason says why)"


def _numbers(f: OpFacts) -> str | None:
    reason = _values(f) or _reads(f)
    if reason or not f.reached:
        return reason
    return None if f.dtypes - {"bool"} else "bool only: no saturation or integer edge"


def _strided(f: OpFacts) -> str | None:
    """A strided read needs a tensor input; an op whose result is one Scalar (``number``) of its one tensor
    (``_local_scalar_dense``: the element at the storage offset, whatever the strides) reads a single element, where a
    read that ignores the strides starts too, so reading the rest wrongly changes nothing."""
    reason = _values(f) or (None if f.tensor_inputs else "no tensor input to read with the wrong strides")
    if reason is None and len(f.tensor_inputs) == 1 and [str(r.type) for r in f.schema.returns] == ["number"]:
        return "its result is one Scalar: the element at its input's storage offset, where a stride-ignoring read starts"
    return reason


def _indexed(f: OpFacts) -> str | None:
    """An index the op reads. An out= ``indices`` (max pooling's argmax) is written, never read, so it cannot be
    out of range. A backward's ``indices`` that its forward's out= form writes (``adaptive_max_pool2d.out`` writes
    the ``indices`` that ``adaptive_max_pool2d_backward`` reads) is the forward's own argmax: CPU trusts it (no
    bounds check, an out-of-range one is undefined behaviour there, no error), so a kernel that clamps instead of
    raising cannot be told from CPU."""
    named = f.args(lambda a: a.name in INDEX_ARGS and _is_tensor_type(a.type))
    if not named:
        return "no index argument in its signature"
    read = [a for a in named if not a.is_out]
    if not read:
        return "its only index argument is an out= tensor it writes (the argmax), never reads"
    if _forward_writes(f.op, {a.name for a in read}):
        return "its indices are its forward's own output (the argmax), which CPU does not bounds-check"
    return None


def _forward_writes(op: str, names: set[str]) -> bool:
    """Whether the forward of backward overload ``op`` (``<packet>_backward`` -> ``<packet>``) has an out= form
    writing every argument in ``names``."""
    packet = op.split("::", 1)[1].split(".")[0]
    if not packet.endswith("_backward"):
        return False
    forward = getattr(torch.ops.aten, packet[:-len("_backward")], None)
    if forward is None:
        return False
    for variant in forward.overloads():
        written = {a.name for a in getattr(forward, variant)._schema.arguments if a.is_out}
        if names <= written:
            return True
    return False


def _promotes(f: OpFacts) -> str | None:
    return None if f.tensor_inputs or f.mutable_inputs else "no tensor input whose dtype could be promoted"


def _inplace(f: OpFacts) -> str | None:
    return None if f.mutable_inputs else "no argument it writes in place"


def _out(f: OpFacts) -> str | None:
    return None if f.outs else "no out= argument"


def _raises(f: OpFacts) -> str | None:
    return None


GENERIC_SHAPES = ((), (0,), (3,), (3, 2))  # 0-dim, empty, a vector, and (transposed) a strided matrix
# argument types with no value out of their domain (flags)
_UNCONSTRAINED = ("bool", "Optional[bool]")
# argument types whose every value is tried (a dtype: a kernel may lack one, so CPU is asked with each)
_DTYPE_ARGS = ("Optional[ScalarType]",)


def no_error_input(f: OpFacts) -> str | None:
    """Why the error_class mutant of ``f.op`` has nothing to act on, or None. It applies to an op whose only
    argument with a domain is one tensor (the others are flags with defaults; no out=): the
    cross-device probe (harness.twins) needs two tensors, and no size, dim or value argument can be out of its
    domain. What is left is the tensor itself, so CPU eager, the oracle, is asked: the op on a 0-dim, an empty,
    a vector and a transposed tensor of every dtype the harness draws. If CPU rejects none (``any``, ``isnan``,
    ``zero_``), no input makes the op raise, and a kernel that would raise the wrong class is never asked to
    raise. An optional dtype argument (``prod``'s ``dtype``) is asked too: the op with it unset and set to each of
    those dtypes. One CPU rejects (``_local_scalar_dense`` of an empty tensor, ``view_as_complex`` of a vector,
    ``hardtanh`` of a bool one) stays a coverage gap: a case should give it that input."""
    args = [a for a in f.schema.arguments if not a.is_out]
    if any(a.is_out for a in f.schema.arguments) or not args or str(args[0].type) != "Tensor" or \
            any(not a.has_default_value() or (str(a.type) not in _UNCONSTRAINED and
                                              str(a.real_type) not in _DTYPE_ARGS) for a in args[1:]):
        return None
    from harness.strategies import ALL_DTYPES

    op = overload(f.op)
    dtyped = [a.name for a in args[1:] if str(a.real_type) in _DTYPE_ARGS]  # type: ScalarType's Python int
    settings = [{}] + [{name: getattr(torch, d) for name in dtyped} for d in ALL_DTYPES] if dtyped else [{}]
    for name in ALL_DTYPES:
        dtype = getattr(torch, name)
        for shape in GENERIC_SHAPES:
            tensor = torch.ones(shape, dtype=dtype)
            for kwargs in settings:
                try:
                    op(tensor.t() if tensor.dim() == 2 else tensor, **kwargs)
                except Exception:  # noqa: BLE001 - CPU rejects this input: the op has an error input to design
                    return None
    also = ", its dtype argument unset or any of them" if dtyped else ""
    return (f"no input to reject: its only argument is one tensor{' (and a dtype)' if dtyped else ''}, and CPU "
            f"raised for none of {len(GENERIC_SHAPES)} generic shapes (0-dim, empty, vector, transposed) in any of "
            f"{len(ALL_DTYPES)} dtypes{also}")


def _backward(f: OpFacts) -> str | None:
    reason = _values(f)
    if reason:
        return reason
    base = f.op.split("::", 1)[1].split(".")[0]
    grads = f.args(lambda a: a.name in GRAD_ARGS)
    return None if "backward" in base or grads else "not a gradient kernel (no grad_output; autograd's " \
        "formulas reach the backward kernels, mutated there)"


def _bf16(f: OpFacts) -> str | None:
    reason = _values(f)
    if reason or not f.reached:
        return reason
    return None if "bfloat16" in f.dtypes else "no bfloat16 in the op's dtypes"


# --- host-side breaks (on copies: the device's buffers are written back with copy_) -------------

def _float(h: torch.Tensor) -> bool:
    return h.dtype.is_floating_point


def nan_inf_host(h: torch.Tensor) -> torch.Tensor | None:
    if not _float(h) or h.numel() == 0 or bool(torch.isfinite(h).all()):
        return None
    info = torch.finfo(h.dtype)
    return torch.nan_to_num(h, nan=0.0, posinf=info.max, neginf=info.min)


def zero_sign_host(h: torch.Tensor) -> torch.Tensor | None:
    if h.is_complex() and h.numel():  # a complex input's parts (irfft's spectrum): -0.0 real or imaginary part
        parts = zero_sign_host(torch.view_as_real(h.resolve_conj().contiguous()))
        return None if parts is None else torch.view_as_complex(parts.contiguous())
    if not _float(h) or h.numel() == 0:
        return None
    negative_zero = (h == 0) & torch.signbit(h)
    return h.masked_fill(negative_zero, 0.0) if bool(negative_zero.any()) else None


TAIL = 10.0  # where the saturation regions start (sigmoid and tanh tails, exp's range reduction)


def saturation_host(h: torch.Tensor) -> torch.Tensor | None:
    if h.is_complex() and h.numel():  # a complex input's parts (irfft's spectrum, view_as_real's self)
        parts = saturation_host(torch.view_as_real(h.resolve_conj().contiguous()))
        return None if parts is None else torch.view_as_complex(parts.contiguous())
    if h.numel() == 0 or h.dtype == torch.bool:
        return None
    if _float(h):
        tail = torch.isfinite(h) & (h.abs() >= TAIL)
        return torch.where(tail, torch.zeros_like(h), h) if bool(tail.any()) else None
    info = torch.iinfo(h.dtype)
    edge = (h == info.min) | (h == info.max)
    if not bool(edge.any()):
        return None
    return torch.where(h == info.min, info.min + 1, torch.where(h == info.max, info.max - 1, h)).to(h.dtype)


def _stale(value: torch.Tensor) -> torch.Tensor:
    """What an element the kernel never wrote holds: the allocator's poison, never the right value."""
    if value.dtype == torch.bool:
        return ~value
    if _float(value) or value.is_complex():
        return torch.zeros_like(value) if bool(torch.isnan(value).any()) else torch.full_like(value, float("nan"))
    return torch.bitwise_xor(value, 0x55)


def tile_edge_host(h: torch.Tensor) -> torch.Tensor | None:
    if h.numel() <= P or h.numel() % P == 0:
        return None
    flat = h.contiguous().clone().view(-1)
    flat[-1] = _stale(flat[-1])
    return flat.view(h.shape)


def gradient_host(h: torch.Tensor) -> torch.Tensor | None:
    if not _float(h) or h.numel() == 0 or not bool((torch.isfinite(h) & (h != 0)).any()):
        return None
    return h * 2


def bf16_host(h: torch.Tensor) -> torch.Tensor | None:
    if h.dtype != torch.bfloat16 or h.numel() == 0:
        return None
    bits = h.contiguous().view(torch.int16)
    cut = bits & ~0x7
    return None if torch.equal(cut, bits) else cut.view(torch.bfloat16).view(h.shape)


# --- planting -------------------------------------------------------------------------

class Bound:
    """A call's arguments by schema name (positional or keyword), and the way back to a call."""

    def __init__(self, schema: Any, args: tuple, kwargs: dict) -> None:
        self.schema, self.args, self.kwargs = schema, list(args), dict(kwargs)
        self.names = [a.name for a in schema.arguments]

    def items(self) -> Iterable[tuple[Any, Any]]:
        for i, a in enumerate(self.schema.arguments):
            if i < len(self.args):
                yield a, self.args[i]
            elif a.name in self.kwargs:
                yield a, self.kwargs[a.name]

    def set(self, name: str, value: Any) -> None:
        i = self.names.index(name)
        if i < len(self.args):
            self.args[i] = value
        else:
            self.kwargs[name] = value


def _device_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if not value.is_cpu else []
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor) and not v.is_cpu]
    return []


def _map_tensor(value: Any, fn: Callable[[torch.Tensor], torch.Tensor | None]) -> tuple[Any, bool]:
    """``value`` with each device tensor replaced by ``fn`` of its host copy (uploaded) where ``fn``
    changed it; and whether anything changed."""
    if isinstance(value, torch.Tensor):
        if value.is_cpu:
            return value, False
        new = fn(value.detach().cpu())
        return (value, False) if new is None else (new.to(value.device), True)
    if isinstance(value, (list, tuple)):
        out, changed = [], False
        for v in value:
            nv, c = _map_tensor(v, fn)
            out.append(nv)
            changed |= c
        return type(value)(out) if isinstance(value, tuple) else out, changed
    return value, False


@dataclass
class Mutant:
    op: str
    cls: str
    facts: OpFacts
    calls: int = 0
    triggered: int = 0  # calls where the break changed something
    equivalent: int = 0  # of those, calls where the kernel's result was bit-identical all the same
    rejected: int = 0  # calls where the break changed an input and the kernel raised (CPU too, where the case passed)

    def run(self, original, keyset, args: tuple, kwargs: dict) -> Any:
        raise NotImplementedError


def _host(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    if isinstance(value, (tuple, list)):
        return [_host(v) for v in value]
    return value


def _bit_equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.is_complex:  # CPU has no equal for complex32: its real and imaginary parts, bit for bit
            return _bit_equal(torch.view_as_real(a.contiguous()), torch.view_as_real(b.contiguous()))
        if a.dtype.is_floating_point and a.element_size() in (2, 4, 8):
            view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
            return torch.equal(a.contiguous().view(view), b.contiguous().view(view))
        return torch.equal(a, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_bit_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a == b or (a != a and b != b))


class InputOutput(Mutant):
    """Breaks read inputs (``pre``) and/or written outputs (``post``) with host functions."""

    pre: Callable | None = None
    post: Callable | None = None

    def run(self, original, keyset, args, kwargs):
        bound = Bound(self.facts.schema, args, kwargs)
        changed = False
        # calling the kernel twice changes nothing but its outs, and those the clean call gets as clones (an out=
        # may alias an input: ``cumprod_`` is ``cumprod.out(self, out=self)``; the first call may resize it)
        pure = not self.facts.mutable_inputs
        if pure:
            cargs, ckwargs = _cloned_outs(self.facts.schema, args, kwargs)
            clean = _host(original.call_boxed(keyset, *cargs, **ckwargs))
        else:
            clean = _shadow(original, keyset, bound) if self.pre is not None else None
        if self.pre is not None:
            for a, value in list(bound.items()):
                if _is_tensor_type(a.type) and not _mutable(a):
                    new, c = _map_tensor(value, type(self).pre)
                    if c:
                        bound.set(a.name, new)
                        changed = True
                elif _mutable(a) and not a.is_out:
                    changed |= _break_in_place(value, type(self).pre)
        try:
            result = original.call_boxed(keyset, *bound.args, **bound.kwargs)
        except Exception:
            self.rejected += changed
            raise
        if self.post is not None:
            for t in _written(bound, result):
                if t.numel():
                    new = type(self).post(t.detach().cpu())
                    if new is not None:
                        with torch.no_grad():
                            t.copy_(new)
                        changed = True
        self.triggered += changed
        seen = _host(result) if pure else _host(_written(bound, result))
        if changed and clean is not None and _bit_equal(seen, clean):
            self.equivalent += 1  # the break met its trigger and the kernel's result did not change
        return result


def _shadow(original, keyset, bound: Bound, errors: bool = False) -> Any:
    """What an in-place kernel writes when it reads its written tensors unbroken: the kernel run on clones of them
    (host copies of what it wrote), to tell an equivalent break (fill_ overwrites self without reading it); None
    where the kernel rejects the clones (``errors``: the kernel's exception instead)."""
    shadow = Bound(bound.schema, tuple(bound.args), bound.kwargs)
    for a, value in list(bound.items()):
        if _mutable(a) and _device_tensors(value):
            copy = [v.clone() if isinstance(v, torch.Tensor) and not v.is_cpu else v for v in value] \
                if isinstance(value, (list, tuple)) else value.clone() if not value.is_cpu else value
            shadow.set(a.name, type(value)(copy) if isinstance(value, tuple) else copy)
    try:
        with torch.no_grad():
            return _host(_written(shadow, original.call_boxed(keyset, *shadow.args, **shadow.kwargs)))
    except Exception as error:  # noqa: BLE001 - the real call meets the same error
        return error if errors else None


def _cloned_outs(schema: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call with each out= tensor replaced by a clone: a second call of an out= kernel (a clean result to compare
    with, a probe) must not write the real out, which may alias an input (``cumprod_`` is cumprod.out with
    out=self) or be resized by the first call. An input that is the out itself gets the same clone, so the call
    stays in place (an in-place call refuses a broadcast that would resize self; an out= call resizes)."""
    bound = Bound(schema, args, kwargs)
    # by the tensor object, not its storage address: every empty out has data_ptr 0, and convolution_backward.out's
    # three empty outs would become one clone passed three times; an input that is the out itself gets its clone
    clones: dict[int, torch.Tensor] = {}

    def clone(v: Any) -> Any:
        if not isinstance(v, torch.Tensor) or v.is_cpu:
            return v
        return clones.setdefault(id(v), v.clone())

    for a, value in list(bound.items()):
        if a.is_out and _device_tensors(value):
            copy = [clone(v) for v in value] if isinstance(value, (list, tuple)) else clone(value)
            bound.set(a.name, type(value)(copy) if isinstance(value, tuple) else copy)
    for a, value in list(bound.items()):
        if not a.is_out and isinstance(value, torch.Tensor) and id(value) in clones:
            bound.set(a.name, clones[id(value)])
    return tuple(bound.args), bound.kwargs


def _break_in_place(value: Any, fn: Callable[[torch.Tensor], torch.Tensor | None]) -> bool:
    """An in-place kernel reads the tensors it writes (``self`` of ``add_``, the gradients
    ``_amp_foreach_non_finite_check_and_unscale_`` unscales): what a wrong read of them gives, written into them
    before the kernel runs (through their own strides); whether anything changed. One that cannot be written
    (expanded: CPU's error, which the kernel raises) is left as it is."""
    changed = False
    for t in _device_tensors(value):
        if not t.numel():
            continue
        new = fn(t.detach().cpu())
        if new is None:
            continue
        try:
            with torch.no_grad():
                t.copy_(new.to(t.device))
        except RuntimeError:
            continue
        changed = True
    return changed


def _written(bound: Bound, result: Any) -> list[torch.Tensor]:
    """What a kernel writes: the device tensors it returns, and the tensors it writes in place without returning
    them (``_amp_foreach_non_finite_check_and_unscale_`` returns nothing; batch norm's running statistics)."""
    out = _device_tensors(result if isinstance(result, (tuple, list)) else [result])
    seen = {id(t) for t in out}
    for a, value in bound.items():
        if _mutable(a):
            out += [t for t in _device_tensors(value) if id(t) not in seen]
            seen.update(id(t) for t in _device_tensors(value))
    return out


def _io(name: str, pre=None, post=None, doc: str = "") -> type:
    return type(name, (InputOutput,), {"pre": staticmethod(pre) if pre else None,
                                       "post": staticmethod(post) if post else None, "__doc__": doc})


class _FloatReads:
    """Counts the calls that read a floating-point operand (``float_reads``) and those of them that returned
    (``float_returns``): the rule of ``run_mutant`` for an op that rejects every float (bitwise ops) reads it."""

    float_reads: int = 0
    float_returns: int = 0

    def run(self, original, keyset, args, kwargs):
        # an out= is written, not read: an integer result cast into a float out (bitwise_and with a float32
        # out) reads no float
        floats = any(t.is_floating_point() for a, v in Bound(self.facts.schema, args, kwargs).items()
                     if not a.is_out for t in _device_tensors(v))
        self.float_reads += floats
        result = super().run(original, keyset, args, kwargs)
        self.float_returns += floats
        return result


class NanInf(_FloatReads, _io("_NanInf", nan_inf_host, nan_inf_host)):
    """NaN read and written as 0 and infinities as the dtype's max (an fmax-style instruction)."""


class ZeroSign(_FloatReads, _io("_ZeroSign", zero_sign_host, zero_sign_host)):
    """-0.0 read and written as +0.0 (0 - x, x + 0.0)."""
Saturation = _io("Saturation", saturation_host, None,
                 "inputs in the saturation region (|x| >= 10) take the small-|x| branch's value at 0; "
                 "integers at the dtype's min/max are read one step inside")
TileEdge = _io("TileEdge", tile_edge_host, tile_edge_host,
               "the remainder tile of a length not a multiple of 128 is one element short, read and written")
Gradient = _io("Gradient", None, gradient_host, "a gradient kernel off by a factor of 2")
class Bf16(_io("_Bf16", None, bf16_host)):
    """bfloat16 results rounded through a 4-bit mantissa (wrong only in bfloat16). Counts the calls that
    read a bfloat16 operand (``bf16_reads``): the rule of ``run_mutant`` for an op whose result is never
    bfloat16 reads it."""

    bf16_reads: int = 0
    bf16_returns: int = 0  # calls that wrote a non-empty bfloat16 tensor (whether or not the break changed it)
    bf16_other_values: int = 0  # of those, calls that wrote a value other than -1, 0, 1 or NaN

    def run(self, original, keyset, args, kwargs):
        bound = Bound(self.facts.schema, args, kwargs)
        if any(t.dtype == torch.bfloat16 for a, v in bound.items() if not a.is_out for t in _device_tensors(v)):
            self.bf16_reads += 1
        result = super().run(original, keyset, args, kwargs)
        written = [t for t in _written(bound, result) if t.dtype == torch.bfloat16 and t.numel()]
        if written:
            self.bf16_returns += 1
            self.bf16_other_values += any(bool((~(t.isnan() | (t.abs() == 1) | (t == 0))).any()) for t in written)
        return result


def _linear_read(t: torch.Tensor) -> torch.Tensor | None:
    """A strided device tensor as a DMA that ignores its strides reads it: its storage walked
    linearly from the offset (cyclically, where the storage is shorter than the tensor)."""
    if t.is_contiguous() or t.numel() <= 1:
        return None
    avail = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
    if avail <= 0:
        return None
    linear = t.as_strided((avail,), (1,), t.storage_offset()).detach().cpu()
    reps = math.ceil(t.numel() / avail)
    values = linear.repeat(reps)[:t.numel()].view(t.shape)
    return None if torch.equal(values, t.detach().cpu().contiguous()) else values


def _other_values(t: torch.Tensor) -> list[torch.Tensor]:
    """``t`` with other values in every storage element it can read, in the same size, strides and offset: all
    zero (False), and each value v as 3v + 1 (its negation, for bool). A result the same for both and for ``t``
    reads none of its values (any() of normal values is True for ``t`` and 3t + 1, not for zeros)."""
    total = t.untyped_storage().nbytes() // t.element_size()
    host = t.as_strided((total,), (1,), 0).detach().cpu()
    others = [torch.zeros_like(host), ~host if host.dtype == torch.bool else host * 3 + 1]
    return [o.to(t.device).as_strided(t.size(), t.stride(), t.storage_offset()) for o in others]


_UNKNOWN = object()


class Strides(Mutant):
    """A non-contiguous (stride-0, transposed, sliced, offset, overlapping) input read linearly. Where the op
    writes nothing in place and returns no view, a call counts as ``equivalent`` when the kernel's result does
    not depend on the values of the inputs read wrongly at all: given other values in them (same layout; see
    _other_values), it is bit-identical (``fill.Scalar_out`` and ``zero.out`` read only their input's shape). A result that merely
    happened not to change under the wrong reading order (any() of a sliced tensor whose stray elements are
    zero) is not equivalent: another input would show the bug."""

    cpu_blind: tuple[str, ...] = ()  # inputs CPU's own kernel reads wrongly when strided (_cpu_stride_blind)
    probed: bool = False
    storage_reads: int = 0  # calls of a view that reads its strided input's storage, not its strides

    def run(self, original, keyset, args, kwargs):
        bound = Bound(self.facts.schema, args, kwargs)
        in_place = False
        strided_self = any(not t.is_contiguous() for a, v in bound.items() if _mutable(a) and not a.is_out
                           for t in _device_tensors(v))
        shadow = _shadow(original, keyset, bound) if strided_self else None
        changed: list[str] = []
        for a, value in list(bound.items()):
            if _mutable(a) and not a.is_out:
                in_place |= _break_in_place(value, _linear_read)  # an in-place kernel reading its self linearly
                continue
            if not _is_tensor_type(a.type) or _mutable(a):
                continue
            if isinstance(value, torch.Tensor) and not value.is_cpu:
                wrong = _linear_read(value)
                if wrong is not None:
                    bound.set(a.name, wrong.to(value.device))
                    changed.append(a.name)
            elif isinstance(value, (list, tuple)):  # cat's tensors: each strided one read linearly
                wrongs = [_linear_read(v) if isinstance(v, torch.Tensor) and not v.is_cpu else None for v in value]
                if any(w is not None for w in wrongs):
                    bound.set(a.name, type(value)(v if w is None else w.to(v.device) for v, w in zip(value, wrongs)))
                    changed.append(a.name)
        self.triggered += bool(changed) or in_place
        if not changed and not in_place:
            if not self.probed and not self.facts.mutable_inputs:
                self.probed = True
                self.cpu_blind = _cpu_stride_blind(self.facts, args, kwargs)
            return original.call_boxed(keyset, *args, **kwargs)
        views = any(r.alias_info is not None and not r.alias_info.is_write for r in self.facts.schema.returns)
        real = self._storage_read(original, keyset, args, kwargs, changed) if views and not in_place else None
        if real is not None:
            self.storage_reads += 1  # as_strided: the input's strides are not read, so ignoring them is no break
            return real
        refused: Any = _UNKNOWN  # what the real call did: _UNKNOWN (not made), None (returned), or its error
        if changed and not self.facts.mutable_inputs and not views:  # a view's aliasing is judged too
            refused = self._count_equivalent(original, keyset, args, kwargs, changed)
        try:
            result = original.call_boxed(keyset, *bound.args, **bound.kwargs)
        except Exception as error:
            self.rejected += 1
            if refused is _UNKNOWN or (refused is not None and type(error) is type(refused)
                                       and str(error) == str(refused)):
                self.triggered -= 1  # refused (as the kernel refuses it): the break never reached a value
            raise
        if in_place and shadow is not None and _bit_equal(_host(_written(bound, result)), shadow):
            self.equivalent += 1  # fill_ overwrites its self without reading it
        return result

    def _storage_read(self, original, keyset, args, kwargs, changed: list[str]) -> Any:
        """The real call's result when this view reads its strided inputs' storage only, not their strides (else
        None): the same call with
        each of them replaced by a dense view of its storage (from the same offset) returns the same view, values
        and geometry. ``as_strided`` addresses the storage with its own size, strides and offset, so a kernel that
        ignored its input's strides would be the real one; ``transpose`` of the dense view is another view."""
        try:
            real = original.call_boxed(keyset, *args, **kwargs)
            probe = Bound(self.facts.schema, args, kwargs)
            given = dict((a.name, v) for a, v in probe.items())
            for name in changed:
                t = given[name]
                avail = t.untyped_storage().nbytes() // t.element_size() - t.storage_offset()
                probe.set(name, t.as_strided((avail,), (1,), t.storage_offset()))
            dense = original.call_boxed(keyset, *probe.args, **probe.kwargs)
        except Exception:  # noqa: BLE001 - a refused call proves nothing
            return None
        pairs = list(zip(_device_tensors(real if isinstance(real, (tuple, list)) else [real]),
                         _device_tensors(dense if isinstance(dense, (tuple, list)) else [dense])))
        same = bool(pairs) and all(
            a.shape == b.shape and a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
            and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for a, b in pairs)
        return real if same else None

    def _count_equivalent(self, original, keyset, args, kwargs, changed: list[str]) -> Exception | None:
        """Count the call ``equivalent`` when the kernel's result reads none of the values of the inputs read
        wrongly (see the class docstring); returns the error the kernel raises on the real call, if any."""
        try:
            cargs, ckwargs = _cloned_outs(self.facts.schema, args, kwargs)
            clean = _host(original.call_boxed(keyset, *cargs, **ckwargs))
        except Exception as error:  # noqa: BLE001 - the kernel refuses the real call
            return error
        given = {a.name: v for a, v in Bound(self.facts.schema, args, kwargs).items()}
        read = {n for n, v in given.items() if isinstance(v, torch.Tensor) and v.numel() > 1
                and n not in self._written()}  # one element has no reading order to get wrong
        try:
            # only where every tensor it reads was read wrongly: a result that ignores the values of a
            # strided input (avg-pool backward's ``self``) may still read another one (grad_output),
            # which no case gave strided: a coverage gap, not an equivalent mutant
            same = read <= set(changed)
            for k in range(2):
                probe = Bound(self.facts.schema, *_cloned_outs(self.facts.schema, args, kwargs))
                for name in changed:
                    probe.set(name, _other_values(given[name])[k])
                same = same and _bit_equal(_host(original.call_boxed(keyset, *probe.args, **probe.kwargs)), clean)
            self.equivalent += same  # the result reads none of those inputs' values
        except Exception:  # noqa: BLE001 - a refused probe proves nothing: not equivalent
            pass
        return None

    def _written(self) -> set[str]:
        return {a.name for a in self.facts.schema.arguments if _mutable(a)}


def _strided_copy(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view with step 2 along its last dim, over a buffer that is NaN (0 for integers) between
    them: the layout of the op suite's ``sliced`` cases. A kernel reading it as dense reads the filler."""
    fill = float("nan") if t.dtype.is_floating_point or t.dtype.is_complex else 0
    base = torch.full((*t.shape[:-1], 2 * t.shape[-1]), fill, dtype=t.dtype)
    view = base[..., ::2]
    view.copy_(t)
    return view


def _cpu_stride_blind(f: OpFacts, args: tuple, kwargs: dict) -> tuple[str, ...]:
    """The tensor inputs of this (dense) call that CPU eager, the oracle, reads wrongly when they are not
    contiguous: the call made again on the host, with that input replaced by a strided copy of the same values
    (``_strided_copy``), gives CPU a different result than the dense call did. ``native_group_norm_backward``'s CPU
    kernel indexes its ``grad_out``/``input`` as dense (autograd's formula hands it contiguous tensors, as every
    case's call shows), so for a strided call CPU's answer is no oracle. Empty when CPU has no kernel, the call
    raises, or CPU honours every input's strides."""
    if not twins.cpu_has_kernel(f.op):
        return ()
    host_args, host_kwargs = _host(list(args)), {k: _host(v) for k, v in kwargs.items()}
    op = overload(f.op)
    try:
        dense = _host(op(*host_args, **host_kwargs))
    except Exception:  # noqa: BLE001 - CPU refuses the call itself: nothing to compare
        return ()
    blind = []
    for a, value in list(Bound(f.schema, host_args, host_kwargs).items()):
        if _mutable(a) or not isinstance(value, torch.Tensor) or value.dim() == 0 or value.shape[-1] < 2:
            continue
        probe = Bound(f.schema, host_args, host_kwargs)
        probe.set(a.name, _strided_copy(value))
        try:
            strided = _host(op(*probe.args, **probe.kwargs))
        except Exception:  # noqa: BLE001 - CPU refuses a strided one: a refusal, compared by error parity
            continue
        if not _bit_equal(strided, dense):
            blind.append(a.name)
    return tuple(blind)


class IndexClamp(Mutant):
    """Out-of-range indices clamped into range instead of raising. Counts the calls whose index-named arguments
    held an integer tensor (``index_reads``): the rule of ``run_mutant`` for an op whose ``target`` is a float (a
    regression loss's) reads it; and those of them the kernel returned from (``index_returns``): the rule for an op
    whose designed out-of-range case CPU and the kernel both accept reads it."""

    index_reads: int = 0
    index_returns: int = 0

    def run(self, original, keyset, args, kwargs):
        bound = Bound(self.facts.schema, args, kwargs)
        reads = any(not t.is_floating_point() and t.dtype != torch.bool for a, v in bound.items()
                    if a.name in INDEX_ARGS for t in _device_tensors(v))
        self.index_reads += reads
        try:
            result = original.call_boxed(keyset, *args, **kwargs)
            self.index_returns += reads
            return result
        except Exception as error:  # noqa: BLE001 - the bounds check this mutant lacks
            bound = Bound(self.facts.schema, args, kwargs)
            sizes = [d for a, v in bound.items() if a.name not in INDEX_ARGS for t in _device_tensors(v)
                     for d in t.shape if d > 0]
            bound_size = min(sizes) if sizes else 1
            changed = False
            for a, value in list(bound.items()):
                if a.name not in INDEX_ARGS:
                    continue
                def clamp(h: torch.Tensor) -> torch.Tensor | None:
                    if h.dtype.is_floating_point or h.dtype == torch.bool or h.numel() == 0:
                        return None
                    c = h.clamp(0, bound_size - 1)
                    return None if torch.equal(c, h) else c
                new, c = _map_tensor(value, clamp)
                if c:
                    bound.set(a.name, new)
                    changed = True
            if not changed:
                raise
            try:
                result = original.call_boxed(keyset, *bound.args, **bound.kwargs)
            except Exception:  # noqa: BLE001 - still an error: the original one stands
                raise error from None
            self.triggered += 1
            return result


class Promotion(Mutant):
    """The result takes the first operand's dtype (or another operand's) instead of the promoted one;
    a written-to tensor's dtype is imposed on the other operands before computing."""

    def run(self, original, keyset, args, kwargs):
        bound = Bound(self.facts.schema, args, kwargs)
        written = [t for a, v in bound.items() if _mutable(a) for t in _device_tensors(v)]
        if written:
            target = written[0].dtype
            changed = False
            for a, value in list(bound.items()):
                if _is_tensor_type(a.type) and not _mutable(a) and isinstance(value, torch.Tensor) \
                        and value.dtype != target and not value.is_cpu and a.name not in INDEX_ARGS:
                    bound.set(a.name, value.to(target))
                    changed = True
            if not changed:
                return original.call_boxed(keyset, *args, **kwargs)
            self.triggered += 1
            clean, refused = None, None
            if not self.facts.mutable_inputs:
                try:
                    cargs, ckwargs = _cloned_outs(self.facts.schema, args, kwargs)
                    clean = _host(original.call_boxed(keyset, *cargs, **ckwargs))
                except Exception as error:  # noqa: BLE001 - the real kernel refuses the out dtype; the mutant computes in it
                    refused = error
            else:  # in place (copy_ casts src to self's dtype by its semantics): what the kernel writes unbroken
                clean = _shadow(original, keyset, Bound(self.facts.schema, args, kwargs), errors=True)
                if isinstance(clean, Exception):
                    clean, refused = None, clean
            try:
                result = original.call_boxed(keyset, *bound.args, **bound.kwargs)
            except Exception as error:
                if refused is not None and type(error) is type(refused):
                    # the mutant refuses the call with the kernel's class: error parity (harness.compare.same_error,
                    # PyTorch's own contract tests) compares only the class, so no comparison can tell them apart
                    self.equivalent += 1
                raise
            seen = _host(result) if not self.facts.mutable_inputs else _host(_written(bound, result))
            if clean is not None and _bit_equal(seen, clean):
                self.equivalent += 1  # computing in the written tensor's dtype gave the same result
            return result
        result = original.call_boxed(keyset, *args, **kwargs)
        inputs = [t for a, v in bound.items() if a.name not in INDEX_ARGS for t in _device_tensors(v)]
        if not inputs or not isinstance(result, torch.Tensor) or result.is_cpu:
            return result
        wrong = inputs[0].dtype if result.dtype != inputs[0].dtype else next(
            (t.dtype for t in inputs if t.dtype != result.dtype), None)
        if wrong is None:
            return result
        self.triggered += 1
        return result.to(wrong)


class InPlace(Mutant):
    """An in-place kernel that writes a contiguous temporary and never copies it back when ``self``
    is a view (strided or offset into its base); other written arguments (running statistics)
    never updated."""

    def run(self, original, keyset, args, kwargs):
        bound = Bound(self.facts.schema, args, kwargs)
        swapped: dict[int, torch.Tensor] = {}
        for a, value in list(bound.items()):
            if not _mutable(a) or a.is_out or not isinstance(value, torch.Tensor):
                continue
            first = a is self.facts.schema.arguments[0]
            if first and value.is_contiguous() and value.storage_offset() == 0:
                continue
            temp = value.clone(memory_format=torch.contiguous_format)
            swapped[id(temp)] = value
            bound.set(a.name, temp)
        result = original.call_boxed(keyset, *bound.args, **bound.kwargs)
        if not swapped:
            return result
        self.triggered += 1

        def back(r: Any) -> Any:  # what aliased the written argument still returns it, unchanged
            return swapped.get(id(r), r) if isinstance(r, torch.Tensor) else r
        return type(result)(back(r) for r in result) if isinstance(result, (tuple, list)) else back(result)


class OutIgnored(Mutant):
    """out= not honoured where it needs resizing: the kernel computes into a fresh tensor and
    returns it, leaving the caller's out tensor as it was."""

    def run(self, original, keyset, args, kwargs):
        bound = Bound(self.facts.schema, args, kwargs)
        fresh: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for a, value in list(bound.items()):
            if a.is_out and isinstance(value, torch.Tensor):
                mine = torch.empty(0, dtype=value.dtype, device=value.device)
                fresh[a.name] = (value, mine)
                bound.set(a.name, mine)
        result = original.call_boxed(keyset, *bound.args, **bound.kwargs)
        ignored = False
        for user, mine in fresh.values():
            if tuple(user.shape) == tuple(mine.shape):
                user.copy_(mine)  # the right size already: written as it should be
            else:
                ignored = True
        self.triggered += ignored

        def back(r: Any) -> Any:
            for user, mine in fresh.values():
                if r is mine and tuple(user.shape) == tuple(mine.shape):
                    return user
            return r
        return type(result)(back(r) for r in result) if isinstance(result, (tuple, list)) else back(result)


class ErrorClass(Mutant):
    """An error raised with a different exception class than PyTorch's (TypeError for any other,
    RuntimeError for a TypeError)."""

    def run(self, original, keyset, args, kwargs):
        try:
            return original.call_boxed(keyset, *args, **kwargs)
        except Exception as error:  # noqa: BLE001
            self.triggered += 1
            wrong = RuntimeError if isinstance(error, TypeError) else TypeError
            raise wrong(f"{self.op}: {error}") from None


@dataclass(frozen=True)
class MutantClass:
    name: str
    bug: str
    make: type
    rule: Rule
    trigger: str  # what a case needs to catch it (shown for survivors)
    priority: Callable[[dict], int]  # higher runs first, from the case's cells


def _cellp(key: str, values: tuple) -> Callable[[dict], int]:
    return lambda cell: int(str(cell.get(key)) in values)


def _checks(spec: Callable[[dict], int], *checks: str) -> Callable[[dict], int]:
    """``spec`` for an op spec's case's cell; for an OpInfo/contract case (its cell names its ``check``:
    a contract check, ``opinfo`` or ``opinfo_error``), 1 when the check is one of ``checks``."""
    return lambda cell: int(cell["check"] in checks) if "check" in cell else spec(cell)


CLASSES: dict[str, MutantClass] = {c.name: c for c in (
    MutantClass("nan_inf", "NaN/inf dropped or replaced", NanInf, _floats, "NaN or an infinity in an input or result",
                _checks(_cellp("domain", ("special", "near_overflow")))),
    MutantClass("zero_sign", "sign of zero lost", ZeroSign, _zero_sign, "-0.0 in an input or result",
                _checks(_cellp("domain", ("signed_zero", "special")))),
    MutantClass("saturation", "saturation/branch region wrong", Saturation, _numbers,
                "an input with |x| >= 10, or an integer at its dtype's min/max",
                _checks(_cellp("domain", ("tails", "int_edges", "near_overflow", "special")))),
    MutantClass("tile_edge", "off-by-one at a tile edge", TileEdge, _values,
                "a tensor of more than 128 elements, not a multiple of 128",
                _checks(_cellp("edge", ("129", "513", "2049", "127", "511", "2047")))),
    MutantClass("layout", "stride-0 / non-contiguous input mishandled", Strides, _strided,
                "a non-contiguous input (expanded, transposed, sliced, offset, overlapping)",
                _checks(lambda cell: int(cell.get("layout") not in ("contiguous", "-")))),
    MutantClass("index_bounds", "out-of-range index clamped instead of raising", IndexClamp, _indexed,
                "an out-of-range index", _checks(_cellp("error", ("oob_index",)), "error_inputs", "opinfo_error")),
    MutantClass("promotion", "dtype promotion wrong", Promotion, _promotes,
                "operands or a result of different dtypes",
                _checks(_cellp("dtype", ("int32", "int64", "bool", "int8")), "out_dtype")),
    MutantClass("inplace", "in-place result not written through to the base / a view", InPlace, _inplace,
                "an in-place call on a strided or offset view",
                _checks(lambda cell: int(cell.get("layout") != "contiguous"), "inplace_rules", "variants",
                        "module_train")),
    MutantClass("out", "out= not honoured", OutIgnored, _out, "an out= tensor that must be resized",
                _checks(lambda cell: 0, "out_resize")),
    MutantClass("error_class", "error raised with a different class", ErrorClass, _raises,
                "an input the op rejects (CPU raises)",
                _checks(lambda cell: int(bool(cell.get("error"))), "error_inputs", "opinfo_error", "out_device")),
    MutantClass("gradient", "gradient wrong by a factor", Gradient, _backward, "a backward pass through the op",
                _checks(lambda cell: 0, "module_train", "module_eval")),
    MutantClass("bf16_rounding", "result wrong only for one dtype (bf16 rounding)", Bf16, _bf16,
                "a bfloat16 result", _checks(_cellp("dtype", ("bfloat16",)))),
)}


def _wrapped_numbers_back(schema: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call with each Python number in a Tensor slot made a tensor again. A wrapped number (the scalar of
    ``bitwise_and(x, 3)``, which ATen's composite passes on as a 0-dim tensor) reaches a Python kernel as a
    Python number, and ``call_boxed`` refuses a number for a Tensor argument; a 0-dim CPU tensor of the number's
    default dtype promotes as the wrapped number does (it loses to any dimensioned operand of its category)."""
    bound = Bound(schema, args, kwargs)
    for a, value in list(bound.items()):
        if str(a.type) in ("Tensor", "Optional[Tensor]") and isinstance(value, (bool, int, float, complex)):
            bound.set(a.name, torch.tensor(value))
    return tuple(bound.args), bound.kwargs


class Planted:
    """``with Planted(mutant):`` the device's kernel of ``mutant.op`` is the mutant; restored on exit.

    Re-entrant calls (the mutant's own host copies through ``copy_``, or the original kernel
    calling its own op) reach the original kernel."""

    def __init__(self, mutant: Mutant, device_key: str = "PrivateUse1") -> None:
        self.mutant, self.key = mutant, device_key

    def __enter__(self) -> "Planted":
        op = self.mutant.op
        original = torch.library.get_kernel(op, self.key)
        mutant = self.mutant

        schema = mutant.facts.schema

        def kernel(keyset, *args, **kwargs):
            args, kwargs = _wrapped_numbers_back(schema, args, kwargs)
            if getattr(_LOCAL, "inside", False):
                return original.call_boxed(keyset, *args, **kwargs)
            _LOCAL.inside = True
            try:
                mutant.calls += 1
                return mutant.run(original, keyset, args, kwargs)
            finally:
                _LOCAL.inside = False

        self.lib = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": the point
            self.lib.impl(op.split("::", 1)[1], kernel, self.key, with_keyset=True)
        return self

    def __exit__(self, *exc) -> None:
        self.lib._destroy()


# --- the run ------------------------------------------------------------------------------

@dataclass
class StoredCase:
    case: Case
    reached: set[str]
    cell: dict
    label: str  # the designed case's id, "drawn:<spec>", "opinfo:<op> ..." or "contract:<op> <check> ..."
    values: bool = True  # the case compares the op's values (an OpInfo random op: only its properties)

    @property
    def source(self) -> str:
        return self.case.source


SOURCES = ("spec", "opinfo", "contract", "module")  # the parts of the default op suite a mutant reruns


def _sweep_case(case: Case, reached: set[str]) -> StoredCase:
    """An OpInfo-sweep or contract case: its cell names the check (``opinfo``/``opinfo_error`` for a
    sweep sample/error input) and the dtype, for ``MutantClass.priority``."""
    from harness.opinfo import RANDOM_OPS

    kind, index = case.params.get("kind", "sample"), case.params.get("index", 0)
    if case.source == "contract":
        check = case.params["check"]
        label = f"contract:{case.spec} {check} [{case.dtype}] {kind} #{index}"
    elif case.source == "module":
        check = f"module_{case.params['check']}"
        label = f"module:{case.spec} {case.params['check']} [{case.dtype}] #{index}"
    else:
        check = "opinfo_error" if kind == "error" else "opinfo"
        label = f"opinfo:{case.spec} [{case.dtype}] {kind} #{index}"
    cell = {"source": case.source, "check": check, "dtype": case.dtype}
    random = case.source == "opinfo" and any(case.spec == r or case.spec.startswith(r + ".") for r in RANDOM_OPS)
    return StoredCase(case, reached, cell, label, values=not random)


def suite_cases(store: Store, mode: str = "eager") -> tuple[int, list[StoredCase]]:
    """The passing cases of the latest finished op-suite run in ``mode`` that has designed cases (else, of the
    latest finished one at all: a run stopped before them), rebuilt from the store: the op specs' cases, then the
    OpInfo sweep's, the contract checks' and the module checks' (those that reached a device kernel: a run stored
    before their ``overloads`` were recorded contributes none of them)."""
    finished = ("SELECT r.id FROM runs r WHERE r.finished IS NOT NULL AND r.kind = 'opsuite' AND EXISTS ("
                "SELECT 1 FROM results x WHERE x.run_id = r.id AND x.mode = ?{} ) ORDER BY r.id DESC LIMIT 1")
    rows = store.query(finished.format(" AND x.cells LIKE '%\"design\": \"%'"), (mode,))
    if not rows:
        # A run its time budget stopped before the designed cases (``make report`` on a loaded machine: the
        # collection took most of it) still has cases: the mutants are judged against those, and the report says
        # the score is not meaningful where most kernels went unreached (reports.conformance.mutation), instead
        # of the whole report stopping here.
        rows = store.query(finished.format(""), (mode,))
        if rows:
            print(f"note: op-suite run {rows[0][0]} in mode {mode} has no designed case (stopped early?): the mutants "
                  "are judged against the cases it ran", file=sys.stderr)
    if not rows:
        raise LookupError(f"no finished op-suite run in mode {mode} in {store.path}: run "
                          f"`pytest opsuite --neuron-mode {mode}` (or `make report`) first")
    run_id = rows[0][0]
    specs, sweep = [], []
    marks = ", ".join("?" for _ in SOURCES)
    for row in store.query(f"SELECT source, case_json, overloads, called, cells FROM results WHERE run_id = ? "
                           f"AND mode = ? AND source IN ({marks}) AND verdict = 'pass' ORDER BY id",
                           (run_id, mode, *SOURCES)):
        case = Case.from_json(row["case_json"])
        reached = set(json.loads(row["overloads"] or "{}")) | set(json.loads(row["called"] or "[]"))
        if row["source"] != "spec":
            if reached:
                sweep.append(_sweep_case(case, reached))
            continue
        if case.spec not in SPECS:
            continue
        cell = json.loads(row["cells"] or "{}")
        specs.append(StoredCase(case, reached, cell, cell.get("design") or f"drawn:{case.spec}"))
    return run_id, specs + sweep


def _zero_signs_free(stored: StoredCase) -> bool:
    """Whether an op spec's case leaves free the sign of every zero a zero_sign mutant can change: its spec ignores
    zero signs in the case's dtypes (``ignore_zero_sign``, no ``zero_ties``), or it is a sum of products
    (``sum_of_products``): -0.0 read as 0.0 changes only terms that are zero, so only results all of whose terms are
    zero, whose magnitude bound is 0 and whose sign is the accumulation's start (CPU's +0.0 accumulator or its first
    term), which the comparison frees (harness.compare.OrderDependent.underflow); and a -0.0 result is such a sum.
    An OpInfo, contract or module case compares every zero's sign."""
    if stored.source != "spec":
        return False
    from harness.runner import _zero_sign

    spec = SPECS[stored.case.spec]
    return spec.sum_of_products or (not _zero_sign(spec, stored.case) and not spec.zero_ties)


def rerun(stored: StoredCase, mode: str) -> tuple[str, str, str]:
    """(verdict, message, criterion) of one stored case run again in ``mode``, with whatever kernel is planted
    (the criterion that judged it: "error parity" where both sides raised)."""
    import dataclasses

    case = stored.case
    if case.source == "spec":
        from harness.runner import run_case

        try:
            result = run_case(dataclasses.replace(case, mode=mode))
        except KeyError as error:  # a case stored before its spec's call text took this parameter
            return "skip", f"the stored case has no parameter {error} that op spec {case.spec}'s call now takes", ""
        return result.verdict, result.message, result.comparison.criterion if result.comparison else ""
    from harness import contract, modules, opinfo

    dtype = getattr(torch, case.dtype)
    if case.source == "module":
        info = modules.find(case.spec)
        if info is None:
            return "skip", f"no ModuleInfo named {case.spec} in this torch's module_db", ""
        comparison = modules.rerun(info, case.params["check"], dtype, case.params.get("index", 0), case.device, mode)
        verdict = "skip" if comparison.criterion.startswith("skip") else "pass" if comparison.ok else "fail"
        return verdict, comparison.message, comparison.criterion
    op = opinfo.find(case.spec)
    if op is None:
        return "skip", f"no OpInfo named {case.spec} in this torch's op_db", ""
    kind, index = case.params.get("kind", "sample"), case.params.get("index", 0)
    if case.source == "contract":
        comparison = contract.rerun(op, case.params["check"], dtype, kind, index, case.device, mode)
    else:
        comparison = opinfo.rerun(op, dtype, kind, index, case.device, mode)
    verdict = "skip" if comparison.criterion.startswith("skip") else "pass" if comparison.ok else "fail"
    return verdict, comparison.message, comparison.criterion


def table(device: str = "neuron") -> list[str]:
    """The device's lowering table: every overload it serves that has a kernel of its own on the
    device's dispatch key (an overload served through PyTorch's composite kernel has none: the
    kernel it reaches is mutated instead)."""
    return sorted(op for op in coverage.table_ops(device)
                  if torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"))


def facts(op: str, cases: list[StoredCase]) -> OpFacts:
    ov = overload(op)
    mine = [c for c in cases if op in c.reached]
    specs = tuple(sorted({c.case.spec for c in mine if c.source == "spec"}))
    sweep = [c for c in mine if c.source != "spec"]
    dtypes = frozenset(d for c in sweep for d in {c.case.dtype} | _supported(c.source, c.case.spec))
    return OpFacts(op, ov._schema, tuple(str(t).split(".")[-1] for t in ov.tags), specs, dtypes,
                   any(c.values for c in sweep))


_SUPPORTED: dict[tuple[str, str], frozenset[str]] = {}


def _supported(source: str, name: str) -> frozenset[str]:
    """The CPU dtypes of the OpInfo (or ModuleInfo) a sweep case ran: the op's dtypes, as an op spec's
    ``dtypes`` are (the default run tries only float32 of them; a class needing another is then a
    coverage gap, reported as a survivor, not excluded)."""
    key = (source, name)
    if key not in _SUPPORTED:
        from harness import modules, opinfo

        found = modules.find(name) if source == "module" else opinfo.find(name)
        try:
            dtypes = found.supported_dtypes("cpu") if found is not None else ()
        except Exception:  # noqa: BLE001 - an info that cannot say: only the dtype the case ran
            dtypes = ()
        _SUPPORTED[key] = frozenset(str(d).replace("torch.", "") for d in dtypes)
    return _SUPPORTED[key]


@dataclass
class Outcome:
    op: str
    cls: str
    status: str  # caught, survived, excluded
    reason: str = ""
    killer: str = ""
    kind: str = ""
    cases_run: int = 0
    triggered: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def run_mutant(op: str, mc: MutantClass, f: OpFacts, cases: list[StoredCase], mode: str) -> Outcome:
    """Plant one mutant and run the op's cases (most likely to catch it first; at equal odds an op
    spec's case before an OpInfo/contract one) until one fails."""
    started = time.perf_counter()
    reason = (_no_oracle(op) if not f.reached else None) or mc.rule(f)
    if reason is not None:
        return Outcome(op, mc.name, "excluded", reason)
    mine = sorted((c for c in cases if op in c.reached), key=lambda c: (-mc.priority(c.cell), c.source != "spec"))
    if not mine:
        return Outcome(op, mc.name, "survived", "no case of the op suite reaches this kernel",
                       seconds=time.perf_counter() - started)
    mutant = mc.make(op, mc.name, f)
    ran = 0
    unchecked = 0  # designed out-of-range cases whose index calls of the kernel all returned (index_bounds)
    blind = 0  # zero_sign: calls that changed the result in cases whose comparison leaves those zeros' signs free
    unrelated = 0  # cases that failed with the mutant planted but never acting in them
    with Planted(mutant), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for stored in mine:
            before = (getattr(mutant, "index_returns", 0), mutant.triggered, mutant.equivalent)
            verdict, message, criterion = rerun(stored, mode)
            ran += 1
            if mc.name == "zero_sign" and _zero_signs_free(stored):
                blind += (mutant.triggered - before[1]) - (mutant.equivalent - before[2])
            if verdict == "fail" and mutant.triggered > before[1]:
                return Outcome(op, mc.name, "caught", killer=stored.label, kind=failure_kind(message),
                               cases_run=ran, triggered=mutant.triggered, seconds=time.perf_counter() - started)
            if verdict == "fail":
                # the case failed while the mutant never acted in it: the break is not what failed it (a
                # nondeterministic case, or the planting itself changed the call: a view's aliasing through the
                # wrapper, an out= that the wrapper's clean call resized first), so it catches nothing
                unrelated += 1
            if stored.cell.get("error") == "oob_index" and criterion != "error parity" \
                    and getattr(mutant, "index_returns", 0) > before[0] and mutant.triggered == before[1]:
                unchecked += 1
    if mutant.triggered and mutant.equivalent == mutant.triggered:
        # An equivalent mutant: every time its break met its trigger the kernel's result came out
        # bit-identical (exp and sigmoid map -0.0 and +0.0 to the same value and never return -0.0).
        return Outcome(op, mc.name, "excluded", f"equivalent for this op: in all {mutant.triggered} calls where "
                       f"the break applied, the kernel's result was bit-identical to the real one's", cases_run=ran,
                       triggered=mutant.triggered, seconds=time.perf_counter() - started)
    if mc.name == "zero_sign" and blind and mutant.equivalent + blind == mutant.triggered:
        # The rule, read from the op's own calls: the break changed results only in cases whose comparison leaves
        # those zeros' signs free (see _zero_signs_free); in every case that compares them, the result was
        # bit-identical. -0.0 read or written as 0.0 changes only zeros' signs, so nothing it does can be seen.
        return Outcome(op, mc.name, "excluded", f"equivalent where zero signs are compared: in {mutant.equivalent} "
                       f"calls of cases that compare them the result was bit-identical; the {blind} calls it changed "
                       "were in cases whose spec leaves those zeros' signs free (ignore_zero_sign, or a sum of "
                       "products's zero results)", cases_run=ran, triggered=mutant.triggered,
                       seconds=time.perf_counter() - started)
    if mc.name == "bf16_rounding" and mutant.triggered == 0 and mutant.bf16_reads and not mutant.bf16_returns:
        # The rule, read from the op's own calls: it was called with bfloat16 operands and still no call
        # returned a bfloat16 result (any/all/isin/nonzero return bool or int64 for every input), so
        # rounding a bfloat16 result has nothing to act on. (An op no bfloat16 case reached stays a gap.)
        return Outcome(op, mc.name, "excluded", f"the result is never bfloat16: {mutant.bf16_reads} calls read "
                       "bfloat16 operands and none returned a bfloat16 tensor", cases_run=ran,
                       seconds=time.perf_counter() - started)
    if mc.name == "bf16_rounding" and mutant.triggered == 0 and mutant.bf16_returns and not mutant.bf16_other_values:
        # The rule, read from the op's own calls: every bfloat16 result it wrote held only -1, 0, 1 or NaN (a truth
        # value, a sign, a zero fill, an identity matrix), over every designed value domain; those are exact at
        # any mantissa width, so no rounding of them can be wrong.
        return Outcome(op, mc.name, "excluded", f"the op's bfloat16 results are exact at any precision: in all "
                       f"{mutant.bf16_returns} calls that wrote bfloat16, every value was -1, 0, 1 or NaN",
                       cases_run=ran, seconds=time.perf_counter() - started)
    if mc.name in ("nan_inf", "zero_sign") and mutant.triggered == 0 and mutant.float_reads \
            and not mutant.float_returns:
        # The rule, read from the op's own calls: every call that read a floating-point operand raised
        # (bitwise ops reject floats, as CPU does: the designed error-free cases of every dtype got there),
        # so no NaN, infinity or -0.0 ever reaches a result.
        return Outcome(op, mc.name, "excluded", f"the op rejects floating-point operands: all {mutant.float_reads} "
                       "calls that read one raised", cases_run=ran, seconds=time.perf_counter() - started)
    if mc.name == "index_bounds" and mutant.triggered == 0 and mutant.calls and not mutant.index_reads:
        # The rule, read from the op's own calls: its index-named argument (a regression loss's ``target``)
        # was a floating-point or bool tensor in every call, never an index, so nothing can be out of range.
        return Outcome(op, mc.name, "excluded", f"no index to bound: in all {mutant.calls} calls its index-named "
                       "arguments held floating-point values, not indices", cases_run=ran,
                       seconds=time.perf_counter() - started)
    if mc.name == "index_bounds" and mutant.triggered == 0 and unchecked:
        # The rule, read from the op's own cases: its designed out-of-range case gave the kernel its indices and
        # the kernel returned, as CPU did (the case passed, comparing values): CPU does not bounds-check this op
        # (embedding_dense_backward skips a row whose index is outside [0, num_weights); its forward checked), so
        # there is no raise for a clamp to replace, and what it does with such an index is compared by that case.
        return Outcome(op, mc.name, "excluded", f"CPU does not bounds-check its indices: in {unchecked} designed "
                       "out-of-range case(s) the kernel was called with the indices and returned, as CPU did, and "
                       "the values matched", cases_run=ran, seconds=time.perf_counter() - started)
    if mc.name in ("tile_edge", "layout") and mutant.triggered == 0 and mutant.rejected:
        # The rule, read from the op's own calls: every call with a tensor the break changed (one longer than a
        # tile, or non-contiguous) raised, as CPU does for it (the case passed): the op rejects such tensors
        # (``_amp_update_scale_`` takes one-element tensors only, so no tile edge or stride reaches its arithmetic).
        return Outcome(op, mc.name, "excluded", f"the op rejects every input the break applies to: all "
                       f"{mutant.rejected} calls where it changed an input raised, as on CPU", cases_run=ran,
                       seconds=time.perf_counter() - started)
    if mc.name == "layout" and mutant.storage_reads and mutant.storage_reads == mutant.triggered:
        # The rule, read from the op's own calls: in every call with a strided input, the same storage as a dense
        # view gave the same view (as_strided addresses the storage with its own size, strides and offset), so the
        # kernel does not read its input's strides and a kernel ignoring them is the real one.
        return Outcome(op, mc.name, "excluded", f"the op reads its input's storage, not its strides: in all "
                       f"{mutant.storage_reads} calls with a strided input, a dense view of the same storage gave "
                       "the same view", cases_run=ran, triggered=mutant.triggered,
                       seconds=time.perf_counter() - started)
    if mc.name == "layout" and mutant.triggered == 0 and getattr(mutant, "cpu_blind", ()):
        # The rule, asked of the running CPU with the op's own calls: every call that reached the kernel passed
        # dense tensors (autograd's formula makes them so), and CPU's own kernel gives another result for the
        # same values strided, so no case could judge a strided call: CPU is no oracle there.
        return Outcome(op, mc.name, "excluded", f"CPU eager reads {', '.join(mutant.cpu_blind)} as dense: the "
                       "same values strided (a step-2 view) changed CPU's own result, and all "
                       f"{mutant.calls} calls that reached the kernel passed dense tensors", cases_run=ran,
                       seconds=time.perf_counter() - started)
    if mc.name == "error_class" and mutant.triggered == 0:
        reason = no_error_input(f)
        if reason is not None:
            return Outcome(op, mc.name, "excluded", reason, cases_run=ran, seconds=time.perf_counter() - started)
    if mc.name == "promotion" and mutant.triggered == 0:
        # The rule, read from the op's own calls: over every case (the design covers every dtype
        # the op supports), no call had operands or a result of different dtypes.
        return Outcome(op, mc.name, "excluded", "the op never promotes: in every call (all its dtypes) the "
                       "result and every operand had one dtype", cases_run=ran, seconds=time.perf_counter() - started)
    why = (f"never triggered in {ran} cases ({mutant.calls} calls): no case had {mc.trigger}" if not mutant.triggered
           else f"triggered in {mutant.triggered} of {mutant.calls} calls over {ran} cases, and every comparison "
                f"passed (the change is within the op's tolerance or its check does not look there)")
    if unrelated:
        why += (f"; {unrelated} case(s) failed without the mutant acting in them (not counted: a nondeterministic "
                "case, or the planting itself changed the call)")
    return Outcome(op, mc.name, "survived", why, cases_run=ran, triggered=mutant.triggered,
                   seconds=time.perf_counter() - started)


def score(outcomes: Iterable[Outcome]) -> dict[str, dict[str, int]]:
    table_: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = table_.setdefault(o.cls, {"caught": 0, "survived": 0, "excluded": 0})
        row[o.status] += 1
    return table_


def source_cut(store: Store, run_id: int) -> str:
    """What cut op-suite run ``run_id`` short, in words ("ran 48 of 2,104 tests (interrupted)"), or "" where it ran
    every test it selected (or, stored before runs said, where nothing says otherwise)."""
    rows = store.query("SELECT tests_collected, tests_run, stopped FROM runs WHERE id = ?", (run_id,))
    if not rows:
        return ""
    collected, ran, stopped = rows[0]["tests_collected"], rows[0]["tests_run"], rows[0]["stopped"]
    if collected is None or ran is None or ran >= collected:
        return ""
    return f"ran {ran:,} of {collected:,} tests" + (f" ({stopped})" if stopped else "")


def main(args: argparse.Namespace) -> int:
    from harness.env import environment

    store = Store(args.results)
    try:
        source_run, cases = suite_cases(store, "eager")
    except LookupError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    unknown = set(args.classes or ()) - set(CLASSES)
    if unknown:
        print(f"unknown class(es) {sorted(unknown)}; choose from {', '.join(CLASSES)}", file=sys.stderr)
        return 2
    ops = table(args.device)
    if args.ops:
        wanted = {o if o.startswith("aten::") else f"aten::{o}" for o in args.ops}
        missing = wanted - set(ops)
        if missing:
            print(f"not in the device's lowering table (with a kernel of its own): {sorted(missing)}", file=sys.stderr)
            return 2
        ops = [o for o in ops if o in wanted]
    classes = [CLASSES[c] for c in (args.classes or CLASSES)]
    env = environment(args.device)
    env["mutate_source_run"] = str(source_run)
    run_id = store.start_run("mutate", env, "quick")
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    unreached: set[str] = set()
    for mode in args.modes:
        for n, op in enumerate(ops):
            f = facts(op, cases)
            for mc in classes:
                outcome = run_mutant(op, mc, f, cases, mode)
                outcomes.append(outcome)
                store.add_mutant(run_id, mode, reached=f.reached, **outcome.to_dict())
                if not f.reached:
                    unreached.add(op)
            store.commit()
            sys.stderr.write(f"\r[{n + 1}/{len(ops)}] {op[:50]:50s} {time.perf_counter() - started:7.1f} s")
    sys.stderr.write("\n")
    store.finish_run(run_id)
    elapsed = time.perf_counter() - started
    per_class = score(outcomes)
    print(f"mutate run {run_id} over {len(ops)} ops x {len(classes)} classes in {elapsed:.0f} s "
          f"(cases of op-suite run {source_run}); store {store.path}")
    for name, counts in per_class.items():
        judged = counts["caught"] + counts["survived"]
        print(f"  {name:14s} {counts['caught']:4d} caught {counts['survived']:4d} survived {counts['excluded']:4d} "
              f"excluded  score {counts['caught'] / judged:.1%}" if judged else f"  {name:14s} all excluded")
    total = sum(c["caught"] for c in per_class.values()), sum(c["survived"] for c in per_class.values())
    if sum(total):
        print(f"  {'all':14s} {total[0]:4d} caught {total[1]:4d} survived  score {total[0] / sum(total):.1%}")
    cut = source_cut(store, source_run)
    if unreached:
        print(f"  {len(unreached)} of {len(ops)} kernels reached by no stored case (their mutants count as survivors)"
              + (f"; the score is not meaningful: op-suite run {source_run} {cut}" if cut else ""))
    for o in outcomes:
        if o.status == "survived":
            print(f"  SURVIVED {o.op} [{o.cls}]: {o.reason}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"run": run_id, "source_run": source_run, "seconds": elapsed, "score": per_class,
                       "outcomes": [o.to_dict() for o in outcomes]}, fh, indent=1)
    store.close()
    return 1 if total[1] else 0


def add_parser(sub) -> None:
    """``mutate``'s command line (harness.cli)."""
    p = sub.add_parser("mutate", help="mutation score: plant wrong kernels over the device's, rerun the op suite")
    p.add_argument("--ops", nargs="*", help="table overloads (aten::name.overload or name.overload; default: all)")
    p.add_argument("--classes", nargs="*", help=f"mutant classes (default: all): {', '.join(CLASSES)}")
    p.add_argument("--modes", nargs="*", default=["eager"], help="modes to rerun the cases in (default eager)")
    p.add_argument("--device", default="neuron")
    p.add_argument("--json", default=None, help="also write the outcomes as JSON to this file")
    p.add_argument("--results", default=str(DEFAULT_PATH))
    p.set_defaults(func=main)
