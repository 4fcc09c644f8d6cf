"""Single ops compiled against their eager kernels (issue 21: benches/compiled_vs_eager_specs.py): the compiled
program does the eager kernel's work, with CPU's bits. Device times are the simulated clock's (deterministic)."""

from __future__ import annotations

import pytest
import torch

from device_impl import engine
from device_impl.compiler import breakdown
from support import compiled_run, eager_run

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _compiled(fn, *device: torch.Tensor) -> tuple[torch.Tensor, float, list]:
    """A warm call's output, device time and its program's steps as (kind, [op names]), Dynamo reset first."""
    torch._dynamo.reset()
    got, ns, steps = compiled_run(fn, *device)
    return got, ns, [(s["kind"], [op["op"] for op in s.get("ops", [])]) for s in steps]


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
    eager, eager_ns = eager_run(fn, *device)
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
    _, eager_ns = eager_run(fn, *device)
    kinds = [kind for kind, _ in steps]
    if weight != 1.0:
        assert kinds == ["fused"], steps
        assert ns <= eager_ns, (ns, eager_ns)
    else:  # the split kept: its mask's iota made in the fused group (compiler/iotas.py) and a select by it
        assert kinds == ["fused"] and "select" in steps[0][1], steps


def test_lerp_with_a_tensor_weight_takes_one_multiply_add():
    """A tensor weight: one multiply-add whose coefficient is w - 1 or -(1 - w) where CPU's loop splits, the mask
    one iota of the whole contiguous run (was three iotas, offsets and a remainder beside both lambdas), made in the
    fused group."""
    start, end, weight = _operands((2, 3, 513), (2, 3, 513), (2, 3, 513))
    weight.view(-1)[-8:] = 1.0
    end.view(-1)[-8:] = -0.0
    start.view(-1)[-8:] = -0.0
    device = [t.to("neuron") for t in (start, end, weight)]
    got, ns, steps = _compiled(torch.lerp, *device)
    _same(got, torch.lerp(start, end, weight), exact=False)
    # the mask's iota made per tile in the fused group that reads it (compiler/iotas.py), not a step of its own
    assert [kind for kind, _ in steps] == ["fused"], steps


@pytest.mark.parametrize("make", [lambda: torch.arange(-5, 7, 3, dtype=torch.float32, device="neuron"),
                                  lambda: torch.arange(300, dtype=torch.uint8, device="neuron"),
                                  lambda: torch.arange(70000, dtype=torch.int32, device="neuron")],
                         ids=["arange_float", "arange_uint8_wraps", "arange_int32_tiles"])
def test_a_one_dimensional_iota_is_one_gpsimd_instruction_per_tile(make):
    """steps._iota: the coordinate of a 1-D iota is the flat index itself; the floor division by 1, the
    remainder of an index below the size and the conversion copy were three VectorE passes per tile
    (compiled arange 1.34x the eager kernel's device time). GpSimd's iota writes the result's dtype directly
    (uint8 wraps as the copy's conversion did). arange's float iota * 3 - 5 (exact integers) is that iota itself,
    made in the group that stores it (compiler/iotas.py): no VectorE instruction in the whole program."""
    got, _, steps = _compiled(make)
    assert torch.equal(got, make().cpu())
    compiled = torch.compile(make, backend="neuron", dynamic=False)
    with breakdown.capture() as calls:
        compiled()
    torch.neuron.synchronize()
    rows = [row for executable, args in calls for row in breakdown.step_figures(executable, args)]
    assert all(row.busy["vector"] == 0 for row in rows) and any(row.busy["gpsimd"] > 0 for row in rows), rows


def _clock_ns(call) -> int:
    """A warm call's device-clock advance (every launch and copy it makes: AOTAutograd's copy back included)."""
    from device_impl._core import C

    call()
    torch.neuron.synchronize()
    before = C.device_time_ns(0)
    call()
    torch.neuron.synchronize()
    return C.device_time_ns(0) - before


