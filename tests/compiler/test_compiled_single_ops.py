"""Single ops compiled against their eager kernels (issue 21: benches/compiled_vs_eager_specs.py): the compiled
program does the eager kernel's work, with CPU's bits. Device times are the simulated clock's (deterministic)."""

from __future__ import annotations

import pytest
import torch

from device_impl import engine
from device_impl.compiler import breakdown

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _device_ns() -> float:
    torch.neuron.synchronize()
    return sum(s["device_ns"] for s in engine.stats().values())


def _eager(fn, *device: torch.Tensor) -> tuple[torch.Tensor, float]:
    fn(*device)  # adaptive eager learns the call's launch on its first run
    torch.neuron.synchronize()
    engine.reset_stats()
    out = fn(*device)
    return out.cpu(), _device_ns()


def _compiled(fn, *device: torch.Tensor) -> tuple[torch.Tensor, float, list]:
    """A warm call's output, device time and its program's steps as (kind, [op names])."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    compiled(*device)
    torch.neuron.synchronize()
    with breakdown.capture() as calls:
        engine.reset_stats()
        out = compiled(*device)
        ns = _device_ns()
    steps = [(s["kind"], [op["op"] for op in s.get("ops", [])]) for e, _ in calls for s in e.program.steps]
    return out.cpu(), ns, steps


def _same(got: torch.Tensor, want: torch.Tensor, exact: bool = True) -> None:
    """Equal values (``exact``; else within float32's default tolerance) and zero signs."""
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True, **({"rtol": 0, "atol": 0} if exact else {}))
    if want.is_floating_point():
        zeros = want == 0
        assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros]))


