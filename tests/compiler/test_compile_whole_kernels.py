"""Ops the compiler used to run eagerly now compile (issue 21: "every op's compiled device time <= its eager
kernel's"; benches/compiled_vs_eager_specs.py listed them as eager-graph). Each graph compiles with no fallback
counted, its result is CPU's bit for bit (what the eager kernel returns), and its program's device time is at most
the eager kernel's: isin used to become PyTorch's sort + searchsorted decomposition, refused by the import and then
run op by op eagerly, 160 us against the eager kernel's 1.7 us."""

from __future__ import annotations

import pytest
import torch

from device_impl._core import C

pytestmark = pytest.mark.usefixtures("fresh")


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _device(args):
    return [a.to("neuron") if isinstance(a, torch.Tensor) else a for a in args]


def _device_ns(call) -> float:
    """One warm call's simulated device time: the device clock's advance, as benches/compiled_vs_eager_specs.py
    reads it (it counts the runtime's copy kernels too, which an eager clone of a view runs without a launch)."""
    call()
    torch.neuron.synchronize()
    before = C.device_time_ns(0)
    call()
    torch.neuron.synchronize()
    return C.device_time_ns(0) - before


def _as_list(value) -> list[torch.Tensor]:
    return [t.cpu() for t in value] if isinstance(value, (tuple, list)) else [value.cpu()]


def _check_compiles(fn, *args) -> tuple[float, float]:
    """``fn`` compiled (static shapes) on ``args`` moved to neuron: no graph ran eagerly, every result equals
    CPU's (bits, dtype), and (compiled, eager) device ns of one warm call."""
    import device_impl.compiler as compiler

    device = _device(args)
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    got = _as_list(compiled(*device))
    assert compiler.stats()["fallbacks_by_op"] == {}, compiler.stats()["fallbacks_by_op"]
    want = _as_list(fn(*args))
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g, w) if not w.is_floating_point() else \
            torch.equal(g.view(torch.int8 if w.element_size() == 1 else getattr(torch, f"int{8 * w.element_size()}")),
                        w.view(torch.int8 if w.element_size() == 1 else getattr(torch, f"int{8 * w.element_size()}")))
    return _device_ns(lambda: compiled(*device)), _device_ns(lambda: fn(*device))


ISIN = [
    # more test values than VectorE compares one by one: the eager kernel sorts them on GpSimd and searches
    ("sorted", lambda a, b: torch.isin(a, b), lambda: (torch.randint(0, 50, (7, 513), generator=_gen()).float(),
                                                        torch.randint(0, 50, (100,), generator=_gen()).float())),
    ("few_inverted", lambda a, b: torch.isin(a, b, invert=True),
     lambda: (torch.randint(0, 9, (3, 129), generator=_gen()), torch.tensor([1, 4, 7]))),
    # test values in several sorted chunks: the program's scratch holds them, as the eager kernel's device tensor
    ("chunks", lambda a, b: torch.isin(a, b), lambda: (torch.randint(0, 99999, (300,), generator=_gen()),
                                                        torch.randint(0, 99999, (20000,), generator=_gen()))),
    # isin(scalar, tensor): with 10 or more test values CPU compares in promote_types(double, float16)
    ("scalar_tensor", lambda b: torch.isin(2.2e-16, b), lambda: (torch.tensor([0.0] * 12, dtype=torch.float16),)),
    ("scalar_tensor_few", lambda b: torch.isin(3, b, invert=True), lambda: (torch.arange(5.0),)),
]


@pytest.mark.parametrize("name,fn,make", ISIN, ids=[c[0] for c in ISIN])
def test_isin_compiles_to_the_eager_kernels_program(name, fn, make):
    """isin is cut whole (compiler/opaque.py) and its step runs kernels.membership's program."""
    compiled_ns, eager_ns = _check_compiles(fn, *make())
    assert compiled_ns <= eager_ns


def _ties() -> torch.Tensor:
    return torch.randint(0, 5, (7, 513), generator=_gen()).float()


# (name, call, whether its device time is compared: a sort of a transposed input writes its results in the eager
# kernel's layout of them, the input's, while the compiled program's outputs are contiguous, its rows strided)
SORTS = [
    # sort.stable: torch-mlir converts only sort.default, so these graphs ran eagerly
    ("stable", lambda a: torch.sort(a, dim=1, stable=True), True),
    ("argsort_stable", lambda a: torch.argsort(a, dim=1, stable=True), True),
    ("descending_dim0", lambda a: torch.sort(a, dim=0, descending=True, stable=False), True),
    ("transposed", lambda a: torch.sort(a.t(), dim=0, stable=True), False),
    # sort.default along an expanded dim: CPU sorts stably there (indices stay arange); stablehlo.sort's step
    # left the ties in std::sort's order
    ("expanded", lambda a: torch.sort(a[:, :1].expand(7, 40), dim=1), True),
]


