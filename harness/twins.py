"""Twin overloads: the other ways PyTorch can reach the same computation, checked on every designed case.

A user (or autograd, a decomposition, a compiler) reaches a computation through several aten
overloads of one packet: ``relu`` and ``relu_`` and ``relu.out``; ``threshold_backward`` and
``threshold_backward.grad_input``; ``add.Tensor`` with a wrapped number and ``add.Scalar`` and
``add.Scalar_out``; ``mm`` and ``mm.dtype`` and ``mm.dtype_out``. A device registers a kernel per
overload, and a kernel no case reaches is a kernel nothing checks: before this module a third of
the device's kernels (99 of them) were reached by no case of the default op suite, however good
the cases of their functional twin (mutation run of issue 18).

So each eager case of an op spec records, on the device, every aten call its expression (and its
backward) makes, with a snapshot of the arguments (their strides and storage offsets kept: an
expanded or transposed input stays one); then, for each overload called, it calls each *twin* the
device registers a kernel for, with the same arguments, on the device and on CPU, and compares:

  out        the overload's out= form (``.out``, ``.grad_input``, ``.values``...): the out tensors
             start empty, so they must be resized; the result must alias them on both sides
  inplace    the ``name_`` form of a functional call (self written; CPU's error where it cannot be)
  functional the functional form of an in-place call
  scalar     the ``Scalar`` overload where the call passed a 0-dim tensor for a ``Tensor`` argument
             (a wrapped Python number), and that overload's out= form
  dtype      the ``out_dtype`` overload (``mm.dtype``: bf16/fp16 operands, float32 result) and its out=

The same recording gives every device kernel a case makes reach an error input, whatever its spec: the
*cross-device probe* (``check_probe``) calls each recorded overload with two or more tensor arguments again
on the device, one read argument moved to the host. Where the running torch rejects that mix (its
``native_functions.yaml`` keeps ``device_check: ExactSame`` for the overload, or its meta kernel refuses the
call), the device must raise RuntimeError and leave its arguments unwritten; where PyTorch accepts it (``copy_``,
``index``'s host indices) the probe is skipped.

A twin passes when the device's result equals, bit for bit, the device's own result of the
recorded call (the functional kernel the case already judged), or else when it is within the
spec's tolerance of CPU's twin; an error must be CPU's class. The harness asks the dispatcher
which twins the device registers (``torch._C._dispatch_has_kernel_for_dispatch_key`` on the
device's dispatch key), so it works for any PyTorch device and checks only kernels that exist.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness import compare as cmp

OUT_DTYPE = "out_dtype"
SCALAR, SCALAR_TYPE = "number", "int"  # how a schema's Scalar and ScalarType arguments print


def dispatch_key(device: str) -> str | None:
    """The dispatch key of a device's own kernels (None where the harness cannot name it)."""
    kind = torch.device(device).type
    if kind == torch._C._get_privateuse1_backend_name():
        return "PrivateUse1"
    return {"cuda": "CUDA", "xpu": "XPU", "mps": "MPS", "meta": "Meta"}.get(kind)


# --- which overloads are twins ---------------------------------------------------------------

@dataclass(frozen=True)
class Twin:
    kind: str  # out, inplace, functional, scalar, dtype
    name: str  # "aten::relu_" / "aten::add.Scalar_out"
    scalar_arg: str | None = None  # the Tensor argument a scalar twin takes as a Scalar

    @property
    def overload(self) -> torch._ops.OpOverload:
        return _overload(self.name)


def _overload(name: str) -> torch._ops.OpOverload:
    packet, _, variant = name.split("::", 1)[1].partition(".")
    return getattr(getattr(torch.ops.aten, packet), variant or "default")


def _name(op: torch._ops.OpOverload) -> str:
    return op.name() if op._overloadname != "default" else op.name().split(".")[0]


def _signature(op: torch._ops.OpOverload) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in op._schema.arguments if not a.is_out]


def _overloads(packet: str) -> list[torch._ops.OpOverload]:
    found = getattr(torch.ops.aten, packet, None)
    if found is None:
        return []
    result = []
    for variant in found.overloads():
        try:
            result.append(getattr(found, variant))
        except (AttributeError, RuntimeError):
            continue
    return result


