"""CPU's argument checks that an AOTAutograd graph no longer enforces.

Dynamo and AOTAutograd trace ops on fake tensors, whose meta functions skip a
few of the checks ATen's CPU kernels run before computing, so a compiled
graph would return a result where eager PyTorch raises. Measured with torch
2.13: ``torch.sub(bool_tensor, 0)`` traced with an int64 result and compiled
to ``convert + subtract`` (CPU's ``sub_check`` raises); floor/ceil/round/trunc
and relu of bool, bitwise ops in a float dtype and integers to negative integer powers
likewise.

For the ops in CHECKED, the node's ATen op is called on one-element CPU
tensors of the node's input dtypes, with its non-tensor arguments as traced:
if CPU refuses, the compiled program raises that same exception. The probe
computes nothing the program uses (its values are zeros and are discarded);
it asks the installed torch which arguments it refuses, so the error class
and message follow the release (torch 2.14 raises NotImplementedError for
``bool - bool`` where 2.13 raised RuntimeError).

``fake_refusal`` does it one step earlier, for the ops of FAKE_CHECKED: their meta functions, which Dynamo
runs on fake tensors while it traces (before the backend sees a graph), accept arguments CPU's kernel
refuses, or refuse them with another exception class (``_fft_r2c(x, dim=[])``: CPU's RuntimeError, the meta
function's IndexError). Registered as a fake-tensor rule (``install_fake_checks``), it probes CPU with the
call's shapes for a call on neuron tensors and raises CPU's error there; other calls go on to the meta.

``out_refusal`` does the same for the out= calls of a Dynamo graph, before AOTAutograd functionalises
them into a functional op and a casting copy (which drops CPU's out dtype rules).

``empty_refusal`` does it for the calls of a Dynamo graph that read or make a zero-size tensor: CPU
checks sizes there that the decompositions AOTAutograd traces do not (``F.interpolate`` to an output
size of 0 raises "Input and output sizes should be greater than 0" on CPU; its decomposition returned
an empty tensor), and a zero-size result is one the compiler never computes, so nothing else would
notice. The probe computes nothing of size: a zero-size tensor holds no elements.

``fill_value_refusal`` does it for the calls of a Dynamo graph that convert a Python number to a tensor's dtype
(``masked_fill``: CPU's checked conversion refuses -0.5 for uint8; the reference AOTAutograd traces casts it, so
its graph no longer holds the number). ``avg_pool3d`` is in FAKE_CHECKED: CPU has no float16/bfloat16 kernel.

``install_meta_checks`` corrects the exception class of a few meta functions, which Dynamo runs before
any backend sees a graph: PyTorch's Python metas of ``amax``/``amin``/``aminmax`` over an empty
dimension and ``argmax``/``argmin`` of an empty tensor raise RuntimeError where CPU raises IndexError, and Dynamo reports a RuntimeError from a fake tensor as
TorchRuntimeError (other classes reach the caller as raised). When a wrapped meta
refuses a call, CPU's kernel is asked with uninitialised CPU tensors of the same sizes (it refuses
before computing) and its class wins. ``FAKE_IMPL_CHECKED`` does the same for FakeTensor's own implementations,
which it consults before any meta (``x[float_index]``: CPU's IndexError, not TorchRuntimeError).

``bool_refusal`` (BOOL_CHECKED: floor and trunc division) asks CPU, for calls on a bool tensor only, whether
it refuses the dtypes (NotImplementedError where the reference meta raised RuntimeError). ``NODE_PROBES``
rebuild a node's CPU call small (constant_pad_nd's value conversion, checked only when something is padded),
``ORIGINAL_PROBES`` the call a decomposed node came from (``index_copy``'s own dtype check, where the
``index_put`` it became raises IndexError), and ``out_of_range_class`` the class CPU's index_select and
index_add raise for an out-of-range index at the node's shapes and strides (their paths differ in class).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch
import torch.fx

aten = torch.ops.aten

CHECKED = frozenset({
    aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor, aten.rsub.Scalar,
    aten.floor.default, aten.ceil.default, aten.round.default, aten.trunc.default,
    *(getattr(getattr(aten, f"bitwise_{name}"), overload) for name in ("and", "or", "xor")
      for overload in ("Tensor", "Scalar")),
    aten.pow.Tensor_Scalar,
    aten.relu.default,  # CPU refuses bool ("Boolean inputs not supported for relu"); the meta function does not
})


def _probe_argument(value: Any) -> Any:
    """A node's argument as the CPU probe receives it: a tensor input becomes one zero of its dtype."""
    if isinstance(value, torch.fx.Node):
        meta = value.meta.get("val")
        if isinstance(meta, torch.Tensor):
            return torch.zeros((1,) * min(meta.dim(), 1), dtype=meta.dtype)
        return meta
    if isinstance(value, (list, tuple)):
        return type(value)(_probe_argument(v) for v in value)
    return value