@pytest.mark.parametrize("name,fn,timed", SORTS, ids=[c[0] for c in SORTS])
def test_sort_compiles_to_the_eager_kernels_sort(name, fn, timed):
    """sort.stable and sort are cut whole (compiler/opaque.py); the step sorts with the eager kernel's tie rule
    (kernels.indexing.sort.stable_order)."""
    compiled_ns, eager_ns = _check_compiles(fn, _ties())
    assert compiled_ns <= eager_ns or not timed


# (name, call): ties in every row (values 0-4); k small (std::partial_sort: k * 64 <= n) and large (nth_element and a
# sort of the first k - 1), both ends, unsorted, along a leading dim, of a transposed input and in bfloat16
TOPKS = [
    ("partial_sort", lambda a: torch.topk(a, 5, dim=1)),
    ("nth_element", lambda a: torch.topk(a, 300, dim=1, largest=False)),
    ("unsorted", lambda a: torch.topk(a, 100, dim=1, sorted=False)),
    ("dim0", lambda a: torch.topk(a, 3, dim=0)),
    ("transposed", lambda a: torch.topk(a.t(), 4, dim=1, largest=False)),
    ("bfloat16", lambda a: torch.topk(a.to(torch.bfloat16), 7, dim=-1)),
]


@pytest.mark.parametrize("name,fn", TOPKS, ids=[c[0] for c in TOPKS])
def test_topk_gives_cpus_tie_order(name, fn):
    """topk is cut whole (compiler/opaque.py ``_topk``) and runs the eager topk kernel's sort with CPU's partial-sort
    tie order; torch-mlir's sort + slice left tied values' indices in std::sort's order (op suite topk compiled:
    output[1] differed), at the same device time."""
    compiled_ns, eager_ns = _check_compiles(fn, _ties())
    assert compiled_ns <= eager_ns


def test_sort_with_a_dim_out_of_range_raises_as_cpu():
    """The meta function accepts the dim; the cut refuses it, so the graph runs eagerly and raises CPU's class."""
    with pytest.raises(IndexError):
        torch.sort(torch.ones(3), dim=2, stable=True)
    with pytest.raises(IndexError):
        torch.compile(lambda a: torch.sort(a, dim=2, stable=True), backend="neuron", dynamic=False)(
            torch.ones(3).to("neuron"))


ALL_ANY = [
    # torch.all(x) decomposes to not(any.dims(not x)) with no dims, which torch-mlir refused
    ("all", lambda a: torch.all(a), False),
    ("all_of_bool", lambda a: torch.all(a != 0), False),
    ("any_dims_none_keepdim", lambda a: torch.ops.aten.any.dims(a > 0, None, True), False),
    ("all_uint8", lambda a: torch.all(a), True),
]


@pytest.mark.parametrize("name,fn,uint8", ALL_ANY, ids=[c[0] for c in ALL_ANY])
def test_all_of_every_element_compiles(name, fn, uint8):
    """legalize._every_dim: any.dims/all.dims with no dims name every dim, which torch-mlir converts."""
    x = torch.randint(0, 3, (4, 9), generator=_gen()).to(torch.uint8) if uint8 else \
        torch.randn((3, 5, 513), generator=_gen())
    compiled_ns, eager_ns = _check_compiles(fn, x)
    assert compiled_ns <= eager_ns


def _unscale(a, b):
    found = torch.zeros(1, device=a.device)
    torch._amp_foreach_non_finite_check_and_unscale_([a, b], found, torch.full((1,), 0.5, device=a.device))
    return found


def _update(s, t, fi):
    return [torch._amp_update_scale_(q, t, fi.float(), 2.0, 0.5, 2) for q in s.reshape(-1)[:8].split(1)]


@pytest.mark.parametrize("overflow", [False, True])
def test_grad_scaler_unscale_compiles_in_place(overflow):
    """_amp_foreach_non_finite_check_and_unscale is cut whole (its (list, tensor) result flattened) and its step
    runs amp.scaler.unscale_program, writing each gradient into its input's memory
    (opaque.IN_PLACE_KINDS, executor.Executable.writable_into): no copy back after the program."""
    import device_impl.compiler as compiler

    x, y = torch.randn((3, 513), generator=_gen()), torch.randn((5,), generator=_gen())
    if overflow:
        y[2] = float("inf")
    a, b = x.to("neuron"), y.to("neuron")
    compiled = torch.compile(_unscale, backend="neuron", dynamic=False)
    found = compiled(a, b)
    assert compiler.stats()["fallbacks_by_op"] == {}
    want = _unscale(x, y)
    assert torch.equal(found.cpu(), want) and torch.equal(a.cpu(), x) and torch.equal(b.cpu(), y)
    a2, b2 = x.to("neuron"), y.to("neuron")
    assert _device_ns(lambda: compiled(a, b)) <= _device_ns(lambda: _unscale(a2, b2))