INPLACE = [
    ("index_put_", lambda x, i, v: x.index_put_((i,), v), (3, 1, 513), [1], (1, 1, 513)),
    ("index_put_accumulate", lambda x, i, v: x.index_put_((i,), v, accumulate=True), (3, 1, 513), [2, 0],
     (2, 1, 513)),
    ("_index_put_impl_", lambda x, i, v: torch.ops.aten._index_put_impl_(x, (i,), v, False, False), (4, 513), [3],
     (1, 513)),
    ("index_fill_", lambda x, i, v: x.index_fill_(-1, i, 2), (1, 2, 513), [0, 5, 512], None),
]


@pytest.mark.parametrize("name,fn,shape,index,values", INPLACE, ids=[c[0] for c in INPLACE])
def test_an_in_place_scatter_writes_into_its_input(name, fn, shape, index, values):
    """executor.writable_into: a scatter whose operand is the input it updates writes the input's memory, its
    operand copy a copy onto itself (skipped, gather.scatter_runner) and AOTAutograd's copy back too; compiled
    ``x.index_put_`` had been the program plus that copy, 2.2x the eager kernel's device time. CPU's values
    (added rows read before they are written), no more device time than eager."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    i = torch.tensor(index)
    v = None if values is None else torch.randn(values, generator=torch.Generator().manual_seed(4))
    args = [x, i] + ([v] if v is not None else [None])
    want = x.clone()
    fn(want, i, v)
    device = [a.to("neuron") if a is not None else None for a in args]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    target = device[0].clone()
    compiled(target, *device[1:])
    _same(target.cpu(), want)
    eager_x, compiled_x = device[0].clone(), device[0].clone()
    eager_ns = _clock_ns(lambda: fn(eager_x, *device[1:]))
    ns = _clock_ns(lambda: compiled(compiled_x, *device[1:]))
    _same(compiled_x.cpu(), eager_x.cpu())
    assert ns <= eager_ns, (ns, eager_ns)


def test_an_in_place_scatter_of_a_strided_input_keeps_its_copy():
    """A transposed input's memory cannot take the contiguous result: a fresh output and the copy back, the
    same values."""
    x = torch.randn(513, 4, generator=torch.Generator().manual_seed(5)).t()
    v = torch.randn(1, 513)
    want = x.clone()
    want.index_put_((torch.tensor([2]),), v)
    target = x.to("neuron")
    torch._dynamo.reset()
    torch.compile(lambda a, i, b: a.index_put_((i,), b), backend="neuron", dynamic=False)(
        target, torch.tensor([2]).to("neuron"), v.to("neuron"))
    _same(target.cpu(), want)


def test_integer_identities_are_their_operand_and_float_ones_are_not():
    """fold._integer_identities: ``x * 1 + 0`` of integers is x (arange's step and start for an index, two
    passes over a value that is already the result); of floats only ``x * 1`` is (-0.0 + 0 is +0.0)."""
    ints = torch.arange(-600, 600, dtype=torch.int32).reshape(2, 600)
    floats = torch.tensor([-0.0, 0.0, 1.5, -2.0] * 129)
    fn = lambda t: t * 1 + 0  # noqa: E731
    got, _, steps = _compiled(fn, ints.to("neuron"))
    assert torch.equal(got, fn(ints))
    assert not any(kind == "fused" for kind, _ in steps), steps
    got, _, steps = _compiled(fn, floats.to("neuron"))
    _same(got, fn(floats))
    assert any(kind == "fused" for kind, _ in steps), steps


def test_breakdown_reruns_a_program_with_a_scatter():
    """breakdown.step_figures wraps the DMA queue's stores: store_rows' keyword arguments (a scatter's accumulate,
    in_order) reach the queue, where the wrapper had refused them (a TypeError for any program with a scatter)."""
    x, v = torch.randn(3, 1, 513), torch.randn(1, 1, 513)
    compiled = torch.compile(lambda a, i, b: a.index_put((i,), b, accumulate=True), backend="neuron", dynamic=False)
    device = [x.to("neuron"), torch.tensor([1]).to("neuron"), v.to("neuron")]
    torch._dynamo.reset()
    compiled(*device)
    with breakdown.capture() as calls:
        compiled(*device)
    torch.neuron.synchronize()
    rows = [row for executable, args in calls for row in breakdown.step_figures(executable, args)]
    (scatter,) = [row for row in rows if row.kind == "scatter"]
    assert scatter.writes["output"] > 0


def test_dropout_that_drops_nothing_returns_its_input():
    """numerics.TRACED_KERNELS: ATen's dropout returns its input itself where nothing is dropped (p = 0, as CPU's
    and the eager device's: no launch); PyTorch's Python form at the op's Autograd key traced a clone, a copy
    launch (1.08 us). Compiled, the call's own tensor comes back, and its gradient flows; p = 0.3 still drops."""
    x = torch.randn(4, 513, generator=torch.Generator().manual_seed(6)).to("neuron")
    torch._dynamo.reset()
    same = torch.compile(lambda t: torch.nn.functional.dropout(t, p=0.0, training=True), backend="neuron",
                         dynamic=False)
    same(x)
    torch.neuron.synchronize()
    engine.reset_stats()
    y = same(x)
    torch.neuron.synchronize()
    assert y.data_ptr() == x.data_ptr() and torch.equal(y.cpu(), x.cpu())
    assert not engine.stats(), engine.stats()
    w = x.detach().clone().requires_grad_()
    (same(w) * 3).sum().backward()
    assert torch.equal(w.grad.cpu(), torch.full((4, 513), 3.0))
    torch._dynamo.reset()
    ones = torch.ones(4, 513).to("neuron")
    dropped = torch.compile(lambda t: torch.nn.functional.dropout(t, p=0.3, training=True), backend="neuron",
                            dynamic=False)(ones).cpu()
    assert 0.2 < (dropped == 0).float().mean().item() < 0.4
    assert set(dropped.unique().tolist()) <= {0.0, 1 / 0.7, float(torch.tensor(1 / 0.7))}