# indexing ops whose index dtypes CPU checks and the decompositions do not (a float index was truncated and
# used: x.index_put((float_index,), v) returned a result where CPU raises IndexError "tensors used as indices
# must be long, int, byte or bool tensors"); probed with one-element tensors of each argument's dtype and rank
INDEX_CHECKED = frozenset({aten.index_put.default, aten._index_put_impl.default, aten.index.Tensor})


def _index_probe(value: Any) -> Any:
    if isinstance(value, torch.fx.Node):
        meta = value.meta.get("val")
        if isinstance(meta, torch.Tensor):
            return torch.zeros((1,) * meta.dim(), dtype=meta.dtype)
        return meta
    if isinstance(value, (list, tuple)):
        return type(value)(_index_probe(v) for v in value)
    return value


def _probe_strided(value: Any) -> Any:
    """A traced tensor as an out-of-range probe receives it: uninitialised, with the traced strides (CPU picks
    its kernel's path, and so its exception class, by them: index_select's dim-1 fast path needs a contiguous
    self), up to PROBE_LIMIT elements; beyond, one zero expanded (``_probe_shaped``)."""
    if isinstance(value, torch.Tensor) and value.numel() <= PROBE_LIMIT:
        return torch.empty_strided(tuple(value.shape), tuple(value.stride()), dtype=value.dtype)
    return _probe_shaped(value)


def _dim_index_call(node: torch.fx.Node, op: Any, out_of_range: bool = False) -> Callable[[], Any] | None:
    """The CPU call ``op(self, dim, index, source)`` (index_add, index_copy) an ``index_put`` node was decomposed
    from, ``index_put(self, [None] * dim + [index], source, ...)``, at the traced shapes (one zero expanded);
    ``out_of_range``: its index all one past the end of ``dim``. None where the node is not of that form."""
    self, indices, source = (tuple(node.args) + (None, None, None))[:3]
    if not isinstance(indices, (list, tuple)):
        return None  # another node of the op's decomposition (index_add's unrolled index_select/index_copy)
    positions = [i for i, index in enumerate(indices or ()) if index is not None]
    if len(positions) != 1:
        return None
    dim = positions[0]
    index = indices[dim].meta.get("val") if isinstance(indices[dim], torch.fx.Node) else None
    shaped = _probe_strided if out_of_range else _probe_shaped
    try:
        probes = [shaped(self.meta.get("val")), _probe_shaped(index), shaped(source.meta.get("val"))]
    except (KeyError, AttributeError):
        return None
    if out_of_range:
        probes[1] = torch.full(tuple(index.shape), probes[0].shape[dim] if probes[0].dim() else 1, dtype=index.dtype)
    return lambda: op(probes[0], dim, probes[1], probes[2])


def _index_select_call(node: torch.fx.Node) -> Callable[[], Any] | None:
    """``index_select(self, dim, index)`` at the traced shapes, its index all one past the end of ``dim``."""
    self, dim, index = node.args[:3]
    try:
        probe = _probe_strided(self.meta.get("val"))
        index = index.meta.get("val")
        dim = dim % max(probe.dim(), 1)
        bad = torch.full(tuple(index.shape), probe.shape[dim] if probe.dim() else 1, dtype=index.dtype)
    except (KeyError, AttributeError):
        return None
    return lambda: aten.index_select.default(probe, dim, bad)


# ops whose CPU kernel's exception class for an out-of-range index depends on the shapes (index_select's dim-1
# fast path and index_add's scatter paths raise RuntimeError, their other paths IndexError): the call rebuilt
# from the node, by the name of the op it came from, with an out-of-range index, for CPU to answer
OUT_OF_RANGE_PROBES: dict[str, Callable[[torch.fx.Node], Callable[[], Any] | None]] = {
    "aten.index_select.default": _index_select_call,
    "aten.index_add.default": lambda node: _dim_index_call(node, aten.index_add.default, out_of_range=True),
    "aten.index_add_.default": lambda node: _dim_index_call(node, aten.index_add.default, out_of_range=True),
}


def out_of_range_class(node: torch.fx.Node) -> type[Exception] | None:
    """The exception class CPU raises for an out-of-range index of the op ``node`` was traced from, asked of
    CPU at the node's shapes (OUT_OF_RANGE_PROBES); None for other ops, or where CPU accepts the probe."""
    builder = OUT_OF_RANGE_PROBES.get(str(node.meta.get("original_aten")))
    if builder is None:
        return None
    with _real_tensors():  # AOTAutograd compiles inside its fake mode: the probe's tensors must be real
        call = builder(node)
        try:
            if call is None:
                return None
            call()
        except Exception as error:  # noqa: BLE001 - CPU's refusal is the answer
            return type(error)
    return None


