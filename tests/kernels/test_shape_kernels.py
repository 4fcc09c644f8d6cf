"""Shape and data-movement kernels against CPU eager: cat, flip, roll, repeat, pads, tril/triu, unfold,
narrow_copy, and the view/copy composites that reach as_strided and copy_."""

import warnings

import pytest
import torch

from device_impl import dispatch
from diff import ALL_DTYPES, EDGE_SIZES, FLOATS, LAYOUTS, check, pair, values

F = torch.nn.functional
A = torch.ops.aten
CL = torch.channels_last
CL3 = torch.channels_last_3d
# repeat's backward sums over the repeated dims (the reduction family).
SUM_OPS = ("aten::sum.IntList_out", "aten::sum.dim_IntList", "aten::sum")


def check_layout(fn, *args, **kwargs):
    """check() and also the output strides (CPU defines them for these ops)."""
    out = check(fn, *args, **kwargs)
    if out is not None:
        expected = fn(*args)
        outs, exps = (out, expected) if isinstance(out, (tuple, list)) else ((out,), (expected,))
        for o, e in zip(outs, exps):
            assert o.stride() == e.stride(), f"strides {o.stride()} != CPU {e.stride()}"
    return out


def grad_of(op):
    """fn(x, g) -> x.grad of op(x) for upstream gradient g (same function on CPU and neuron)."""
    def fn(x, g):
        x = x.detach().requires_grad_()
        op(x).backward(g)
        return x.grad
    return fn


def cl_values(shape, dtype=torch.float32, fmt=CL, seed=0):
    return values(shape, dtype, seed=seed).contiguous(memory_format=fmt)


# --- cat ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_cat_dtypes_and_tile_edges(dtype):
    for n in EDGE_SIZES:
        a, b = values((3, n), dtype, seed=1), values((2, n), dtype, seed=2)
        check(lambda x, y: torch.cat([x, y]), a, b)
        check(lambda x, y: torch.cat([x, y, x], -1), a, values((3, 5), dtype, seed=3))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_layouts(layout, dim):
    a_cpu, a_dev = pair((6, 130), torch.float32, layout, seed=1)
    b_cpu, b_dev = pair((6, 130), torch.float32, "transposed", seed=2)
    check_layout(lambda x, y: torch.cat([x, y], dim), a_cpu, b_cpu, neuron_args=(a_dev, b_dev))
    check_layout(lambda x, y: torch.cat([y, x, y], dim), a_cpu, b_cpu, neuron_args=(a_dev, b_dev))


def test_cat_channels_last():
    a, b = cl_values((2, 3, 4, 5), seed=1), cl_values((2, 5, 4, 5), seed=2)
    check_layout(lambda x, y: torch.cat([x, y], 1), a, b)
    check_layout(lambda x, y: torch.cat([x, x], 3), a, b)
    check_layout(lambda x, y: torch.cat([x, y.contiguous()], 1), a, b)  # mixed -> contiguous
    check_layout(lambda x, y: torch.cat([torch.empty(0, device=x.device), x], 1), a, b)
    check_layout(lambda x: torch.cat([x, x], 1), cl_values((2, 3, 4, 5, 6), fmt=CL3))
    check_layout(lambda x: torch.cat([x[:, :, :0], x], 2), a)


@pytest.mark.parametrize("dtypes", [(torch.int8, torch.bool), (torch.uint8, torch.int8), (torch.bfloat16, torch.float16),
                                    (torch.int64, torch.float32), (torch.bool, torch.bool), (torch.int32, torch.float16),
                                    (torch.float16, torch.bool, torch.int64)], ids=str)
def test_cat_type_promotion(dtypes):
    tensors = [values((2, 3), d, seed=i) for i, d in enumerate(dtypes)]
    check(lambda *ts: torch.cat(ts, 1), *tensors)
    check(lambda *ts: torch.cat([torch.empty(0, dtype=torch.float16, device=ts[0].device), *ts]), *tensors)


def test_cat_empty_and_legacy_empty():
    e = torch.empty(0)
    x = values((2, 3), torch.float32)
    check(lambda a, b: torch.cat([a, b]), e, x)
    check(lambda a, b: torch.cat([b, a, b], 1), e, x)  # legacy (0,) tensors skip the shape checks
    check(lambda a, b: torch.cat([a, a], 5), e, x)  # all legacy empty: any dim
    check(lambda a, b: torch.cat([a.long(), b]), e, x)  # but take part in type promotion
    check(lambda a, b: torch.cat([torch.empty(0, 3, device=a.device), b]), e, x)
    check(lambda a, b: torch.cat([b[:, :0], b[:, :0]], 1), e, x)
    check(lambda a: torch.cat([a[:0], a[:0]]), torch.empty(0, 4))


@pytest.mark.parametrize("case", ["shape", "ndim", "dim", "zero_dim", "empty_list", "empty_dim"])
def test_cat_errors(case):
    x = values((2, 3), torch.float32)
    calls = {
        "shape": lambda a: torch.cat([a, a[:, :2]], 0),
        "ndim": lambda a: torch.cat([a, a[None]], 0),
        "dim": lambda a: torch.cat([a, a], 2),
        "zero_dim": lambda a: torch.cat([a[0, 0], a[0, 1]]),
        "empty_list": lambda a: torch.cat([]),
        "empty_dim": lambda a: torch.cat([torch.empty(0, 4, device=a.device), a], 0),
    }
    check(calls[case], x)


