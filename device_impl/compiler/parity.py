"""CPU's argument checks that an AOTAutograd graph no longer enforces.

Dynamo and AOTAutograd trace ops on fake tensors, whose meta functions skip a
few of the checks ATen's CPU kernels run before computing. A compiled graph
would then return a result where eager PyTorch raises. Measured with torch
2.13: ``torch.sub(bool_tensor, 0)`` traces as ``aten.sub.Tensor`` with an
int64 result, and compiled to ``convert + subtract``; CPU raises
RuntimeError (ATen's ``sub_check``); likewise floor/ceil/round/trunc of bool,
bitwise ops in a float dtype, and integers to negative integer powers. Each
entry here re-runs such a check on the traced node (its ``meta['val']``)
before lowering, with CPU's exception class and message.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

aten = torch.ops.aten


def _is_bool(value: Any) -> bool:
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    if isinstance(value, torch.Tensor):
        return value.dtype == torch.bool
    return isinstance(value, bool)


def _sub_check(node: torch.fx.Node) -> None:
    """ATen's sub_check: no bool operand (its two messages, for two bool operands or one)."""
    a, b = node.args[0], node.args[1]
    if _is_bool(a) and _is_bool(b):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. "
                           "Use the `^` or `logical_xor()` operator instead.")
    if _is_bool(a) or _is_bool(b):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. "
                           "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.")


def _dtype(value: Any) -> torch.dtype | None:
    value = value.meta.get("val") if isinstance(value, torch.fx.Node) else value
    return value.dtype if isinstance(value, torch.Tensor) else None


# c10's names of dtypes in "not implemented for '...'" messages
_C10_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
              torch.bool: "Bool"}


def _kernel_refuses(kernel: str, refused: Callable[[torch.dtype], bool], of_result: bool = False):
    """CPU's dispatch macro has no case for the dtype: NotImplementedError naming CPU's kernel.
    ``of_result``: the kernel runs in the promoted (result) dtype, as bitwise ops with a float scalar."""
    def rule(node: torch.fx.Node) -> None:
        dtype = _dtype(node) if of_result else _dtype(node.args[0])
        if dtype is not None and refused(dtype):
            raise NotImplementedError(f'"{kernel}" not implemented for \'{_C10_NAMES.get(dtype, dtype)}\'')
    return rule


def _pow_check(node: torch.fx.Node) -> None:
    """An integral tensor to a negative integral Python scalar power."""
    base, exponent = node.args[0], node.args[1]
    dtype = _dtype(base)
    if dtype is not None and not (dtype.is_floating_point or dtype.is_complex) and \
            isinstance(exponent, int) and exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")


def _floating(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


CHECKS: dict[Any, Callable[[torch.fx.Node], None]] = {
    aten.sub.Tensor: _sub_check, aten.sub.Scalar: _sub_check,
    aten.rsub.Tensor: _sub_check, aten.rsub.Scalar: _sub_check,
    **{getattr(aten, name).default: _kernel_refuses(f"{name}_vml_cpu", lambda d: d == torch.bool)
       for name in ("floor", "ceil", "round", "trunc")},
    **{getattr(getattr(aten, f"bitwise_{name}"), overload): _kernel_refuses(f"bitwise_{name}_cpu", _floating, True)
       for name in ("and", "or", "xor") for overload in ("Tensor", "Scalar")},
    aten.pow.Tensor_Scalar: _pow_check,
}


def refusal(gm: torch.fx.GraphModule) -> Exception | None:
    """The error CPU raises for the first node of ``gm`` whose arguments it refuses, or None."""
    for node in gm.graph.nodes:
        if node.op == "call_function":
            rule = CHECKS.get(node.target)
            if rule is not None:
                try:
                    rule(node)
                except Exception as error:  # noqa: BLE001 - the rule's error is the answer
                    return error
    return None


def raising_program(error: Exception) -> Callable[..., list]:
    """A compiled graph that raises ``error`` each time it runs, as the eager op would. Raising at compile
    time instead would reach the caller wrapped in Dynamo's BackendCompilerFailed, a RuntimeError,
    and lose CPU's exception class (NotImplementedError for a dtype a kernel refuses)."""
    kind, args = type(error), error.args

    def run(*inputs: Any) -> list:  # AOTAutograd calls with a list, or with the tensors spread
        raise kind(*args)
    return run
