"""Activations whose eager kernel is one ScalarE instruction, compiled as that instruction: silu, gelu (the erf
form), log2 and log10 of float32 tensors.

Each reached torch-mlir as a formula of several ops: silu as PyTorch's decomposition ``x * sigmoid(x)`` (ScalarE's
sigmoid, then a VectorE multiply), log2 and log10 as ``log(x) / log(b)`` (torch-mlir's lowering: a VectorE divide
after ScalarE's log), gelu as numerics' ``x * 0.5 * (1 + erf(x / sqrt(2)))`` (ScalarE's erf and two VectorE ops).
The eager kernels issue one ScalarE activation per tile (``kernels.elementwise.activations``/``unary``), so the
compiled program's extra pass on the last tile lay on its critical path: each lost to the eager kernel by one
VectorE instruction, 0.06-0.07 us of a 513-element call (``benches/compiled_vs_eager_specs.py``: gelu and silu
1.54 us against 1.48, log2 1.59 against 1.53, log10 1.70 against 1.63).

So such a call is cut out of the FX graph (``CUTTERS``, merged into ``opaque.CUTTERS``) and spliced back as the
elementwise op of the activation's name (``lowering._ACTIVATION``), which fuses with its neighbours as any
elementwise op and evaluates the eager kernel's function (``engine.isa.ACTIVATIONS``: silu is CPU's float32
formula x / (1 + exp(-x)) on a float64 exp, gelu and the logs one rounding of the float64 value), so compiled and
eager give the same bits. The cut call is a float32 one (a fused group computes in float32). A bfloat16/float16
silu or gelu is kept whole too (``silu_whole``, ``gelu_whole``): legalize's opmath rule widens it into the float32
call between two converts, which the group folds into its load and store, so the activation reads the narrow
tile and rounds its float32 value to the dtype once, as the eager kernel's activation on the narrow tile does
(bfloat16 at 513 elements: silu 1.60 us against eager's 1.54, gelu 1.53 against 1.33, PyTorch's decomposition
``x * sigmoid(x)`` and numerics' erf formula each a VectorE pass or three more on the last tile).
gelu only where the eager kernel issues the one activation: ``approximate="none"``
and not oneDNN's overflowing form, which CPU runs on some hosts (``cpu_host.onednn_gelu``; numerics' ``_gelu``
writes that form out, as the eager kernel's four instructions). silu is in PyTorch's core decompositions, so
``DECOMPOSITIONS`` keeps the calls cut here whole while AOTAutograd traces (NotImplemented: the op stays).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

aten = torch.ops.aten


# dtypes whose silu/gelu calls are kept whole: float32, and the reduced floats, which legalize's opmath rule
# (numerics.opmath) then widens into a float32 call between two converts, the form ``CUTTERS`` cuts
_WHOLE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _float32(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.float32


def _whole_dtype(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype in _WHOLE_DTYPES


def silu_whole(x: Any) -> bool:
    """Is ``silu(x)`` compiled as ScalarE's one silu (a float32, bfloat16 or float16 tensor)?"""
    return _whole_dtype(x)


def gelu_whole(x: Any, approximate: str) -> bool:
    """Is ``gelu(x, approximate)`` compiled as ScalarE's one gelu: a float32, bfloat16 or float16 tensor, the erf
    form, and CPU not running oneDNN's form for it (the eager kernel then issues that form's four instructions,
    numerics' too)."""
    from device_impl.kernels import cpu_host

    return _whole_dtype(x) and approximate == "none" and not cpu_host.onednn_gelu(x, approximate)


def _meta(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _describe(whole: Callable[[torch.fx.Node], bool]) -> Callable:
    def describe(node: torch.fx.Node) -> tuple[list[torch.fx.Node], dict[int, int], dict[str, Any]] | None:
        """Operand the input, result the activation's (``opaque.CUTTERS``' form), for the calls ``whole`` takes."""
        x = node.args[0]
        if not _float32(_meta(x)) or not _float32(_meta(node)) or not whole(node):
            return None
        return [x], {0: 0}, {}

    return describe


# FX meta key numerics._gelu sets on the float32 gelu it widens a reduced-float call into: the call was judged
# whole on its own tensor (oneDNN's choice for a bfloat16 tensor is not the one for a float32 tensor)
WIDENED = "neuron_widened_whole"


def _gelu_call(node: torch.fx.Node) -> bool:
    if node.meta.get(WIDENED):
        return True
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return gelu_whole(_meta(node.args[0]), approximate)


# FX target -> (elementwise op name, lowering._ACTIVATION's key; describer): merged into opaque.CUTTERS
CUTTERS: dict[Any, tuple[str, Callable]] = {
    aten.silu.default: ("silu", _describe(lambda node: True)),
    aten.log2.default: ("log2", _describe(lambda node: True)),
    aten.log10.default: ("log10", _describe(lambda node: True)),
    aten.gelu.default: ("gelu", _describe(_gelu_call)),
}


def _silu(x: torch.Tensor) -> Any:
    """PyTorch's decomposition of silu, except for the calls cut whole (``silu_whole``): NotImplemented keeps the
    op in the traced graph, where ``opaque.cut`` takes it."""
    if silu_whole(x):
        return NotImplemented
    return torch._decomp.decomposition_table[aten.silu.default](x)


# AOTAutograd decompositions (merged into backend's table after the core ones)
DECOMPOSITIONS: dict[Any, Callable] = {aten.silu.default: _silu}