def test_cat_out():
    x, y = values((2, 3), torch.float32, seed=1), values((4, 3), torch.float32, seed=2)
    check(lambda a, b: torch.cat([a, b], out=torch.empty(6, 3, device=a.device)), x, y)
    check(lambda a, b: torch.cat([a, b], out=torch.empty(0, device=a.device)), x, y)
    check(lambda a, b: torch.cat([a, b], out=torch.empty(6, 3, dtype=torch.int64, device=a.device)), x, y)  # TypeError
    check(lambda a, b: torch.cat([a.int(), b.int()], out=torch.empty(6, 3, device=a.device)), x, y)  # int -> float
    check(lambda a, b: torch.cat([a, b], out=torch.empty(6, 3, device=a.device).t().t()), x, y)
    cl = cl_values((2, 3, 4, 5))
    check_layout(lambda a: torch.cat([a, a], 1, out=torch.empty(0, device=a.device)), cl)  # resized -> restrided
    check_layout(lambda a: torch.cat([a, a], 1, out=torch.empty(2, 6, 4, 5, device=a.device)), cl)  # kept
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cat([x.to("neuron")] * 2, out=torch.empty(3, device="neuron"))
    assert any("resized" in str(w.message) for w in caught)


def test_cat_out_overlap_errors():
    check(lambda a: torch.cat([a[:2], a[2:]], out=a), values((4,), torch.float32))
    check(lambda a: torch.cat([a], out=a), values((4,), torch.float32))
    check(lambda a: torch.cat([a[:2], a[:2]], out=torch.ones(1, device=a.device).expand(4)), values((4,), torch.float32))


def test_cat_float64_inputs():
    # float64 is storage-only: same-dtype cat is pure DMA; promotion into float64 takes copy_'s path.
    check(lambda a, b: torch.cat([a, b], 1), values((3, 4), torch.float64), values((3, 2), torch.float64))
    check(lambda a, b: torch.cat([a, b]), values((3, 4), torch.float64), values((3, 4), torch.float32),
          allow_fallback=("aten::copy_",))


def test_stack_family_routes_to_cat():
    a, b = values((3, 4), torch.float32, seed=1), values((3, 4), torch.float32, seed=2)
    for fn in (lambda x, y: torch.stack([x, y]), lambda x, y: torch.stack([x, y], -1),
               lambda x, y: torch.hstack([x, y]), lambda x, y: torch.vstack([x, y]),
               lambda x, y: torch.dstack([x, y]), lambda x, y: torch.column_stack([x, y]),
               lambda x, y: torch.stack([x, y], out=torch.empty(0, device=x.device))):
        check(fn, a, b)
    check(lambda x, y: torch.stack([x, y[:, :2]]), a, b)  # stack's own size error


def test_cat_grad():
    a, b = values((3, 4), torch.float32, seed=1), values((3, 6), torch.float32, seed=2)
    g = values((3, 10), torch.float32, seed=3)

    def fn(x, y, g):
        x, y = x.detach().requires_grad_(), y.detach().requires_grad_()
        torch.cat([x, y], 1).backward(g)
        return x.grad, y.grad

    check(fn, a, b, g)


# --- flip -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_flip_dtypes(dtype):
    x = values((3, 4, 129), dtype)
    for dims in ([0], [-1], [1, 2], [0, 1, 2], []):
        check(lambda t: torch.flip(t, dims), x)


@pytest.mark.parametrize("n", EDGE_SIZES + (2049, 4100))
def test_flip_tile_edges(n):
    x = values((3, n), torch.float32)
    check(lambda t: torch.flip(t, [-1]), x)
    check(lambda t: torch.flip(t, [0, 1]), x)
    check(lambda t: torch.flip(t, [0]), values((n, 3), torch.bfloat16))
    check(lambda t: torch.flip(t, [0]), values((n,), torch.int8))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_flip_layouts(layout):
    x_cpu, x_dev = pair((6, 130), torch.float32, layout)
    for dims in ([0], [1], [0, 1]):
        check_layout(lambda t: torch.flip(t, dims), x_cpu, neuron_args=(x_dev,))
    cl = cl_values((2, 3, 4, 5))
    check_layout(lambda t: torch.flip(t, [1]), cl)
    check_layout(lambda t: torch.flip(t, [1, 3]), cl)
    check_layout(lambda t: t.flip(-1), values((4, 6, 8), torch.int16).transpose(0, 1))
    check_layout(lambda t: t[:, ::2].flip(0), values((8, 10, 3), torch.float16))
    check_layout(lambda t: t[:, :3].flip(-1), values((8, 5, 300), torch.float32))  # rows that do not merge
    check_layout(lambda t: t[:, :2].flip(-1), values((4, 3, 2100), torch.int32))  # ... and longer than a tile