def _index_copy_call(node: torch.fx.Node) -> Callable[[], Any] | None:
    """The ``index_copy`` call an ``index_put`` node was decomposed from (its ``original_aten``), rebuilt from
    the node's arguments at their traced shapes (``_dim_index_call``). CPU's ``index_copy`` refuses a non-int64
    index with its own RuntimeError ("index_copy_(): Expected a long tensor for index, but got Float") where
    ``index_put`` raises IndexError; only such calls are rebuilt."""
    indices = node.args[1] if len(node.args) > 1 else None
    index = next((i for i in indices or () if i is not None), None)
    meta = index.meta.get("val") if isinstance(index, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor) or meta.dtype == torch.int64:
        return None
    return _dim_index_call(node, aten.index_copy.default)


# decomposed ops whose CPU kernel checks its arguments in its own words (and class): the node's original call,
# rebuilt for the probe (``original_aten`` -> a builder of the call, or None where it needs no probe of its own)
# (keyed by the op's name: the ``original_aten`` AOTAutograd records is not always the very OpOverload object
# ``torch.ops.aten`` gives)
ORIGINAL_PROBES: dict[str, Callable[[torch.fx.Node], Callable[[], Any] | None]] = {
    "aten.index_copy.default": _index_copy_call,
    "aten.index_copy_.default": _index_copy_call,
}