def _out_forms(op: torch._ops.OpOverload) -> list[torch._ops.OpOverload]:
    """Overloads of ``op``'s packet taking ``op``'s arguments plus out= tensors."""
    mine = _signature(op)
    return [o for o in _overloads(op._schema.name.split("::")[1])
            if o is not op and any(a.is_out for a in o._schema.arguments) and _signature(o) == mine]


@functools.lru_cache(maxsize=None)
def twins_of(name: str, key: str) -> tuple[Twin, ...]:
    """The twins of overload ``name`` that have a kernel of their own on dispatch key ``key``."""
    try:
        op = _overload(name)
    except (AttributeError, RuntimeError):
        return ()
    packet = op._schema.name.split("::")[1]
    mine = _signature(op)
    found: list[Twin] = []
    if not any(a.is_out for a in op._schema.arguments):
        found += [Twin("out", _name(o)) for o in _out_forms(op)]
        if packet.endswith("_"):
            found += [Twin("functional", _name(o)) for o in _overloads(packet[:-1])
                      if o._overloadname == op._overloadname and _signature(o) == mine]
        else:
            found += [Twin("inplace", _name(o)) for o in _overloads(packet + "_")
                      if o._overloadname == op._overloadname and _signature(o) == mine]
        for o in _overloads(packet):
            theirs = _signature(o)
            if o is op or any(a.is_out for a in o._schema.arguments) or len(theirs) != len(mine):
                continue
            differ = [(m, t) for m, t in zip(mine, theirs) if m != t]
            if len(differ) == 1 and differ[0][0][0] == differ[0][1][0] and differ[0][0][1] == "Tensor" \
                    and differ[0][1][1] == SCALAR:
                found.append(Twin("scalar", _name(o), differ[0][0][0]))
                found += [Twin("scalar", _name(t), differ[0][0][0]) for t in _out_forms(o)]
        for o in _overloads(packet):
            theirs = _signature(o)
            if theirs == mine + [(OUT_DTYPE, SCALAR_TYPE)]:
                found.append(Twin("dtype", _name(o)))
                found += [Twin("dtype", _name(t)) for t in _out_forms(o)]
    # a twin the device has a kernel for, and CPU too (the oracle: CUDA-only fused cells have none)
    if not cpu_has_kernel(name):
        return ()
    return tuple(t for t in found if torch._C._dispatch_has_kernel_for_dispatch_key(t.name, key)
                 and cpu_has_kernel(t.name))


def cpu_has_kernel(name: str) -> bool:
    """Whether CPU eager, the oracle, can run overload ``name`` (its own kernel or a composite one)."""
    return torch._C._dispatch_has_computed_kernel_for_dispatch_key(name, "CPU")


# --- recording the calls, with their arguments ----------------------------------------------

class Snapshot:
    """A tensor argument as it was when the call started: its storage span copied, its view kept
    (sizes, strides, offset within the span), so a twin sees the layout the kernel saw. With
    ``values=False`` only the layout, dtype and device are kept (what the cross-device probe needs: PyTorch
    refuses a mix of devices before it reads a value), and ``make`` gives uninitialised memory."""

    __slots__ = ("region", "host", "size", "stride", "dtype", "device", "extent")

    def __init__(self, t: torch.Tensor, values: bool = True) -> None:
        t = t.detach()
        self.size, self.stride, self.dtype, self.device = tuple(t.shape), tuple(t.stride()), t.dtype, t.device
        self.extent = 0 if t.numel() == 0 else 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride))
        self.region = self.host = None
        if values:
            self.region = t.as_strided((self.extent,), (1,), t.storage_offset()).clone() if self.extent else \
                torch.empty(0, dtype=t.dtype, device=t.device)
            self.host = self.region.cpu()

    @property
    def overlapping(self) -> bool:
        """Whether two elements share memory (a write through it is ill-defined: its result is the loop order's)."""
        n = 1
        for s in self.size:
            n *= s
        if n <= 1:
            return False
        offsets = torch.arange(self.extent).as_strided(self.size, self.stride, 0)
        return int(offsets.unique().numel()) != n

    def make(self, device: bool) -> torch.Tensor:
        """A fresh tensor of the snapshot, on its device or on the host."""
        return self._of((self.region if device else self.host).clone() if self.region is not None else None, device)

    def view(self, device: bool) -> torch.Tensor:
        """The snapshot itself, not copied (for a call that must not write it)."""
        return self._of(self.region if device else self.host, device)

    def _of(self, region: torch.Tensor | None, device: bool) -> torch.Tensor:
        if region is None:
            region = torch.empty(self.extent, dtype=self.dtype, device=self.device if device else "cpu")
        if region.numel() == 0:
            return torch.empty(self.size, dtype=region.dtype, device=region.device)
        return region.as_strided(self.size, self.stride, 0)