def test_grad_scaler_update_compiles():
    """_amp_update_scale is cut whole: eight updates (one scale overflowing to inf when grown) in one program."""
    import device_impl.compiler as compiler

    s = torch.randn((8,), generator=_gen()) * 1e38
    t, fi = torch.zeros(1, dtype=torch.int32), torch.tensor([False])
    sd, td, fd = s.to("neuron"), t.to("neuron"), fi.to("neuron")
    compiled = torch.compile(_update, backend="neuron", dynamic=False)
    got = compiled(sd, td, fd)
    assert compiler.stats()["fallbacks_by_op"] == {}
    want = _update(s, t, fi)
    assert torch.equal(sd.cpu(), s) and torch.equal(td.cpu(), t)
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want, strict=True))
    s2, t2 = s.to("neuron"), t.to("neuron")
    assert _device_ns(lambda: compiled(sd, td, fd)) <= _device_ns(lambda: _update(s2, t2, fd))


def _bits_of(t: torch.Tensor) -> torch.Tensor:
    return t.float().view(torch.int32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,fn,make", [
    ("erfc", lambda a: torch.erfc(a), lambda: torch.randn((7, 513), generator=_gen()) * 3),
    ("erfc_fused", lambda a: torch.erfc(a * 2) + 1, lambda: torch.randn((7, 513), generator=_gen()) * 3),
    ("erfinv", lambda a: torch.erfinv(a),
     lambda: torch.cat([torch.tensor([-0.0, 1.0, -1.0, float("nan")]), torch.rand((509,), generator=_gen()) * 2 - 1])),
    # sinh/cosh: numerics' exact h form needed copysign, a bitcast nothing lowers (sinh ran eagerly; cosh cost 1.5x)
    ("sinh", lambda a: torch.sinh(a), lambda: torch.randn((7, 513), generator=_gen()) * 8),
    ("cosh_fused", lambda a: torch.cosh(a) * 2, lambda: torch.randn((7, 513), generator=_gen()) * 8),
], ids=lambda v: v if isinstance(v, str) else None)
def test_activations_torch_mlir_lacks_compile_to_scalar_engine(name, fn, make, dtype):
    """erfc, erfinv, sinh and cosh are spliced back as ScalarE's activations (compiler/opaque.py _activation):
    compiled bits are the eager kernel's (one rounding of the float64 value; float16/bfloat16 in float32 first,
    as CPU's opmath), within CPU's tolerance, at no more device time."""
    import device_impl.compiler as compiler

    x = make().to(dtype)
    d = x.to("neuron")
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    got = compiled(d).cpu()
    assert compiler.stats()["fallbacks_by_op"] == {}
    assert torch.equal(_bits_of(got), _bits_of(fn(d).cpu()))
    torch.testing.assert_close(got, fn(x), equal_nan=True)
    assert _device_ns(lambda: compiled(d)) <= _device_ns(lambda: fn(d))


CUMPRODS = [
    ("rows", lambda a: torch.cumprod(a, 1), lambda: torch.rand((7, 513), generator=_gen()) + 0.5),
    ("columns", lambda a: torch.cumprod(a, 0), lambda: torch.rand((7, 513), generator=_gen()) + 0.5),
    ("bfloat16", lambda a: torch.cumprod(a, -1), lambda: (torch.rand((7, 513), generator=_gen()) + 0.5).bfloat16()),
    ("int64", lambda a: torch.cumprod(a, 1), lambda: torch.randint(-3, 4, (5, 40), generator=_gen())),
    ("int32_to_int64", lambda a: torch.cumprod(a, 1), lambda: torch.randint(-3, 4, (5, 40), generator=_gen()).int()),
    # longer than steps.SCAN_CHUNK: chunks carrying the double running value
    ("long", lambda a: torch.cumprod(a, 1), lambda: torch.rand((3, 9000), generator=_gen()) / 2 + 0.75),
]


@pytest.mark.parametrize("name,fn,make", CUMPRODS, ids=[c[0] for c in CUMPRODS])
def test_cumprod_compiles_to_the_scan_step(name, fn, make):
    """cumprod (torch-mlir converts none) is cut whole and runs as the compiler's scan with a multiply (float32
    carried in double, as CPU's acc_type): CPU's bits at no more device time than the eager kernel."""
    compiled_ns, eager_ns = _check_compiles(fn, make())
    assert compiled_ns <= eager_ns


IMPORTABLE = [
    ("remainder_scalar_float", lambda a: torch.remainder(2.5, a), lambda: torch.randn((7, 513), generator=_gen())),
    ("remainder_scalar_negative", lambda a: torch.remainder(-3, a), lambda: torch.randn((7, 513), generator=_gen())),
    ("narrow_copy", lambda a: torch.narrow_copy(a, 1, 3, 100), lambda: torch.randn((7, 513), generator=_gen())),
    ("narrow_copy_negative_start", lambda a: torch.narrow_copy(a, 0, -3, 2),
     lambda: torch.randn((7, 513), generator=_gen())),
]


@pytest.mark.parametrize("name,fn,make", IMPORTABLE, ids=[c[0] for c in IMPORTABLE])
def test_ops_torch_mlir_lacks_compile_as_ops_it_converts(name, fn, make):
    """remainder.Scalar_Tensor and narrow_copy decompose into remainder.Tensor of a 0-d tensor and a sliced clone
    (backend._IMPORTABLE): CPU's bits at no more device time than the eager kernel."""
    compiled_ns, eager_ns = _check_compiles(fn, make())
    assert compiled_ns <= eager_ns


