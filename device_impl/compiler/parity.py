"""CPU's argument checks that an AOTAutograd graph no longer enforces.

Dynamo and AOTAutograd trace ops on fake tensors, whose meta functions skip a
few of the checks ATen's CPU kernels run before computing. A compiled graph
would then return a result where eager PyTorch raises. Measured with torch
2.13: ``torch.sub(bool_tensor, 0)`` traces as ``aten.sub.Tensor`` with an
int64 result, and compiled to ``convert + subtract``; CPU raises
RuntimeError (ATen's ``sub_check``). Each entry here re-runs such a check on
the traced node (its ``meta['val']``) before lowering, with CPU's message.
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


CHECKS: dict[Any, Callable[[torch.fx.Node], None]] = {
    aten.sub.Tensor: _sub_check, aten.sub.Scalar: _sub_check,
    aten.rsub.Tensor: _sub_check, aten.rsub.Scalar: _sub_check,
}


def check(gm: torch.fx.GraphModule) -> None:
    """Raise as CPU would for any node of ``gm`` whose arguments CPU refuses."""
    for node in gm.graph.nodes:
        if node.op == "call_function":
            rule = CHECKS.get(node.target)
            if rule is not None:
                rule(node)
