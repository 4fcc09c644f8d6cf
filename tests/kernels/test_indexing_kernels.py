"""Indexing kernels against CPU eager: gathers, scatters, advanced indexing, masks, embeddings, sort, topk.

Integer results and indices compare exactly; float data movement is exact too (the
default tolerances only matter for accumulations, whose inputs are small integers in
bf16/fp16 so the sums are exact in any order).
"""

import warnings

import pytest
import torch

from diff import EDGE_SIZES, FLOATS, check, pair, values
from device_impl import dispatch

F = torch.nn.functional
# CPU's own deprecation warnings (scatter reduce=, uint8 masks) are not under test.
pytestmark = pytest.mark.filterwarnings("ignore:.*deprecated:UserWarning")
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool)
NUMERIC = tuple(d for d in DTYPES if d != torch.bool)


def ints(shape, low, high, seed=0, dtype=torch.int64):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, tuple(shape), generator=g).to(dtype)


def acc_values(shape, dtype, seed=0):
    """Values whose sums are exact in every dtype (small integers)."""
    return values(shape, dtype, "small_int" if dtype.is_floating_point else "normal", seed)


# --- table: the forms PyTorch uses are native ------------------------------------------------

NATIVE = [
    "aten::gather.out", "aten::scatter.src_out", "aten::scatter.value_out", "aten::scatter.reduce_out",
    "aten::scatter.value_reduce_out", "aten::scatter_add.out", "aten::scatter_reduce.two_out", "aten::index_select",
    "aten::index_select.out", "aten::index.Tensor", "aten::index.Tensor_out", "aten::_index_put_impl_",
    "aten::index_put_", "aten::index_put", "aten::index_add.out", "aten::index_copy.out",
    "aten::index_fill_.int_Scalar", "aten::index_fill_.int_Tensor", "aten::masked_scatter_", "aten::masked_select",
    "aten::masked_select.out", "aten::nonzero", "aten::nonzero.out", "aten::select_scatter", "aten::slice_scatter",
    "aten::diagonal_scatter", "aten::embedding", "aten::embedding_dense_backward", "aten::_embedding_bag",
    "aten::_embedding_bag_forward_only", "aten::sort.values_stable", "aten::topk.values", "aten::take",
    "aten::take.out",
]
SERVED = ["aten::gather", "aten::scatter.src", "aten::scatter_.value", "aten::scatter_add", "aten::scatter_add_",
          "aten::scatter_reduce.two", "aten::scatter_reduce_.two", "aten::index_add", "aten::index_add_",
          "aten::index_copy_", "aten::sort", "aten::sort.stable", "aten::topk", "aten::masked_scatter",
          "aten::argsort"]


def test_lowering_table():
    for op in NATIVE:
        entry = dispatch.TABLE.lookup(op)
        assert entry.tier is dispatch.Tier.NATIVE and entry.source != "csrc", (op, entry)
    for op in SERVED:
        assert dispatch.TABLE.lookup(op).tier in (dispatch.Tier.NATIVE, dispatch.Tier.COMPOSITE), op


# --- index_select / embedding ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_index_select_dtypes(dtype):
    x = values((7, 9), dtype, seed=1)
    check(lambda t, i: t.index_select(0, i), x, ints((11,), 0, 7))
    check(lambda t, i: t.index_select(1, i), x, ints((5,), 0, 9, 2))


@pytest.mark.parametrize("n", EDGE_SIZES)
def test_index_select_edges(n):
    x = values((n, 3), torch.float32)
    check(lambda t, i: t.index_select(0, i), x, ints((n,), 0, n))  # indexed dim
    y = values((4, n), torch.bfloat16)
    check(lambda t, i: t.index_select(0, i), y, torch.tensor([3, 0, 0, 2]))  # rows of n elements
    check(lambda t, i: t.index_select(1, i), y, ints((n,), 0, n, 3))


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded", "offset"])
def test_index_select_layouts(layout):
    cpu, dev = pair((6, 130), torch.float32, layout)
    idx = ints((9,), 0, 6)
    check(lambda t, i: t.index_select(0, i), cpu, idx, neuron_args=(dev, idx.to("neuron")))
    idx1 = ints((9,), 0, 130)
    check(lambda t, i: t.index_select(1, i), cpu, idx1, neuron_args=(dev, idx1.to("neuron")))


def test_index_select_errors_and_edges():
    x = values((4, 5), torch.float32)
    check(lambda t, i: t.index_select(0, i), x, torch.tensor([-1]))
    check(lambda t, i: t.index_select(0, i), x, torch.tensor([4]))
    check(lambda t, i: t.index_select(0, i), x, torch.tensor([[1]]))
    check(lambda t, i: t.index_select(0, i), x, torch.tensor([], dtype=torch.long))
    check(lambda t, i: t.index_select(1, i), x, torch.tensor([3, 1], dtype=torch.int32))
    check(lambda t, i: t.index_select(0, i), x, torch.tensor(2))
    check(lambda t, i: t.index_select(0, i), values((3, 0, 2), torch.float32), torch.tensor([2, 0]))
    check(lambda t, i: t.index_select(-1, i), values((2, 3, 4), torch.int8), torch.tensor([3, 3, 0]))
    out = torch.empty(0)
    check(lambda t, i, o: torch.index_select(t, 0, i, out=o), x, torch.tensor([1, 1, 3]), out)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_embedding(dtype):
    w = values((10, 16), dtype)
    check(F.embedding, ints((3, 7), 0, 10), w)
    check(F.embedding, torch.tensor(4), w)
    check(F.embedding, ints((5,), 0, 10, dtype=torch.int32), w)
    check(F.embedding, torch.tensor([[0, 10]]), w)  # out of range
    check(F.embedding, torch.tensor([-1]), w)
    check(F.embedding, torch.tensor([1.0]), w)
    check(F.embedding, torch.zeros(0, 3, dtype=torch.long), w)
    big = values((600, 513), dtype, seed=2)
    check(F.embedding, ints((130,), 0, 600, 3), big)


def _embedding_grad(w, idx, g, padding_idx=None, scale=False):
    w = w.detach().requires_grad_()
    out = F.embedding(idx, w, padding_idx=padding_idx, scale_grad_by_freq=scale)
    return torch.autograd.grad(out, w, g)[0]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding_backward(dtype, padding_idx):
    w = values((9, 6), dtype)
    idx = torch.tensor([[2, 3, 2, 8], [0, 2, 8, 8]])
    g = acc_values((2, 4, 6), dtype, 1)
    check(lambda a, i, b: _embedding_grad(a, i, b, padding_idx), w, idx, g)
    check(lambda a, i, b: _embedding_grad(a, i, b, padding_idx, True), w, idx, values((2, 4, 6), dtype, seed=1),
          tol=(2e-2, 1e-2) if dtype != torch.float32 else None)


def test_embedding_dense_backward_skips_out_of_range_indices():
    """CPU's embedding backward checks no index (the forward did): a row whose index is outside [0, num_weights)
    adds nowhere, negative ones too (``embedding_dense_backward(ones(3, 4), [0, 5, 1], 3, -1, False)`` on CPU:
    rows 0 and 1 are 1, row 2 is 0). The device skips them as well, with a padding row and int32 indices."""
    g = acc_values((2, 3, 6), torch.float32)
    idx = torch.tensor([[0, 9, 2], [1, -7, 2]])
    check(lambda a, i: torch.ops.aten.embedding_dense_backward(a, i, 4, -1, False), g, idx)
    check(lambda a, i: torch.ops.aten.embedding_dense_backward(a, i, 4, 2, False), g, idx.int())
    check(lambda a, i: torch.ops.aten.embedding_dense_backward(a, i, 129, 5, False), acc_values((300, 7),
          torch.bfloat16), ints((300,), -20, 150))