def test_remainder_scalar_tensor_of_integers_runs_eagerly():
    """Only float32 remainder.Scalar_Tensor is decomposed: an integer one would compile op by op, slower than the
    eager kernel, so it still runs as the eager kernel (counted: torch-mlir refuses it, so it is an eager cut,
    compiler/eager_cut.py, its graph nothing else), with CPU's result."""
    import device_impl.compiler as compiler

    x = torch.randint(1, 9, (5, 40), generator=_gen())
    got = torch.compile(lambda a: torch.remainder(-3, a), backend="neuron", dynamic=False)(x.to("neuron"))
    assert torch.equal(got.cpu(), torch.remainder(-3, x))
    stats = compiler.stats()
    assert sum(stats["fallbacks_by_op"].values()) + sum(stats["eager_cuts_by_op"].values()) == 1


DIAGONALS = [
    ("main", lambda a: torch.diagonal(a).clone(), (7, 513)),
    ("offset", lambda a: torch.diagonal(a, 1).clone(), (7, 513)),
    ("negative_offset", lambda a: torch.diagonal(a, -2).clone(), (7, 513)),
    ("offset_past_the_end", lambda a: torch.diagonal(a, 600).clone(), (7, 513)),
    ("dims_0_2", lambda a: torch.diagonal(a, 1, 0, 2).clone() * 2, (4, 5, 6)),
    ("dims_reversed", lambda a: torch.diagonal(a, -1, -1, 1).clone(), (4, 5, 6)),
    ("transposed", lambda a: torch.diagonal(a.t()).clone(), (7, 513)),
]


@pytest.mark.parametrize("name,fn,shape", DIAGONALS, ids=[c[0] for c in DIAGONALS])
def test_diagonal_compiles_as_a_strided_slice(name, fn, shape):
    """diagonal (torch-mlir converts none) decomposes into its dims moved last, flattened, and a slice with a
    step (backend._diagonal): CPU's values; the 2-D case at no more device time than the eager kernel."""
    compiled_ns, eager_ns = _check_compiles(fn, torch.randn(shape, generator=_gen()))
    assert compiled_ns <= eager_ns or len(shape) != 2 or name == "transposed"


@pytest.mark.parametrize("dims,error", [((0, 0), RuntimeError), ((0, 3), IndexError)])
def test_diagonal_arguments_cpu_refuses_raise_as_cpu(dims, error):
    with pytest.raises(error):
        torch.diagonal(torch.ones(3, 3), 0, *dims)
    with pytest.raises(error):
        torch.compile(lambda a: torch.diagonal(a, 0, *dims).clone(), backend="neuron", dynamic=False)(
            torch.ones(3, 3).to("neuron"))


UNFOLD_BACKWARDS = [  # (input sizes, dim, size, step, dtype)
    ((7, 513), 1, 4, 2, torch.float32),  # overlapping windows: summed from +0.0
    ((7, 513), 0, 3, 1, torch.float32),
    ((7, 513), 1, 2, 3, torch.bfloat16),  # disjoint windows, copied; bfloat16 accumulates in an fp32 scratch
    ((5, 6, 7), -1, 7, 1, torch.float16),
    ((9,), 0, 4, 2, torch.int64),
]


@pytest.mark.parametrize("sizes,dim,size,step,dtype", UNFOLD_BACKWARDS)
def test_unfold_backward_compiles_to_the_eager_kernels_program(sizes, dim, size, step, dtype):
    """unfold_backward is cut whole (kept from PyTorch's decomposition, which ran eagerly at 4.4x): the eager
    kernel's bits (its order of summing overlapping windows) at its device time, within CPU's tolerance."""
    import device_impl.compiler as compiler

    shape = torch.empty(sizes).unfold(dim, size, step).shape
    g = torch.randn(shape, generator=_gen()).to(dtype) if dtype.is_floating_point else \
        torch.randint(-5, 5, shape, generator=_gen())
    fn = lambda a: torch.ops.aten.unfold_backward(a, list(sizes), dim, size, step)  # noqa: E731
    d = g.to("neuron")
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    got = compiled(d).cpu()
    assert compiler.stats()["fallbacks_by_op"] == {}
    assert torch.equal(got, fn(d).cpu())
    torch.testing.assert_close(got, fn(g))
    assert _device_ns(lambda: compiled(d)) <= _device_ns(lambda: fn(d))


VIEW_SCATTERS = [
    ("slice_step_2", lambda a, b: torch.slice_scatter(a, b, 1, 3, None, 2), (7, 513), (7, 255)),
    ("slice_dim0_step_3", lambda a, b: torch.slice_scatter(a, b, 0, 0, 7, 3), (7, 513), (3, 513)),
    ("diagonal_offset", lambda a, b: torch.diagonal_scatter(a, b, 1), (7, 513), (7,)),
    ("diagonal_last_dims", lambda a, b: torch.diagonal_scatter(a, b, -1, -2, -1), (3, 5, 6), (3, 4)),
]


