"""PyTorch's own device contract, as checks driven by OpInfo data (op_db), against CPU eager.

What PyTorch's device-generic tests (test_ops.py: test_out, test_out_warning,
test_variant_consistency_eager, the in-place and error-input tests) ask of every backend, written
differentially: each check makes the same call on CPU and on the device under test (any torch
device: the harness never imports the device's code) and compares what each did.

Checks (``CHECKS``), per op and dtype, over the op's first samples:

- ``out_values``: out= with the right shape and dtype returns the out tensor(s), holding what
  the functional variant computes on CPU.
- ``out_device``: out= on another device (CPU) for a device call must raise PyTorch's
  RuntimeError and leave the out tensor alone.
- ``out_dtype``: out= of a dtype PyTorch's casting rules reject (long for a floating result,
  bool for an integral one): the device raises what CPU raises, or, where CPU accepts, writes
  what CPU writes.
- ``out_resize``: out= of the wrong shape (non-empty) is resized with PyTorch's UserWarning
  ("An output with one or more elements was resized") when CPU warns, and holds CPU's result.
- ``variants``: function, method, in-place, operator and in-place-operator variants on the
  device each match the same variant on CPU (values, errors) and the device's function variant;
  an in-place variant returns self, with the result written into it.
- ``inplace_rules``: an in-place variant never resizes or broadcasts self (self narrowed to size
  1 along its last dim, and OpInfo's ``broadcasts_input`` samples: CPU raises RuntimeError, the
  device must too, leaving self's shape alone); in-place on a view writes through to its base.
- ``error_inputs``: OpInfo's error inputs raise on the device the class CPU raises (and OpInfo's
  ``error_type``), with a message matching OpInfo's ``error_regex`` wherever CPU's does.

In every check an exception of a class PyTorch does not raise (numpy's exceptions, an error
raised inside numpy, AssertionError, ZeroDivisionError, a TypeError/ValueError raised inside the
device's own Python where CPU raises no such error) is a failure by itself (``foreign_exception``).
"""

from __future__ import annotations

import os
import re
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from harness import compare as cmp
from harness import opinfo
from harness.cases import Case
from harness.runner import Result, _reset_stats, _stats
from harness.values import dtype_name

CHECKS = ("out_values", "out_device", "out_dtype", "out_resize", "variants", "inplace_rules", "error_inputs")
RESIZE_WARNING = "An output with one or more elements was resized"

# Exception classes PyTorch raises to users (its own error classes derive from these: torch's
# OutOfMemoryError, NotImplementedError and Dynamo's errors from RuntimeError, torch's
# IndexError/ValueError/TypeError translations of c10 errors are the builtins).
PYTORCH_CLASSES = (RuntimeError, IndexError, ValueError, TypeError, NotImplementedError)
_TORCH_DIR = os.path.dirname(torch.__file__)


def _package_dir(module_name: str) -> str | None:
    top = sys.modules.get(module_name.split(".")[0])
    path = getattr(top, "__file__", None)
    return os.path.dirname(os.path.abspath(path)) if path else None


_NUMERIC_DIRS = tuple(d for d in (_package_dir("numpy"), _package_dir("ml_dtypes")) if d)


def device_package_dir(device: str) -> str | None:
    """The directory of the Python package behind ``torch.<device type>``, when it is not torch's own
    (a PrivateUse1 backend's module); None for CPU, CUDA and other in-tree devices."""
    module = getattr(torch, torch.device(device).type, None)
    name = getattr(module, "__name__", "")
    if not name or name.startswith("torch"):
        return None
    found = _package_dir(name)
    if found is None:
        __import__(name.split(".")[0])
        found = _package_dir(name)
    return found if found and not found.startswith(_TORCH_DIR) else None