def test_embedding_dense_backward_direct():
    g = acc_values((129, 513), torch.float32)
    idx = ints((129,), 0, 40)
    check(lambda a, i: torch.ops.aten.embedding_dense_backward(a, i, 40, 3, False), g, idx)
    check(lambda a, i: torch.ops.aten.embedding_dense_backward(a, i, 40, -1, True), g, idx)
    check(lambda a, i: torch.ops.aten.embedding_dense_backward(a.t(), i, 40, -1, False), acc_values((7, 5),
          torch.bfloat16), ints((5,), 0, 40))


# --- gather / scatter ----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gather_dtypes(dtype):
    x = values((6, 9), dtype)
    check(lambda t, i: t.gather(1, i), x, ints((6, 12), 0, 9))
    check(lambda t, i: t.gather(0, i), x, ints((4, 5), 0, 6, 1))


@pytest.mark.parametrize("n", EDGE_SIZES)
def test_gather_edges(n):
    x = values((3, n), torch.float32)
    check(lambda t, i: t.gather(1, i), x, ints((3, n), 0, n))
    check(lambda t, i: t.gather(0, i), values((n, 2), torch.int32), ints((n, 2), 0, n, 1))


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded", "offset"])
def test_gather_layouts(layout):
    cpu, dev = pair((5, 130), torch.bfloat16, layout)
    icpu, idev = pair((5, 40), torch.int64, "transposed" if layout == "expanded" else layout)
    icpu, idev = icpu.abs() % 5, idev.abs() % 5
    check(lambda t, i: t.gather(0, i), cpu, icpu, neuron_args=(dev, idev))
    e = ints((1, 7), 0, 130)
    check(lambda t, i: t.gather(1, i.expand(5, 7)), cpu, e, neuron_args=(dev, e.to("neuron")))


def test_gather_errors_and_edges():
    x = values((4, 5), torch.float32)
    check(lambda t, i: t.gather(1, i), x, torch.tensor([[-1]]))
    check(lambda t, i: t.gather(1, i), x, torch.tensor([[5]]))
    check(lambda t, i: t.gather(1, i), x, torch.tensor([1]))
    check(lambda t, i: t.gather(1, i), x, torch.zeros(5, 2, dtype=torch.long))
    check(lambda t, i: t.gather(1, i), x, torch.zeros(2, 2, dtype=torch.int32))
    check(lambda t, i: t.gather(1, i), x, torch.zeros(0, 2, dtype=torch.long))
    check(lambda t, i: t.gather(0, i), torch.tensor(5.0), torch.tensor([0, 0]))
    check(lambda t, i: t.gather(-1, i), values((2, 3, 4), torch.float16), ints((2, 3, 6), 0, 4))
    check(lambda t, i, o: torch.gather(t, 1, i, out=o), x, ints((4, 3), 0, 5), torch.empty(4, 3))
    check(lambda t, i: torch.take_along_dim(t, i, 1), x, ints((1, 3), 0, 5))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scatter_dtypes(dtype):
    x = values((5, 7), dtype)
    src = values((5, 7), dtype, seed=3)
    idx = torch.stack([torch.randperm(7, generator=torch.Generator().manual_seed(i))[:4] for i in range(5)])
    check(lambda t, i, s: t.scatter(1, i, s), x, idx, src)
    check(lambda t, i: t.scatter(1, i, 1), x, idx)
    check(lambda t, i, s: t.clone().scatter_(1, i, s), x, idx, src)
    check(lambda t, i, s: t.scatter_add(1, i, s), acc_values((5, 7), dtype), ints((5, 9), 0, 7), acc_values(
        (5, 9), dtype, 4))


def test_scatter_duplicates_last_wins():
    x = torch.zeros(3, 6)
    idx = torch.tensor([[0, 0, 0, 1, 1, 5], [2, 2, 2, 2, 2, 2], [5, 4, 5, 4, 5, 4]])
    src = torch.arange(18.0).view(3, 6)
    check(lambda t, i, s: t.scatter(1, i, s), x, idx, src)
    check(lambda t, i, s: t.scatter(0, i % 3, s), x, idx, src)


@pytest.mark.parametrize("n", [1, 128, 129, 513])
def test_scatter_add_edges(n):
    x = acc_values((4, n), torch.float32)
    check(lambda t, i, s: t.scatter_add(1, i, s), x, ints((4, n), 0, n), acc_values((4, n), torch.float32, 1))
    check(lambda t, i, s: t.scatter_add(0, i, s), x, ints((7, n), 0, 4), acc_values((7, n), torch.float32, 1))


@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_reduce_arg(reduce):
    x = acc_values((4, 6), torch.float32)
    idx = ints((4, 5), 0, 6)
    check(lambda t, i, s: t.scatter(1, i, s, reduce=reduce), x, idx, acc_values((4, 5), torch.float32, 1))
    check(lambda t, i: t.scatter(1, i, 2.0, reduce=reduce), x, idx)
    check(lambda t, i: t.scatter(1, i, 2.0, reduce="max"), x, idx)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int8], ids=str)
def test_scatter_reduce(reduce, include_self, dtype):
    x = acc_values((5, 8), dtype)
    src = acc_values((5, 12), dtype, 1)
    if reduce == "prod" and dtype.is_floating_point:
        src = src.clamp(-2, 2)
    idx = ints((5, 12), 0, 8, 2)
    tol = (2e-2, 1e-2) if (reduce == "mean" and dtype == torch.bfloat16) else None
    check(lambda t, i, s: t.scatter_reduce(1, i, s, reduce, include_self=include_self), x, idx, src, tol=tol)
    check(lambda t, i, s: t.clone().scatter_reduce_(0, i, s, reduce, include_self=include_self), x,
          ints((3, 8), 0, 5, 3), src[:3, :8], tol=tol)


def test_scatter_reduce_specials_and_errors():
    x = torch.tensor([1.0, float("nan"), 3.0, 0.0])
    src = torch.tensor([float("-inf"), 2.0, float("nan"), 5.0, -1.0])
    idx = torch.tensor([0, 1, 2, 0, 3])
    for reduce in ("amax", "amin", "sum", "prod"):
        for inc in (True, False):
            check(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=inc), x, idx, src)
    check(lambda t, i, s: t.scatter_reduce(0, i, s, "foo"), x, idx, src)
    check(lambda t, i, s: t.scatter_reduce(0, i, s, "mean"), torch.ones(3, dtype=torch.bool), torch.tensor([0]),
          torch.tensor([True]))
    check(lambda t, i, s: t.scatter(0, i, s), x, torch.tensor([4]), src)
    check(lambda t, i, s: t.scatter(0, i, s), x, torch.tensor([-1]), src)
    check(lambda t, i, s: t.scatter(0, i, s), x, torch.tensor([1]), src.double())
    check(lambda t, i: t.scatter(0, i, 300), torch.zeros(3, dtype=torch.uint8), torch.tensor([1]))
    check(lambda t, i, s: t.scatter_add(0, i, s), x, torch.zeros(0, dtype=torch.long), src)


# --- advanced indexing ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_index_forms(dtype):
    x = values((5, 6, 7), dtype)
    i = ints((4,), -5, 5)
    j = ints((4,), -6, 6, 1)
    check(lambda t, a: t[a], x, i)
    check(lambda t, a: t[:, a], x, j)
    check(lambda t, a: t[..., a], x, ints((2, 3), -7, 7, 2))
    check(lambda t, a, b: t[a, b], x, i, j)
    check(lambda t, a, b: t[a, :, b], x, i, ints((4,), 0, 7, 3))  # non-adjacent: broadcast dims first
    check(lambda t, a, b: t[a[:, None], b], x, i, j)  # broadcasting index tensors
    check(lambda t, m: t[m], x, values((5, 6, 7), torch.bool, seed=4))
    check(lambda t, m: t[m], x, values((5, 6), torch.bool, seed=5))
    check(lambda t, m: t[:, m], x, values((6,), torch.bool, seed=6))
    check(lambda t, m, a: t[m, a], x, values((5,), torch.bool, seed=7), ints((1,), 0, 6))