@pytest.mark.parametrize("name,fn,shape,src", VIEW_SCATTERS, ids=[c[0] for c in VIEW_SCATTERS])
def test_view_scatters_compile_to_the_eager_kernels_moves(name, fn, shape, src):
    """slice_scatter with a step and diagonal_scatter (torch-mlir converts neither) are cut whole: self moved
    into the result, src into its region (indexing.gather_scatter.view_scatter_program)."""
    compiled_ns, eager_ns = _check_compiles(fn, torch.randn(shape, generator=_gen()), torch.randn(src, generator=_gen()))
    assert compiled_ns <= eager_ns


def test_view_scatter_with_a_src_of_the_wrong_size_raises_as_cpu():
    """The cut asks the region of the traced meta and refuses a src that does not fit: eager raises CPU's error."""
    with pytest.raises(RuntimeError):
        torch.diagonal_scatter(torch.ones(4, 4), torch.ones(3))
    with pytest.raises(RuntimeError):
        torch.compile(lambda a, b: torch.diagonal_scatter(a, b), backend="neuron", dynamic=False)(
            torch.ones(4, 4).to("neuron"), torch.ones(3).to("neuron"))


PRODUCTS = [
    # the sweep's designed cases (benches/compiled_vs_eager_specs.py): 257 and 127 elements, one batch of 128x5x127
    ("dot", torch.dot, [(257,), (257,)], torch.float32),
    ("vdot", torch.vdot, [(127,), (127,)], torch.float32),
    ("dot_bfloat16", torch.dot, [(513,), (513,)], torch.bfloat16),
    ("vdot_bfloat16", torch.vdot, [(300,), (300,)], torch.bfloat16),
    ("addbmm", lambda s, a, b: torch.addbmm(s, a, b, beta=0.5, alpha=2.0), [(1, 127), (1, 128, 5), (1, 5, 127)],
     torch.float32),
    ("addbmm_batches", lambda s, a, b: torch.addbmm(s, a, b, alpha=-1.5), [(9, 130), (3, 9, 200), (3, 200, 130)],
     torch.float32),
    # reduced-float baddbmm and mv (the bfloat16 sweep's cases; float32 keeps its decomposition): the product had
    # run in float32 after a convert of each operand (baddbmm 7.69 us against 5.68) or on VectorE (mv 1.72 against
    # 1.48)
    ("baddbmm_bfloat16", lambda s, a, b: torch.baddbmm(s, a, b, beta=1, alpha=2.0),
     [(2, 1, 127), (2, 128, 257), (2, 257, 127)], torch.bfloat16),
    ("baddbmm_float16_beta", lambda s, a, b: torch.baddbmm(s, a, b, beta=0.5, alpha=-1.5),
     [(3, 9, 130), (3, 9, 20), (3, 20, 130)], torch.float16),
    ("mv_bfloat16", torch.mv, [(5, 129), (129,)], torch.bfloat16),
    ("mv_float16", torch.mv, [(130, 300), (300,)], torch.float16),
    ("adaptive_avg_pool1d", lambda x: torch.nn.functional.adaptive_avg_pool1d(x, 2), [(1, 2, 8)], torch.float32),
    ("adaptive_avg_pool2d", lambda x: torch.nn.functional.adaptive_avg_pool2d(x, (3, 5)), [(2, 3, 7, 11)],
     torch.float32),
]