def test_flip_composites_and_errors():
    x = values((3, 4, 5), torch.float32)
    check(torch.fliplr, x)
    check(torch.flipud, x)
    check(lambda t: torch.rot90(t, 1, [1, 2]), x)
    check(lambda t: A.flip.out(t, [0], out=torch.empty(0, device=t.device)), x)
    check(lambda t: torch.flip(t, [0, -3]), x)  # duplicates
    check(lambda t: torch.flip(t, [3]), x)  # IndexError
    check(lambda t: torch.flip(t, [0]), torch.tensor(3.0))
    check(lambda t: torch.flip(t, [1]), torch.empty(0, 3))


def test_flip_grad():
    x = values((4, 130), torch.float32)
    check(grad_of(lambda t: torch.flip(t, [0, 1])), x, values((4, 130), torch.float32, seed=1))


# --- roll -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_roll_dtypes(dtype):
    x = values((3, 129), dtype)
    for shifts, dims in ((1, 0), (-5, 1), (130, -1), ((1, 2), (0, 1)), (4, None), (-400, None), ((1, 2), (1, 1))):
        check(lambda t: torch.roll(t, shifts, dims), x)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_roll_layouts(layout):
    x_cpu, x_dev = pair((6, 130), torch.float32, layout)
    for shifts, dims in ((1, 0), (3, 1), ((2, -7), (0, 1)), (11, None), (0, 1)):
        check_layout(lambda t: torch.roll(t, shifts, dims), x_cpu, neuron_args=(x_dev,))


def test_roll_layouts_channels_last_and_empty():
    cl = cl_values((2, 3, 4, 5))
    for shifts, dims in ((1, 1), (0, 1), ((1, 2), (2, 3)), (3, None), (5, 3)):
        check_layout(lambda t: torch.roll(t, shifts, dims), cl)
    check_layout(lambda t: torch.roll(t, 1, 0), torch.empty(0, 3).t())
    check_layout(lambda t: torch.roll(t, 1), torch.empty(0, 3))
    check(lambda t: torch.roll(t, 1), torch.tensor(2.0))


@pytest.mark.parametrize("case", [((1, 2), (0,)), ((), ()), ((1,), (2,)), ((1, 2), ())])
def test_roll_errors(case):
    check(lambda t: torch.roll(t, *case), values((3, 4), torch.float32))
    check(lambda t: torch.roll(t, 1, 0), torch.tensor(2.0))


def test_roll_grad_and_out():
    x = values((5, 7), torch.float32)
    check(grad_of(lambda t: torch.roll(t, (2, -3), (0, 1))), x, values((5, 7), torch.float32, seed=1))
    check(lambda t: A.roll.out(t, [2], [1], out=torch.empty(0, device=t.device)), x)


# --- repeat ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_repeat_dtypes(dtype):
    x = values((3, 5), dtype)
    for reps in ((2, 3), (1, 1), (2, 1, 3), (0, 2), (1, 130)):
        check(lambda t: t.repeat(*reps), x)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_repeat_layouts(layout):
    x_cpu, x_dev = pair((6, 13), torch.float32, layout)
    check_layout(lambda t: t.repeat(2, 3), x_cpu, neuron_args=(x_dev,))
    check_layout(lambda t: t.repeat(1, 2, 1), x_cpu, neuron_args=(x_dev,))
    check_layout(lambda t: t.repeat(1, 1, 1, 2), cl_values((2, 3, 4, 5)))


def test_repeat_edges_and_errors():
    check(lambda t: t.repeat(3, 2), torch.tensor(1.5))
    check(lambda t: t.repeat([]), torch.tensor(1.5))
    check(lambda t: t.repeat(2), values((3, 4), torch.float32))  # fewer repeats than dims
    check(lambda t: t.repeat(-1, 2), values((3, 4), torch.float32))
    check(lambda t: t.repeat(2, 2), torch.empty(0, 3))
    check(lambda t: t.tile(2), values((3, 4), torch.int32))
    check(lambda t: A.repeat.out(t, [2, 1], out=torch.empty(0, device=t.device)), values((3, 4), torch.float32))
    for n in EDGE_SIZES:
        check(lambda t: t.repeat(2, 3), values((n, 1), torch.float16))


def test_repeat_grad():
    x = values((3, 4), torch.float32)
    check(grad_of(lambda t: t.repeat(2, 1, 3)), x, values((2, 3, 12), torch.float32, seed=1),
          allow_fallback=SUM_OPS)


# --- constant_pad_nd ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_constant_pad_dtypes(dtype):
    x = values((3, 4, 5), dtype)
    value = True if dtype == torch.bool else (-3 if not dtype.is_floating_point else 2.5)
    for pad in ((1, 2), (0, 1, 2, 0), (1, 1, 1, 1, 1, 1), (-1, 2), (-1, -1, 0, 0), (2, -3, -1, 1)):
        check(lambda t: F.pad(t, pad, value=value), x)