@dataclass
class Call:
    op: torch._ops.OpOverload
    args: tuple
    kwargs: dict
    result: Any = None  # the device's result of the recorded call (host copies), None if it raised
    updated: list = field(default_factory=list)  # host copies, after the call, of what it wrote in place (not out=)


def _snap(value: Any, values: bool = True) -> Any:
    if isinstance(value, torch.Tensor):
        return Snapshot(value, values)
    if isinstance(value, (list, tuple)):
        return type(value)(_snap(v, values) for v in value)
    return value


def _make(value: Any, device: bool) -> Any:
    if isinstance(value, Snapshot):
        return value.make(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_make(v, device) for v in value)
    return value


def _host(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_host(v) for v in value)
    return value


def _on(value: Any, device_type: str) -> bool:
    if isinstance(value, torch.Tensor):
        return value.device.type == device_type
    if isinstance(value, (list, tuple)):
        return any(_on(v, device_type) for v in value)
    return False


class Recorder(TorchDispatchMode):
    """Records the first call of each overload that has twins on the device, or that the cross-device probe can
    reach (a device kernel and two tensor arguments, ``probe_candidate``), and has a device tensor argument."""

    def __init__(self, device: str, key: str) -> None:
        super().__init__()
        self.device_type, self.key = torch.device(device).type, key
        self.calls: dict[tuple[str, bool], Call] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        call = None
        twinned = bool(twins_of(name, self.key))
        wanted = twinned or (probe_candidate(name, self.key) and len(_tensors(list(args) + list(kwargs.values()))) >= 2)
        if wanted and (_on(args, self.device_type) or _on(list(kwargs.values()), self.device_type)):
            # the first call of each overload, and its first call with a 0-dim tensor argument (a wrapped
            # number: what a scalar twin needs); a call only the probe uses keeps no values
            slot = (name, any(t.dim() == 0 for t in _tensors(list(args) + list(kwargs.values()))))
            if slot not in self.calls:
                call = Call(func, _snap(args, twinned), {k: _snap(v, twinned) for k, v in kwargs.items()})
                self.calls[slot] = call
        result = func(*args, **kwargs)
        if call is not None and twinned:
            call.result = _host(result)
            call.updated = [_host(v) for a, v in _bound(func, args, kwargs) if _updates(func, a)
                            and isinstance(v, torch.Tensor)]
        return result


# --- calling and judging the twins ------------------------------------------------------------

def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _snapshots(call: Call):
    """The call's tensor arguments (in lists too), in argument order."""
    for a in list(call.args) + list(call.kwargs.values()):
        for v in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(v, Snapshot):
                yield v


def _first_tensor(call: Call) -> Snapshot | None:
    return next(_snapshots(call), None)


def _arguments(twin: Twin, call: Call, device: bool) -> tuple[tuple, dict, list[torch.Tensor]] | None:
    """The twin's (args, kwargs) on one side, and the out tensors it was given; None if not applicable."""
    target = torch.device(call_device(call)) if device else torch.device("cpu")
    args, kwargs = list(_make(call.args, device)), {k: _make(v, device) for k, v in call.kwargs.items()}
    schema = call.op._schema
    if twin.kind == "scalar":
        names = [a.name for a in schema.arguments]
        i = names.index(twin.scalar_arg)
        value = args[i] if i < len(args) else kwargs.get(twin.scalar_arg)
        if not isinstance(value, torch.Tensor) or value.dim() != 0:
            return None
        if i < len(args):
            args[i] = value.item()
        else:
            kwargs[twin.scalar_arg] = value.item()
    if twin.kind == "inplace":
        first = call.args[0] if call.args else None
        if isinstance(first, Snapshot) and first.overlapping:
            return None  # writing self through overlapping memory: PyTorch leaves the result to the loop order
    if twin.kind == "dtype":
        first = _first_tensor(call)
        if first is None or first.dtype not in (torch.bfloat16, torch.float16):
            return None
        kwargs[OUT_DTYPE] = torch.float32
    outs: list[torch.Tensor] = []
    twin_outs = [a for a in twin.overload._schema.arguments if a.is_out]
    if twin_outs:
        results = _tensors(call.result)
        first = _first_tensor(call)
        for j, a in enumerate(twin_outs):
            dtype = results[j].dtype if j < len(results) else (first.dtype if first else torch.float32)
            if twin.kind == "dtype":
                dtype = torch.float32
            out = torch.empty(0, dtype=dtype, device=target)
            outs.append(out)
            kwargs[a.name] = out
    return tuple(args), kwargs, outs