@pytest.mark.parametrize("name,fn,shapes,dtype", PRODUCTS, ids=[c[0] for c in PRODUCTS])
def test_products_and_adaptive_average_pooling_compile_to_the_eager_kernels_program(name, fn, shapes, dtype):
    """dot, vdot, addbmm, reduced-float baddbmm and mv (compiler/opaque_products.py) and 2-d adaptive average
    pooling (opaque_cnn) are cut
    whole and run as their eager kernels' programs: the eager kernel's bits (TensorE's sum order, CPU's rounding
    after each batch of addbmm, CPU's window sums) and at most its device time. Said as PyTorch's decomposition or
    torch-mlir's, dot was a VectorE sum over one partition (1.96 us against 1.62), addbmm a product and two
    elementwise steps (3.06 against 2.60 us), adaptive_avg_pool1d a reduce_window and a divide (1.59 against
    1.19 us)."""
    import device_impl.compiler as compiler
    from support import compiled_run, eager_run

    inputs = [torch.randn(s, generator=_gen()).to(dtype) for s in shapes]
    want, eager_ns = eager_run(fn, *inputs)
    got, compiled_ns, steps = compiled_run(fn, *inputs)
    assert compiler.stats()["fallbacks_by_op"] == {}, compiler.stats()["fallbacks_by_op"]
    assert len(steps) == 1, [s["kind"] for s in steps]
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)
    # and near the float64 result (sums of up to 600 products in another order than CPU's BLAS)
    torch.testing.assert_close(got.double(), fn(*[t.double() for t in inputs]),
                               **({"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 0.1, "rtol": 0.02}))


INDEX_ADDS = [  # (self shape, dim, index, alpha, dtype): the sweep's designed case first
    ((5, 3, 513), -2, [0, 2, 1, 2, 0, 0], 2, torch.bfloat16),
    ((7, 130), 0, [6, 0, 6, 3], -1.5, torch.float32),  # repeated rows added in index order, alpha not a power of 2
    ((4, 9, 3), 2, [2, 2], 3, torch.float16),
    ((4, 9, 3), 1, [8, 0, 8], 2, torch.int64),
    ((300,), 0, [5, 299, 5], 0.5, torch.float32),  # 1-d self: CPU rounds source * alpha first
]


@pytest.mark.parametrize("shape,dim,index,alpha,dtype", INDEX_ADDS)
def test_index_add_with_alpha_compiles_to_the_eager_kernels_program(shape, dim, index, alpha, dtype):
    """index_add with alpha other than 1 is cut whole (compiler/opaque.py ``index_add_whole``) and runs the eager
    kernel's program (kernels.indexing.index_put.index_scatter_program): one step, CPU's bits (its loop of adds,
    one fused multiply-add each where the host's kernels fuse), at most the eager kernel's device time. numerics'
    decomposition unrolled CPU's loop per index entry: 26.7 us against the kernel's 4.7 for the sweep's case."""
    import device_impl.compiler as compiler
    from support import compiled_run, eager_run

    src_shape = list(shape)
    src_shape[dim] = len(index)
    x = torch.randn(shape, generator=_gen()).to(dtype) if dtype.is_floating_point else \
        torch.randint(-9, 9, shape, generator=_gen())
    src = torch.randn(src_shape, generator=_gen()).to(dtype) if dtype.is_floating_point else \
        torch.randint(-9, 9, src_shape, generator=_gen())
    idx = torch.tensor(index)
    fn = lambda a, i, s: torch.index_add(a, dim, i, s, alpha=alpha)  # noqa: E731
    want, eager_ns = eager_run(fn, x, idx, src)
    got, compiled_ns, steps = compiled_run(fn, x, idx, src)
    assert compiler.stats()["fallbacks_by_op"] == {}, compiler.stats()["fallbacks_by_op"]
    assert [s["kind"] for s in steps] == ["index_add"]
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert torch.equal(got, fn(x, idx, src))  # CPU's bits
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)


def test_index_add_cut_whole_raises_cpus_error_for_an_index_out_of_range():
    """The step raises the exception CPU's path raises (its loop of adds: IndexError), not the scatter's."""
    x, src, idx = torch.zeros(4, 5), torch.ones(2, 5), torch.tensor([1, 4])
    with pytest.raises(IndexError):
        torch.index_add(x, 0, idx, src, alpha=2)
    fn = torch.compile(lambda a, i, s: torch.index_add(a, 0, i, s, alpha=2), backend="neuron", dynamic=False)
    with pytest.raises(IndexError):
        fn(x.to("neuron"), idx.to("neuron"), src.to("neuron"))



ROW_MOVES = [  # (name, fn, make): the sweep's designed cases first
    ("index_copy_last", lambda x, i, s: torch.index_copy(x, -1, i, s),
     lambda: (torch.randn(513, generator=_gen()), torch.tensor([511]), torch.randn(1, generator=_gen()))),
    ("index_copy_rows_bf16", lambda x, i, s: torch.index_copy(x, 0, i, s),
     lambda: (torch.randn(9, 130, generator=_gen()).bfloat16(), torch.tensor([8, 0, 3]),
              torch.randn(3, 130, generator=_gen()).bfloat16())),
    ("index_copy_middle", lambda x, i, s: torch.index_copy(x, 1, i, s),
     lambda: (torch.randn(2, 5, 3, generator=_gen()), torch.tensor([4, 1]), torch.randn(2, 2, 3, generator=_gen()))),
]


@pytest.mark.parametrize("name,fn,make", ROW_MOVES, ids=[c[0] for c in ROW_MOVES])
def test_index_copy_compiles_to_the_eager_kernels_program(name, fn, make):
    """index_copy is cut whole (compiler/opaque_indexing.py) and runs as the eager kernel's indirect-DMA program: one
    step, CPU's bits, at most the eager kernel's device time. PyTorch's decomposition was a fused step wrapping the
    index before a scatter (the sweep's case: 1.526 us against 1.446)."""
    import device_impl.compiler as compiler
    from support import compiled_run, eager_run

    inputs = make()
    want, eager_ns = eager_run(fn, *inputs)
    got, compiled_ns, steps = compiled_run(fn, *inputs)
    assert compiler.stats()["fallbacks_by_op"] == {}, compiler.stats()["fallbacks_by_op"]
    assert [s["kind"] for s in steps] == ["index_copy"], [s["kind"] for s in steps]
    assert got.dtype == want.dtype and torch.equal(got, want)
    assert torch.equal(got, fn(*inputs))  # CPU's bits
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)


def test_index_copy_in_place_compiles_into_its_input():
    """``x.index_copy_`` (a KV cache's update) is the index_copy step written into x's own memory
    (executor.Executable._scatters_into), its copy of x skipped: only the rows move, at most the eager kernel's
    device time (1523 ns against the scatter path's 1533 for a [64, 513] float32 x), and x holds CPU's result."""
    def fn(x, i, s):
        x.index_copy_(0, i, s)
        return x

    x, idx, src = torch.randn(64, 513, generator=_gen()), torch.tensor([3, 7]), torch.randn(2, 513, generator=_gen())
    want = fn(x.clone(), idx, src)
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    device = _device([x, idx, src])
    eager_ns = _device_ns(lambda: fn(*device))
    device = _device([x, idx, src])
    compiled(*device)
    assert torch.equal(device[0].cpu(), want)
    compiled_ns = _device_ns(lambda: compiled(*device))
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)
    from device_impl.compiler import breakdown

    with breakdown.capture() as calls:
        compiled(*device)
    torch.neuron.synchronize()
    assert [s["kind"] for executable, _ in calls for s in executable.program.steps] == ["index_copy"]