@pytest.mark.parametrize("n", EDGE_SIZES)
def test_constant_pad_tile_edges(n):
    check(lambda t: F.pad(t, (1, 2, 3, 0)), values((2, n), torch.float32))
    check(lambda t: F.pad(t, (n, 1)), values((2, 3), torch.int64))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_constant_pad_layouts(layout):
    x_cpu, x_dev = pair((6, 13), torch.float32, layout)
    check_layout(lambda t: F.pad(t, (1, 2, 3, 4), value=-1.0), x_cpu, neuron_args=(x_dev,))
    check_layout(lambda t: F.pad(t, (-1, 0)), x_cpu, neuron_args=(x_dev,))  # crop: clone keeps the layout
    check_layout(lambda t: F.pad(t, (0, 0)), x_cpu, neuron_args=(x_dev,))
    check_layout(lambda t: F.pad(t, (1, 1, 1, 1)), cl_values((2, 3, 4, 5)))
    check_layout(lambda t: F.pad(t, (1, 1, 0, 0, 2, 0)), cl_values((2, 3, 4, 5, 6), fmt=CL3))


@pytest.mark.parametrize("case", [
    (torch.int8, 300), (torch.uint8, -1), (torch.uint8, -256), (torch.uint8, -1.0), (torch.int32, float("inf")),
    (torch.float16, 65504.0), (torch.float16, 65520.0), (torch.bfloat16, 3.4e38), (torch.bool, 0.5),
    (torch.int32, 2.7), (torch.int32, -2.7), (torch.float16, float("nan")), (torch.int64, -2**63)], ids=str)
def test_constant_pad_values(case):
    dtype, value = case
    check(lambda t: torch.constant_pad_nd(t, [1, 1], value), values((2, 3), dtype))


@pytest.mark.parametrize("pad", [[1], [1] * 6, [-3, -2], [-3, -2, 1, 1], [-5, 4], [-4, 0]], ids=str)
def test_constant_pad_errors(pad):
    check(lambda t: torch.constant_pad_nd(t, pad), values((3, 4), torch.float32))


def test_constant_pad_empty_out_and_grad():
    check(lambda t: F.pad(t, (1, 1)), torch.empty(0, 3))
    check(lambda t: F.pad(t, (1, 1, 1, 1)), torch.empty(0, 3))
    check(lambda t: torch.constant_pad_nd(t, []), torch.tensor(2.0))
    check(lambda t: A.constant_pad_nd.out(t, [1, 1], 0, out=torch.empty(0, device=t.device)), values((2, 3), torch.float32))
    check(lambda t: A.constant_pad_nd.out(t, [1, 1], 0, out=torch.empty(0, dtype=torch.int64, device=t.device)),
          values((2, 3), torch.float32))
    x = values((3, 4, 5), torch.float32)
    check(grad_of(lambda t: F.pad(t, (1, 2, -1, 1))), x, values((3, 4, 8), torch.float32, seed=1))


# --- reflection / replication padding ----------------------------------------------------

PAD_OPS = [(mode, n) for mode in ("reflection", "replication") for n in (1, 2, 3)]
PAD_SHAPES = {1: (2, 3, 9), 2: (2, 3, 5, 9), 3: (2, 3, 4, 5, 9)}


def _pad_op(mode, n):
    return getattr(A, f"{mode}_pad{n}d"), getattr(A, f"{mode}_pad{n}d_backward")


@pytest.mark.parametrize("mode, n", PAD_OPS)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_pad_forward_dtypes(mode, n, dtype):
    op, _ = _pad_op(mode, n)
    x = values(PAD_SHAPES[n], dtype)
    check(lambda t: op(t, [2, 3] * n), x)  # bool: NotImplementedError, as CPU


@pytest.mark.parametrize("mode, n", PAD_OPS)
def test_pad_forward_cases(mode, n):
    op, _ = _pad_op(mode, n)
    x = values(PAD_SHAPES[n], torch.float32)
    for pad in ([0, 0] * n, [3, 1] * n, [-2, 3] * n, [4, -3] * n, [8, 8] * n, [1, 0] + [0, 1] * (n - 1)):
        check(lambda t: op(t, pad), x)
    check(lambda t: op(t, [1, 2] * n), values(PAD_SHAPES[n][1:], torch.float32))  # no batch dim
    check(lambda t: op(t, [1, 2] * n), values((0,) + PAD_SHAPES[n][1:], torch.float32))  # 0 batch
    check(lambda t: F.pad(t, [2, 1] * n, mode="reflect" if mode == "reflection" else "replicate"), x)


@pytest.mark.parametrize("mode, n", PAD_OPS)
def test_pad_layouts(mode, n):
    op, bw = _pad_op(mode, n)
    shape = PAD_SHAPES[n]
    for layout in LAYOUTS:
        x_cpu, x_dev = pair(shape, torch.float32, layout)
        check_layout(lambda t: op(t, [2, 1] * n), x_cpu, neuron_args=(x_dev,))
    if n > 1:
        x = cl_values(shape, fmt=CL if n == 2 else CL3)
        check_layout(lambda t: op(t, [2, 1] * n), x)
        g = values(op(x, [2, 1] * n).shape, torch.float32, seed=1)
        check_layout(lambda gg, t: bw(gg, t, [2, 1] * n), g, x)
        # out= of the right shape is restrided to the input's format, as the CPU kernels do
        check_layout(lambda t: op.out(t, [2, 1] * n, out=torch.empty(g.shape, device=t.device)), x)
        check_layout(lambda gg, t: bw.grad_input(gg, t, [2, 1] * n, grad_input=torch.empty(t.shape, device=t.device)),
                     g, x)