def _pad_call(node: torch.fx.Node) -> Callable[[], Any] | None:
    """``constant_pad_nd(x, pad, value)`` on a tensor of x's rank and dtype just large enough for ``pad`` (each
    padded dimension 1 plus what its negative pads crop): CPU converts ``value`` to x's dtype when the call
    pads anything and refuses one it cannot hold ("value cannot be converted to type uint8_t without
    overflow"); the decompositions cast it. The probe fills a handful of elements whatever x's size."""
    self = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    pad = list(node.args[1]) if len(node.args) > 1 else list(node.kwargs.get("pad", ()))
    value = node.args[2] if len(node.args) > 2 else node.kwargs.get("value", 0)
    if not isinstance(self, torch.Tensor) or not all(isinstance(p, int) for p in pad) or len(pad) > 2 * self.dim():
        return None
    shape = [1] * self.dim()
    for i in range(len(pad) // 2):
        shape[self.dim() - 1 - i] = 1 + max(0, -pad[2 * i]) + max(0, -pad[2 * i + 1])
    probe = torch.zeros(shape, dtype=self.dtype)
    return lambda: aten.constant_pad_nd.default(probe, pad, value)


# ops whose CPU kernel checks an argument the FX graph still holds but the lowering does not: the CPU call
# rebuilt small from the node (by its target)
NODE_PROBES: dict[Any, Callable[[torch.fx.Node], Callable[[], Any] | None]] = {
    aten.constant_pad_nd.default: _pad_call,
}


def refusal(gm: torch.fx.GraphModule) -> Exception | None:
    """The error CPU raises for the first CHECKED (or INDEX_CHECKED) node of ``gm`` whose arguments it refuses,
    or None."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in NODE_PROBES:
            with _real_tensors():
                call = NODE_PROBES[node.target](node)
                try:
                    if call is not None:
                        call()
                except Exception as error:  # noqa: BLE001 - CPU's refusal is the answer
                    return error
            continue
        if node.op == "call_function" and node.target in INDEX_CHECKED:
            with _real_tensors():
                builder = ORIGINAL_PROBES.get(str(node.meta.get("original_aten")))
                original = builder(node) if builder is not None else None
                try:
                    if original is not None:
                        original()
                    node.target(*[_index_probe(a) for a in node.args],
                                **{k: _index_probe(v) for k, v in node.kwargs.items()})
                except Exception as error:  # noqa: BLE001 - CPU's refusal is the answer
                    return error
            continue
        if node.op != "call_function" or node.target not in CHECKED:
            continue
        # AOTAutograd calls its compilers inside its fake-tensor mode: leave it, so the probe runs CPU's kernel
        with _real_tensors():
            args = [_probe_argument(a) for a in node.args]
            kwargs = {k: _probe_argument(v) for k, v in node.kwargs.items()}
            try:
                node.target(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - CPU's refusal is the answer
                return error
    return None


# Ops whose meta function checks less than CPU's kernel, or raises another class (module docstring).
FAKE_CHECKED = frozenset({
    aten._fft_r2c.default,  # an empty dim list: CPU's RuntimeError (dim.back()), the meta's IndexError
    aten._fft_c2r.default,  # last_dim_size 0 or a dim list CPU refuses: the meta function returns a result
    aten.narrow_copy.default,  # a dim out of range: CPU's RuntimeError (a TORCH_CHECK), the meta's IndexError
    aten.scatter.value,  # a value the tensor's dtype cannot hold (-0.5 into uint8): CPU's RuntimeError
    # dtypes CPU's kernel refuses (NotImplementedError "..._cpu" not implemented for 'Int'), which the decompositions
    # compute, and heaviside's mixed dtypes (RuntimeError). Ops with a Python meta never reach this rule (elu_backward,
    # hardshrink, log_sigmoid_*, softplus_backward): backend.EAGER_CALLS runs such calls eagerly
    aten.softplus.default, aten.mish.default, aten.threshold.default, aten.frac.default, aten.heaviside.default,
    aten.logaddexp.default, aten.logaddexp2.default,
    aten.avg_pool3d.default,  # float16/bfloat16: CPU has no kernel (NotImplementedError); the meta accepts them
    # (the shift operators' metas are wrapped instead, META_CHECKED: that covers their in-place forms too)
})
_INSTALLED: list[bool] = []


def _on_neuron(values: Any) -> bool:
    if isinstance(values, torch.Tensor):
        return values.device.type == "neuron"
    if isinstance(values, (list, tuple)):
        return any(_on_neuron(v) for v in values)
    if isinstance(values, dict):
        return any(_on_neuron(v) for v in values.values())
    return False


def _probe_shaped(value: Any) -> Any:
    """A traced argument as CPU's probe receives it: a tensor becomes one zero of its dtype expanded to its
    shape (no memory); a symbolic size stops the probe (KeyError: nothing to compare)."""
    if isinstance(value, torch.Tensor):
        if any(not isinstance(s, int) for s in value.shape):
            raise KeyError("symbolic shape")
        return torch.zeros((), dtype=value.dtype).expand(tuple(value.shape))
    if isinstance(value, (list, tuple)):
        return type(value)(_probe_shaped(v) for v in value)
    if isinstance(value, torch.SymInt):
        raise KeyError("symbolic size")
    return value


def fake_refusal(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """The fake-tensor rule of FAKE_CHECKED ops: CPU's error for a call on neuron tensors that CPU's kernel
    refuses at these shapes and dtypes; NotImplemented (on to the meta function) otherwise."""
    if not (_on_neuron(args) or _on_neuron(kwargs)):
        return NotImplemented
    with _real_tensors():
        try:
            probe_args = [_probe_shaped(a) for a in args]
            probe_kwargs = {k: _probe_shaped(v) for k, v in kwargs.items()}
        except KeyError:
            return NotImplemented
        try:
            func(*probe_args, **probe_kwargs)
        except Exception as error:  # noqa: BLE001 - CPU's refusal is the answer
            raise type(error)(*error.args) from None
    return NotImplemented


def bool_power(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """``pow(bool tensor, bool exponent)``: CPU returns bool (``x ** True`` is x), the meta function int64, so the
    traced graph (and the compiled result) had the wrong dtype. The fake result takes CPU's dtype."""
    base, exponent = (list(args) + [kwargs.get("exponent")])[:2]
    if not (isinstance(base, torch.Tensor) and base.dtype == torch.bool and isinstance(exponent, bool)
            and base.device.type == "neuron"):
        return NotImplemented
    with fake_mode:
        return torch.empty_like(base)


# Ops whose meta function refuses bool with another class than CPU's kernel: floor and trunc division of bool,
# CPU's NotImplementedError ("div_floor_cpu" not implemented for 'Bool'), the reference meta's RuntimeError
# ("torch.bool not supported for floor_divide"), which Dynamo reports as TorchRuntimeError
BOOL_CHECKED = frozenset({aten.div.Tensor_mode, aten.div.Scalar_mode})


def _probe_one(value: Any) -> Any:
    """A traced argument as a dtype probe receives it: a tensor becomes one 1 of its dtype (a divisor of 1 is
    never a division by zero)."""
    if isinstance(value, torch.Tensor):
        return torch.ones((1,) * min(value.dim(), 1), dtype=value.dtype)
    return value


def bool_refusal(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """The fake-tensor rule of BOOL_CHECKED ops: for a call on a bool neuron tensor, CPU's error if its kernel
    refuses the call's dtypes (asked with one-element ones); NotImplemented (on to the meta function) otherwise,
    and for a call with an empty tensor. Calls without a bool tensor cost nothing."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not any(t.dtype == torch.bool for t in tensors) or not _on_neuron(tensors) \
            or any(t.numel() == 0 for t in tensors):  # CPU returns an empty result before its dtype dispatch
        return NotImplemented
    with _real_tensors():
        try:
            func(*[_probe_one(a) for a in args], **{k: _probe_one(v) for k, v in kwargs.items()})
        except Exception as error:  # noqa: BLE001 - CPU's refusal is the answer
            raise type(error)(*error.args) from None
    return NotImplemented


def install_fake_checks() -> None:
    """Register ``fake_refusal`` (and ``bool_power``) with the fake-tensor mode once per process (Dynamo's
    tracing consults it)."""
    if _INSTALLED:
        return
    from torch._subclasses.fake_impls import register_op_impl

    register_op_impl(lambda func: func in FAKE_CHECKED)(fake_refusal)
    register_op_impl(lambda func: func is aten.pow.Tensor_Scalar)(bool_power)
    register_op_impl(lambda func: func in BOOL_CHECKED)(bool_refusal)
    _INSTALLED.append(True)


def _hinted(size: Any) -> Any:
    """A traced size (or shape) at the call Dynamo traced: a symbolic size's hint, read without adding a guard. A
    probe of a symbolic graph (dynamic sizes) made zeros of SymInt sizes, which raised "SymIntArrayRef expected to
    contain only concrete integers" out of the backend (``torch.mul(x, y, out=o)`` with o sized from x's shape,
    called at a second size); CPU's out= dtype rules do not depend on the sizes."""
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    if isinstance(size, (tuple, list, torch.Size)):
        return tuple(_hinted(s) for s in size)
    return optimization_hint(size) if isinstance(size, torch.SymInt) else size


def _probe_full(value: Any, known: dict, writable: bool = False) -> Any:
    """A node's argument at its traced shape (a symbolic size at its hint, ``_hinted``): a graph input's own values
    (``known``, on CPU), else zeros of its dtype (one zero expanded, no memory); an out= tensor writable and the
    right size."""
    if isinstance(value, torch.fx.Node):
        meta = value.meta.get("example_value", value.meta.get("val"))
        if isinstance(meta, torch.Tensor):
            if writable:
                return torch.zeros(_hinted(meta.shape), dtype=meta.dtype)
            if value in known:
                return known[value]
            return torch.zeros((), dtype=meta.dtype).expand(_hinted(meta.shape))
        return _hinted(meta)
    if isinstance(value, (list, tuple)):
        return type(value)(_probe_full(v, known, writable) for v in value)
    return value


def out_refusal(gm: torch.fx.GraphModule, example_inputs: list) -> Exception | None:
    """The error CPU raises for the first out= call of a Dynamo graph whose out tensors it refuses, or None.

    AOTAutograd functionalises ``op(..., out=o)`` into the functional op and a copy into ``o``, and a copy
    casts, so the out= dtype rules CPU's kernels enforce beyond the meta functions are gone from the graph
    it hands the compiler: ``softmax(x, 1, out=float16)`` raises on CPU ("Expected out tensor to have dtype
    float") and returned a float16 result compiled. Each out= call is probed on CPU at its traced shapes, with
    the graph's own input values where it reads them (zeros would be a singular matrix to a linalg op)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = {n: v for n, v in zip(placeholders, example_inputs) if type(v) in (torch.Tensor, torch.nn.Parameter)}
    known: dict = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or "out" not in node.kwargs or not callable(node.target):
            continue
        # a random op's probe draws from CPU's generator: fork_rng leaves the user's stream where it was
        with _real_tensors(), torch.random.fork_rng(devices=[]):
            if not known and inputs:
                known.update({n: v.detach().to("cpu") for n, v in inputs.items()})
            args = [_probe_full(a, known) for a in node.args]
            kwargs = _on_cpu({k: _probe_full(v, known, writable=k == "out") for k, v in node.kwargs.items()})
            try:
                node.target(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - CPU's refusal, if the functional call is accepted
                if _accepts_functional(node.target, args, kwargs):
                    return error
    return None


def _on_cpu(kwargs: dict) -> dict:
    """A probe's keyword arguments with a factory's ``device=`` on CPU, where the probe runs: the traced call's
    ``device="neuron"`` with a CPU out tensor was refused ("device type neuron does not match device type of
    out parameter (cpu)") for ``torch.logspace(a, b, n, device="neuron", out=o)``, which the device accepts."""
    if kwargs.get("device") is None:
        return kwargs
    return {**kwargs, "device": torch.device("cpu")}


SMALL_PROBE = 1 << 16  # elements: a probe argument up to this size is real zeros, beyond it one zero expanded


def _has_empty(value: Any) -> bool:
    if isinstance(value, torch.fx.Node):
        meta = value.meta.get("example_value", value.meta.get("val"))
        items = meta if isinstance(meta, (tuple, list)) else [meta]
        return any(isinstance(t, torch.Tensor) and t.numel() == 0 for t in items)
    if isinstance(value, (list, tuple)):
        return any(_has_empty(v) for v in value)
    if isinstance(value, dict):
        return any(_has_empty(v) for v in value.values())
    return False


def _probe_sized(value: Any, known: dict) -> Any:
    """``_probe_full``, except that an intermediate tensor of up to SMALL_PROBE elements is real zeros (an
    in-place call may write it; an expanded zero is not writable)."""
    if isinstance(value, torch.fx.Node) and value not in known:
        meta = value.meta.get("example_value", value.meta.get("val"))
        if isinstance(meta, torch.Tensor) and meta.numel() <= SMALL_PROBE:
            return torch.zeros(meta.shape, dtype=meta.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_probe_sized(v, known) for v in value)
    return _probe_full(value, known)


def _convolution_backward(grad_output, input, weight, stride, padding, dilation, transposed, output_padding, groups,
                          output_mask):
    """CPU's convolution_backward for convolution_backward_overrideable's arguments: the bias sizes are the output
    channels."""
    channels = weight.shape[1] * groups if transposed else weight.shape[0]
    return torch.ops.aten.convolution_backward(grad_output, input, weight, [channels], stride, padding, dilation,
                                               transposed, output_padding, groups, output_mask)


# Ops CPU has no kernel for (a backend implements them: CPU's entry raises NotImplementedError), probed as the op they
# implement: the device's convolution_overrideable is aten::convolution, its backward convolution_backward.
# Keyed by packet: a Dynamo graph calls the packet (torch.ops.aten.convolution_overrideable), AOTAutograd's the overload.
_CPU_STANDS_FOR: dict[Any, Callable[..., Any]] = {
    torch.ops.aten.convolution_overrideable: torch.ops.aten.convolution.default,
    torch.ops.aten.convolution_backward_overrideable: _convolution_backward,
}


def empty_refusal(gm: torch.fx.GraphModule, example_inputs: list) -> Exception | None:
    """The error CPU raises for the first call of a Dynamo graph that reads or makes a zero-size tensor and
    whose arguments CPU refuses, or None (see module docstring). Probed at the traced shapes with the graph's
    own input values, as ``out_refusal``; a random call's draw comes from a forked CPU generator."""
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")
             and (_has_empty(n) or _has_empty(n.args) or _has_empty(n.kwargs))]
    if not calls:
        return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    inputs = {n: v for n, v in zip(placeholders, example_inputs) if type(v) in (torch.Tensor, torch.nn.Parameter)}
    with _real_tensors(), torch.random.fork_rng(devices=[]):
        known = {n: v.detach().to("cpu").clone() for n, v in inputs.items()}
        for node in calls:
            args = [_probe_sized(a, known) for a in node.args]
            kwargs = _on_cpu({k: _probe_sized(v, known) for k, v in node.kwargs.items()})
            target = getattr(args[0], node.target, None) if node.op == "call_method" and args else node.target
            target = _CPU_STANDS_FOR.get(getattr(target, "overloadpacket", target), target)
            if not callable(target):
                continue
            try:
                result = target(*args[1:] if node.op == "call_method" else args, **kwargs)
            except AssertionError:  # the probe itself could not be made (a fake tensor among its arguments:
                return None  # max_pool2d's indices), not a refusal of CPU's: it proves nothing
            except Exception as error:  # noqa: BLE001 - CPU's refusal is the answer
                return error
            # a later call reads this one's result, not zeros of its shape: a view keeps its base's storage
            # (x[1:] of a one-element x is empty, but as_strided over it may address the element before it)
            if isinstance(result, torch.Tensor):
                known[node] = result
    return None


# Dynamo-graph calls that convert a Python number to the tensor's dtype with c10's checked conversion, which CPU's
# kernel runs before looking at the mask ("value cannot be converted to type uint8_t without overflow", also for an
# empty tensor) and the traced graph does not: PyTorch's masked_fill reference casts the value, so the AOTAutograd
# graph holds only the converted number (-0.5 into uint8 became 0). Keyed by the call's target (a method's name or
# the function); the value's position among the call's arguments (or its keyword, ``value``).
FILL_VALUE_CHECKED: dict[Any, int] = {
    "masked_fill": 2, "masked_fill_": 2, torch.masked_fill: 2, torch.Tensor.masked_fill: 2,
    torch.Tensor.masked_fill_: 2,
}


def _probe_one_element(value: Any) -> Any:
    """A Dynamo graph's argument as a dtype probe receives it: a tensor becomes one zero of its dtype."""
    if isinstance(value, torch.fx.Node):
        meta = value.meta.get("example_value", value.meta.get("val"))
        return torch.zeros(1, dtype=meta.dtype) if isinstance(meta, torch.Tensor) else meta
    return value


def fill_value_refusal(gm: torch.fx.GraphModule) -> Exception | None:
    """The error CPU raises for the first FILL_VALUE_CHECKED call of a Dynamo graph whose fill value (a Python
    number, given by position or as ``value=``) its dtype cannot hold, or None. The probe is the call on
    one-element zeros of the traced dtypes: the conversion is checked before anything is read."""
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method"):
            continue
        position = FILL_VALUE_CHECKED.get(node.target)
        if position is None:
            continue
        value = node.args[position] if len(node.args) > position else node.kwargs.get("value")
        if value is None or isinstance(value, torch.fx.Node):
            continue
        with _real_tensors():
            args = [_probe_one_element(a) for a in node.args]
            kwargs = {name: _probe_one_element(a) for name, a in node.kwargs.items()}
            tensors = args[:position] + [a for name, a in kwargs.items() if name != "value"]
            if not all(isinstance(a, torch.Tensor) for a in tensors):
                continue
            try:
                if node.op == "call_method":
                    getattr(args[0], node.target)(*args[1:], **kwargs)
                else:
                    node.target(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - CPU's refusal is the answer
                return error
    return None


# meta functions (torch 2.13) whose error on a zero-size input is another class than CPU's (measured: compiled
# amax(empty (3, 0), -1) raised TorchRuntimeError where CPU raises IndexError)
META_CHECKED = ("amax.default", "amin.default", "aminmax.default", "argmax.default", "argmin.default",
                # the shift operators' meta (meta_lshifts/meta_rshifts) refuses float tensors with a RuntimeError
                # where CPU raises NotImplementedError ("lshift_cpu" not implemented for 'Float'), and refuses bool
                # tensors, which CPU shifts: wrapping the out-of-place meta also covers __ilshift__/__irshift__,
                # whose decomposition calls it (FAKE_CHECKED's probe cannot: its stand-ins share memory)
                "__lshift__.Tensor", "__lshift__.Scalar", "__rshift__.Tensor", "__rshift__.Scalar")
# of META_CHECKED, the metas that refuse calls CPU computes: there the meta answers with CPU's result's layout
META_ACCEPTS_AS_CPU = frozenset({"__lshift__.Tensor", "__lshift__.Scalar", "__rshift__.Tensor", "__rshift__.Scalar"})
# in-place metas (torch._decomp's inplace_op: the out-of-place op, then a copy_ that casts) and their out-of-place
# op: CPU's in-place kernel refuses a result its self cannot hold (a bool tensor's <<= 1 is Long: RuntimeError
# "result type Long can't be cast to the desired output type Bool"), which the copy_ would cast
META_INPLACE_CHECKED = {"__ilshift__.Tensor": "__lshift__.Tensor", "__ilshift__.Scalar": "__lshift__.Scalar",
                        "__irshift__.Tensor": "__rshift__.Tensor", "__irshift__.Scalar": "__rshift__.Scalar"}
# fake-tensor implementations of their own (FakeTensor's op table, consulted before any meta) whose refusal
# is another class than CPU's: a float index to x[i] raised the meta's RuntimeError ("tensors used as indices
# must be long, int, byte or bool tensors"), reported by Dynamo as TorchRuntimeError, where CPU raises IndexError
FAKE_IMPL_CHECKED = ("index.Tensor",)


def _cpu_like(value: Any, make: Callable[..., torch.Tensor]) -> Any:
    """``value`` with each tensor (in lists and tuples too) replaced by ``make(shape, dtype=...)`` on CPU."""
    if isinstance(value, torch.Tensor):
        return make(value.shape, dtype=value.dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cpu_like(v, make) for v in value)
    return value


def _cpu_empty(value: Any) -> Any:
    return _cpu_like(value, torch.empty)


@contextlib.contextmanager
def _cpu_kernels() -> Iterator[None]:
    """Inside a meta function under fake tensors: real CPU tensors reach CPU's kernels. The fake mode's kernel
    invocation puts the Meta key in the thread's dispatch set (a CPU tensor would dispatch to this meta again)
    and Dynamo's Python dispatcher would route it to the Python meta."""
    from torch.utils._python_dispatch import _disable_current_modes

    include = torch._C._meta_in_tls_dispatch_include()
    torch._C._set_meta_in_tls_dispatch_include(False)
    try:  # and no tracing mode (a decomposition runs under AOTAutograd's proxy mode) records the probe
        with _real_tensors(), _disable_current_modes(), torch._C._DisablePythonDispatcher():
            yield
    finally:
        torch._C._set_meta_in_tls_dispatch_include(include)


def cpu_refusal(call: Callable[[], Any]) -> Exception | None:
    """The error CPU raises for ``call`` (which makes its own small CPU tensors), or None; for decompositions
    and metas, which run under fake tensors and tracing modes that must not see the probe."""
    try:
        with _cpu_kernels():
            call()
    except Exception as error:  # noqa: BLE001 - CPU's refusal is the answer
        return error
    return None


PROBE_LIMIT = 1 << 20  # elements: a meta's refusal is checked on CPU for arguments up to this size


def _cpu_zeros(value: Any) -> Any:
    """``_cpu_empty`` with zeros: an index tensor's values are part of what CPU checks (zero is in range)."""
    return _cpu_like(value, torch.zeros)


def _raise_as_cpu(op: Any, error: Exception, args: tuple, kwargs: dict,
                  cpu_tensor: Callable[[Any], Any] = _cpu_empty) -> Any:
    """Raise CPU's error for ``op(*args, **kwargs)`` where CPU's kernel, asked with CPU tensors of the same sizes
    and dtypes (uninitialised: CPU refuses before computing), refuses it with another class than ``error``;
    return CPU's result where it accepts the call, None otherwise (also for arguments of more than PROBE_LIMIT
    elements, which are not probed)."""
    def tensors(values: Any) -> list:
        if isinstance(values, torch.Tensor):
            return [values]
        return [t for v in values for t in tensors(v)] if isinstance(values, (list, tuple)) else []
    if sum(t.numel() for t in tensors([*args, *kwargs.values()])) > PROBE_LIMIT:
        return
    with _real_tensors():
        cpu_args = [cpu_tensor(a) for a in args]
        cpu_kwargs = {k: cpu_tensor(v) for k, v in kwargs.items()}
    try:
        with _cpu_kernels():
            return op(*cpu_args, **cpu_kwargs)
    except Exception as cpu_error:  # noqa: BLE001 - CPU's refusal is the answer
        if type(cpu_error) is not type(error):
            raise type(cpu_error)(*cpu_error.args) from None
    return None


def _checked_meta(op: Any, meta: Callable, accepts_as_cpu: bool = False) -> Callable:
    """``meta``, except that when it refuses a call, CPU's kernel is asked with CPU tensors of the same sizes
    and dtypes (uninitialised: CPU refuses before computing) and, when CPU refuses it with another class,
    CPU's error is raised instead; where CPU computes it and ``accepts_as_cpu``, the result is an empty meta
    tensor of CPU's result's sizes, strides and dtype. Nothing runs on CPU for calls the meta accepts."""
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            return meta(*args, **kwargs)
        except Exception as error:
            result = _raise_as_cpu(op, error, args, kwargs)
            if accepts_as_cpu and isinstance(result, torch.Tensor):
                return torch.empty_strided(result.shape, result.stride(), dtype=result.dtype, device="meta")
            raise

    checked.__wrapped__ = meta  # type: ignore[attr-defined]
    return checked


def _cast_checked_meta(outplace: Any, meta: Callable) -> Callable:
    """An in-place ``meta`` that first refuses, as CPU's in-place kernel does, a result of the out-of-place op
    ``outplace`` whose dtype self cannot hold (``torch.can_cast``, TensorIterator's rule)."""
    from device_impl.kernels.common import cast_error

    def checked(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        result = outplace(self, *args, **kwargs)
        if not torch.can_cast(result.dtype, self.dtype):
            raise cast_error(result.dtype, self.dtype)
        return meta(self, *args, **kwargs)

    checked.__wrapped__ = meta  # type: ignore[attr-defined]
    return checked


def _overload(name: str) -> Any:
    """aten's overload ``name`` ("packet.overload"), or None where this torch lacks it."""
    packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet, None), overload, None)


def _wrap_meta(name: str, wrap: Callable[[Any, Callable], Callable]) -> None:
    """Put ``wrap(op, meta)`` in the place of overload ``name``'s Python meta and clear the op's dispatch cache (which
    holds the meta it found); an op or meta this torch lacks, or one already wrapped, is left alone."""
    from torch._C import DispatchKey

    op = _overload(name)
    meta = getattr(op, "py_kernels", {}).get(DispatchKey.Meta) if op is not None else None
    if meta is None or hasattr(meta, "__wrapped__"):
        return
    op.py_kernels[DispatchKey.Meta] = wrap(op, meta)
    op._dispatch_cache.clear()


def install_meta_checks() -> None:
    """Wrap the Python metas of META_CHECKED and META_INPLACE_CHECKED (see module docstring). Idempotent; an op or
    meta this torch lacks is left alone."""
    for name in META_CHECKED:
        _wrap_meta(name, lambda op, meta, accepts=name in META_ACCEPTS_AS_CPU: _checked_meta(op, meta, accepts))
    for name, outplace in META_INPLACE_CHECKED.items():
        _wrap_meta(name, lambda op, meta, outplace=_overload(outplace): _cast_checked_meta(outplace, meta))
    from torch._subclasses import fake_impls

    for name in FAKE_IMPL_CHECKED:
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        impl = fake_impls.op_implementations_dict.get(op)
        if impl is not None and not hasattr(impl, "__wrapped__"):
            fake_impls.op_implementations_dict[op] = _checked_fake_impl(op, impl)


def _checked_fake_impl(op: Any, impl: Callable) -> Callable:
    """``impl`` (a fake-tensor implementation: fake mode, op, arguments), except that when it refuses a call,
    CPU's kernel is asked as in ``_checked_meta`` (with zeros: an index's values are checked) and its exception
    class wins."""
    def checked(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return impl(fake_mode, func, *args, **kwargs)
        except Exception as error:
            _raise_as_cpu(op, error, args, kwargs, _cpu_zeros)
            raise

    checked.__wrapped__ = impl  # type: ignore[attr-defined]
    return checked


def _accepts_functional(target: Any, args: list, kwargs: dict) -> bool:
    """Whether CPU runs the call without its out= tensors: then the refusal was about them, not about values
    the probe's zeros stand in for (a singular matrix for linalg ops)."""
    functional = getattr(target, "overloadpacket", target)  # an out= overload: the packet picks the functional
    try:
        functional(*args, **{k: v for k, v in kwargs.items() if k != "out"})
    except Exception:  # noqa: BLE001 - refused either way: not an out= rule
        return False
    return True


def _real_tensors():
    from device_impl._compat import internal

    return internal("torch._subclasses.fake_tensor", "unset_fake_temporarily",
                    "probing CPU's argument checks from the compiler")()


def raising_program(error: Exception) -> Callable[..., list]:
    """A compiled graph that raises ``error`` each time it runs, as the eager op would. Raising at compile
    time instead would reach the caller wrapped in Dynamo's BackendCompilerFailed, a RuntimeError,
    and lose CPU's exception class (NotImplementedError for a dtype a kernel refuses)."""
    kind, args = type(error), error.args

    def run(*inputs: Any) -> list:  # AOTAutograd calls with a list, or with the tensors spread
        raise kind(*args)
    return run