@pytest.mark.parametrize("name,call,error", [
    ("index_copy", lambda x, i: torch.index_copy(x, 0, i, torch.ones(2, 5, device=x.device)), IndexError),
])
def test_index_copy_cut_whole_raises_cpus_error_for_an_index_out_of_range(name, call, error):
    """The step raises the exception CPU raises for an index out of range: index_copy's IndexError."""
    x = torch.zeros(4, 5)
    idx = torch.tensor([1, 4])
    with pytest.raises(error):
        call(x, idx)
    fn = torch.compile(call, backend="neuron", dynamic=False)
    with pytest.raises(error):
        fn(x.to("neuron"), idx.to("neuron"))


MOMENTS = [  # (name, fn, shape, dtype): the sweep's designed cases first
    ("std_mean_all", lambda x: torch.std_mean(x, dim=None, correction=0, keepdim=True), (3, 1, 513), torch.bfloat16),
    ("var_mean_all", lambda x: torch.var_mean(x, dim=None, correction=0, keepdim=True), (3, 1, 513), torch.bfloat16),
    ("std_one_row", lambda x: torch.std(x, dim=(0,)), (1, 513), torch.bfloat16),  # divisor 0: NaN, as CPU
    ("var_last", lambda x: torch.var(x, dim=-1, correction=1), (7, 513), torch.bfloat16),
    ("std_mean_float16", lambda x: torch.std_mean(x, dim=(0, 2)), (4, 5, 130), torch.float16),
    ("var_middle_keepdim", lambda x: torch.var(x, dim=1, keepdim=True), (3, 130, 2), torch.float16),
]


@pytest.mark.parametrize("name,fn,shape,dtype", MOMENTS, ids=[c[0] for c in MOMENTS])
def test_reduced_float_moments_compile_to_the_eager_kernels_program(name, fn, shape, dtype):
    """var, std, var_mean and std_mean of bfloat16/float16 tensors are cut whole
    (compiler/opaque_moments.py) and
    run the eager kernel's program (kernels.reduction.moments.var_program: CPU's double Welford on GpSimd): one
    step, the eager kernel's bits, at most its device time. numerics' float32 forms took 4.95 us against the
    kernel's 1.56 (std_mean), 1.99 against 1.43 (var)."""
    import device_impl.compiler as compiler
    from support import compiled_run, eager_run

    x = (torch.randn(shape, generator=_gen()) * 3 + 1).to(dtype)
    parts = lambda f: (lambda a: torch.stack(list(f(a))) if isinstance(f(a), tuple) else f(a))  # noqa: E731
    want, eager_ns = eager_run(parts(fn), x)
    got, compiled_ns, steps = compiled_run(parts(fn), x)
    assert compiler.stats()["fallbacks_by_op"] == {}, compiler.stats()["fallbacks_by_op"]
    assert [s["kind"] for s in steps if s["kind"] != "concatenate"] == ["moments"], [s["kind"] for s in steps]
    bits = torch.int32 if dtype == torch.float32 else torch.int16
    assert got.dtype == want.dtype and torch.equal(got.view(bits), want.view(bits))
    torch.testing.assert_close(got, parts(fn)(x), equal_nan=True)  # CPU's double Welford, rounded
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)


EMBEDDING_BACKWARDS = [
    # (grad shape, indices, num_weights, padding_idx, dtype)
    ((5, 16), [3, 0, 3, 6, 3], 7, -1, torch.float32),  # the spec sweep's case: 3.47 us against the kernel's 2.15
    ((2, 3, 33), [[1, 1, 4], [0, 4, 4]], 5, 4, torch.bfloat16),  # 2-d indices, a padding row
    ((4, 9), [2, 9, 2, -1], 6, -1, torch.float32),  # out-of-range indices: the eager kernel's dummy row
]