def call_device(call: Call) -> torch.device:
    return next((s.device for s in _snapshots(call) if s.device.type != "cpu"), torch.device("cpu"))


def _own_arguments(call: Call) -> tuple[tuple, dict]:
    """The recorded call's own arguments, made again on the device."""
    return tuple(_make(call.args, True)), {k: _make(v, True) for k, v in call.kwargs.items()}


def _run(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[Any, BaseException | None]:
    try:
        with torch.no_grad():
            return op(*args, **kwargs), None
    except Exception as error:  # noqa: BLE001 - error parity is a check
        return None, error


def _bound(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list[tuple[Any, Any]]:
    """(schema argument, value) of each argument a call passed, positionally or by name."""
    return [(a, args[i] if i < len(args) else kwargs[a.name]) for i, a in enumerate(op._schema.arguments)
            if i < len(args) or a.name in kwargs]


def _updates(op: torch._ops.OpOverload, a: Any) -> bool:
    """Whether ``op``'s schema argument ``a`` is written in place without being out= or self (the first)."""
    return a.name != op._schema.arguments[0].name and a.alias_info is not None and a.alias_info.is_write and not a.is_out


def _own(call: Call) -> Any:
    """What the device's own call gave its caller: its result, and what it wrote in place besides (the twin
    shortcut compares a twin's ``_written`` with it)."""
    return _tensors(call.result) + call.updated if call.updated else call.result


def _written(twin: Twin, args: tuple, kwargs: dict, result: Any, outs: list[torch.Tensor],
             updates: bool = True) -> Any:
    """What a twin's caller sees: the out tensors, self of an in-place form, else the result; and the other
    tensors the overload writes in place (``Tensor(a!)`` arguments that are not out=: batch norm's running
    statistics, which ``_native_batch_norm_legit.out`` updates besides writing its outs; ``updates`` False: not
    those, where the twin is compared with the device's own call's result)."""
    schema = twin.overload._schema.arguments
    updated = [value for i, a in enumerate(schema) if _updates(twin.overload, a)
               for value in [args[i] if i < len(args) else kwargs.get(a.name)] if isinstance(value, torch.Tensor)] \
        if updates else []
    if outs:
        return outs + updated if updated else outs
    if twin.kind == "inplace":
        return [args[0]] + updated if updated else args[0]
    return result


def _aliases(result: Any, outs: list[torch.Tensor]) -> list[bool]:
    got = _tensors(result)
    return [i < len(got) and got[i].numel() > 0 and got[i].data_ptr() == o.data_ptr() for i, o in enumerate(outs)]


def _bit_equal(a: Any, b: Any) -> bool:
    ta, tb = _tensors(a), _tensors(b)
    if len(ta) != len(tb) or not ta:
        return False
    for x, y in zip(ta, tb):
        x, y = x.detach().cpu(), y.detach().cpu()
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if x.dtype.is_floating_point and x.element_size() in (2, 4, 8):
            view = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
            if not torch.equal(x.contiguous().view(view), y.contiguous().view(view)):
                return False
        elif not torch.equal(x, y):
            return False
    return True


def check_twin(twin: Twin, call: Call, judge: Callable[[Any, Any], cmp.Comparison]) -> cmp.Comparison | None:
    """One twin of one recorded call, on the device and on CPU; None when it does not apply."""
    sides = []
    for device in (True, False):
        built = _arguments(twin, call, device)
        if built is None:
            return None
        args, kwargs, outs = built
        result, error = _run(twin.overload, args, kwargs)
        sides.append((args, kwargs, result, error, outs))
    (d_args, d_kwargs, d_result, d_error, d_outs), (c_args, c_kwargs, c_result, c_error, c_outs) = sides
    where = f"twin {twin.name} ({twin.kind} form of {_name(call.op)})"
    if isinstance(c_error, NotImplementedError) and twin.kind in ("out", "inplace", "functional"):
        # CPU has no kernel for the overload (an *_overrideable op, whose CPU entry only raises "not implemented
        # ... override this function"): its twin is judged by the device's own call, which the case judged (its
        # error, where it raised: the recorded call again on the device)
        if call.result is None or d_error is not None:
            _, own = _run(call.op, *_own_arguments(call))
            if own is None or d_error is None:
                who = "the twin" if d_error is not None else f"{_name(call.op)}"
                return cmp.Comparison(False, f"{where}: {who} raised, the other returned (CPU has no kernel for it)",
                                      criterion="twin")
            parity = cmp.same_error(d_error, own)
            return parity if parity.ok else cmp.Comparison(False, f"{where}: {parity.message}", criterion="twin")
        actual = _written(twin, d_args, d_kwargs, d_result, d_outs, updates=False)
        if not _bit_equal(actual, call.result):
            return cmp.Comparison(False, f"{where}: not the device's own {_name(call.op)} result (CPU has no kernel "
                                         f"for it to compare with)", criterion="twin")
        judged = cmp.Comparison(True, criterion="twin: bit-identical to the device's own call (no CPU kernel)")
        return judged.merge(_out_on_host(twin, call, where)) if d_outs else judged
    if c_error is not None or d_error is not None:
        if c_error is not None and d_error is not None:
            parity = cmp.same_error(d_error, c_error)
            return parity if parity.ok else cmp.Comparison(False, f"{where}: {parity.message}", criterion="twin")
        who, error = ("CPU", c_error) if c_error is not None else ("the device", d_error)
        other = "the device" if who == "CPU" else "CPU"
        return cmp.Comparison(False, f"{where}: {who} raised {type(error).__name__}: {str(error)[:200]}; {other} "
                                     f"returned a result", criterion="twin")
    if _aliases(d_result, d_outs) != _aliases(c_result, c_outs):
        return cmp.Comparison(False, f"{where}: the result aliases the out= tensors on CPU {_aliases(c_result, c_outs)}"
                                     f", on the device {_aliases(d_result, d_outs)}", criterion="twin")
    actual, expected = _written(twin, d_args, d_kwargs, d_result, d_outs), _written(twin, c_args, c_kwargs, c_result, c_outs)
    if twin.kind in ("out", "inplace", "functional") and call.result is not None and \
            _bit_equal(actual, _own(call)):
        judged = cmp.Comparison(True, criterion="twin: bit-identical to the device's own call")
    else:
        judged = judge(actual, _host(expected))
        if not judged.ok:
            judged.message = f"{where}: {judged.message}"
    if judged.ok and d_outs:
        judged = judged.merge(_out_on_host(twin, call, where))
    return judged


def _out_on_host(twin: Twin, call: Call, where: str) -> cmp.Comparison:
    """PyTorch's test_out wrong-device rule for an out= twin: the device's inputs with CPU out tensors must raise
    RuntimeError ("Expected out tensor to have device ...") and leave those tensors unwritten."""
    built = _arguments(twin, call, True)
    if built is None:
        return cmp.Comparison(True)
    args, kwargs, outs = built
    host = {a.name: torch.full((1,), 7, dtype=o.dtype) for a, o in
            zip([a for a in twin.overload._schema.arguments if a.is_out], outs)}
    kwargs.update(host)
    before = {name: t.clone() for name, t in host.items()}
    _, error = _run(twin.overload, args, kwargs)
    written = any(t.shape != before[name].shape or not torch.equal(t, before[name]) for name, t in host.items())
    if error is None:
        return cmp.Comparison(False, f"{where}: out= on cpu for inputs on the device did not raise (PyTorch raises "
                                     f"RuntimeError: Expected out tensor to have device ...)"
                                     + ("; the CPU out tensor was written" if written else ""), criterion="twin")
    if not isinstance(error, RuntimeError) or written:
        return cmp.Comparison(False, f"{where}: out= on cpu for inputs on the device raised {type(error).__name__}: "
                                     f"{str(error)[:160]}" + ("; the CPU out tensor was written" if written else "")
                                     + "; PyTorch raises RuntimeError before writing", criterion="twin")
    return cmp.Comparison(True)


# --- the cross-device probe: one tensor argument on the host ------------------------------------

@functools.lru_cache(maxsize=None)
def probe_candidate(name: str, key: str) -> bool:
    """Whether the device has a kernel of its own for overload ``name``: a call of it with a host tensor among
    device tensors reaches that kernel (the device's dispatch key outranks CPU's), which must then raise
    what PyTorch raises."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    except RuntimeError:
        return False


@functools.lru_cache(maxsize=1)
def _native_functions() -> dict[str, dict]:
    """The running torch's own ``native_functions.yaml`` (shipped in ``torchgen``), entry by overload name."""
    import os

    import torchgen
    import yaml

    path = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen", "native", "native_functions.yaml")
    try:
        with open(path) as fh:
            entries = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError:
        return {}
    return {e["func"].split("(", 1)[0]: e for e in entries if isinstance(e, dict) and "func" in e}


def _codegen_checks_devices(op: torch._ops.OpOverload) -> bool:
    """Whether PyTorch's generated backend wrapper checks that every tensor argument is on one device: the
    overload's ``native_functions.yaml`` entry keeps the default ``device_check: ExactSame`` (``NoCheck`` marks
    the ops that accept a host tensor: ``copy_``, ``index.Tensor``'s host indices, TensorIterator's host
    scalars) and has a device backend kernel of its own (structured, or a ``CUDA`` dispatch entry, whose generated
    wrapper holds the check: a composite kernel checks nothing itself, its inner calls do, and a ``Meta`` entry
    beside one, as ``copy``'s, is no device's)."""
    entry = _native_functions().get(op._schema.name.split("::", 1)[1] +
                                    (f".{op._overloadname}" if op._overloadname != "default" else ""))
    if entry is None or entry.get("device_check", "ExactSame") != "ExactSame":
        return False
    keys = {k.strip() for key in entry.get("dispatch") or {} for k in key.split(",")}
    return bool("CUDA" in keys or entry.get("structured") or entry.get("structured_delegate"))


def _meta(s: Snapshot) -> torch.Tensor:
    return torch.empty(s.extent, dtype=s.dtype, device="meta").as_strided(s.size, s.stride, 0)


def _with(call: Call, make: Callable[[Snapshot], torch.Tensor], slot: tuple[str, int]) -> tuple[tuple, dict]:
    """The call's arguments, each tensor made by ``make`` except the one at ``slot`` (argument name, position in
    its list), made on the host."""
    def build(name: str, value: Any) -> Any:
        if isinstance(value, Snapshot):
            return value.make(False) if slot == (name, 0) else make(value)
        if isinstance(value, (list, tuple)):
            return type(value)(v.make(False) if slot == (name, j) else make(v) if isinstance(v, Snapshot) else v
                               for j, v in enumerate(value))
        return value
    names = [a.name for a in call.op._schema.arguments]
    return (tuple(build(names[i], v) for i, v in enumerate(call.args)),
            {k: build(k, v) for k, v in call.kwargs.items()})


def _slots(call: Call) -> list[tuple[str, int]]:
    """The tensor arguments a probe may move to the host: read-only inputs (a written one is ``written.py``'s
    rule, an out= one ``_out_on_host``'s) with dimensions (a 0-dim host tensor is a scalar PyTorch accepts)."""
    schema = call.op._schema
    values = dict(zip([a.name for a in schema.arguments], call.args)) | call.kwargs
    slots = []
    for a in schema.arguments:
        if a.is_out or (a.alias_info is not None and a.alias_info.is_write):
            continue
        value = values.get(a.name)
        items = value if isinstance(value, (list, tuple)) else [value]
        j = next((j for j, v in enumerate(items) if isinstance(v, Snapshot) and v.size), None)
        if j is not None:
            slots.append((a.name, j))
    return slots


_REJECTS: dict[tuple[str, str], str | None] = {}


def mixed_devices_rejected(call: Call, slot: tuple[str, int]) -> str | None:
    """Why PyTorch rejects the call with the argument at ``slot`` on the host and the others on a device (None
    where it accepts, or cannot say). Two facts of the running torch, never a list: its codegen's device check
    (``_codegen_checks_devices``); else its meta kernels, the device stood in by ``meta``: the call on meta
    tensors must succeed, and the same call with the argument on the host raise RuntimeError. Cached per
    overload and argument (the rule is the op's, not the shapes')."""
    key = (_name(call.op), slot[0])
    if key in _REJECTS:
        return _REJECTS[key]
    if _codegen_checks_devices(call.op):
        _REJECTS[key] = "its native_functions.yaml entry keeps device_check: ExactSame"
        return _REJECTS[key]
    _, control = _run(call.op, *_with(call, _meta, ("", -1)))
    if control is not None:
        return None  # the meta kernel cannot run the call at all: no answer, not cached
    _, mixed = _run(call.op, *_with(call, _meta, slot))
    _REJECTS[key] = f"its meta kernel raises {type(mixed).__name__}: {str(mixed)[:80]}" \
        if isinstance(mixed, RuntimeError) else None
    return _REJECTS[key]


def check_probe(call: Call, slot: tuple[str, int]) -> cmp.Comparison | None:
    """The device's kernel with the argument at ``slot`` on the host must raise RuntimeError where PyTorch
    rejects the mix, and leave every device argument unwritten; None when the probe does not apply."""
    why = mixed_devices_rejected(call, slot)
    if why is None:
        return None
    target = call_device(call)
    args, kwargs = _with(call, lambda s: s.view(True), slot)  # not copied: a kernel must refuse before it reads
    if not any(t.device == target for t in _tensors(list(args) + list(kwargs.values()))):
        return None  # the host argument was the only device tensor
    written = dict(zip([a.name for a in call.op._schema.arguments], args)) | kwargs
    before = [(t, t.cpu()) for a in call.op._schema.arguments if a.alias_info is not None and a.alias_info.is_write
              for t in _tensors(written.get(a.name)) if t.device == target]
    result, error = _run(call.op, args, kwargs)
    where = f"{_name(call.op)} with {slot[0]} on the host ({why})"
    if error is None:
        return cmp.Comparison(False, f"{where}: the device returned a result; PyTorch raises RuntimeError "
                                     f"(Expected all tensors to be on the same device)", criterion="probe")
    if not isinstance(error, RuntimeError):
        return cmp.Comparison(False, f"{where}: the device raised {type(error).__name__}: {str(error)[:160]}; "
                                     f"PyTorch raises RuntimeError", criterion="probe")
    if any(not _bit_equal(t, old) for t, old in before):
        return cmp.Comparison(False, f"{where}: the device raised, but wrote an argument it writes first",
                              criterion="probe")
    return cmp.Comparison(True, criterion="probe")


def record(run: Callable[[], Any], device: str) -> list[Call]:
    """The calls ``run`` makes on ``device`` that have twins there or that the cross-device probe can make
    (errors inside ``run`` swallowed: a call that raised is recorded with no result)."""
    key = dispatch_key(device)
    if key is None:
        return []
    recorder = Recorder(device, key)
    try:
        with recorder:
            run()
    except Exception:  # noqa: BLE001 - an error case still made its calls
        pass
    return list(recorder.calls.values())


def check(calls: list[Call], device: str, judge: Callable[[Any, Any], cmp.Comparison]
          ) -> tuple[cmp.Comparison, list[str]]:
    """Every twin of every recorded call, and the cross-device probe of every recorded device kernel with two
    tensor arguments: the merged comparison, and the twins that were called."""
    key = dispatch_key(device)
    result, called = cmp.Comparison(True), []
    for call in calls:
        probed = probe_candidate(_name(call.op), key) and len(list(_snapshots(call))) >= 2
        for slot in _slots(call) if probed else ():
            outcome = check_probe(call, slot)
            if outcome is not None and not outcome.ok:
                result = result.merge(outcome)
        for twin in twins_of(_name(call.op), key):
            outcome = check_twin(twin, call, judge)
            if outcome is None:
                continue
            called.append(twin.name)
            if not outcome.ok:
                result = result.merge(outcome)
    return result, called
