"""Iotas made in the group that reads them (compiler/iotas.py): no iota step, no store and reload of the index,
the eager kernels' one GpSimd iota per tile, and CPU's bits (issue 21's spec sweep, benches/compiled_vs_eager_specs.py:
compiled arange, eye and triu lost to their eager kernels by the iota's step)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from device_impl import engine
from support import compile_traced, compiled_run, eager_run

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int32).numpy() if t.dtype == torch.float32 else t.numpy()


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


# the sweep's designed cases (float32, 513 along the free axis where the op takes a tensor)
FACTORIES = [
    ("arange", lambda: torch.arange(-5, 7, 3, dtype=torch.float32, device="neuron"), []),
    ("eye_n", lambda: torch.eye(37, dtype=torch.float32, device="neuron"), []),
    ("triu", lambda x: torch.triu(x, -1), [(2, 513)]),
]


@pytest.mark.parametrize("name,fn,shapes", FACTORIES, ids=[c[0] for c in FACTORIES])
def test_an_iota_is_made_in_its_readers_group_no_slower_than_the_eager_kernel(name, fn, shapes):
    """arange: iota * 3 - 5 of small integers is exact, so the group writes GpSimd's iota with base -5 and step
    3 and issues nothing else (1.38 -> 1.12 us, eager 1.17); eye: row == column as one iota of row - column
    compared with 0, over one [37, 37] tile (1.50 -> 1.25 us, eager 1.27); triu: column - row as one GpSimd
    program per flat tile (1.76 -> 1.38 us, eager 1.52). No iota step is left, and the bits are CPU's."""
    inputs = [_randn(*s) for s in shapes]
    got, compiled_ns, steps = compiled_run(fn, *inputs)
    assert "iota" not in {step["kind"] for step in steps}, [step["kind"] for step in steps]
    assert any(step.get("generated") for step in steps)
    want = fn(*inputs) if inputs else fn().cpu()
    assert np.array_equal(_bits(got), _bits(want))
    _, eager_ns = eager_run(fn, *inputs)
    assert compiled_ns <= eager_ns, (name, compiled_ns, eager_ns)


# functions of the device they make their iotas on (the CPU reference makes them on CPU)
GENERATED = [
    # the sweep's linspace as PyTorch decomposes it (compile_traced's table): its index and 225 - index generated
    # (no iota step); torch.compile now cuts float32 linspace whole (compiler/factories.py: the eager kernel's
    # GpSimd program, 1.18 us, where these six VectorE passes took 1.46)
    ("linspace", lambda d: lambda: torch.linspace(-8, -9, 226, device=d), []),
    # 0 * -2.0 is -0.0: a product that signs a zero is never folded into the iota's integers
    ("negative_step", lambda d: lambda: torch.arange(0, 10, dtype=torch.float32, device=d) * -2.0, []),
    # 300 does not fit uint8: the wrapping convert stays an op of the group
    ("uint8_wraps", lambda d: lambda x: x + torch.arange(300, device=d).to(torch.uint8).float(), [(300,)]),
    # 90000 elements over several [128, 300] tiles, each row's tile an affine iota of column - row
    ("tril_tiles", lambda d: lambda: torch.ones(300, 300, device=d).tril(), []),
    # batches of matrices: the mask's index over flat tiles crossing matrices, a GpSimd program per tile
    ("tril_batched", lambda d: lambda x: torch.tril(x, 3), [(3, 37, 40)]),
    ("causal_mask", lambda d: lambda x: x.masked_fill(torch.ones(37, 40, dtype=torch.bool, device=d).triu(1),
                                                      float("-inf")).softmax(-1), [(3, 37, 40)]),
    ("diag_embed", lambda d: torch.diag_embed, [(130, 7)]),
]


@pytest.mark.parametrize("name,make,shapes", GENERATED, ids=[c[0] for c in GENERATED])
def test_generated_iotas_keep_the_iota_steps_bits(name, make, shapes, monkeypatch):
    """The tile program (GpSimd iotas and programs per tile) and the static replay's wide core (one [1, N]
    tile) write the iota's integers in the load's dtype: the bits the program with its iota step gave."""
    import device_impl.compiler as compiler
    from device_impl.compiler import iotas

    inputs = [_randn(*s) for s in shapes]
    device = [t.to("neuron") for t in inputs]
    run, program = compile_traced(make("neuron"), *inputs)
    assert "iota" not in {step["kind"] for step in program.steps}
    assert any(step.get("generated") for step in program.steps)
    (first,) = run(device)
    (second,) = run(device)  # the static replay's wide core
    monkeypatch.setattr(iotas, "generate", lambda steps, *rest: steps)
    compiler.clear_cache()
    stepped, program = compile_traced(make("neuron"), *inputs)
    assert "iota" in {step["kind"] for step in program.steps}
    (want,) = stepped(device)
    assert np.array_equal(_bits(first.cpu()), _bits(want.cpu()))
    assert np.array_equal(_bits(second.cpu()), _bits(want.cpu()))
    torch.testing.assert_close(first.cpu(), make("cpu")(*inputs))