def _eager_and_compiled(fn, *host: torch.Tensor, exact: bool = True) -> tuple[float, float, list]:
    """Eager and compiled device time of one warm call, the compiled output checked against CPU (bit for bit
    where ``exact``)."""
    device = [t.to("neuron") for t in host]
    _, eager_ns = eager_run(fn, *device)
    got, ns, steps = _compiled(fn, *device)
    _same(got, fn(*host), exact)
    return eager_ns, ns, steps


@pytest.mark.parametrize("name, fn, host", [
    ("gt_int8_scalar_tensor", lambda a, b: torch.gt(a, b),
     lambda: (_operands((1, 3, 513))[0], torch.tensor([[[2]]], dtype=torch.int8))),
    ("floor_div_int16_row", lambda a, b: torch.div(a, b, rounding_mode="floor"),
     lambda: (_operands((2, 3, 513))[0], torch.arange(-256, 257, dtype=torch.int16).clamp(max=200) | 1)),
    ("remainder_int64_one", lambda a, b: torch.remainder(a, b), lambda: (_operands((513,))[0], torch.tensor([3]))),
    ("copy_int16_broadcast", lambda a, b: torch.ops.aten.copy(a, b),
     lambda: (_operands((3, 513))[0], torch.arange(513, dtype=torch.int16))),
])
def test_a_small_convert_runs_in_its_readers_group(name, fn, host):
    """fold.sink_small_ops: a convert of a small operand read broadcast (a 0-d tensor, a row, an index of
    another dtype) runs per element in the group that reads it, as the eager kernel converts the broadcast tile
    in its loop, not as a step of its own whose result is stored and loaded back (issue 21: these lost to the
    eager kernel by that step, 1.05-1.07x)."""
    eager_ns, ns, steps = _eager_and_compiled(fn, *host())
    assert [kind for kind, _ in steps] == ["fused"], steps
    assert ns <= eager_ns, (ns, eager_ns)


def test_a_convert_spread_onto_a_large_value_stays_a_step():
    """fold.SINK_LIMIT: a small operand's convert spread onto more than SINK_LIMIT elements stays one small step
    (run once, not once per element of the large value)."""
    x, b = _operands((4, 128, 513))[0], torch.arange(513, dtype=torch.int16)
    _, _, steps = _eager_and_compiled(lambda a, c: a * c, x, b)
    assert [ops for _, ops in steps] == [["convert"], ["multiply"]], steps


