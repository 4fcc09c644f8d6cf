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
"""

from __future__ import annotations

from typing import Any, Callable

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


def refusal(gm: torch.fx.GraphModule) -> Exception | None:
    """The error CPU raises for the first CHECKED node of ``gm`` whose arguments it refuses, or None."""
    for node in gm.graph.nodes:
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


def install_fake_checks() -> None:
    """Register ``fake_refusal`` (and ``bool_power``) with the fake-tensor mode once per process (Dynamo's
    tracing consults it)."""
    if _INSTALLED:
        return
    from torch._subclasses.fake_impls import register_op_impl

    register_op_impl(lambda func: func in FAKE_CHECKED)(fake_refusal)
    register_op_impl(lambda func: func is aten.pow.Tensor_Scalar)(bool_power)
    _INSTALLED.append(True)


def _probe_full(value: Any, known: dict, writable: bool = False) -> Any:
    """A node's argument at its traced shape: a graph input's own values (``known``, on CPU), else zeros of its
    dtype (one zero expanded, no memory); an out= tensor writable and the right size."""
    if isinstance(value, torch.fx.Node):
        meta = value.meta.get("example_value", value.meta.get("val"))
        if isinstance(meta, torch.Tensor):
            if writable:
                return torch.zeros(meta.shape, dtype=meta.dtype)
            if value in known:
                return known[value]
            return torch.zeros((), dtype=meta.dtype).expand(meta.shape)
        return meta
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
            kwargs = {k: _probe_full(v, known, writable=k == "out") for k, v in node.kwargs.items()}
            try:
                node.target(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - CPU's refusal, if the functional call is accepted
                if _accepts_functional(node.target, args, kwargs):
                    return error
    return None


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
