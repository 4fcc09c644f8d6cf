"""``Tensor.view(dtype)`` compiled (compiler/bitcast.py): torch-mlir imports it as ``stablehlo.bitcast_convert``, which
the compiler lowers as one ``bitcast_convert`` step (a byte copy), so the graph around it compiles instead of running
eagerly (the op spec sweep's out= specs compare ``out.reshape(-1).view(torch.uint8)``, which sent their graphs to
eager: ``stats()['fallbacks_by_op']`` named ``stablehlo.bitcast_convert``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from device_impl import compiler
from device_impl.compiler.bitcast import as_operand
from support import compiled_run

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _values(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    x.view(-1)[:4] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")]).to(dtype)
    return x


# (source dtype, target dtype): one element size, a wider source (a trailing dim of bytes); torch-mlir imports no
# view to a wider dtype (``as_operand``'s narrower source is tested on its own below)
CASTS = [
    (torch.float32, torch.int32),
    (torch.bfloat16, torch.int16),
    (torch.int16, torch.bfloat16),
    (torch.float32, torch.uint8),
    (torch.bfloat16, torch.uint8),
]


@pytest.mark.parametrize("source,target", CASTS, ids=lambda d: str(d).split(".")[-1])
def test_view_dtype_compiles_to_a_bitcast_step_with_cpus_bytes(source, target):
    """The graph (an add, the view as another dtype, an add of the reinterpreted value) compiles with no eager
    fallback, a ``bitcast_convert`` step among its steps, and its result is CPU's bit for bit (NaN, -0.0 and
    infinities included: no engine touches the bytes)."""
    x = _values((3, 513), source) if source.is_floating_point else _values((3, 513), torch.bfloat16).view(source)

    def fn(t):
        return (t + t).reshape(-1).view(target).reshape(3, -1)[:, 1:]

    before = dict(compiler.stats()["fallbacks_by_op"])
    got, _, steps = compiled_run(fn, x)
    assert compiler.stats()["fallbacks_by_op"] == before
    assert "bitcast_convert" in [step["kind"] for step in steps], [step["kind"] for step in steps]
    expected = fn(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.array_equal(got.contiguous().view(torch.uint8).numpy(), expected.contiguous().view(torch.uint8).numpy())


def test_out_spec_graph_compiles():
    """The op suite's ``add_out`` check, the reinterpreted bytes of out= against the functional result's: no eager
    graph, CPU's answer."""
    x0, x1 = _values((3, 513), torch.float32), _values((3, 513), torch.float32).flip(0)

    def fn(a, b):
        out = torch.empty(0, dtype=a.dtype, device=a.device)
        torch.add(a, b, out=out)
        return out.reshape(-1).view(torch.uint8), torch.add(a, b).reshape(-1).view(torch.uint8)

    before = dict(compiler.stats()["fallbacks_by_op"])
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    got = compiled(x0.to("neuron"), x1.to("neuron"))
    assert compiler.stats()["fallbacks_by_op"] == before
    expected = fn(x0, x1)
    assert all(torch.equal(g.cpu(), e) for g, e in zip(got, expected))


def test_narrower_source_reads_its_trailing_dim_as_one_element():
    """StableHLO's narrower-to-wider form: the operand's trailing dim of ``size(result) / size(operand)`` elements is
    one result element; the result buffer seen as the operand (what the step copies the operand into) holds those
    bytes in memory order, as numpy's view."""
    result = np.zeros((3, 5), np.float32)
    operand = np.arange(60, dtype=np.uint8).reshape(3, 5, 4)
    as_operand(result, operand.dtype, operand.shape)[...] = operand
    assert np.array_equal(result, operand.reshape(-1).view(np.float32).reshape(3, 5))
    wide = np.zeros((3, 5, 2), np.int16)
    as_operand(wide, np.dtype(np.int32), (3, 5))[...] = np.arange(15, dtype=np.int32).reshape(3, 5)
    assert np.array_equal(wide.reshape(-1).view(np.int32), np.arange(15, dtype=np.int32))