@pytest.mark.parametrize("name, fn, host, absent", [
    ("times_one", lambda a: a * 1.0 / 1.0 - 0.0, lambda: _operands((3, 513)), {"multiply", "divide", "subtract"}),
    ("plus_negative_zero", lambda a: a + -0.0, lambda: _operands((3, 513)), {"add"}),
    ("linear_bias", lambda a, w, b: torch.nn.functional.linear(a, w, b),
     lambda: _operands((2, 3, 17), (3, 17), (3,)), {"multiply"}),
    ("addcmul_value_one", lambda a, b, c: torch.addcmul(a, b, c, value=1),
     lambda: _operands((3, 2, 513), (), (3, 2, 513)), set()),
    ("elu", lambda a: torch.nn.functional.elu(a), lambda: _operands((3, 513)), {"multiply"}),
])
def test_float_identities_are_their_operand(name, fn, host, absent):
    """fold._integer_identities' float rules: x * 1, x / 1, x - 0.0 and x + -0.0 are x exactly (NaN, both zeros)
    and are not computed; on a small operand (linear's bias times beta, addcmul's 0-d tensor times value) that
    was a step of its own before the group reading it."""
    # a product's sums (linear) are TensorE's order and elu's expm1 ScalarE's, within float32's tolerance of
    # CPU's (as before this fold, and in the op suite)
    _, _, steps = _eager_and_compiled(fn, *host(), exact=name not in ("linear_bias", "elu"))
    ops = {op for _, names in steps for op in names}
    assert not ops & absent, steps
    assert all(names != ["multiply"] for kind, names in steps if kind == "fused"), steps


def test_add_with_alpha_minus_one_is_a_subtraction():
    """fold._negated_addends: ``add(x, y, alpha=-1)`` (x + y * -1) is x - y, one VectorE pass, as the eager
    kernel's one instruction (it lost 1.02x by the multiply)."""
    eager_ns, ns, steps = _eager_and_compiled(lambda a, b: torch.add(a, b, alpha=-1), *_operands((513,), (1, 2, 513)))
    assert steps == [("fused", ["subtract"])], steps
    assert ns <= eager_ns, (ns, eager_ns)


@pytest.mark.parametrize("name, fn", [
    ("isnan", lambda a: torch.isnan(a)),
    ("clamp_min_inf", lambda a: torch.clamp_min(a, float("inf"))),
    ("clamp_max_minus_inf", lambda a: torch.clamp_max(a, float("-inf"))),
    ("clamp_min", lambda a: torch.clamp_min(a, 0.25)),
])
def test_one_operand_tests_and_one_sided_clamps_are_one_instruction(name, fn):
    """lowering: ``x != x`` is VectorE's isnan of one operand, and a clamp's bound of +inf above (or -inf
    below), which leaves every value as it is, NaN included, takes no pass: the eager kernel's one instruction,
    its device time (isnan and clamp_min lost 1.02x and 1.09x)."""
    eager_ns, ns, _ = _eager_and_compiled(fn, *_operands((5, 513)))
    assert ns <= eager_ns, (ns, eager_ns)


@pytest.mark.parametrize("name, fn, shape, absent", [
    ("unfold", lambda a: torch.nn.functional.unfold(a, 4), (1, 1, 5, 6), {"copy"}),
    ("constant_pad", lambda a: torch.nn.functional.pad(a, (2, 3), value=-0.0), (513,), {"fill"}),
    ("constant_pad_cropping", lambda a: torch.nn.functional.pad(a, (-1, 2, 1, -2), value=1.5), (3, 7), {"fill"}),
    ("argmax", lambda a: torch.argmax(a), (3, 513), {"fill", "iota"}),
    ("argmin_dim", lambda a: torch.argmin(a, dim=1), (3, 513), {"fill", "iota"}),
])
def test_no_step_for_what_the_op_step_needs_no_bytes_of(name, fn, shape, absent):
    """schedule.finish: an output that is a reshape of a value is that value's buffer (no copy step); a pad's or
    reduce_window's constant and argmax's iota and initial values, which the runner never reads from HBM
    (schedule.UNREAD), get no fill or iota step; a pad without interior padding fills only the boxes around the
    copied interior, as the eager kernel does."""
    eager_ns, ns, steps = _eager_and_compiled(fn, _operands(shape)[0])
    assert not {kind for kind, _ in steps} & absent, steps
    if name != "argmax" and name != "argmin_dim":  # the arg-reduction of one row runs on one partition
        assert ns <= eager_ns, (ns, eager_ns)