def _innermost_file(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    return os.path.abspath(frames[-1].filename) if frames else ""


def foreign_exception(error: BaseException, device: str, cpu_error: BaseException | None = None) -> str | None:
    """Why ``error`` (raised by the device) is not an exception PyTorch raises, or None if it is one.

    A class outside PyTorch's (AssertionError, ZeroDivisionError, KeyError, ...), a class defined by
    numpy or ml_dtypes (numpy.exceptions.AxisError derives from ValueError and IndexError), an error
    raised inside numpy, and a TypeError/ValueError raised inside the device's own Python where
    CPU raised no error of that class."""
    kind = type(error)
    where = _innermost_file(error)
    module = kind.__module__ or ""
    if module.split(".")[0] in ("numpy", "ml_dtypes"):
        return f"non-PyTorch exception class {module}.{kind.__qualname__}"
    in_numpy = bool(where) and any(where.startswith(d + os.sep) for d in _NUMERIC_DIRS)
    own = device_package_dir(device)
    in_device = bool(own) and where.startswith(own + os.sep)
    if not issubclass(kind, PYTORCH_CLASSES):
        if cpu_error is not None and type(cpu_error) is kind and not in_numpy and not in_device:
            return None  # torch's own Python raised it on both sides (Tensor.__rdiv__ on an int: AttributeError)
        return f"non-PyTorch exception class {kind.__qualname__}"
    if in_numpy:
        return f"{kind.__qualname__} raised inside numpy ({os.path.basename(where)})"
    if in_device and issubclass(kind, (TypeError, ValueError)) \
            and not isinstance(error, RuntimeError) and not (cpu_error is not None and isinstance(error, type(cpu_error))):
        return f"{kind.__qualname__} raised inside the device's Python ({os.path.relpath(where, own)})"
    return None


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0][:240] if str(error) else ''}"


def _foreign(error: BaseException | None, device: str, cpu_error: BaseException | None = None) -> cmp.Comparison | None:
    if error is None:
        return None
    why = foreign_exception(error, device, cpu_error)
    if why is None:
        return None
    return cmp.Comparison(False, f"{why}: {_describe(error)}", criterion="exception class")


def _skip(reason: str) -> cmp.Comparison:
    return cmp.Comparison(True, criterion=f"skip: {reason}")


@dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None
    warnings: tuple = ()

    @property
    def resize_warned(self) -> bool:
        return any(RESIZE_WARNING in str(w.message) for w in self.warnings)


def _attempt(fn: Callable[[], Any], mode: str = "eager", device: str | None = None) -> Outcome:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = fn() if device is None else opinfo._in_mode(mode, fn, device)
        except Exception as e:  # noqa: BLE001 - what each side raised is the check
            return Outcome(None, traced_error(e) if device is not None else e, tuple(caught))
    return Outcome(value, None, tuple(caught))


def traced_error(error: BaseException) -> BaseException:
    """The error a call raised, seen through torch.compile's wrapping.

    Dynamo reports an exception raised while it traces with fake tensors (an op's argument check:
    ``hardtanh``'s ValueError, ``take``'s IndexError) as ``torch._dynamo.exc.TorchRuntimeError``
    chained to the original, for every backend; the contract is about the original, so its class
    and message are compared. A backend's own failure (``BackendCompilerFailed``) is unwrapped the
    same way: what the device's compiler raised is then judged like any other device error."""
    seen = 0
    while _is_dynamo_wrapper(error) and seen < 8:
        inner = error.__cause__ or error.__context__
        if inner is None:
            break
        error, seen = inner, seen + 1
    return error


def _is_dynamo_wrapper(error: BaseException) -> bool:
    module = type(error).__module__ or ""
    return module.startswith("torch._dynamo") or module.startswith("torch._subclasses.fake_tensor")


def _parity(cpu: Outcome, dev: Outcome, device: str, where: str) -> cmp.Comparison | None:
    """None when neither raised; else the verdict on the errors (class parity, PyTorch's classes)."""
    foreign = _foreign(dev.error, device, cpu.error)
    if foreign is not None:
        return foreign
    if cpu.error is None and dev.error is None:
        return None
    if cpu.error is None and _host_only(dev.error):
        return _skip("the op requires some tensors on the host; the check moved them")
    if cpu.error is not None and dev.error is not None:
        result = cmp.same_error(dev.error, cpu.error)
        return result if result.ok else cmp.Comparison(False, f"{where}: {result.message}", criterion="error parity")
    if cpu.error is not None:
        return cmp.Comparison(False, f"{where}: CPU raised {_describe(cpu.error)}; the device did not raise",
                              criterion="error parity")
    return cmp.Comparison(False, f"{where}: the device raised {_describe(dev.error)}; CPU did not raise",
                          criterion="error parity")