@pytest.mark.parametrize("mode, n", PAD_OPS)
def test_pad_errors(mode, n):
    op, bw = _pad_op(mode, n)
    x = values(PAD_SHAPES[n], torch.float32)
    w = PAD_SHAPES[n][-1]
    for pad in ([1] * (2 * n - 1), [1] * (2 * n + 2), [w, 0] * n, [0, w] * n, [-w, 0] * n, [-5, -5] * n):
        check(lambda t: op(t, pad), x)
    check(lambda t: op(t, [1, 1] * n), values(PAD_SHAPES[n][2:], torch.float32))  # too few dims
    check(lambda t: op(t, [1, 1] * n), values((2, 0) + PAD_SHAPES[n][2:], torch.float32))  # 0 channels
    check(lambda t: op.out(t, [1, 1] * n, out=torch.empty(0, dtype=torch.int64, device=t.device)), x)
    y = op(x, [2, 1] * n)
    check(lambda g, t: bw(g, t, [2, 1] * n), values(y.shape[:-1] + (y.shape[-1] + 1,), torch.float32), x)
    check(lambda g, t: bw(g, t, [2, 1] * n), values(y.shape, torch.float16), x)  # dtype mismatch
    check(lambda g, t: bw(g, t, [2, 1] * n), values(y.shape, torch.int32), x.int())  # not implemented for Int


@pytest.mark.parametrize("mode, n", PAD_OPS)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_pad_backward(mode, n, dtype):
    op, bw = _pad_op(mode, n)
    x = values(PAD_SHAPES[n], dtype)
    # CPU accumulates in the narrow dtype; the device accumulates in fp32 (closer to the exact sum)
    tol = None if dtype == torch.float32 else (3e-2, 0.13)
    for pad in ([2, 3] * n, [-2, 3] * n, [1, 0] * n):
        g = values(op(x, pad).shape, dtype, seed=1)
        check(lambda gg, t: bw(gg, t, pad), g, x, tol=tol)
    g = values(op(x, [1, 1] * n).shape, dtype, seed=2)
    check(lambda gg, t: bw.grad_input(gg, t, [1, 1] * n, grad_input=torch.empty(0, dtype=dtype, device=t.device)),
          g, x, tol=tol)


def test_pad_backward_wide_pads_and_grad():
    x = values((2, 3, 40), torch.float32)
    g = values((2, 3, 40 + 70), torch.float32, seed=1)
    check(lambda gg, t: A.replication_pad1d_backward(gg, t, [30, 40]), g, x)  # reduction path (> 16 columns)
    g = values((2, 3, 40 + 77), torch.float32, seed=2)
    check(lambda gg, t: A.reflection_pad1d_backward(gg, t, [39, 38]), g, x)
    for mode in ("reflect", "replicate"):
        for n in (1, 2, 3):
            x = values(PAD_SHAPES[n], torch.float32)
            pad = [2, 1] * n
            g = values(F.pad(x, pad, mode=mode).shape, torch.float32, seed=3)
            check(grad_of(lambda t: F.pad(t, pad, mode=mode)), x, g)


@pytest.mark.parametrize("w", EDGE_SIZES[1:])
def test_pad_tile_edges(w):
    x = values((2, 3, w), torch.float32)
    check(lambda t: A.reflection_pad1d(t, [w - 1, 1]), x)
    check(lambda t: A.replication_pad1d(t, [w, 2]), x)
    check(lambda g, t: A.replication_pad1d_backward(g, t, [3, 2]), values((2, 3, w + 5), torch.float32), x)


# --- tril / triu ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_tril_triu_dtypes(dtype):
    x = values((3, 7, 9), dtype)
    for k in (0, 1, -2, 8, -7, 100, -100):
        check(lambda t: torch.tril(t, k), x)
        check(lambda t: torch.triu(t, k), x)


@pytest.mark.parametrize("shape", [(1, 1), (127, 3), (128, 128), (129, 129), (3, 511), (2, 512, 3), (513, 5),
                                   (2, 300, 200), (3, 2100), (40, 2, 3), (0, 4), (2, 0, 3)], ids=str)
def test_tril_triu_shapes(shape):
    x = values(shape, torch.float32)
    for k in (0, 2, -3):
        check(lambda t: torch.tril(t, k), x)
        check(lambda t: torch.triu(t, k), x)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tril_layouts(layout):
    x_cpu, x_dev = pair((5, 6, 130), torch.bfloat16, layout)
    check_layout(lambda t: torch.tril(t, 3), x_cpu, neuron_args=(x_dev,))
    check_layout(lambda t: torch.triu(t, -1), x_cpu, neuron_args=(x_dev,))
    check(lambda t: torch.tril(t.transpose(0, 1)), values((4, 3, 5, 6), torch.int32))  # lead dims not mergeable