@pytest.mark.parametrize("n", EDGE_SIZES)
def test_index_edges(n):
    x = values((n, 5), torch.float32)
    check(lambda t, a: t[a], x, ints((n,), -n, n))
    check(lambda t, a: t[:, a], values((3, n), torch.int64), ints((n,), -n, n, 1))
    check(lambda t, m: t[m], x, values((n,), torch.bool, seed=2))


@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded", "offset"])
def test_index_layouts(layout):
    cpu, dev = pair((6, 130), torch.float16, layout)
    a = ints((9,), -6, 6)
    b = ints((9,), 0, 130, 1)
    check(lambda t, i: t[i], cpu, a, neuron_args=(dev, a.to("neuron")))
    check(lambda t, i: t[:, i], cpu, b, neuron_args=(dev, b.to("neuron")))
    check(lambda t, i, j: t[i, j], cpu, a, b, neuron_args=(dev, a.to("neuron"), b.to("neuron")))
    m = values((6, 130), torch.bool)
    check(lambda t, k: t[k], cpu, m, neuron_args=(dev, m.to("neuron")))
    ic, id_ = pair((4, 3), torch.int64, layout)
    ic, id_ = ic.abs() % 6, id_.abs() % 6
    check(lambda t, i: t[i], cpu, ic, neuron_args=(dev, id_))