def _tensors(value: Any) -> list[torch.Tensor] | None:
    """The output's tensors, if it is a tensor or a flat tuple/list of tensors; else None."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    return None


def _same_structure(template: Any, tensors: list[torch.Tensor]) -> Any:
    return tensors[0] if isinstance(template, torch.Tensor) else tuple(tensors)


def _compare(actual: Any, expected: Any, device: str | None, where: str,
             reference: Callable[[], Any] | None = None) -> cmp.Comparison:
    """Values against CPU's; where that fails on tolerance, ``reference`` (the op's float64 result) gives
    the OpInfo sweep's second criterion: the device's error no more than 3x CPU's own (matmuls,
    reductions and convolutions accumulate in another order on the device)."""
    result = opinfo.compare_values(actual, expected, device, reference or (lambda: None))
    if not result.ok:
        return cmp.Comparison(False, f"{where}: {result.message}", result.max_abs, result.max_rel, result.ulp,
                              result.criterion)
    return result


class _Reference:
    """The op's float64 result on CPU for one sample, computed once, only if a comparison needs it."""

    def __init__(self, op, sample) -> None:
        self.op, self.sample, self.done, self.value = op, sample, False, None

    def part(self, index: int | None = None) -> Callable[[], Any]:
        def get() -> Any:
            if not self.done:
                self.value, self.done = opinfo._fp64_reference(self.op, self.sample), True
            if index is None:  # a tensor result only: a structure is compared part by part by the caller
                return self.value if isinstance(self.value, torch.Tensor) else None
            parts = _tensors(self.value) if self.value is not None else None
            return parts[index] if parts is not None and index < len(parts) else None
        return get


def _to_cpu(value: Any) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.detach().cpu() if isinstance(t, torch.Tensor) else t, value)


def _call_out(op, sample, out) -> Any:
    return op.op(sample.input, *sample.args, out=out, **sample.kwargs)


def _usable(op, sample) -> str | None:
    if opinfo.is_random(op, sample):
        return "random op"
    if not opinfo._has_tensor(sample):
        return "no tensor input"
    return None


def _functional(op, sample, device: str, mode: str) -> tuple[Outcome, Outcome, Any]:
    cpu = _attempt(lambda: opinfo._call(op, sample))
    moved = opinfo._move(sample, device)
    dev = _attempt(lambda: opinfo._call(op, moved), mode, device)
    return cpu, dev, moved


def _fresh(t: torch.Tensor, like: torch.Tensor | None = None, shape=None, dtype=None, device=None) -> torch.Tensor:
    """An out tensor: ``like``'s shape and dtype unless given, filled with a value neither side computes."""
    shape = tuple(t.shape) if shape is None else shape
    result = torch.empty(shape, dtype=dtype or t.dtype, device=device or t.device)
    if result.numel():
        result.fill_(True if result.dtype == torch.bool else 7)
    return result


# ---- out= -------------------------------------------------------------------------------------

def check_out_values(op, sample, device: str, mode: str = "eager") -> cmp.Comparison:
    cpu, _, moved = _functional(op, sample, device, "eager")
    if cpu.error is not None or _tensors(cpu.value) is None:
        return _skip("the functional variant raises on CPU or returns no tensors")
    expected = _tensors(cpu.value)
    cpu_outs = [_fresh(t) for t in expected]
    cpu_out = _attempt(lambda: _call_out(op, sample, _same_structure(cpu.value, cpu_outs)))
    dev_outs = [_fresh(t, device=device) for t in expected]
    dev_out = _attempt(lambda: _call_out(op, moved, _same_structure(cpu.value, dev_outs)), mode, device)
    if isinstance(cpu_out.error, TypeError) and "out" in str(cpu_out.error):
        return _skip("the op's callable takes no out= argument")
    errors = _parity(cpu_out, dev_out, device, "out=")
    if errors is not None:
        return errors
    returned = _tensors(dev_out.value)
    if mode == "eager" and returned is not None and len(returned) == len(dev_outs) \
            and not all(r is o for r, o in zip(returned, dev_outs)):
        return cmp.Comparison(False, "out=: the returned tensor(s) are not the out tensor(s)", criterion="aliasing")
    result = cmp.Comparison(True, criterion="out values")
    reference = _Reference(op, sample)
    for i, (d, c) in enumerate(zip(dev_outs, cpu_outs)):
        result = result.merge(_compare(d, c, device, f"out[{i}]", reference.part(i)))
    return result


