"""``stablehlo.bitcast_convert``: the operand's bytes read as another element type, a DMA move with no arithmetic.

torch-mlir imports ``Tensor.view(dtype)`` as this op (and ``copysign``/``signbit`` before compiler/opaque.py cut them
whole). Without a lowering the whole graph ran eagerly: the op spec sweep's out= specs, which compare
``out.reshape(-1).view(torch.uint8)`` with CPU's bytes, lost to eager in both dtypes (``eager-graph-LOSES``: the graph's
ops as eager kernels plus AOTAutograd's out= copy, benches/compiled_vs_eager_specs.py).

The StableHLO spec's shapes: elements of one size keep the shape; a wider operand element becomes a trailing dim of
``size(operand) / size(result)`` narrower elements, in memory order (little-endian bytes, as ``Tensor.view(dtype)`` and
numpy's ``ndarray.view``); a narrower operand's trailing dim of that ratio becomes one wider element. On the device this
is a byte copy: the result's HBM buffer is seen in the operand's dtype and shape and the operand is DMA-copied into it
(``DMA.hbm_copy`` moves bytes of one dtype), so no engine touches the values and every bit (NaN payloads included)
comes through. A step of its own (``lowering.STEP_OPS``), not a layout view: views keep their base's dtype, which every
reader of a view assumes.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from device_impl.compiler.program import Program
from device_impl.compiler.program import operand_array as _operand_array


def as_operand(result: np.ndarray, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """``result`` (the bitcast's result buffer) seen as an array of ``dtype`` and ``shape`` (the operand's): the
    same bytes. numpy changes the itemsize only along a contiguous last axis; a result laid out otherwise (never a
    step's own buffer, which is row-major) raises."""
    if result.dtype.itemsize == dtype.itemsize:
        return result.view(dtype).reshape(shape)
    if not result.flags.c_contiguous:  # a reshape would copy: the bytes written would be lost
        raise AssertionError(f"bitcast_convert into a strided buffer {result.strides}")
    return result.reshape(-1).view(dtype).reshape(shape)


def _run_bitcast(step: dict, program: Program) -> Callable:
    """The operand's bytes copied into the result's buffer seen in the operand's dtype (``as_operand``)."""
    (operand,), (result,) = step["operands"], step["results"]
    dtype, shape = program.dtype(operand), tuple(program.shape(operand))

    def run(nc, env) -> None:
        dst = env.access(result)
        if dst.size:
            nc.dma.hbm_copy(as_operand(dst, dtype, shape), _operand_array(env, program, operand))

    return run


# step kind -> runner: merged into steps.RUNNERS (the kind is StableHLO's op name: lowering.STEP_OPS)
RUNNERS: dict[str, Callable[[dict, Program], Any]] = {"bitcast_convert": _run_bitcast}

# step kind -> how the static replay runs it (replay.STEP_KINDS): one DMA move of fixed bytes, shape-only
STEP_KINDS: dict[str, str] = {"bitcast_convert": "plan"}