def test_tril_triu_inplace_aliasing():
    for name in ("tril_", "triu_"):
        def fn(base, name=name):
            view = base[1:, :, 1:]  # an offset, strided view: the writes must land in base
            out = getattr(view, name)(1)
            assert out.data_ptr() == view.data_ptr()
            return base

        check(fn, values((3, 6, 7), torch.float32))
        check(lambda t, name=name: getattr(t.t(), name)(-1), values((5, 4), torch.int64))
        check(lambda t, name=name: getattr(t, name)(), values((4,), torch.float32))  # needs 2 dims


def test_tril_triu_out_and_errors():
    x = values((4, 5), torch.float32)
    check(lambda t: torch.tril(t, out=torch.empty(4, 5, device=t.device)), x)
    check(lambda t: torch.triu(t, 1, out=torch.empty(0, device=t.device)), x)
    check(lambda t: torch.tril(t, out=torch.empty(0, dtype=torch.int64, device=t.device)), x)
    check(lambda t: torch.tril(t, out=t), x)
    check(torch.tril, values((5,), torch.float32))
    check(grad_of(lambda t: torch.tril(t, -1)), x, values((4, 5), torch.float32, seed=1))


# --- unfold, narrow_copy ----------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_unfold(dtype):
    x_cpu, x_dev = pair((4, 9), dtype, "offset")
    for dim, size, step in ((1, 2, 1), (1, 3, 2), (0, 4, 1), (-1, 9, 5), (1, 0, 1)):
        out = check_layout(lambda t: t.unfold(dim, size, step), x_cpu, neuron_args=(x_dev,))
        assert out.storage_offset() == x_cpu.unfold(dim, size, step).storage_offset()
    check(lambda t: t.unfold(0, 1, 1), torch.tensor(2.0))


@pytest.mark.parametrize("case", [(1, 10, 1), (1, 2, 0), (1, -1, 1), (2, 1, 1)])
def test_unfold_errors(case):
    check(lambda t: t.unfold(*case), values((4, 9), torch.float32))
    check(lambda t: t.unfold(0, 2, 1), torch.tensor(2.0))