def check_out_device(op, sample, device: str, mode: str = "eager") -> cmp.Comparison:
    """test_ops.test_out's wrong-device case: the out tensor on CPU while the inputs are on the device."""
    if torch.device(device).type == "cpu":
        return _skip("the device under test is CPU")
    cpu, _, moved = _functional(op, sample, device, "eager")
    if cpu.error is not None or _tensors(cpu.value) is None:
        return _skip("the functional variant raises on CPU or returns no tensors")
    outs = [_fresh(t) for t in _tensors(cpu.value)]  # on CPU
    before = [o.clone() for o in outs]
    dev = _attempt(lambda: _call_out(op, moved, _same_structure(cpu.value, outs)), mode, device)
    if dev.error is None:
        written = any(not torch.equal(o, b) if o.shape == b.shape else True for o, b in zip(outs, before))
        return cmp.Comparison(False, f"out= on cpu for inputs on {device}: the device did not raise "
                                     f"(PyTorch raises RuntimeError: Expected out tensor to have device {device})"
                                     + ("; the CPU out tensor was written" if written else ""),
                              criterion="error parity")
    foreign = _foreign(dev.error, device, None)
    if foreign is not None:
        return foreign
    if isinstance(dev.error, TypeError) and "out" in str(dev.error) and "argument" in str(dev.error):
        return _skip("the op's callable takes no out= argument")
    if not isinstance(dev.error, RuntimeError):
        return cmp.Comparison(False, f"out= on cpu: the device raised {_describe(dev.error)}; PyTorch raises "
                                     f"RuntimeError", criterion="error parity")
    return cmp.Comparison(True, criterion="out device")


def _wrong_dtypes(dtype: torch.dtype) -> list[torch.dtype]:
    """Out dtypes to try for a result of ``dtype``: one PyTorch's casting rules reject (torch.can_cast is
    False: long for a floating result, bool for an integral one), and one casting allows but ops with an exact
    out dtype (neg, bitwise ops, softmax, reductions with a dim, ...) reject on CPU: float32 for an integral
    result, another float for a floating one (float16 for float32 and bfloat16, bfloat16 for float16, float32 for
    float64). A kernel that computes in the out tensor's dtype instead of refusing it (or instead of computing in
    the inputs' and casting) is seen only by the second: given a long out it fails as the refusal would."""
    if dtype.is_complex:
        return [torch.long]
    if dtype.is_floating_point:
        other = {torch.float32: torch.float16, torch.bfloat16: torch.float16, torch.float16: torch.bfloat16,
                 torch.float64: torch.float32}.get(dtype)
        return [torch.long] + ([other] if other is not None else [])
    return [torch.bool, torch.float32] if dtype != torch.bool else [torch.long]


def _out_dtype_choices(expected: list[torch.Tensor]) -> list[list[torch.dtype]]:
    """The out dtypes check_out_dtype tries: every out of a wrong dtype (each choice of ``_wrong_dtypes``), and for
    several outs each one alone of a wrong dtype, the others right (``max.dim_max``'s values of another float with
    long indices: CPU refuses it; a kernel that checks only its indices' dtype, or computes in the values' dtype,
    writes it, and one wrong indices dtype refused first hides that)."""
    choices = [[(_wrong_dtypes(t.dtype) * 2)[choice] for t in expected]
               for choice in range(len(_wrong_dtypes(expected[0].dtype)))]
    if len(expected) > 1:
        choices += [[_wrong_dtypes(t.dtype)[-1] if i == j else t.dtype for j, t in enumerate(expected)]
                    for i in range(len(expected))]
    return choices


def _cast_bits_equal(actual: torch.Tensor, functional: torch.Tensor) -> bool:
    """Whether ``actual`` holds ``functional`` cast to its dtype bit for bit (NaN payloads aside)."""
    want = functional.to(actual.dtype).cpu()
    got = actual.detach().cpu()
    if got.shape != want.shape:
        return False
    if not got.dtype.is_floating_point:
        return torch.equal(got, want)
    nan = torch.isnan(got)
    if not torch.equal(nan, torch.isnan(want)):
        return False
    view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[got.element_size()]
    return torch.equal(got[~nan].view(view), want[~nan].view(view))


