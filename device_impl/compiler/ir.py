"""The compiler's own small, typed view of a StableHLO function.

torch-mlir's IR objects live in an MLIR context and cannot be pickled, hashed
stably or inspected cheaply, so the importer copies what the passes need into
these plain records: values are integers, each op has a name (the dialect
prefix ``stablehlo.`` dropped), operand and result value ids, result types, and
attributes as Python data (lists of ints, strings, numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# MLIR element type -> numpy dtype name (ml_dtypes supplies bfloat16).
ELEMENT_TYPES = {
    "f32": "float32", "bf16": "bfloat16", "f16": "float16", "f64": "float64",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i1": "bool",
    "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "complex<f32>": "complex64", "complex<f64>": "complex128",
}


@dataclass(frozen=True)
class TensorType:
    """A ranked tensor type; ``dynamic`` lists the dimensions MLIR marks ``?``."""

    shape: tuple[int, ...]
    dtype: str
    dynamic: tuple[int, ...] = ()

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def np_dtype(self) -> np.dtype:
        return numpy_dtype(self.dtype)

    def __str__(self) -> str:
        dims = ["?" if i in self.dynamic else str(d) for i, d in enumerate(self.shape)]
        return f"tensor<{'x'.join(dims + [self.dtype])}>"


@dataclass
class Op:
    name: str
    operands: tuple[int, ...]
    results: tuple[int, ...]
    types: tuple[TensorType, ...]
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def type(self) -> TensorType:
        return self.types[0]

    @property
    def result(self) -> int:
        return self.results[0]


@dataclass
class Graph:
    """One function: inputs (value ids), ops in program order, outputs (value ids)."""

    inputs: list[int]
    outputs: list[int]
    ops: list[Op]
    types: dict[int, TensorType]
    constants: dict[int, np.ndarray] = field(default_factory=dict)  # non-splat constant payloads
    splats: dict[int, Any] = field(default_factory=dict)  # value id -> Python scalar of a splat value

    def producers(self) -> dict[int, Op]:
        return {r: op for op in self.ops for r in op.results}

    def users(self) -> dict[int, list[Op]]:
        found: dict[int, list[Op]] = {}
        for op in self.ops:
            for v in op.operands:
                found.setdefault(v, []).append(op)
        return found

    def op_names(self) -> set[str]:
        return {op.name for op in self.ops}


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)