_F = torch.nn.functional


@pytest.mark.parametrize("name, fn, shapes", [
    ("conv1d", lambda x, w, b: _F.conv1d(x, w, b, padding=1, dilation=2), ((2, 2, 9), (3, 2, 3), (3,))),
    ("conv2d_groups", lambda x, w, b: _F.conv2d(x, w, b, stride=2, groups=2), ((1, 4, 7, 7), (6, 2, 2, 2), (6,))),
    ("conv_transpose2d", lambda x, w, b: _F.conv_transpose2d(x, w, b, stride=2, padding=1, groups=2),
     ((2, 2, 3, 4), (2, 2, 3, 3), (4,))),
    ("convolution_internal", lambda x, w, b: torch.ops.aten._convolution(
        x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1, False, False, True, True),
     ((2, 3, 7, 5), (1, 3, 2, 2), (1,))),
])
def test_a_convolution_adds_its_bias_on_the_way_out(name, fn, shapes):
    """fold.conv_bias: torch-mlir's add of the broadcast bias after a convolution is the convolution step's
    bias, added on PSUM's way out as the eager kernel adds it, not a group of its own (a store, a reload and
    a pass: conv1d/conv2d/conv_transpose2d/_convolution lost to eager 1.07x by it)."""
    x, w, b = _operands(*shapes)
    # a finite weight: the compiled step multiplies the padded zeros, which CPU's oneDNN kernel never forms (a
    # NaN weight there is NaN in the compiled output only, with or without this fold)
    w = w.nan_to_num()
    # TensorE's order of the products' sums, not CPU's: float32's tolerance (as the op suite's)
    eager_ns, ns, steps = _eager_and_compiled(fn, x, w, b, exact=False)
    assert steps == [("convolution", [])], steps
    assert ns <= eager_ns, (ns, eager_ns)


def test_a_convolution_read_elsewhere_keeps_its_bias_add():
    """fold.conv_bias leaves the add where the convolution's result is also read by something else (here an
    multiply): both values are needed."""
    x, w, b = _operands((1, 2, 9), (3, 2, 3), (3,))
    fn = lambda x, w, b: (lambda y: y * (y + b[:, None]))(_F.conv1d(x, w))  # noqa: E731
    _, _, steps = _compiled(fn, *[t.to("neuron") for t in (x, w, b)])
    assert [kind for kind, _ in steps] == ["convolution", "fused"], steps


@pytest.mark.parametrize("name, fn, shapes", [
    ("stride_above_kernel", lambda x, w, b: _F.conv_transpose2d(x, w, b, stride=3, groups=2),
     ((2, 2, 3, 4), (2, 2, 1, 1), (4,))),
    ("output_padding_past_reach", lambda x, w, b: _F.conv_transpose1d(x, w, b, output_padding=2, dilation=3,
                                                                      stride=1),
     ((1, 2, 5), (2, 4, 2), (4,))),
])
def test_a_transposed_convolution_with_unreached_outputs_has_cpus_zero_signs(name, fn, shapes):
    """A stride of 3 over a 1x1 kernel, or output padding past a dilated kernel's reach, leaves outputs no product
    reaches, which CPU computes as 0 + bias (+0.0 for the -0.0 among the bias values). Imported, the bias add stays
    a step of its own (fold._every_output_reached); cut whole where costed cheaper, the eager program forms them
    as CPU does (kernels.spatial.conv._unreached): either way the zero signs are CPU's."""
    _, _, steps = _eager_and_compiled(fn, *_operands(*shapes), exact=False)
    assert [kind for kind, _ in steps] in (["convolution", "fused"], ["convolution_overrideable"]), steps
