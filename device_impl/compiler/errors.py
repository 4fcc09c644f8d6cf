"""Exceptions the compiler raises. Each message names the cause and the fix.

Errors a user must act on (``ShapeContractError``, ``FallbackDisabledError``)
derive from Dynamo's ``ShortenTraceback``: Dynamo re-raises those unchanged
instead of wrapping them in ``BackendCompilerFailed``, so ``except
ShapeContractError`` works around ``torch.compile``. This module imports
``torch._dynamo`` (about 2 s), so it is only imported once a compile starts or
when a user asks for one of these names.
"""

from __future__ import annotations

from torch._dynamo.exc import ShortenTraceback


class _UserFacing(ShortenTraceback):
    """Propagates through torch.compile as itself (Dynamo strips its own frames from the traceback)."""

    def __init__(self, message: str):
        super().__init__(message, first_useful_frame=None)


class ShapeContractError(_UserFacing):
    """A dynamic (symbolic) shape reached the neuron backend, which compiles static shapes only."""


class FallbackDisabledError(_UserFacing, NotImplementedError):
    """A graph needs eager fallback but TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1 forbids it."""


class UnsupportedOpError(NotImplementedError):
    """A StableHLO op (or a form of one) the compiler has no lowering for."""

    def __init__(self, op: str, detail: str = ""):
        self.op = op
        self.detail = detail
        super().__init__(f"the neuron compiler cannot lower '{op}'" + (f" ({detail})" if detail else ""))


class ImportFailure(RuntimeError):
    """torch-mlir could not import the FX graph to StableHLO."""

    def __init__(self, message: str, op: str = "torch-mlir import"):
        self.op = op
        super().__init__(message)


class NeffFormatError(ValueError):
    """A NEFF file is truncated, corrupted or of another format version."""