def check_out_dtype(op, sample, device: str, mode: str = "eager") -> cmp.Comparison:
    cpu, dev, moved = _functional(op, sample, device, "eager")
    if cpu.error is not None or _tensors(cpu.value) is None:
        return _skip("the functional variant raises on CPU or returns no tensors")
    expected = _tensors(cpu.value)
    result = cmp.Comparison(True, criterion="out dtype")
    for dtypes in _out_dtype_choices(expected):
        cpu_outs = [_fresh(t, dtype=d) for t, d in zip(expected, dtypes)]
        cpu_out = _attempt(lambda: _call_out(op, sample, _same_structure(cpu.value, cpu_outs)))
        if isinstance(cpu_out.error, TypeError) and "out" in str(cpu_out.error):
            return _skip("the op's callable takes no out= argument")
        dev_outs = [_fresh(t, dtype=d, device=device) for t, d in zip(expected, dtypes)]
        dev_out = _attempt(lambda: _call_out(op, moved, _same_structure(cpu.value, dev_outs)), mode, device)
        names = ",".join(dtype_name(d) for d in dtypes)
        errors = _parity(cpu_out, dev_out, device, f"out= of dtype {names}")
        if errors is not None:
            result = result.merge(errors)
            continue
        # PyTorch's out= rule for most ops: the result is computed in its own dtype, then cast into out (cumsum
        # and sum compute in out's dtype instead). Where CPU's out is its functional result cast bit for bit, the
        # device's must be its own functional result cast (CPU's differs by a reduction's summation order): a
        # kernel computing in the out dtype lands within the tolerance above, but not bit for bit here.
        functional = _tensors(dev.value) if dev.error is None and not opinfo.is_random(op, sample) else None
        for i, (d, c) in enumerate(zip(dev_outs, cpu_outs)):
            result = result.merge(_compare(d, c, device, f"out[{i}] ({names}, CPU accepts it)"))
            if functional is not None and i < len(functional) and _cast_bits_equal(c, expected[i]) \
                    and not _cast_bits_equal(d, functional[i]):
                result = result.merge(cmp.Comparison(False, f"out[{i}] ({names}, CPU accepts it): not the "
                                                            f"device's functional result cast to {names} bit for bit"))
    return result


def _wrong_shape(t: torch.Tensor) -> tuple[int, ...]:
    """test_ops.test_out's wrong shape: one more element along the last dim ((2,) for a 0-dim result)."""
    shape = list(t.shape)
    if not shape:
        return (2,)
    shape[-1] += 1
    return tuple(shape)


def check_out_resize(op, sample, device: str, mode: str = "eager") -> cmp.Comparison:
    cpu, _, moved = _functional(op, sample, device, "eager")
    if cpu.error is not None or _tensors(cpu.value) is None:
        return _skip("the functional variant raises on CPU or returns no tensors")
    expected = _tensors(cpu.value)
    cpu_outs = [_fresh(t, shape=_wrong_shape(t)) for t in expected]
    cpu_out = _attempt(lambda: _call_out(op, sample, _same_structure(cpu.value, cpu_outs)))
    if isinstance(cpu_out.error, TypeError) and "out" in str(cpu_out.error):
        return _skip("the op's callable takes no out= argument")
    dev_outs = [_fresh(t, shape=_wrong_shape(t), device=device) for t in expected]
    dev_out = _attempt(lambda: _call_out(op, moved, _same_structure(cpu.value, dev_outs)), mode, device)
    errors = _parity(cpu_out, dev_out, device, "out= of the wrong shape")
    if errors is not None:
        return errors
    if mode == "eager" and cpu_out.resize_warned and not dev_out.resize_warned:
        return cmp.Comparison(False, f"out= of the wrong shape: CPU warns UserWarning '{RESIZE_WARNING}'; the device "
                                     f"did not warn", criterion="resize warning")
    result = cmp.Comparison(True, criterion="out resize")
    reference = _Reference(op, sample)
    for i, (d, c) in enumerate(zip(dev_outs, cpu_outs)):
        result = result.merge(_compare(d, c, device, f"resized out[{i}]", reference.part(i)))
    return result


# ---- variants ---------------------------------------------------------------------------------

def _variants(op) -> list[tuple[str, Callable, bool]]:
    """(name, callable taking (input, *args, **kwargs), in place) of the op's variants besides the function."""
    found = []
    for name, fn, inplace in (("method", op.get_method(), False), ("inplace", op.get_inplace(), True),
                              ("operator", op.get_operator(), False),
                              ("inplace_operator", op.get_inplace_operator(), True)):
        if fn is not None:
            found.append((name, fn, inplace))
    return found