def _operands(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    """Normal values with zeros of both signs and NaN among them."""
    g = torch.Generator().manual_seed(7)
    out = []
    for shape in shapes:
        t = torch.randn(shape, generator=g)
        flat = t.view(-1)
        flat[: min(3, flat.numel())] = torch.tensor([0.0, -0.0, float("nan")])[: min(3, flat.numel())]
        out.append(t)
    return out


LOGICAL = [
    ("logical_and", torch.logical_and, [(2, 1, 513), (1,)], ["and"]),
    ("logical_or", torch.logical_or, [(2, 3, 513), (2, 3, 513)], ["or"]),
    ("logical_xor", torch.logical_xor, [(2, 3, 513), (513,)], ["xor"]),
    ("logical_not", lambda x: torch.logical_not(x), [(2, 3, 513)], ["not"]),
    ("logical_and_int", lambda x, y: torch.logical_and(x, (y * 4).int()), [(2, 3, 513), (513,)], ["and"]),
    ("sign", torch.sign, [(2, 3, 513)], ["compare", "compare", "subtract"]),
    # operands of two dtypes: each read as its truth (a float16 subnormal is true, not uint8's 0)
    ("logical_xor_mixed", lambda x, y: torch.logical_xor((x.abs() * 2).to(torch.uint8), (y * 1e-4).half()),
     [(2, 3, 513), (513,)], ["xor"]),
]
COMPOSED = {"logical_and_int", "logical_xor_mixed"}  # eager launches a conversion of its own there


@pytest.mark.parametrize("name,fn,shapes,ops", LOGICAL, ids=[c[0] for c in LOGICAL])
def test_tests_write_their_result_type_as_the_eager_kernels(name, fn, shapes, ops):
    """expansions.fold_conversions: logical_and of float tensors was two converts to bool and an and (three
    VectorE passes, 1.20x the eager kernel's device time), sign two compares each converted to float (five
    against three, 1.16x). VectorE's logical ops read the floats' truth themselves and a compare writes its 1/0
    in the float tile, as the eager kernels' instructions do: the same steps, CPU's bits (NaN true, zeros of both
    signs false), no more device time than eager."""
    inputs = _operands(*shapes)
    device = [t.to("neuron") for t in inputs]
    want = fn(*inputs)
    eager, eager_ns = _eager(fn, *device)
    got, ns, steps = _compiled(fn, *device)
    _same(got, want)
    _same(eager, want)
    fused = [o for kind, o in steps if kind == "fused"]
    assert fused[-1][-len(ops):] == ops, steps
    if name not in COMPOSED:
        assert fused == [ops], steps
        assert ns <= eager_ns, (ns, eager_ns)


def test_a_compare_read_by_a_convert_and_another_op_keeps_its_bool():
    """The compare writes the converted type only where the convert is its one reader: a mask also selected on
    keeps its bool result (and the bits of both uses)."""
    x, y = _operands((4, 513), (4, 513))

    def fn(a, b):
        mask = a > b
        return mask.float() * a, torch.where(mask, a, b)

    device = [x.to("neuron"), y.to("neuron")]
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", dynamic=False)(*device)
    for g, w in zip(got, fn(x, y)):
        _same(g.cpu(), w)


@pytest.mark.parametrize("weight", [0.7, 0.25, -3.5, 1.0], ids=str)
def test_lerp_with_a_python_weight_is_one_pass(weight):
    """loops._lerp: CPU's two lambdas differ only where ``w - 1`` is zero, so a Python weight other than 1
    computes one multiply-add over the tiles, with no index mask (compiled lerp had computed both lambdas and an
    iota mask: 1.82x the eager kernel's device time); w = 1 keeps the split (a tail of 6 after 3072)."""
    start, end = _operands((2, 3, 513), (2, 3, 513))
    end.view(-1)[-6:] = -0.0  # the tail's zero signs: lerp_vec's +0.0, the scalar lambda's -0.0 at w = 1
    start.view(-1)[-6:] = -0.0
    fn = lambda s, e: torch.lerp(s, e, weight)  # noqa: E731
    device = [start.to("neuron"), end.to("neuron")]
    got, ns, steps = _compiled(fn, *device)
    _same(got, fn(start, end), exact=False)  # loops._multiply_add: CPU's fma, the product rounded first
    _, eager_ns = _eager(fn, *device)
    kinds = [kind for kind, _ in steps]
    if weight != 1.0:
        assert kinds == ["fused"], steps
        assert ns <= eager_ns, (ns, eager_ns)
    else:
        assert "iota" in kinds


def test_lerp_with_a_tensor_weight_takes_one_multiply_add():
    """A tensor weight: one multiply-add whose coefficient is w - 1 or -(1 - w) where CPU's loop splits, the mask
    one iota of the whole contiguous run (was three iotas, offsets and a remainder beside both lambdas)."""
    start, end, weight = _operands((2, 3, 513), (2, 3, 513), (2, 3, 513))
    weight.view(-1)[-8:] = 1.0
    end.view(-1)[-8:] = -0.0
    start.view(-1)[-8:] = -0.0
    device = [t.to("neuron") for t in (start, end, weight)]
    got, ns, steps = _compiled(torch.lerp, *device)
    _same(got, torch.lerp(start, end, weight), exact=False)
    assert [kind for kind, _ in steps].count("iota") == 1, steps


@pytest.mark.parametrize("make", [lambda: torch.arange(-5, 7, 3, dtype=torch.float32, device="neuron"),
                                  lambda: torch.arange(300, dtype=torch.uint8, device="neuron"),
                                  lambda: torch.arange(70000, dtype=torch.int32, device="neuron")],
                         ids=["arange_float", "arange_uint8_wraps", "arange_int32_tiles"])
def test_a_one_dimensional_iota_is_one_gpsimd_instruction_per_tile(make):
    """steps._iota: the coordinate of a 1-D iota is the flat index itself; the floor division by 1, the
    remainder of an index below the size and the conversion copy were three VectorE passes per tile
    (compiled arange 1.34x the eager kernel's device time). GpSimd's iota writes the result's dtype directly
    (uint8 wraps as the copy's conversion did)."""
    got, _, steps = _compiled(make)
    assert torch.equal(got, make().cpu())
    compiled = torch.compile(make, backend="neuron", dynamic=False)
    with breakdown.capture() as calls:
        compiled()
    torch.neuron.synchronize()
    rows = [row for executable, args in calls for row in breakdown.step_figures(executable, args)]
    iotas = [row for row in rows if row.kind == "iota"]
    assert iotas and all(row.busy["vector"] == 0 and row.busy["gpsimd"] > 0 for row in iotas), rows
