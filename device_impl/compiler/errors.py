"""Exceptions the compiler raises. Each message names the cause and the fix."""

from __future__ import annotations


class ShapeContractError(RuntimeError):
    """A dynamic (symbolic) shape reached the neuron backend, which compiles static shapes only."""


class UnsupportedOpError(NotImplementedError):
    """A StableHLO op (or a form of one) the compiler has no lowering for."""

    def __init__(self, op: str, detail: str = ""):
        self.op = op
        self.detail = detail
        super().__init__(f"the neuron compiler cannot lower '{op}'" + (f" ({detail})" if detail else ""))


class ImportFailure(RuntimeError):
    """torch-mlir could not import the FX graph to StableHLO."""


class NeffFormatError(ValueError):
    """A NEFF file is truncated, corrupted or of another format version."""