def clone_keep_layout(t: Any) -> Any:
    """A copy of ``t`` on its own storage with the same sizes, strides and offset (``Tensor.clone`` would
    make it dense, and a variant reading the storage around a view, as_strided, would then differ)."""
    if not isinstance(t, torch.Tensor) or t.layout != torch.strided or t.is_conj() or t.is_neg():
        return t.clone() if isinstance(t, torch.Tensor) else t
    storage = t.untyped_storage()
    raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(storage, 0, (storage.nbytes(),), (1,)).clone()
    result = torch.empty(0, dtype=t.dtype, device=t.device).set_(raw.untyped_storage(), t.storage_offset(),
                                                                 t.shape, t.stride())
    return result.requires_grad_() if t.requires_grad else result


def _clone_input(sample, device: str | None = None):
    """The sample with its input cloned (on CPU, or moved to ``device``): an in-place variant writes it."""
    s = sample.transform(lambda t: t)
    s.input = clone_keep_layout(sample.input)
    return opinfo._move(s, device) if device else s


def _host_only(error: BaseException | None) -> bool:
    """The device refused a tensor the op wants on the host (tensor_split's indices): the sweep moved it."""
    return error is not None and "to be on cpu" in str(error)


def check_variants(op, sample, device: str, mode: str = "eager") -> cmp.Comparison:
    variants = _variants(op)
    if not variants:
        return _skip("the op has no method, in-place or operator variant")
    if not isinstance(sample.input, torch.Tensor):
        return _skip("the sample's input is not a tensor")
    _, fn_dev, _ = _functional(op, sample, device, mode)
    on = None if opinfo._names_host(sample) else device  # x.to('cpu') puts its result on the host
    result = cmp.Comparison(True, criterion="variants")
    reference = _Reference(op, sample)
    ran = 0
    for name, fn, inplace in variants:
        if "operator" in name and sample.kwargs:
            continue  # test_ops: operators take no keyword arguments
        cpu_sample, dev_sample = _clone_input(sample), _clone_input(sample, device)
        cpu = _attempt(lambda: fn(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs))
        dev = _attempt(lambda: fn(dev_sample.input, *dev_sample.args, **dev_sample.kwargs), mode, device)
        ran += 1
        errors = _parity(cpu, dev, device, f"{name} variant")
        if errors is not None and cpu.error is None and _host_only(dev.error):
            ran -= 1
            continue
        if errors is not None:
            result = result.merge(errors)
            continue
        result = result.merge(_compare(dev.value, cpu.value, on, f"{name} variant", reference.part()))
        if inplace:
            if mode == "eager" and dev.value is not dev_sample.input:
                result = result.merge(cmp.Comparison(False, f"{name} variant: did not return self",
                                                     criterion="aliasing"))
            result = result.merge(_compare(dev_sample.input, cpu_sample.input, device, f"{name} variant's self",
                                           reference.part()))
        if fn_dev.error is None and cpu.error is None and not inplace:
            result = result.merge(_compare(dev.value, _to_cpu(fn_dev.value), on,
                                           f"{name} variant vs the device's function"))
    return result if ran else _skip("no variant applies to the sample (operators take no kwargs)")


# ---- in-place rules -----------------------------------------------------------------------------