@pytest.mark.parametrize("shape,indices,num_weights,padding_idx,dtype", EMBEDDING_BACKWARDS)
def test_embedding_backward_scaled_by_frequency_compiles_to_the_eager_kernels_program(shape, indices, num_weights,
                                                                                      padding_idx, dtype):
    """embedding_dense_backward with scale_grad_by_freq is cut whole (compiler/opaque_indexing.py) and runs the
    eager kernel's program (kernels.indexing.embedding.dense_backward_program): one step, the eager kernel's bits,
    at most its device time. PyTorch's decomposition made a zero-filled count tensor, an index_put of ones, a
    gather, a divide and the scaled rows' index_put: 11 steps through the scratch arena."""
    import device_impl.compiler as compiler
    from support import compiled_run, eager_run

    grad = torch.randn(shape, generator=_gen()).to(dtype)
    idx = torch.tensor(indices)
    fn = lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, num_weights, padding_idx, True)  # noqa: E731
    want, eager_ns = eager_run(fn, grad, idx)
    got, compiled_ns, steps = compiled_run(fn, grad, idx)
    assert compiler.stats()["fallbacks_by_op"] == {}, compiler.stats()["fallbacks_by_op"]
    assert [s["kind"] for s in steps] == ["embedding_dense_backward"]
    assert got.dtype == want.dtype and torch.equal(got, want)
    if all(0 <= i < num_weights for i in idx.flatten().tolist()):  # CPU's kernel reads out of bounds for the others
        torch.testing.assert_close(got, fn(grad, idx))
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)


NARROW_WHOLE = [  # (name, fn, shapes, dtype, step kind): the bfloat16 sweep's designed cases first
    ("group_norm", lambda x, w, b: torch.nn.functional.group_norm(x, 2, w, b), [(2, 4, 5), (4,), (4,)],
     torch.bfloat16, "group_norm"),
    ("group_norm_no_affine", lambda x: torch.nn.functional.group_norm(x, 3), [(3, 6, 130)], torch.float16,
     "group_norm"),
    ("avg_pool1d", lambda x: torch.nn.functional.avg_pool1d(x, 2, 1), [(2, 2, 6)], torch.bfloat16, "avg_pool"),
    ("avg_pool2d_padded", lambda x: torch.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                                   count_include_pad=False),
     [(2, 3, 9, 130)], torch.float16, "avg_pool"),
    ("avg_pool2d_divisor", lambda x: torch.nn.functional.avg_pool2d(x, (2, 3), divisor_override=5), [(1, 4, 7, 9)],
     torch.bfloat16, "avg_pool"),
]


@pytest.mark.parametrize("name,fn,shapes,dtype,kind", NARROW_WHOLE, ids=[c[0] for c in NARROW_WHOLE])
def test_reduced_float_norm_and_pooling_run_the_eager_kernels_program_in_their_dtype(name, fn, shapes, dtype, kind):
    """A bfloat16/float16 group_norm is cut whole in its own dtype: legalize no longer widens a call opaque cuts
    (widened, it ran float32's program between two convert steps: 3.18 us against the eager kernel's 2.99);
    average pooling of reduced floats is cut as the eager kernel's window program (widened, a convert, the window
    sum and the divide: avg_pool1d 1.68 us against 1.40). One step, the eager kernel's bits, at most its device
    time."""
    import device_impl.compiler as compiler
    from support import compiled_run, eager_run

    inputs = [(torch.randn(s, generator=_gen()) * 3 + 1).to(dtype) for s in shapes]
    parts = lambda f: (lambda *a: f(*a) if not isinstance(f(*a), tuple) else torch.stack(f(*a)))  # noqa: E731
    want, eager_ns = eager_run(parts(fn), *inputs)
    got, compiled_ns, steps = compiled_run(parts(fn), *inputs)
    assert compiler.stats()["fallbacks_by_op"] == {}, compiler.stats()["fallbacks_by_op"]
    assert [s["kind"] for s in steps] == [kind], [s["kind"] for s in steps]
    assert got.dtype == want.dtype and torch.equal(got.view(torch.int16), want.view(torch.int16))
    torch.testing.assert_close(got, fn(*inputs), equal_nan=True)  # CPU, within the dtype's tolerance
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)


def test_index_fill_keeps_its_decomposition_not_an_index_copy_of_the_expanded_value():
    """PyTorch decomposes index_fill into an index_copy of its value expanded over the filled slices; that call is
    not cut whole (``opaque_indexing.index_copy_whole`` refuses a broadcast source): the eager index_copy program
    would move every slice of the expanded value, where the decomposition's step computes them from the one value
    (the sweep's x.index_fill_(-1, i, 2) of [.., 513]: 1.83 us cut against 1.60)."""
    import device_impl.compiler as compiler
    from support import compiled_run, eager_run

    x = torch.randn(3, 513, generator=_gen())
    idx = torch.tensor([5, 0, 512, 5])
    fn = lambda t, i: t.index_fill(-1, i, 2.0)  # noqa: E731
    want, eager_ns = eager_run(fn, x, idx)
    got, compiled_ns, steps = compiled_run(fn, x, idx)
    assert compiler.stats()["fallbacks_by_op"] == {}, compiler.stats()["fallbacks_by_op"]
    assert "index_copy" not in [s["kind"] for s in steps], [s["kind"] for s in steps]
    assert torch.equal(got, want) and torch.equal(got, fn(x, idx))
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)