def test_index_errors_and_edges():
    x = values((4, 5), torch.float32)
    check(lambda t, a: t[a], x, torch.tensor([4]))
    check(lambda t, a: t[a], x, torch.tensor([-5]))
    check(lambda t, a: t[:, a], x, torch.tensor([5]))
    check(lambda t, a: t[a], x, torch.tensor([1], dtype=torch.int8))
    check(lambda t, a: t[a], x, torch.tensor([1.0]))
    check(lambda t, a: t[a], x, torch.tensor([2, 0], dtype=torch.int32))
    check(lambda t, a, b: t[a, b], x, torch.tensor([0, 1]), torch.tensor([0, 1, 2]))
    check(lambda t, m: t[m], x, torch.ones(3, 3, dtype=torch.bool))
    check(lambda t, a: t[a], x, torch.tensor([], dtype=torch.long))
    check(lambda t, a: t[a], x, torch.zeros(0, 3, dtype=torch.long))
    check(lambda t, m: t[m], x, torch.zeros(4, 5, dtype=torch.bool))
    check(lambda t, a: t[a], values((0, 3), torch.float32), torch.tensor([0]))
    check(lambda t, a: t[a], values((0, 3), torch.float32), torch.tensor([], dtype=torch.long))
    check(lambda t, a: t[a], x, torch.tensor(-2))
    check(lambda t, a: torch.ops.aten.index.Tensor(t, [None, a]), x, torch.tensor([4, 0]))
    check(lambda t, a, b, c: torch.ops.aten.index.Tensor(t, [a, b, c]), x, torch.tensor([0]), torch.tensor([0]),
          torch.tensor([0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda t, m: t[m], x, torch.tensor([1, 0, 0, 1], dtype=torch.uint8))
    out = torch.empty(0)
    check(lambda t, a, o: torch.ops.aten.index.Tensor_out(t, [a], out=o), x, torch.tensor([3, 1]), out)
    # a host index on a device tensor, as CUDA allows
    idx = torch.tensor([2, 0])
    check(lambda t, a: t[a], x, idx, neuron_args=(x.to("neuron"), idx))


def _put(t, indices, v, accumulate=False):
    t = t.clone()
    torch.ops.aten.index_put_(t, [None if isinstance(i, slice) else i for i in indices], v, accumulate)
    return t


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(dtype, accumulate):
    x = acc_values((5, 6, 7), dtype)
    i = torch.tensor([0, 4, -1, 2])
    j = torch.tensor([1, -6, 5, 3])
    v = acc_values((4, 7), dtype, 1)
    check(lambda t, a, b, c: _put(t, (a, b), c, accumulate), x, i, j, v)
    check(lambda t, a, c: _put(t, (a,), c, accumulate), x, i, acc_values((6, 7), dtype, 2))  # broadcast values
    check(lambda t, m, c: _put(t, (m,), c, accumulate), x, values((5, 6), torch.bool, seed=3),
          acc_values((7,), dtype, 3))
    dup = torch.tensor([1, 1, 3, 1])
    assert check(lambda t, a, c: torch.ops.aten.index_put_(t.clone(), [None, a], c, accumulate), x, dup,
                 acc_values((5, 4, 7), dtype, 4)) is not None


def test_index_put_setitem_forms():
    x = values((6, 129), torch.float32)
    idx = ints((7,), -6, 6)

    def setitem(t, key_fn, v):
        t = t.clone()
        t[key_fn(t)] = v
        return t

    check(lambda t, a, v: setitem(t, lambda _: a, v), x, idx, values((129,), torch.float32, seed=1))
    check(lambda t, a, v: setitem(t, lambda _: (Ellipsis, a), v), x, ints((5,), 0, 129), values((6, 5),
          torch.float32, seed=2))
    check(lambda t, v: setitem(t, lambda s: s > 0, v), x, torch.tensor(-7.0))
    check(lambda t: setitem(t, lambda s: s < 0, 1.5), x)
    check(lambda t, a, b: setitem(t, lambda _: (a, b), 0.25), x, idx, ints((7,), 0, 129, 2))
    check(lambda t, a, v: setitem(t, lambda _: (slice(1, 4), a), v), x, ints((3,), 0, 129),
          values((3, 3), torch.float32, seed=3))


def test_index_put_errors_and_duplicates():
    x = values((4, 5), torch.float32)
    check(lambda t, a: _put(t, (a,), torch.tensor(1.0)), x, torch.tensor([4]))
    check(lambda t, a: _put(t, (a,), torch.tensor(1.0), True), x, torch.tensor([-5]))
    check(lambda t, a: _put(t, (a,), torch.tensor(1.0, dtype=torch.float64)), x, torch.tensor([1]))
    check(lambda t, a: _put(t, (a,), torch.ones(3, 5)), x, torch.tensor([0, 1]))
    check(lambda t, a: _put(t, (a,), torch.ones(5)), x, torch.tensor([], dtype=torch.long))
    check(lambda t: t.index_put_((torch.tensor([0]),), t[1]), x)
    # duplicates: last write wins without accumulate (CPU's serial order), sum with it
    dup = torch.tensor([2, 0, 2, 2, 0])
    v = torch.arange(25.0).view(5, 5)
    check(lambda t, a, c: _put(t, (a,), c), x, dup, v)
    check(lambda t, a, c: _put(t, (a,), c, True), x, dup, v)
    check(lambda t, a, c: torch.index_put(t, (a,), c, True), x, dup, v)
    big = acc_values((300, 3), torch.float32)
    bidx = ints((1000,), 0, 300)  # 3000 elements: CPU's loop is serial, so its last write wins
    check(lambda t, a, c: _put(t, (a,), c), big, bidx, acc_values((1000, 3), torch.float32, 1))
    check(lambda t, a, c: _put(t, (a,), c, True), big, bidx, acc_values((1000, 3), torch.float32, 1))


# --- index_add / index_copy / index_fill / take ------------------------------------------------

@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
def test_index_add_copy_fill(dtype):
    x = acc_values((6, 5), dtype)
    idx = torch.tensor([1, 5, 1, 0])
    src = acc_values((4, 5), dtype, 1)
    check(lambda t, i, s: t.index_add(0, i, s), x, idx, src)
    assert check(lambda t, i, s: t.index_add(1, i % 5, s, alpha=2), x, idx, acc_values((6, 4), dtype, 5)) is not None
    check(lambda t, i, s: t.clone().index_add_(0, i.int(), s), x, idx, src)
    check(lambda t, i, s: t.index_copy(0, i, s), x, torch.tensor([3, 0, 5, 2]), src)
    check(lambda t, i, s: t.index_copy(0, i, s), x, idx, src)  # duplicates: last wins
    check(lambda t, i: t.index_fill(1, i, 3), x, torch.tensor([-1, 2]))
    check(lambda t, i, v: t.index_fill(0, i, v), x, torch.tensor([4, 4, 0]), torch.tensor(2, dtype=dtype))


@pytest.mark.parametrize("n", [1, 128, 129, 513])
def test_index_add_edges(n):
    x = acc_values((n, 130), torch.bfloat16)
    idx = ints((n,), 0, n)
    check(lambda t, i, s: t.index_add(0, i, s), x, idx, acc_values((n, 130), torch.bfloat16, 1))
    check(lambda t, i, s: t.index_copy(1, i % 130, s), x, torch.randperm(130)[:n % 130 or 1],
          acc_values((n, n % 130 or 1), torch.bfloat16, 1))


def test_index_add_copy_fill_errors():
    x = values((4, 5), torch.float32)
    one = torch.ones(1, 5)
    check(lambda t, i, s: t.index_add(0, i, s), x, torch.tensor([4]), one)
    check(lambda t, i, s: t.index_add(0, i, s), x, torch.tensor([-1]), one)
    check(lambda t, i, s: t.index_add(0, i, s), x, torch.tensor([1]), one.double())
    check(lambda t, i, s: t.index_copy(0, i, s), x, torch.tensor([4]), one)
    check(lambda t, i, s: t.index_copy(0, i, s), x, torch.tensor([-1]), one)
    check(lambda t, i, s: t.index_copy(0, i, s), x, torch.tensor([1], dtype=torch.int32), one)
    check(lambda t, i: t.index_fill(0, i, 2.0), x, torch.tensor([4]))
    check(lambda t, i: t.index_fill(0, i, 2.0), x, torch.tensor([1], dtype=torch.int32))
    check(lambda t, i: t.index_fill(0, i, 300), torch.zeros(3, dtype=torch.uint8), torch.tensor([0]))
    check(lambda t, i, v: t.index_fill(0, i, v), x, torch.tensor([0]), torch.tensor([1.0]))
    check(lambda t, i: t.index_fill(1, i, float("nan")), x, torch.tensor([0, 3]))
    check(lambda t, i, s: t.index_add(0, i, s, alpha=1.5), torch.ones(3, dtype=torch.long), torch.tensor([0]),
          torch.tensor([1]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_take(dtype):
    x = values((7, 9), dtype)
    check(torch.take, x, ints((4, 5), -63, 63))
    check(torch.take, x.t(), ints((20,), -63, 63, 1))
    check(torch.take, x, torch.tensor(3))
    check(torch.take, x, torch.tensor([63]))
    check(torch.take, x, torch.tensor([1], dtype=torch.int32))
    check(torch.take, values((0,), dtype), torch.tensor([0]))
    check(lambda t, i, o: torch.take(t, i, out=o), x, ints((3,), 0, 63), torch.empty(0, dtype=dtype))


# --- nonzero and masks ------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonzero(dtype):
    x = values((6, 7), dtype, "small_int" if dtype.is_floating_point else "normal")
    check(torch.nonzero, x)
    check(torch.argwhere, x)
    check(lambda t: torch.nonzero(t, as_tuple=True), x)
    check(lambda t: torch.where(t != 0), x)


@pytest.mark.parametrize("shape", [(), (0,), (1,), (127,), (513,), (3, 129), (2, 3, 5), (0, 3), (300, 600)],
                         ids=str)
def test_nonzero_shapes(shape):
    check(torch.nonzero, values(shape, torch.bool, seed=1))
    check(torch.nonzero, values(shape, torch.float32, "special"))
    check(lambda t, o: torch.nonzero(t, out=o), values(shape, torch.int32), torch.empty(0, dtype=torch.long))


def test_nonzero_layouts():
    for layout in ("transposed", "sliced", "expanded", "offset"):
        cpu, dev = pair((5, 130), torch.bool, layout)
        check(torch.nonzero, cpu, neuron_args=(dev,))
    check(torch.nonzero, torch.zeros(5, 4))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_masked_select_scatter(dtype):
    x = values((5, 129), dtype)
    m = values((5, 129), torch.bool, seed=1)
    check(torch.masked_select, x, m)
    check(torch.masked_select, x, m[0])  # broadcast mask
    check(torch.masked_select, x[0], m)  # broadcast self
    src = values((700,), dtype, seed=2)
    check(lambda t, k, s: t.masked_scatter(k, s), x, m, src)
    check(lambda t, k, s: t.clone().masked_scatter_(k, s), x, m[1], src)


def test_mask_errors_and_layouts():
    x = values((4, 5), torch.float32)
    check(torch.masked_select, x, torch.ones(4, 5, dtype=torch.uint8))
    check(torch.masked_select, x, torch.ones(3, 5, dtype=torch.bool))
    check(lambda t, k, s: t.masked_scatter(k, s), x, torch.ones(4, 5, dtype=torch.bool), torch.ones(3))
    check(lambda t, k, s: t.masked_scatter(k, s), x, torch.ones(4, 5, dtype=torch.uint8), torch.ones(30))
    check(lambda t, k, s: t.masked_scatter(k, s), x, torch.ones(4, 5, dtype=torch.bool), torch.ones(30).double())
    check(lambda t, k, s: t.clone().masked_scatter_(k, s), torch.ones(4), torch.ones(3, 1, dtype=torch.bool),
          torch.ones(12))
    check(torch.masked_select, torch.tensor(3.0), torch.tensor(True))
    check(lambda t, k, o: torch.masked_select(t, k, out=o), x, x > 0, torch.empty(0))
    for layout in ("transposed", "sliced", "expanded", "offset"):
        xc, xd = pair((6, 40), torch.float32, layout)
        mc, md = pair((6, 40), torch.bool, layout, seed=1)
        sc, sd = pair((30, 10), torch.float32, layout, seed=2)
        check(torch.masked_select, xc, mc, neuron_args=(xd, md))
        check(lambda t, k, s: t.masked_scatter(k, s), xc, mc, sc, neuron_args=(xd, md, sd))


# --- select / slice / diagonal scatter -----------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.bool], ids=str)
def test_view_scatters(dtype):
    x = values((5, 6, 7), dtype)
    check(lambda t, s: torch.select_scatter(t, s, 1, -2), x, values((5, 7), dtype, seed=1))
    check(lambda t, s: torch.slice_scatter(t, s, 2, 1, 6, 2), x, values((5, 6, 3), dtype, seed=2))
    check(lambda t, s: torch.slice_scatter(t, s), x, values((5, 6, 7), dtype, seed=3))
    check(lambda t, s: torch.diagonal_scatter(t, s, 1, 1, 2), x, values((5, 6), dtype, seed=4))
    check(lambda t, s: torch.diagonal_scatter(t, s, -2, 0, 2), x, values((6, 3), dtype, seed=5))
    check(lambda t, s: torch.select_scatter(t, s, 0, 1), x.transpose(0, 2), values((6, 5), dtype, seed=6))


def test_view_scatters_small():
    check(lambda t, s: torch.select_scatter(t, s, 0, -1), values((5,), torch.float32), torch.tensor(2.0))
    check(lambda t, s: torch.slice_scatter(t, s, 0, 4), values((5,), torch.int64), values((1,), torch.int64, seed=1))
    check(lambda t, s: torch.diagonal_scatter(t, s, 3), values((2, 3), torch.float32), values((0,), torch.float32))


def test_view_scatter_errors():
    x = torch.zeros(3, 2)
    check(lambda t, s: torch.select_scatter(t, s, 0, 1), x, torch.ones(2, dtype=torch.float64))
    check(lambda t, s: torch.select_scatter(t, s, 0, 1), x, torch.ones(3))
    check(lambda t, s: torch.select_scatter(t, s, 0, 3), x, torch.ones(2))
    check(lambda t, s: torch.slice_scatter(t, s, 0, 1), x, torch.ones(3, 2))
    check(lambda t, s: torch.diagonal_scatter(t, s), x, torch.ones(3))


# --- sort / argsort / topk ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable_ties(dtype, descending):
    x = values((9, 300), dtype, "small_int" if dtype.is_floating_point else "normal")  # many ties
    check(lambda t: torch.sort(t, stable=True, descending=descending), x)
    check(lambda t: torch.sort(t, dim=0, stable=True, descending=descending), x)
    check(lambda t: torch.argsort(t, dim=1, stable=True, descending=descending), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_sort_nan_and_specials(dtype):
    x = values((4, 12), dtype, "special")
    x[2, 5] = float("nan")
    for descending in (False, True):
        check(lambda t: torch.sort(t, descending=descending, stable=True), x)
        check(lambda t: torch.sort(t, dim=0, descending=descending, stable=True), x)
    check(lambda t: torch.sort(t, stable=True), torch.tensor([0.0, -0.0, 0.0, -0.0, float("nan"), -1.0], dtype=dtype))


@pytest.mark.parametrize("n", EDGE_SIZES + (4097, 9000))
def test_sort_edges(n):
    x = values((3, n), torch.float32, "small_int")
    check(lambda t: torch.sort(t, stable=True), x)
    check(lambda t: torch.sort(t, stable=True, descending=True), x[:, : n // 2 + 1])
    check(lambda t: torch.sort(t, dim=0, stable=True), values((n, 2), torch.int32))


def test_sort_shapes_layouts_and_out():
    check(lambda t: torch.sort(t), torch.tensor(3.0))
    check(lambda t: torch.sort(t), values((0, 4), torch.float32))
    check(lambda t: torch.sort(t, dim=1, stable=True), values((2, 3, 4), torch.int64))
    check(lambda t: torch.sort(t, dim=3), values((2,), torch.float32))
    check(lambda t: torch.sort(t), values((5, 10), torch.float32))  # distinct values: stable or not
    for layout in ("transposed", "sliced", "expanded", "offset"):
        cpu, dev = pair((6, 130), torch.bfloat16, layout, "small_int")
        check(lambda t: torch.sort(t, stable=True), cpu, neuron_args=(dev,))
        check(lambda t: torch.sort(t, dim=0, stable=True, descending=True), cpu, neuron_args=(dev,))
    x = values((4, 6), torch.float32)
    v, i = torch.empty(0), torch.empty(0, dtype=torch.long)
    check(lambda t, a, b: torch.sort(t, stable=True, out=(a, b)), x, v, i)
    check(lambda t, a, b: torch.sort(t.t(), stable=True, out=(a, b)), x, torch.empty(4, 6).t(),
          torch.empty(4, 6, dtype=torch.long).t())
    check(torch.msort, x)


@pytest.mark.parametrize("dtype", NUMERIC, ids=str)
def test_topk(dtype):
    base = torch.randperm(200, generator=torch.Generator().manual_seed(0)).view(4, 50) - 100
    if dtype == torch.uint8:
        base = base + 100
    x = base.to(dtype) if dtype != torch.bfloat16 and dtype != torch.float16 else (base / 4).to(dtype)
    for k in (1, 7, 50):
        check(lambda t: torch.topk(t, k), x)
        check(lambda t: torch.topk(t, k, largest=False), x)
    check(lambda t: torch.topk(t, 3, dim=0), x)
    check(lambda t: torch.topk(t, 4, dim=0, largest=False), x)


def test_topk_edges_and_errors():
    x = values((2, 9000), torch.float32)
    check(lambda t: torch.topk(t, 5), x)
    check(lambda t: torch.topk(t, 3, largest=False), x)
    nan = values((3, 20), torch.float32)
    nan[1, 4] = float("nan")
    check(lambda t: torch.topk(t, 2), nan)
    check(lambda t: torch.topk(t, 2, largest=False), nan)
    check(lambda t: torch.topk(t, 1), torch.tensor(3.0))
    check(lambda t: torch.topk(t, 0), values((3, 4), torch.float32))
    check(lambda t: torch.topk(t, 5), values((3, 4), torch.float32))
    check(lambda t: torch.topk(t, -1), values((3, 4), torch.float32))
    check(lambda t: torch.topk(t, 1), torch.tensor([True, False]))
    for n in (127, 128, 129, 513):
        check(lambda t: torch.topk(t, n // 2), values((3, n), torch.float32, seed=n))
    v, i = torch.empty(0), torch.empty(0, dtype=torch.long)
    check(lambda t, a, b: torch.topk(t, 2, out=(a, b)), values((3, 4), torch.float32), v, i)
    # ties: CPU's partial_sort / nth_element order, reproduced
    check(lambda t: torch.topk(t, 2), torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0]]))


@pytest.mark.parametrize("dtype", [torch.int32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("n", [5, 17, 100, 700, 5000])
def test_unstable_orders_match_cpu(dtype, n):
    """With ties, sort(stable=False) and topk return CPU's libstdc++ introsort / partial_sort /
    nth_element order, not merely some valid order."""
    x = ints((3, n), 0, 7, n).to(dtype)
    for descending in (False, True):
        check(lambda t: torch.sort(t, descending=descending), x)
        check(lambda t: torch.argsort(t, dim=0, descending=descending), x)
    for k in sorted({1, max(1, n // 64), max(1, n // 3), n}):
        for largest in (True, False):
            check(lambda t: torch.topk(t, k, largest=largest), x)
            check(lambda t: torch.topk(t, k, largest=largest, sorted=False), x)
    nan = values((2, n), torch.float32, "small_int")
    nan[:, ::3] = float("nan")
    check(lambda t: torch.sort(t, descending=True), nan)
    check(lambda t: torch.topk(t, max(1, n // 2)), nan)
    check(torch.sort, ints((40000,), 0, 9))  # CPU's radix sort for long 1-D integer rows: stable


# --- embedding_bag ------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("padding_idx", [-1, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_outputs(mode, padding_idx, include_last_offset):
    w = values((6, 3), torch.float32)
    idx = torch.tensor([0, 2, 2, 5, 1, 3])
    off = torch.tensor([0, 2, 2, 5])
    for fn in (torch.ops.aten._embedding_bag, torch.ops.aten._embedding_bag_forward_only):
        check(lambda a, b, c: fn(a, b, c, False, mode, False, None, include_last_offset, padding_idx), w, idx, off)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_embedding_bag_functional(dtype):
    w = acc_values((50, 129), dtype)  # small integers: every bag sum is exact in fp32, rounded once
    idx = ints((300,), 0, 50)
    off = torch.tensor([0, 3, 3, 100, 250])
    for mode in ("sum", "mean", "max"):
        check(lambda a, b, c: F.embedding_bag(b, a, c, mode=mode), w, idx, off)
    check(lambda a, b, c, s: F.embedding_bag(b, a, c, mode="sum", per_sample_weights=s), w, idx, off,
          acc_values((300,), dtype, 3))
    check(lambda a, b, c: F.embedding_bag(b, a, c, mode="max", padding_idx=7), w, idx, off)
    check(lambda a, b, c: F.embedding_bag(b, a, c, include_last_offset=True), w, idx, torch.tensor([0, 5, 300]))
    check(lambda a, b, c: F.embedding_bag(b, a, c), w, ints((4,), 0, 50), torch.tensor([0, 0, 0]))


def test_a_float16_embedding_bag_mean_divides_the_rounded_sum():
    """CPU's mean bag writes the sum into the float16 output, then divides it there: a bag of 60000s is inf (the sum
    overflows float16), and a sum's rounding shows in the mean; the device divided its fp32 sum (60000; designed
    embedding_bag-float16-near_overflow-contiguous-2048)."""
    w = torch.full((10, 4), 60000.0, dtype=torch.float16)
    check(lambda a, b, c: F.embedding_bag(b, a, c, mode="mean"), w, torch.tensor([0, 1, 2, 3]), torch.tensor([0]))
    w = (torch.randn(50, 33, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3e4).half()
    idx = torch.randint(0, 50, (40,), generator=torch.Generator().manual_seed(1))
    check(lambda a, b, c: F.embedding_bag(b, a, c, mode="mean"), w, idx, torch.tensor([0, 3, 10, 10, 25]))


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_embedding_bag_layouts(mode, include_last_offset):
    # CPU's fast sum path (contiguous rows, no padding) ends the last bag at offsets[-1] with
    # include_last_offset; its general path runs it to the end of the input: both reproduced.
    idx, off = torch.tensor([0, 2, 2, 5, 1, 3]), torch.tensor([0, 2, 2, 5])
    wc, wd = pair((6, 3), torch.float32, "transposed")
    pc, pd = pair((6,), torch.float32, "sliced")
    psw = (pc, pd) if mode == 0 else (None, None)
    for fn in (torch.ops.aten._embedding_bag, torch.ops.aten._embedding_bag_forward_only):
        check(lambda w, i, o, s: fn(w, i, o, False, mode, False, s, include_last_offset, -1), wc, idx, off, psw[0],
              neuron_args=(wd, idx.to("neuron"), off.to("neuron"), psw[1]))
        check(lambda w, i, o: fn(w, i, o, False, mode, False, None, include_last_offset, -1), wc.half(), idx.int(),
              off.int())


def test_embedding_bag_random_values():
    # Bags of up to 150 rows summed in fp32 in another order than CPU's: a few ULPs of the sum apart.
    w = values((50, 129), torch.float32)
    check(lambda a, b, c: F.embedding_bag(b, a, c, mode="mean"), w, ints((300,), 0, 50), torch.tensor([0, 3, 100]),
          tol=(1e-5, 1e-4))


def test_embedding_bag_errors():
    w = values((6, 3), torch.float32)
    bag = torch.ops.aten._embedding_bag
    check(lambda a, b, c: bag(a, b, c, False, 0, False, None, False, -1), w, torch.tensor([0, 7]), torch.tensor([0]))
    check(lambda a, b, c: bag(a, b, c, False, 0, False, None, False, -1), w, torch.tensor([0, 1]), torch.tensor([1]))
    check(lambda a, b, c: bag(a, b, c, False, 0, False, None, False, -1), w, torch.tensor([0, 1]),
          torch.tensor([0, 3]))
    check(lambda a, b, c: bag(a, b, c, False, 1, False, torch.ones(2), False, -1), w, torch.tensor([0, 1]),
          torch.tensor([0]))
    check(lambda a, b, c: bag(a.long(), b, c, False, 0, False, None, False, -1), w, torch.tensor([0, 1]),
          torch.tensor([0]))
    check(lambda a, b, c: bag(a, b, c, False, 1, False, None, False, -1), w, torch.tensor([], dtype=torch.long),
          torch.tensor([0, 0]))


# --- gradients through autograd ----------------------------------------------------------

def _grad(fn, x, g, *rest):
    x = x.detach().requires_grad_()
    return torch.autograd.grad(fn(x, *rest), x, g)[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gradients(dtype):
    x = values((6, 9), dtype)
    idx = ints((6, 12), 0, 9)
    check(lambda a, g, i: _grad(lambda t, j: t.gather(1, j), a, g, i), x, acc_values((6, 12), dtype, 1), idx)
    rows = torch.tensor([4, -1, 4, 0])
    check(lambda a, g, i: _grad(lambda t, j: t[j], a, g, i), x, acc_values((4, 9), dtype, 2), rows)
    check(lambda a, g, i: _grad(lambda t, j: t[:, j], a, g, i), x, acc_values((6, 4), dtype, 3), rows + 4)
    m = x > 0
    check(lambda a, g, k: _grad(lambda t, j: t[j], a, g, k), x, acc_values((int(m.sum()),), dtype, 4), m)
    check(lambda a, g, i: _grad(lambda t, j: t.index_select(0, j), a, g, i), x, acc_values((4, 9), dtype, 5),
          rows % 6)
    check(lambda a, g: _grad(lambda t: torch.sort(t, dim=1, stable=True)[0], a, g), x, acc_values((6, 9), dtype, 6))
    check(lambda a, g: _grad(lambda t: torch.topk(t, 3)[0], a, g), x, acc_values((6, 3), dtype, 7))

    def put(t, v, i):
        return torch.index_put(t, (i,), v, accumulate=True)

    v = acc_values((4, 9), dtype, 8)
    check(lambda a, b, g, i: _grad(lambda t: put(t, b, i), a, g), x, v, acc_values((6, 9), dtype, 9), rows)
    check(lambda a, b, g, i: _grad(lambda s: put(a, s, i), b, g), x, v, acc_values((6, 9), dtype, 9), rows)


# --- wide rows, staging, mixed forms ------------------------------------------------------

def test_wide_rows_are_chunked():
    x = values((4, 9000), torch.float32)  # a row is wider than one SBUF data tile
    idx = torch.tensor([3, 0, 0, 2, 1])
    check(lambda t, i: t.index_select(0, i), x, idx)
    check(lambda t, i: t[i], x, idx)
    check(lambda t, i, v: _put(t, (i,), v, True), acc_values((4, 9000), torch.float32), idx,
          acc_values((5, 9000), torch.float32, 1))
    # (without accumulate CPU writes duplicates from parallel threads above 32768 elements: unique rows here)
    check(lambda t, i, v: _put(t, (i,), v), x, torch.tensor([3, 0, 2]), values((3, 9000), torch.float32, seed=2))
    check(F.embedding, torch.tensor([[1, 3]]), x)


def test_sort_staged_layouts():
    cpu, dev = pair((4, 6, 8), torch.float32, "sliced", "small_int")
    check(lambda t: torch.sort(t, dim=1, stable=True), cpu, neuron_args=(dev,))
    cpu, dev = pair((4, 6, 8), torch.float32, "sliced")  # distinct values: topk's tie order is CPU-specific
    check(lambda t: torch.topk(t, 2, dim=1), cpu.permute(2, 0, 1), neuron_args=(dev.permute(2, 0, 1),))


def test_mixed_index_forms_4d():
    x = values((3, 4, 5, 6), torch.float32)
    a, b, c = ints((2, 1), -3, 3), ints((1, 3), 0, 5, 1), ints((3,), -6, 6, 2)
    check(lambda t, i, j: t[i, :, j], x, a, b)
    check(lambda t, i, j: t[..., i, j], x, ints((2, 1), 0, 5), c)
    assert check(lambda t, i, j, k: t[i, None, j, :, k], x, a, b % 4, c[:1]) is not None
    check(lambda t, i: t[:, i, :, i], x, torch.tensor([0, 3, 1]))
    check(lambda t, m, j: t[:, m, j], x, values((4, 5), torch.bool, seed=3), torch.tensor([1]))

    def setitem(t, i, j, v):
        t = t.clone()
        t[..., i, :, j] = v
        return t

    check(setitem, values((2, 3, 4, 5), torch.int32), torch.tensor([2, 0]), torch.tensor([4, -1]),
          values((2, 4), torch.int32, seed=1))


def test_int32_and_host_indices():
    x = values((6, 7), torch.float32)
    i = torch.tensor([5, -1, 0], dtype=torch.int32)
    check(lambda t, a, v: _put(t, (a,), v, True), x, i, acc_values((3, 7), torch.float32, 1))
    check(lambda t, a: t[:, a], x, i)
    for host in (torch.tensor([1, 5, 1]), torch.tensor([True, False, True, False, False, True])):
        check(lambda t, a: t[a], x, host, neuron_args=(x.to("neuron"), host))
        check(lambda t, a: _put(t, (a,), torch.tensor(2.5)), x, host, neuron_args=(x.to("neuron"), host))


@pytest.mark.parametrize("layout", ["transposed", "sliced", "offset"])
def test_non_contiguous_destinations(layout):
    xc, xd = pair((6, 40), torch.float32, layout, "small_int")
    sc, sd = pair((6, 40), torch.float32, layout, "small_int", seed=1)
    idx = ints((6, 40), 0, 6, 2)
    check(lambda t, i, s: t.scatter_add_(0, i, s), xc.clone(), idx, sc, neuron_args=(xd.clone(), idx.to("neuron"),
          sd))
    check(lambda t, i, s: t.scatter_reduce(0, i, s, "prod"), xc, idx, sc, neuron_args=(xd, idx.to("neuron"), sd))
    rows = torch.tensor([5, 0, 5])
    check(lambda t, i, s: t.index_add_(0, i, s[:3]), xc.clone(), rows, sc, neuron_args=(xd.clone(),
          rows.to("neuron"), sd))
    check(lambda t, i, s: t.index_put_((i,), s[:3], accumulate=True), xc.clone(), rows, sc,
          neuron_args=(xd.clone(), rows.to("neuron"), sd))
    wc, wd = pair((30, 8), torch.float32, layout)
    e = ints((4, 3), 0, 30)
    check(F.embedding, e, wc, neuron_args=(e.to("neuron"), wd))


def test_setitem_gradient():
    def fn(a, v, i):
        a = a.detach().requires_grad_()
        v = v.detach().requires_grad_()
        y = a * 1
        y[i] = v
        return torch.autograd.grad(y, (a, v), torch.ones_like(y))

    check(fn, values((5, 4), torch.float32), values((2, 4), torch.float32, seed=1), torch.tensor([3, 0]))


@pytest.mark.parametrize("n", [127, 129, 513])
def test_index_put_edges(n):
    x = acc_values((n, 3), torch.float32)
    check(lambda t, i, v: _put(t, (i,), v, True), x, ints((n,), -n, n), acc_values((n, 3), torch.float32, 1))
    check(lambda t, i, v: _put(t, (slice(None), i), v), acc_values((3, n), torch.float16), ints((n,), 0, n),
          acc_values((3, n), torch.float16, 2))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unique(dtype):
    x = values((7, 40), dtype, "small_int" if dtype.is_floating_point else "normal")
    for ri in (False, True):
        for rc in (False, True):
            check(lambda t: torch.unique(t, return_inverse=ri, return_counts=rc), x)
    check(lambda t: torch.unique(t, sorted=False, return_inverse=True, return_counts=True), x.t())


def test_unique_edges():
    check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), torch.tensor(
        [3.0, 1, float("nan"), 1, 3, float("nan"), -0.0, 0.0, 2]))
    check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), torch.tensor([], dtype=torch.long))
    check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), torch.tensor(3.0))
    check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), ints((5000,), 0, 700))
    check(lambda t: torch.unique(t, return_inverse=True, return_counts=True), values((129, 4), torch.float32))


def test_device_mismatch_is_an_error():
    x = torch.randn(3, 4, device="neuron:0")
    for i in (torch.tensor([0], device="neuron:1"), torch.tensor([[0]])):
        for fn in (lambda: x.index_select(0, i.view(-1)), lambda: x.gather(1, i.view(1, 1)),
                   lambda: x.scatter_add(1, i.view(1, 1), x), lambda: F.embedding(i, x)):
            with pytest.raises(RuntimeError, match="same device"):
                fn()
    with pytest.raises(RuntimeError, match="same device"):
        x[torch.tensor([0], device="neuron:1")]


def test_out_variants():
    x = acc_values((4, 6), torch.float32)
    idx = ints((4, 5), 0, 6)
    src = acc_values((4, 5), torch.float32, 1)
    check(lambda t, i, s, o: torch.scatter(t, 1, i, s, out=o), x, idx, src, torch.empty(0))
    check(lambda t, i, o: torch.scatter(t, 1, i, 2.5, out=o), x, idx, torch.empty(6, 4).t())
    check(lambda t, i, s, o: torch.scatter_add(t, 1, i, s, out=o), x, idx, src, torch.empty(4, 6))
    check(lambda t, i, s, o: torch.scatter_reduce(t, 1, i, s, "amin", out=o), x, idx, src, torch.empty(0))
    check(lambda t, i, s, o: torch.scatter_add(t, 1, i, s, out=o), x, idx, src, torch.empty(0, dtype=torch.int64))
    rows = torch.tensor([3, 1])
    check(lambda t, i, s, o: torch.index_add(t, 0, i, s, out=o), x, rows, src[:2, :].repeat(1, 2)[:, :6],
          torch.empty(0))
    check(lambda t, i, s, o: torch.index_copy(t, 0, i, s, out=o), x, rows, x[:2] * 2, torch.empty(0))
    check(lambda t, i, s: t.index_copy_(1, i, s), x.clone(), torch.tensor([5, 0]), x[:, :2] + 1)


@pytest.mark.parametrize("seed", range(24))
def test_advanced_indexing_sweep(seed):
    """Random shapes, index positions (adjacent or not), broadcast index shapes, masks and slices."""
    g = torch.Generator().manual_seed(seed)

    def rint(lo, hi):
        return int(torch.randint(lo, hi, (1,), generator=g))

    ndim = rint(1, 5)
    shape = tuple(rint(1, 6) for _ in range(ndim))
    x = values(shape, (torch.float32, torch.int16, torch.bfloat16)[seed % 3], seed=seed)
    key_shape = tuple(rint(1, 4) for _ in range(rint(0, 3)))
    key, tensors = [], []
    for d in range(ndim):
        kind = rint(0, 4)
        if kind == 0:
            key.append(None)
        elif kind == 1 and d == ndim - 1 and rint(0, 2):
            tensors.append(values((shape[d],), torch.bool, seed=seed + d))
            key.append(len(tensors) - 1)
        else:
            bshape = tuple(s if rint(0, 2) else 1 for s in key_shape)
            tensors.append(ints(bshape, -shape[d], shape[d], seed + d))
            key.append(len(tensors) - 1)
    if all(k is None for k in key):
        tensors.append(ints(key_shape, 0, shape[0], seed))
        key[0] = 0

    def build(ts):
        return tuple(slice(None) if k is None else ts[k] for k in key)

    assert check(lambda t, *ts: t[build(ts)], x, *tensors) is not None
    result_shape = x[build(tensors)].shape
    v = values(result_shape[rint(0, len(result_shape) + 1):], x.dtype, seed=seed + 100)

    def put(t, val, *ts):
        t = t.clone()
        t[build(ts)] = val
        return t

    assert check(put, x, v, *tensors) is not None  # duplicates: the last write wins, as in CPU's serial loop
    assert check(lambda t, val, *ts: torch.ops.aten.index_put(t, [None if k is None else ts[k] for k in key], val,
                                                              True), x.to(torch.int32), v.to(torch.int32),
                 *tensors) is not None


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_accumulation_rounding_matches_cpu(dtype):
    """CPU's serial accumulation order and rounding, reproduced exactly (zero tolerance): bf16/fp16
    scatter_add, scatter_reduce sum/mean/prod and index_add(alpha=1) accumulate in fp32 and round
    once; index_put(accumulate=True), embedding backward and index_add(alpha != 1) round every add."""
    exact = (0.0, 0.0)
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(4, 33, generator=g) * 10).to(dtype)
    src = (torch.randn(40, 33, generator=g) * torch.logspace(-2, 2, 40)[:, None]).to(dtype)
    idx = ints((40, 33), 0, 4, 5)
    check(lambda t, i, s: t.scatter_add(0, i, s), x, idx, src, tol=exact)
    check(lambda t, i, s: t.scatter(0, i, s, reduce="add"), x, idx, src, tol=exact)
    for reduce in ("sum", "mean", "prod"):
        s2 = src.clamp(-1.2, 1.2) if reduce == "prod" else src
        for inc in (True, False):
            check(lambda t, i, s: t.scatter_reduce(0, i, s, reduce, include_self=inc), x, idx, s2, tol=exact)
    rows = ints((40,), 0, 4, 6)
    check(lambda t, i, s: t.index_add(0, i, s), x, rows, src, tol=exact)
    # alpha != 1 in bf16/fp16: CPU's vectorized lanes round once per add (reproduced) but the scalar tail
    # of each slice (its last n % 32 elements) rounds source * alpha first: an ULP there
    if dtype == torch.float32:
        check(lambda t, i, s: t.index_add(0, i, s, alpha=0.3), x, rows, src, tol=exact)
    check(lambda t, i, s: t.index_add(0, i, s, alpha=0.3), x[:, :32], rows, src[:, :32], tol=exact)
    check(lambda t, i, s: t.index_add(0, i, s), x, rows.int(), src, tol=exact)  # the add_ loop: every add rounds
    check(lambda t, i, s: t.index_add(0, i, s), x[0], rows % 33, src[:, 0], tol=exact)
    check(lambda t, i, s: _put(t, (i,), s, True), x, rows, src, tol=exact)
    check(lambda s, i: torch.ops.aten.embedding_dense_backward(s, i, 4, -1, False), src, rows, tol=exact)
    # scale_grad_by_freq is add_(grad, 1 / count): the same vectorized-lane rounding (and scalar tail)
    check(lambda s, i: torch.ops.aten.embedding_dense_backward(s, i, 4, -1, True), src[:, :32], rows, tol=exact)
    if dtype == torch.float32:
        check(lambda s, i: torch.ops.aten.embedding_dense_backward(s, i, 4, -1, True), src, rows, tol=exact)


@pytest.mark.parametrize("shape", [(4, 5), (3, 1, 7), (300, 200), (6,)])
def test_nonzero_is_column_major_as_cpus(shape):
    """CPU's nonzero allocates (and restrides a resized out=) column-major, strides (1, n) (gh-46224); the device's
    came back row-major. An out= of the right shape keeps its own strides."""
    host = torch.randn(shape, generator=torch.Generator().manual_seed(5)).gt(0.3)
    expected, got = torch.nonzero(host), torch.nonzero(host.to("neuron"))
    assert torch.equal(got.cpu(), expected) and got.stride() == expected.stride()
    assert torch.argwhere(host.to("neuron")).stride() == torch.argwhere(host).stride()
    for make in (lambda d: torch.empty(0, dtype=torch.long, device=d),
                 lambda d: torch.empty(tuple(expected.shape), dtype=torch.long, device=d),
                 lambda d: torch.empty(tuple(reversed(expected.shape)), dtype=torch.long, device=d).t()):
        out_cpu, out_dev = make("cpu"), make("neuron")
        torch.nonzero(host, out=out_cpu)
        torch.nonzero(host.to("neuron"), out=out_dev)
        assert torch.equal(out_dev.cpu(), out_cpu) and out_dev.stride() == out_cpu.stride()


VIEW_SCATTERS = {
    "select_scatter": lambda t: torch.select_scatter(t, torch.ones_like(t[0]), 0, 0),
    "slice_scatter": lambda t: torch.slice_scatter(t, torch.ones_like(t[:1]), 0, 0, 1),
    "diagonal_scatter": lambda t: torch.diagonal_scatter(t, torch.ones_like(torch.diagonal(t))),
}


@pytest.mark.parametrize("layout", ["sliced", "offset", "transposed", "expanded"])
@pytest.mark.parametrize("op", VIEW_SCATTERS, ids=list(VIEW_SCATTERS))
def test_view_scatters_preserve_strides_as_cpus(op, layout):
    """ATen's view scatters build their result with clone_preserve_strides (Note [*_scatter ops preserve strides]):
    a sliced self gives a result of its strides and storage offset (the device's was contiguous); one with a
    stride-0 dim is cloned, contiguous."""
    base = torch.randn(3, 4, 10, generator=torch.Generator().manual_seed(6))
    host = {"sliced": lambda: base[..., ::2], "offset": lambda: base.reshape(-1)[7:7 + 60].view(3, 4, 5),
            "transposed": lambda: base[..., :5].transpose(0, 2), "expanded": lambda: base[:, :1, :5].expand(3, 4, 5)
            }[layout]()
    fn = VIEW_SCATTERS[op]
    expected = fn(host)
    dev_base = base.to("neuron")
    dev = {"sliced": lambda: dev_base[..., ::2], "offset": lambda: dev_base.reshape(-1)[7:7 + 60].view(3, 4, 5),
           "transposed": lambda: dev_base[..., :5].transpose(0, 2),
           "expanded": lambda: dev_base[:, :1, :5].expand(3, 4, 5)}[layout]()
    got = fn(dev)
    assert got.stride() == expected.stride() and got.storage_offset() == expected.storage_offset()
    assert torch.equal(got.cpu(), expected)


def _significant(t: torch.Tensor) -> tuple:
    """The strides of the dims of size > 1 (the harness's layout check, harness.compare.compare_strides)."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)


INDEX_SELVES = {
    "overlapping": lambda d: torch.randn(200, generator=torch.Generator().manual_seed(8)).to(d).as_strided(
        (2, 2, 127), (1, 1, 1)),
    "transposed": lambda d: torch.arange(70, dtype=torch.int8).reshape(7, 2, 5).to(d).permute(2, 1, 0),
    "channels_last": lambda d: torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(9)).to(d).contiguous(
        memory_format=torch.channels_last),
}
INDEX_KEYS = {
    "first": lambda: (torch.tensor([0, 1, 1, 0]),),
    "one": lambda: (torch.tensor([1]),),
    "second": lambda: (slice(None), torch.tensor([1])),
    "apart": lambda: (torch.tensor([1]), slice(None), torch.tensor([1])),
    "matrix": lambda: (slice(None), torch.tensor([[0, 1, 1], [1, 0, 0]])),
    "mask": lambda: (torch.tensor([True, False]),),
}


@pytest.mark.parametrize("key", INDEX_KEYS, ids=list(INDEX_KEYS))
@pytest.mark.parametrize("layout", INDEX_SELVES, ids=list(INDEX_SELVES))
def test_advanced_index_result_is_laid_out_as_cpus(layout, key):
    """CPU's ``index`` result is its TensorIterator's output over self restrided to the result (stride 0 where the
    indices go) and the indices: an index of a transposed, channels-last or overlapping self is laid out as self
    (the designed index-int8-int_edges-transposed-7: CPU (14, 1, 2)); the device's came back contiguous."""
    make, keys = INDEX_SELVES[layout], INDEX_KEYS[key]()
    host = make("cpu")
    if any(isinstance(k, torch.Tensor) and k.dtype == torch.bool and k.shape[0] != host.shape[0] for k in keys):
        keys = (torch.arange(host.shape[0]) % 2 == 0,)
    expected = host[keys]
    got = make("neuron")[tuple(k.to("neuron") if isinstance(k, torch.Tensor) else k for k in keys)]
    assert torch.equal(got.cpu(), expected)
    assert _significant(got) == _significant(expected), (got.stride(), expected.stride())


@pytest.mark.parametrize("key", INDEX_KEYS, ids=list(INDEX_KEYS))
@pytest.mark.parametrize("layout", INDEX_SELVES, ids=list(INDEX_SELVES))
def test_advanced_index_into_a_resized_out_is_laid_out_as_cpus(layout, key):
    """``index.Tensor_out`` is structured: an out= the call resizes takes its TensorIterator's strides, as the
    functional result does (the device's resized out came back contiguous: CPU's index of a permuted (4, 5, 6)
    self into ``torch.empty(0)`` is (30, 1, 5))."""
    make, keys = INDEX_SELVES[layout], INDEX_KEYS[key]()
    host = make("cpu")
    if any(isinstance(k, torch.Tensor) and k.dtype == torch.bool and k.shape[0] != host.shape[0] for k in keys):
        keys = (torch.arange(host.shape[0]) % 2 == 0,)
    expected = torch.empty(0, dtype=host.dtype)
    torch.ops.aten.index.Tensor_out(host, [None if isinstance(k, slice) else k for k in keys], out=expected)
    got = torch.empty(0, dtype=host.dtype, device="neuron")
    torch.ops.aten.index.Tensor_out(make("neuron"), [None if isinstance(k, slice) else k.to("neuron") for k in keys],
                                    out=got)
    assert torch.equal(got.cpu(), expected)
    assert _significant(got) == _significant(expected), (got.stride(), expected.stride())