def check_inplace_rules(op, sample, device: str, mode: str = "eager") -> cmp.Comparison:
    fn = op.get_inplace()
    if fn is None:
        return _skip("the op has no in-place variant")
    x = sample.input
    if not isinstance(x, torch.Tensor) or x.layout != torch.strided:
        return _skip("the sample's input is not a strided tensor")
    result = cmp.Comparison(True, criterion="in-place rules")

    def run(self_cpu: torch.Tensor, where: str, view_of: torch.Tensor | None = None,
            reference: Callable[[], Any] | None = None) -> cmp.Comparison:
        memo: dict = {}
        cpu_self = self_cpu
        base = view_of if view_of is not None else self_cpu
        dev_base = opinfo.to_device(base, device, memo)
        dev_self = opinfo.to_device(cpu_self, device, memo)
        rest = sample.transform(lambda t: t)
        dev_rest = rest.transform(lambda t: opinfo.to_device(t, device, memo))
        shape, x_numel = tuple(cpu_self.shape), cpu_self.numel()
        cpu = _attempt(lambda: fn(cpu_self, *rest.args, **rest.kwargs))
        dev = _attempt(lambda: fn(dev_self, *dev_rest.args, **dev_rest.kwargs), mode, device)
        errors = _parity(cpu, dev, device, where)
        if tuple(dev_self.shape) != tuple(cpu_self.shape):
            # a view op's in-place form (squeeze_, t_, as_strided_) changes self's shape on CPU too
            return cmp.Comparison(False, f"{where}: self's shape went from {list(shape)} to {list(dev_self.shape)}, "
                                         f"on CPU to {list(cpu_self.shape)}"
                                  + (" (CPU raised " + _describe(cpu.error) + ")" if cpu.error else ""),
                                  criterion="in-place shape")
        if errors is not None and cpu.error is None and _host_only(dev.error):
            return _skip("the op requires some tensors on the host")
        if errors is not None:
            return errors
        if cpu_self.numel() > x_numel:
            return cmp.Comparison(True, criterion="in-place shape (self grew: its new elements are uninitialized)")
        return _compare(dev_base, base, device, where, reference)

    ran = 0
    if x.dim() >= 1 and x.shape[-1] > 1:
        narrow = x[..., :1].clone()  # self [..., 1]: the other operands broadcast it to x's shape
        result = result.merge(run(narrow, f"in-place on self of shape {list(narrow.shape)} (broadcast shape "
                                          f"{list(x.shape)})"))
        ran += 1
    if getattr(sample, "broadcasts_input", False):
        result = result.merge(run(x.clone(), "in-place on a sample OpInfo marks broadcasts_input"))
        ran += 1
    # in place on a view (a slice of a larger base at an offset): written through, the rest of the base untouched
    base = torch.stack([x.detach().clone(), x.detach().clone()])
    functional = _Reference(op, sample).part()

    def view_reference() -> torch.Tensor | None:  # the base in float64: the untouched half, then the result
        ref = functional()
        if not isinstance(ref, torch.Tensor) or ref.shape != x.shape:
            return None
        return torch.stack([x.detach().to(ref.dtype), ref])

    result = result.merge(run(base[1], "in-place on a view", view_of=base, reference=view_reference))
    ran += 1
    return result


# ---- error inputs ---------------------------------------------------------------------------------

def check_error_input(op, error_input, device: str, mode: str = "eager") -> cmp.Comparison:
    sample = error_input.sample_input
    if not opinfo._has_tensor(sample) and "device" not in sample.kwargs:
        return _skip("the error input has no tensor; nothing runs on the device")
    cpu = _attempt(lambda: opinfo._call(op, sample))
    if cpu.error is None:
        return _skip("the error input does not raise on CPU when called directly")
    moved = opinfo._move(sample, device, name_device=False)
    dev = _attempt(lambda: opinfo._call(op, moved), mode, device)
    errors = _parity(cpu, dev, device, "error input")
    if errors is None or not errors.ok:
        return errors if errors is not None else cmp.Comparison(False, "error input: neither side raised")
    expected_type = getattr(error_input, "error_type", None)
    if expected_type is not None and isinstance(cpu.error, expected_type) and not isinstance(dev.error, expected_type):
        return cmp.Comparison(False, f"error input: OpInfo expects {expected_type.__name__}; the device raised "
                                     f"{_describe(dev.error)}", criterion="error parity")
    regex = getattr(error_input, "error_regex", "") or ""
    if regex and re.search(regex, str(cpu.error)) and not re.search(regex, str(dev.error)):
        return cmp.Comparison(False, f"error input: message {str(dev.error)[:200]!r} does not match OpInfo's "
                                     f"error_regex {regex!r} (CPU's does: {str(cpu.error)[:160]!r})",
                              criterion="error message")
    return cmp.Comparison(True, criterion="error class and message")


# ---- running ----------------------------------------------------------------------------------------

SAMPLE_CHECKS: dict[str, Callable] = {
    "out_values": check_out_values, "out_device": check_out_device, "out_dtype": check_out_dtype,
    "out_resize": check_out_resize, "variants": check_variants, "inplace_rules": check_inplace_rules,
}


def applies(op, check: str) -> str | None:
    """None if ``check`` applies to ``op``, else why not."""
    reason = opinfo.skip_reason(op)
    if reason:
        return reason
    if check.startswith("out_") and not op.supports_out:
        return "the op does not support out= (OpInfo supports_out)"
    if check == "variants" and not _variants(op):
        return "the op has no method, in-place or operator variant"
    if check == "inplace_rules" and op.get_inplace() is None:
        return "the op has no in-place variant"
    if check == "error_inputs" and op.error_inputs_func is None:
        return "the op has no error inputs"
    return None