def test_unfold_backward_and_repeat_via_unfold():
    x = values((4, 9), torch.float32)
    for dim, size, step in ((1, 3, 1), (1, 2, 3), (0, 2, 2)):
        g = values(x.unfold(dim, size, step).shape, torch.float32, seed=1)
        check(grad_of(lambda t: t.unfold(dim, size, step)), x, g)
    check(lambda g: A.unfold_backward(g, [3, 5], 1, 2, 1), values((3, 4, 2), torch.int32))
    check(lambda t: A.unfold_copy(t, 1, 3, 2), x)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_unfold_backward_keeps_negative_zero_where_windows_do_not_overlap(dtype):
    """CPU copies a gradient into an input element one window covers when the windows do not overlap (step >= size),
    so -0.0 stays -0.0; overlapping windows are summed from +0.0 (designed case unfold_backward-float32-special-
    sliced-127: the device summed from +0.0 everywhere)."""
    zeros = torch.full((3, 2), -0.0, dtype=dtype)
    for input_size, step in ((7, 2), (8, 3), (4, 1)):
        g = zeros[: (input_size - 2) // step + 1]
        cpu = A.unfold_backward(g, [input_size], 0, 2, step)
        dev = A.unfold_backward(g.to("neuron"), [input_size], 0, 2, step).cpu()
        assert torch.equal(torch.signbit(dev), torch.signbit(cpu)), (input_size, step, cpu, dev)


def test_narrow_copy():
    x_cpu, x_dev = pair((5, 130), torch.float32, "transposed")
    for dim, start, length in ((1, 1, 3), (0, -2, 2), (-1, 0, 5), (0, 130, 0)):
        check_layout(lambda t: torch.narrow_copy(t, dim, start, length), x_cpu, neuron_args=(x_dev,))
        check(lambda t: A.narrow_copy.out(t, dim, start, length, out=torch.empty(0, device=t.device)), x_cpu,
              neuron_args=(x_dev,))
    x = values((3, 4), torch.int8)
    for args in ((1, 3, 2), (1, 5, 0), (1, -5, 1), (1, 0, -1), (2, 0, 1), (-3, 0, 1)):
        check(lambda t: torch.narrow_copy(t, *args), x)
    check(lambda t: torch.narrow_copy(t, 0, 0, 1), torch.tensor(1.0))
    check(lambda t: A.narrow_copy.out(t, 1, 0, 2, out=torch.empty(0, dtype=torch.int16, device=t.device)), x)


# --- view ops and copy composites: no fallback, and recorded as served ---------------------

VIEWS = {
    "permute": lambda t: t.permute(2, 0, 1), "expand": lambda t: t[:, :1].expand(4, 3, 6),
    "alias": lambda t: A.alias(t), "diagonal": lambda t: t.diagonal(1, 1, 2), "select": lambda t: t.select(1, -2),
    "slice": lambda t: t[:, 1:5:2], "squeeze": lambda t: t[:, :1].squeeze(), "squeeze_dim": lambda t: t[:, :1].squeeze(1),
    "squeeze_dims": lambda t: t[:1, :1].squeeze((0, 1)), "unsqueeze": lambda t: t.unsqueeze(-1),
    "split_with_sizes": lambda t: t.split([2, 3], 1), "split": lambda t: t.split(2, 2), "chunk": lambda t: t.chunk(3, 2),
    "unbind": lambda t: t.unbind(1), "narrow": lambda t: t.narrow(2, 1, 3), "t": lambda t: t[0].t(),
    "transpose": lambda t: t.transpose(0, 2), "unsafe_split": lambda t: A.unsafe_split(t, 2, 1),
    "unsafe_split_with_sizes": lambda t: A.unsafe_split_with_sizes(t, [1, 4], 1), "_unsafe_view": lambda t: A._unsafe_view(t, [20, 6]),
    "detach": lambda t: t.detach(), "movedim": lambda t: t.movedim(0, 2), "unflatten": lambda t: t.unflatten(2, (2, 3)),
    "tensor_split": lambda t: t.tensor_split(3, 2), "unfold": lambda t: t.unfold(2, 3, 2),
    "clone": lambda t: t.transpose(0, 1).clone(), "contiguous": lambda t: t.transpose(0, 2).contiguous(),
    "reshape_copy": lambda t: t.transpose(0, 2).reshape(-1), "expand_copy": lambda t: A.expand_copy(t[:, :1], [4, 3, 6]),
    "permute_copy": lambda t: A.permute_copy(t, [2, 0, 1]), "split_with_sizes_copy": lambda t: A.split_with_sizes_copy(t, [2, 3], 1),
    "unbind_copy": lambda t: A.unbind_copy(t, 0), "narrow_copy": lambda t: torch.narrow_copy(t, 1, 1, 2),
    "fill_diagonal_": lambda t: t[0].clone().fill_diagonal_(2.0), "tile": lambda t: t.tile(2, 1),
    "diag_embed": lambda t: torch.diag_embed(t[0]), "slice_scatter": lambda t: torch.slice_scatter(t, t[:, :2], 1, 0, 2),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_view_and_copy_composites_run_natively(name):
    check(VIEWS[name], values((4, 5, 6), torch.float32))


SERVED = {
    "aten::cat": "aten::cat.out", "aten::stack": "aten::cat.out", "aten::hstack": "aten::cat.out",
    "aten::tril": "aten::tril.out", "aten::tril_": "aten::tril.out", "aten::triu_": "aten::triu.out",
    "aten::flip.out": "aten::flip", "aten::roll.out": "aten::roll", "aten::repeat.out": "aten::repeat",
    "aten::constant_pad_nd.out": "aten::constant_pad_nd", "aten::reflection_pad1d": "aten::reflection_pad1d.out",
    "aten::replication_pad2d": "aten::replication_pad2d.out",
    "aten::replication_pad1d_backward": "aten::replication_pad1d_backward.grad_input",
    "aten::permute": "aten::as_strided", "aten::select.int": "aten::as_strided", "aten::squeeze.dims": "aten::as_strided",
    "aten::split_with_sizes": "aten::as_strided", "aten::unsafe_split.Tensor": "aten::as_strided",
    "aten::_unsafe_view": "aten::view", "aten::clone": "aten::copy_", "aten::permute_copy": "aten::copy_",
    "aten::split_with_sizes_copy.out": "aten::copy_", "aten::fill_diagonal_": "aten::fill_.Scalar",
}
NATIVE = {  # op -> the op-group module of kernels.shape that lowers it
    "aten::cat.out": "cat_stack", "aten::flip": "flip_roll_repeat", "aten::roll": "flip_roll_repeat",
    "aten::repeat": "flip_roll_repeat", "aten::constant_pad_nd": "pad", "aten::unfold": "views",
    "aten::unfold_backward": "views", "aten::narrow_copy": "views", "aten::narrow_copy.out": "views",
    "aten::reflection_pad2d": "pad", "aten::reflection_pad2d_backward": "pad",
    "aten::replication_pad3d_backward": "pad",
    "aten::tril.out": "tril_triu", "aten::triu.out": "tril_triu",
}


def test_lowering_table_records_the_family():
    for op, module in NATIVE.items():
        entry = dispatch.TABLE.lookup(op)
        assert entry.tier is dispatch.Tier.NATIVE and entry.source == f"device_impl.kernels.shape.{module}", (op, entry)
    for op, target in SERVED.items():
        entry = dispatch.TABLE.lookup(op)
        assert entry.tier is dispatch.Tier.NATIVE and f"(via {target})" in entry.source, (op, entry)


# --- complex views, storage-only dtypes, devices ----------------------------------------

def _stats_native(op):
    return dispatch.stats().get(op, {}).get("native", 0)


def test_view_as_real_and_complex():
    c = torch.randn(3, 4, dtype=torch.complex64)
    for fn in (torch.view_as_real, lambda t: torch.view_as_real(t.t()), lambda t: torch.view_as_real(t[1:, ::2]),
               lambda t: torch.view_as_real(t.conj()), lambda t: torch.view_as_real(t.real)):
        check(fn, c)
    r = values((3, 4, 2), torch.float32)
    for fn in (torch.view_as_complex, lambda t: torch.view_as_complex(t[:, ::2]),
               lambda t: torch.view_as_complex(t[:, :, :1]), lambda t: torch.view_as_complex(t[0, 0, 0]),
               lambda t: torch.view_as_complex(t.reshape(-1)[1:-1].view(-1, 2))):
        check(fn, r)
    check(torch.view_as_complex, values((3, 2), torch.float64))
    check(torch.view_as_complex, values((3, 2), torch.bfloat16))  # not supported, as on CPU
    dispatch.reset_stats()
    dev = c.to("neuron")
    real = torch.view_as_real(dev)
    real[0, 1, 0] = 7.0  # a view: the write lands in the complex tensor
    assert dev[0, 1].item().real == 7.0 and real._base is dev
    back = torch.view_as_complex(real)
    assert back.data_ptr() == dev.data_ptr() and _stats_native("aten::view_as_real") == 1
    assert _stats_native("aten::view_as_complex") == 1
    assert not any(v["fallback"] for v in dispatch.stats().values())


def test_storage_only_dtypes():
    # float64/complex: pure data movement runs on DMA; kernels that compute take the counted fallback.
    x = values((3, 5), torch.float64)
    c = torch.randn(3, 5, dtype=torch.complex64)
    for fn in (lambda t: torch.flip(t, [1]), lambda t: torch.roll(t, 2, 1), lambda t: t.repeat(2, 1),
               lambda t: A.reflection_pad1d(t, [2, 1]), lambda t: A.replication_pad1d(t, [1, 3]),
               lambda t: torch.cat([t, t], 1), lambda t: torch.narrow_copy(t, 1, 1, 2)):
        dispatch.reset_stats()
        check(fn, x)
        check(fn, c)
        assert not any(v["fallback"] for v in dispatch.stats().values()), dispatch.stats()
    for fn in (lambda t: torch.tril(t), lambda t: F.pad(t, (1, 1), value=2.0),
               lambda t: A.reflection_pad1d_backward(torch.ones(3, 8, dtype=t.dtype, device=t.device), t, [2, 1])):
        check(fn, x)
    check(lambda t: torch.flip(t.conj(), [0]), c)
    check(lambda t: torch.cat([t.conj(), t]), c)


def test_cat_device_mismatch_raises():
    x = torch.ones(2, 3)
    with pytest.raises(RuntimeError, match="same device"):
        torch.cat([x.to("neuron"), x])


# --- randomized layouts ------------------------------------------------------------------

def _random_layout(rng, ndim, dtype, shape=None):
    """The same random layout on CPU and neuron: a permutation, steps (and sometimes an expand)."""
    shape = shape or [rng.randint(1, 5) for _ in range(ndim)]
    perm = list(range(ndim))
    rng.shuffle(perm)
    steps = [rng.choice([1, 2]) for _ in range(ndim)]
    expand = rng.random() < 0.2 and shape[0] > 1
    base = values([(1 if expand and p == 0 else shape[p]) * steps[p] for p in perm], dtype, seed=rng.randint(0, 99))

    def make(t):
        t = t.permute(*[perm.index(i) for i in range(ndim)])[tuple(slice(None, None, s) for s in steps)]
        return t.expand(*shape) if expand else t

    return make(base), make(base.to("neuron"))


@pytest.mark.parametrize("seed", range(16))
def test_randomized_layouts(seed):
    import random

    rng = random.Random(seed)
    for _ in range(6):
        ndim = rng.randint(2, 4)
        x, xd = _random_layout(rng, ndim, rng.choice(ALL_DTYPES))
        d = rng.randrange(-ndim, ndim)
        y_shape = list(x.shape)
        y_shape[d] = rng.randint(0, 4)
        y, yd = _random_layout(rng, ndim, rng.choice(ALL_DTYPES), y_shape)
        check_layout(lambda a, b: torch.cat([a, b], d), x, y, neuron_args=(xd, yd))
        dims = rng.sample(range(ndim), rng.randint(1, ndim))
        check_layout(lambda a: torch.flip(a, dims), x, neuron_args=(xd,))
        shifts = [rng.randint(-7, 7) for _ in dims]
        check_layout(lambda a: torch.roll(a, shifts, dims), x, neuron_args=(xd,))
        reps = [rng.randint(1, 3) for _ in range(ndim + 1)]
        check_layout(lambda a: a.repeat(*reps), x, neuron_args=(xd,))
        pad = [rng.randint(-1, 3) for _ in range(2 * rng.randint(1, ndim))]
        check_layout(lambda a: torch.constant_pad_nd(a, pad, 1), x, neuron_args=(xd,))
        k = rng.randint(-3, 3)
        check_layout(lambda a: torch.triu(a, k), x, neuron_args=(xd,))
        if x.dtype != torch.bool:
            n = rng.randint(max(1, ndim - 2), min(3, ndim - 1))
            mode = rng.choice(["reflection", "replication"])
            pads = [rng.randint(-1, min(x.shape[-1], x.shape[-n]) - 1) for _ in range(2 * n)]
            check_layout(lambda a: getattr(A, f"{mode}_pad{n}d")(a, pads), x, neuron_args=(xd,))