def _inputs(op, check: str, dtype: torch.dtype, max_samples: int | None) -> Iterator[tuple[str, int, Any]]:
    if check == "error_inputs":
        torch.manual_seed(opinfo.SEED)
        for i, error_input in enumerate(op.error_inputs("cpu")):
            if max_samples is not None and i >= max_samples:
                break
            yield "error", i, error_input
        return
    if check != "inplace_rules":
        yield from opinfo._samples(op, dtype, max_samples, reference=False)
        return
    # the first samples, and (as many again) the samples OpInfo marks broadcasts_input: where an
    # in-place variant must refuse to broadcast self
    marked = 0
    for kind, i, sample in opinfo._samples(op, dtype, None, reference=False):
        if max_samples is None or i < max_samples:
            yield kind, i, sample
        elif getattr(sample, "broadcasts_input", False) and marked < max_samples:
            marked += 1
            yield kind, i, sample


def run_check(op, check: str, dtypes: list[torch.dtype], device: str, max_samples: int | None = 2,
              mode: str = "eager", xfails=None) -> list[Result]:
    """One contract check of one OpInfo, over its first ``max_samples`` samples in each dtype CPU supports
    (error inputs once, in float32's name: OpInfo makes them per device only)."""
    reason = applies(op, check)
    if reason:
        return []
    results = []
    for dtype in ([torch.float32] if check == "error_inputs" else dtypes):
        if check != "error_inputs" and not op.supports_dtype(dtype, "cpu"):
            continue
        try:
            inputs = list(_inputs(op, check, dtype, max_samples))
        except Exception as e:  # noqa: BLE001 - an OpInfo that cannot build samples here is a skip
            results.append(_result(op, check, dtype, "sample", -1, None, _skip(f"sample generation failed: {e}"),
                                   0.0, device, mode, xfails))
            continue
        for kind, index, item in inputs:
            t0 = time.perf_counter()
            _reset_stats(device)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    if check == "error_inputs":
                        comparison = check_error_input(op, item, device, mode)
                    else:
                        usable = _usable(op, item)
                        comparison = _skip(usable) if usable else SAMPLE_CHECKS[check](op, item, device, mode)
            except Exception as e:  # noqa: BLE001 - a harness error is reported, not hidden
                comparison = cmp.Comparison(False, f"harness error in {check}: {_describe(e)}", criterion="harness")
            sample = item.sample_input if check == "error_inputs" else item
            results.append(_result(op, check, dtype, kind, index, sample, comparison, time.perf_counter() - t0,
                                   device, mode, xfails))
            results[-1].device_ops = _stats(device)  # the overloads the check reached on the device
    return results


def rerun(op, check: str, dtype: torch.dtype, kind: str, index: int, device: str, mode: str = "eager"
          ) -> cmp.Comparison:
    """One stored contract case (op, check, dtype, sample) again, as ``run_check`` ran it (harness.mutate
    reruns it with a planted kernel)."""
    item = opinfo.sample_at(op, dtype, "error" if check == "error_inputs" else kind, index)
    if item is None:
        return _skip("the sample is no longer generated")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if check == "error_inputs":
                return check_error_input(op, item, device, mode)
            usable = _usable(op, item)
            return _skip(usable) if usable else SAMPLE_CHECKS[check](op, item, device, mode)
    except Exception as e:  # noqa: BLE001 - as run_check: a harness error is reported, not hidden
        return cmp.Comparison(False, f"harness error in {check}: {_describe(e)}", criterion="harness")


def _result(op, check, dtype, kind, index, sample, comparison: cmp.Comparison, seconds: float, device: str,
            mode: str, xfails) -> Result:
    verdict = "skip" if comparison.criterion.startswith("skip") else "pass" if comparison.ok else "fail"
    specs = opinfo._specs_of(sample) if sample is not None else ()
    case = Case(opinfo.full_name(op), dtype_name(dtype), specs, {"check": check, "kind": kind, "index": index}, mode,
                device, source="contract")
    result = Result(case, verdict, comparison.message or (comparison.criterion if verdict == "skip" else ""),
                    comparison, device_ms=seconds * 1e3, expression=f"{op.name} {check} ({kind} #{index})",
                    check=check)
    if xfails is not None and verdict in ("pass", "fail"):
        entry = xfails.match(case, verdict == "fail", comparison.message)
        if entry is not None:
            result.xfail_reason = f"{entry.category}: {entry.reason}"
            result.verdict = "xfail" if verdict == "fail" else "xpass"
    return result
