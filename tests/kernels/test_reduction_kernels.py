"""Reduction-family kernels against CPU eager: reductions, scans, softmax, normalisation layers, losses."""

import itertools
import math

import pytest
import torch

from device_impl import dispatch
from device_impl.kernels import cpu_host
from device_impl.kernels.reduction import moments
from diff import ALL_DTYPES, EDGE_SIZES, FLOATS, LAYOUTS, TOLERANCES, check, pair, values

F = torch.nn.functional
A = torch.ops.aten
INF = float("inf")
NAN = float("nan")


def sum_tol(n: int, dtype=torch.float32):
    """Summation-order tolerance for sums of n terms of magnitude ~1: both sides accumulate in fp32 but in
    different orders (CPU: cascade, neuron: per-partition then across partitions), so the absolute error
    grows with n while the result can be small (cancellation)."""
    rtol, atol = TOLERANCES[dtype]
    return rtol, atol + 3e-9 * n


def _grad(fn, *inputs_requiring_grad):
    """A function of CPU/neuron tensors returning (output, grads of every input) after backward."""

    def run(*ts):
        leaves = [t.detach().requires_grad_(i in inputs_requiring_grad or not inputs_requiring_grad)
                  if t.dtype.is_floating_point else t for i, t in enumerate(ts)]
        out = fn(*leaves)
        g = values(out.shape, out.dtype, seed=7).to(out.device)
        out.backward(g)
        return (out,) + tuple(t.grad for t in leaves if isinstance(t, torch.Tensor) and t.requires_grad)

    return run


# --- sum / mean / prod / amax / amin / any / all --------------------------------------------

SHAPES_DIMS = [((129, 513), 1), ((129, 513), 0), ((129, 513), None), ((3, 2049), -1), ((3, 2049), 0),
               ((127,), 0), ((128, 1), (0, 1)), ((511, 3), 0), ((2, 512, 3), (0, 2)), ((4, 5, 6), (-1, 0)),
               ((1,), None), ((), None), ((), 0), ((7, 9), ())]


@pytest.mark.parametrize("shape, dim", SHAPES_DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_shapes(shape, dim, keepdim):
    x = values(shape, torch.float32)
    n = x.numel()  # an upper bound on the terms per sum
    check(lambda t: torch.sum(t, dim, keepdim=keepdim) if dim is not None else t.sum(), x, tol=sum_tol(n))
    check(lambda t: torch.mean(t, dim, keepdim=keepdim) if dim is not None else t.mean(), x, tol=sum_tol(n))
    check(lambda t: torch.amax(t, dim if dim is not None else (), keepdim=keepdim), x)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_sum_prod_dtypes(dtype):
    x = values((129, 33), dtype, "small_int" if dtype.is_floating_point else "normal")
    check(lambda t: t.sum(1), x)
    check(lambda t: t.sum(0), x)
    check(lambda t: t.sum(), x)
    # products of 33 small integers overflow int64 exactly as CPU wraps; floats keep few factors
    y = values((129, 5), dtype, "small_int" if dtype.is_floating_point else "normal")
    check(lambda t: t.prod(1), y)
    check(lambda t: t.prod(0), y.t().contiguous())
    check(lambda t: t.prod(), values((9,), dtype, "small_int" if dtype.is_floating_point else "normal"))
    check(lambda t: t.mean(), x)  # ints: same error as CPU
    check(lambda t: t.amax(1), x)
    check(lambda t: t.amin(0), x)
    check(lambda t: t.any(1), x)
    check(lambda t: t.all(0), x)
    check(lambda t: t.any(), x)
    check(lambda t: t.all(), x)
    check(lambda t: t.max(), x)
    check(lambda t: t.min(), x)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_sums_long_rows(dtype):
    # bf16/fp16 inputs accumulate in fp32 on both sides; the summation orders differ, so sums of
    # thousands of terms get a tolerance relative to the sum of magnitudes rather than to the result
    tol = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (1.6e-2, 1e-1), torch.float16: (1e-3, 1e-2)}[dtype]
    x = values((3, 9000), dtype)
    check(lambda t: t.sum(1), x, tol=tol)
    check(lambda t: t.sum(), x, tol=tol)
    check(lambda t: t.mean(0), x)
    check(lambda t: t.amax(1), x)
    check(lambda t: t.sum(1, dtype=torch.float32), x, tol=tol)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.int32), ids=str)
def test_reduction_layouts(layout, dtype):
    cpu, dev = pair((6, 130, 5), dtype, layout)
    for fn in (lambda t: t.sum(1), lambda t: t.sum((0, 2)), lambda t: t.amax(-1), lambda t: t.sum(),
               lambda t: t.amin(0, keepdim=True), lambda t: t.any(1)):
        check(fn, cpu, neuron_args=(dev,))
    if dtype.is_floating_point:
        check(lambda t: t.mean((0, 1)), cpu, neuron_args=(dev,))


def test_dtype_and_out_variants():
    x = values((5, 7), torch.float32)
    i = values((5, 7), torch.int32)
    check(lambda t: t.sum(0, dtype=torch.float16), x)
    check(lambda t: t.sum(0, dtype=torch.int32), x)
    check(lambda t: t.sum(1, dtype=torch.bool), x)
    check(lambda t: t.sum(dtype=torch.float32), i)
    check(lambda t: t.mean(1, dtype=torch.float32), i)
    check(lambda t: t.mean(1, dtype=torch.int64), x)
    check(lambda t: t.prod(0, dtype=torch.float32), i)
    check(lambda t: torch.sum(t, 0, out=torch.empty(7, device=t.device)), x)
    check(lambda t: torch.sum(t, 0, out=torch.empty(0, dtype=torch.int64, device=t.device)), x)
    check(lambda t: torch.sum(t, 0, out=torch.empty(3, device=t.device)), x)  # resized with a warning
    check(lambda t: torch.sum(t, 0, dtype=torch.float16, out=torch.empty(7, device=t.device)), x)
    check(lambda t: torch.mean(t, 1, out=torch.empty(5, dtype=torch.float16, device=t.device)), x)
    check(lambda t: torch.mean(t, 1, out=torch.empty(5, dtype=torch.int64, device=t.device)), x)
    check(lambda t: torch.prod(t, 1, out=torch.empty(5, dtype=torch.int64, device=t.device)), x)
    check(lambda t: torch.amax(t, 1, out=torch.empty(5, device=t.device)), x)
    check(lambda t: torch.amax(t, 1, out=torch.empty(5, dtype=torch.float16, device=t.device)), x)
    check(lambda t: torch.any(t, 1, out=torch.empty(5, dtype=torch.float32, device=t.device)), x)
    check(lambda t: torch.all(t, out=torch.empty((), dtype=torch.uint8, device=t.device)), x)
    check(lambda t: torch.any(t, out=torch.empty((), dtype=torch.bool, device=t.device)), i.to(torch.uint8))
    check(lambda t: torch.max(t, out=torch.empty((), dtype=torch.float16, device=t.device)), x)


def test_dim_errors_and_variants():
    x = values((4, 5, 6), torch.float32)
    check(lambda t: t.sum((0, 0)), x)
    check(lambda t: t.sum(3), x)
    check(lambda t: t.sum(-4), x)
    check(lambda t: t.sum([]), x)
    check(lambda t: t.amax([]), x)
    check(lambda t: t.any(dim=()), x)
    check(lambda t: A.any.dims(t, None), x)
    check(lambda t: A.all.dims(t, [0, 2], True), x)
    check(lambda t: t.sum(-1).sum(-1), x)
    s = values((), torch.float32)
    for fn in (lambda t: t.sum(0), lambda t: t.sum(-1), lambda t: t.sum(1), lambda t: t.amax(0), lambda t: t.prod(0),
               lambda t: t.mean(), lambda t: t.any(0), lambda t: t.max(), lambda t: t.amin(-1, keepdim=True)):
        check(fn, s)


def test_empty_reductions():
    e = values((0, 3), torch.float32)
    for fn in (lambda t: t.sum(), lambda t: t.sum(0), lambda t: t.sum(1), lambda t: t.mean(), lambda t: t.mean(0),
               lambda t: t.prod(0), lambda t: t.amax(0), lambda t: t.amax(1), lambda t: t.amax(), lambda t: t.max(),
               lambda t: t.min(), lambda t: t.any(0), lambda t: t.all(), lambda t: t.all(1), lambda t: t.norm(),
               lambda t: torch.linalg.vector_norm(t, INF), lambda t: torch.linalg.vector_norm(t, INF, dim=1),
               lambda t: torch.linalg.vector_norm(t, INF, dim=0), lambda t: t.sum(0, keepdim=True)):
        check(fn, e)
    check(lambda t: t.sum(), values((0,), torch.int32))
    check(lambda t: t.prod(), values((0,), torch.int8))


def test_nan_and_inf():
    x = torch.tensor([[1.0, NAN, 3.0, -INF], [INF, 2.0, -1.0, 0.5], [-INF, -INF, -INF, -INF], [INF, -INF, 1.0, 0.0]])
    for fn in (lambda t: t.sum(1), lambda t: t.amax(1), lambda t: t.amin(0), lambda t: t.max(), lambda t: t.min(),
               lambda t: t.prod(1), lambda t: t.mean(0), lambda t: t.any(1), lambda t: t.all(1), lambda t: t.norm(dim=1),
               lambda t: torch.linalg.vector_norm(t, INF, dim=0), lambda t: torch.linalg.vector_norm(t, 1, dim=1)):
        check(fn, x)
    big = values((3, 5000), torch.float32, "special")
    check(lambda t: t.amax(1), big)
    check(lambda t: t.amax(), big)
    check(lambda t: t.amin(0), big)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("ord_", [2, 1, INF, -INF, 0, 3, 0.5, -1])
def test_vector_norm(dtype, ord_):
    x = values((129, 65), dtype)
    # the full norm sums 8385 terms and raises the sum to 1/ord: summation-order differences are amplified
    full_tol = (1e-5, 1e-5) if dtype == torch.float32 and ord_ not in (INF, -INF, 0) else None
    check(lambda t: torch.linalg.vector_norm(t, ord_), x, tol=full_tol)
    check(lambda t: torch.linalg.vector_norm(t, ord_, dim=1), x)
    check(lambda t: torch.linalg.vector_norm(t, ord_, dim=0, keepdim=True), x)


def test_vector_norm_dtypes_and_errors():
    x = values((9, 17), torch.float32)
    check(lambda t: t.norm(), x)
    check(lambda t: t.norm(dim=1), x)
    check(lambda t: torch.norm(t, p=1, dim=0), x)
    check(lambda t: torch.linalg.vector_norm(t.half(), dtype=torch.float32), x)
    check(lambda t: torch.linalg.vector_norm(t, dtype=torch.float16), x)
    check(lambda t: torch.linalg.vector_norm(t, out=torch.empty((), device=t.device)), x)
    check(lambda t: torch.linalg.vector_norm(t, out=torch.empty((), dtype=torch.float16, device=t.device)), x)
    check(lambda t: torch.linalg.vector_norm(t), values((3,), torch.int64))
    cpu, dev = pair((40, 70), torch.float32, "transposed")
    check(lambda t: t.norm(dim=0), cpu, neuron_args=(dev,))


@pytest.mark.parametrize("n", EDGE_SIZES)
@pytest.mark.parametrize("kept_first", [True, False], ids=["n-kept", "n-reduced"])
def test_tile_edge_sizes(n, kept_first):
    # n along the kept dim (rows on partitions: 128-row blocks) or along the reduced dim (free-axis chunks)
    x = values((n, 513) if kept_first else (129, n), torch.float32)
    for dim in (1, 0):
        check(lambda t: t.sum(dim), x, tol=sum_tol(x.shape[dim]))
        check(lambda t: t.amax(dim), x)
        check(lambda t: t.argmin(dim), x)
        check(lambda t: torch.softmax(t, dim), x)
        check(lambda t: t.var(dim), x, tol=(1e-5, 1e-5))  # Welford in double on CPU
        check(lambda t: torch.cumsum(t, dim), x, tol=CUMSUM_TOL)
    check(lambda t: F.layer_norm(t, t.shape[-1:]), x, tol=(1e-5, 1e-5))
    check(lambda t: t.sum(), x, tol=sum_tol(x.numel()))
    b = values(x.shape, torch.bfloat16)
    check(lambda t: t.sum(1), b)
    check(lambda t: torch.log_softmax(t, 0), b)


def test_float64_takes_the_counted_fallback(fresh_stats):
    x = torch.randn(5, 7, dtype=torch.float64)
    out = x.to("neuron").sum(1)
    assert torch.allclose(out.cpu(), x.sum(1))
    counts = fresh_stats.stats()["aten::sum.IntList_out"]
    assert counts["fallback"] == 1 and counts["native"] == 0
    # a float64 output (dtype=) is storage-only too: the counted fallback serves it
    check(lambda t: t.sum(0, dtype=torch.float64), values((5, 7), torch.float32),
          allow_fallback=("aten::sum.IntList_out",))


def test_ops_are_native():
    ops = """sum sum.dim_IntList sum.IntList_out sum.out mean mean.dim mean.out mean.dtype_out prod prod.out
        prod.dim_int prod.int_out amax amax.out amin amin.out any any.dim any.dims any.out any.dims_out any.all_out
        all all.dim all.dims all.out all.dims_out all.all_out argmax argmax.out argmin argmin.out max max.unary_out
        max.dim max.dim_max min min.unary_out min.dim min.dim_min aminmax aminmax.out var.correction
        var.correction_out std.correction std.correction_out var_mean.correction var_mean.correction_out
        std_mean.correction std_mean.correction_out cumsum cumsum.out cumsum_ cumprod cumprod.out cumprod_
        logsumexp logsumexp.out linalg_vector_norm linalg_vector_norm.out _softmax _softmax.out _log_softmax
        _log_softmax.out _softmax_backward_data _softmax_backward_data.out _log_softmax_backward_data
        _log_softmax_backward_data.out _safe_softmax native_layer_norm native_layer_norm.out
        native_layer_norm_backward native_layer_norm_backward.out native_group_norm native_group_norm.out
        native_group_norm_backward native_group_norm_backward.out native_batch_norm native_batch_norm.out
        _native_batch_norm_legit _native_batch_norm_legit.out _native_batch_norm_legit.no_stats
        _native_batch_norm_legit.no_stats_out _native_batch_norm_legit_no_training
        _native_batch_norm_legit_no_training.out native_batch_norm_backward native_batch_norm_backward.out
        mse_loss mse_loss.out mse_loss_backward mse_loss_backward.grad_input nll_loss_forward
        nll_loss_forward.output nll_loss_backward nll_loss_backward.grad_input nll_loss2d_forward
        nll_loss2d_forward.output nll_loss2d_backward nll_loss2d_backward.grad_input""".split()
    for op in ops:
        assert dispatch.TABLE.lookup("aten::" + op).tier is dispatch.Tier.NATIVE, op


# --- argmax / argmin / max.dim / min.dim / aminmax -------------------------------------------

@pytest.mark.parametrize("shape, dim", [((129, 513), 1), ((129, 513), 0), ((129, 513), None), ((3, 2049), 1),
                                        ((3, 5000), None), ((511,), 0), ((2, 3, 4), 1), ((), None), ((), 0),
                                        ((1, 1), -1)], ids=str)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.int32, torch.uint8), ids=str)
def test_arg_reductions(shape, dim, dtype):
    x = values(shape, dtype, "small_int" if dtype.is_floating_point else "normal")  # many ties: first index wins
    check(lambda t: t.argmax(dim), x)
    check(lambda t: t.argmin(dim, keepdim=True), x)
    if dim is not None:
        check(lambda t: t.max(dim), x)
        check(lambda t: t.min(dim, keepdim=True), x)
        check(lambda t: torch.aminmax(t, dim=dim), x)
    else:
        check(lambda t: torch.aminmax(t), x)
        check(lambda t: torch.aminmax(t, keepdim=True), x)


def test_arg_reductions_nan_inf_and_ties():
    x = torch.tensor([[1.0, NAN, 3.0, NAN], [INF, 2.0, INF, 0.5], [-INF, -INF, -INF, -INF], [2.0, 2.0, 1.0, 2.0]])
    for fn in (lambda t: t.argmax(1), lambda t: t.argmin(1), lambda t: t.max(1), lambda t: t.min(0),
               lambda t: t.argmax(), lambda t: t.argmin(), lambda t: torch.aminmax(t, dim=1), lambda t: t.argmax(0)):
        check(fn, x)
    long = values((2, 5000), torch.float32, "small_int")
    long[0, 4000] = NAN
    long[1, 4500] = -INF
    for fn in (lambda t: t.argmax(1), lambda t: t.argmin(1), lambda t: t.max(1), lambda t: t.argmax(),
               lambda t: t.argmin(), lambda t: t[1].argmin(), lambda t: t.amax()):
        check(fn, long)
    ties = torch.zeros(3, 4100)
    check(lambda t: t.argmax(), ties)
    check(lambda t: t.argmin(1), ties)
    check(lambda t: t.max(), values((9, 9), torch.bool))
    check(lambda t: t.max(0), values((9, 9), torch.bool))
    check(lambda t: t.argmax(0), values((9, 9), torch.bool))  # refused like CPU


def test_arg_reduction_layouts_and_errors():
    for layout in LAYOUTS:
        cpu, dev = pair((6, 130), torch.float32, layout, domain="small_int")
        for fn in (lambda t: t.argmax(), lambda t: t.argmax(0), lambda t: t.max(1), lambda t: t.argmin(-1)):
            check(fn, cpu, neuron_args=(dev,))
    e = values((0, 3), torch.float32)
    for fn in (lambda t: t.argmax(), lambda t: t.argmax(0), lambda t: t.argmax(1), lambda t: t.max(0),
               lambda t: t.max(1), lambda t: torch.aminmax(t), lambda t: torch.aminmax(t, dim=1),
               lambda t: torch.aminmax(t, dim=0), lambda t: t.argmax(2)):
        check(fn, e)
    x = values((4, 5), torch.float32)
    check(lambda t: torch.argmax(t, 1, out=torch.empty(4, dtype=torch.int64, device=t.device)), x)
    check(lambda t: torch.argmax(t, 1, out=torch.empty(4, dtype=torch.int32, device=t.device)), x)
    check(lambda t: torch.max(t, 0, out=(torch.empty(0, device=t.device), torch.empty(0, dtype=torch.int64,
                                                                                     device=t.device))), x)
    check(lambda t: torch.max(t, 0, out=(torch.empty(0, dtype=torch.float16, device=t.device),
                                         torch.empty(0, dtype=torch.int64, device=t.device))), x)
    check(lambda t: torch.min(t, 1, keepdim=True, out=(torch.empty(0, device=t.device),
                                                       torch.empty(0, dtype=torch.int64, device=t.device))), x)
    check(lambda t: torch.aminmax(t, dim=0, out=(torch.empty(0, device=t.device), torch.empty(0, device=t.device))), x)


# --- var / std / var_mean / std_mean / logsumexp ------------------------------------------------

@pytest.mark.parametrize("shape, dim", [((129, 513), 1), ((129, 513), 0), ((129, 513), None), ((3, 2049), 1),
                                        ((3, 9000), -1), ((2, 3, 130), (0, 2)), ((127,), 0), ((1, 5), 0),
                                        ((), None)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_var_std(shape, dim, dtype):
    x = values(shape, dtype)
    # CPU's Welford accumulates in double; neuron is two-pass in fp32
    tol = (1e-5, 1e-5) if dtype == torch.float32 else None
    check(lambda t: t.var(dim), x, tol=tol)
    check(lambda t: t.std(dim, keepdim=True), x, tol=tol)
    check(lambda t: torch.var(t, dim, correction=0), x, tol=tol)
    check(lambda t: torch.var_mean(t, dim), x, tol=tol)
    check(lambda t: torch.std_mean(t, dim, correction=2, keepdim=True), x, tol=tol)


@pytest.mark.parametrize("n", [1, 5, 7, 8, 127, 1000, 32768])
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_var_std_over_every_dim_take_cpus_float_mean(n, strided):
    """CPU's var/std reducing every dim of a float32 tensor (std_var_all_cpu) takes its mean from self.mean(), a
    float32 cascade sum (SumKernel's row_sum over Vectorized<float> lanes: moments._cpu_float_sum) divided in float,
    then sums the squares about it in double: values near +-3e38 whose float sum overflows give NaN or inf on CPU,
    where the double Welford stayed finite (op suite ci profile: std float32 [127] near_overflow, NaN on CPU, finite
    on the device). var_mean / std_mean and partial reductions keep the double Welford (CPU's stub)."""
    gen = torch.Generator().manual_seed(n)
    for scale in (1.0, 1e30, 3.4e38):
        sign = torch.where(torch.rand(n, generator=gen) > 0.4, 1.0, -1.0)
        x = (torch.rand(n, generator=gen) * 0.5 + 0.5) * scale * sign
        fns = (torch.std, torch.var) if strided else \
            (torch.std, torch.var, lambda t: torch.var(t.reshape(1, -1), dim=(0, 1), keepdim=True, correction=0))
        for fn in fns:  # a strided vector (a slice with step 2): at::sum's scalar row_sum (scalar_inner_sum)
            dev = torch.stack([x, x], 1).to("neuron")[:, 0] if strided else x.to("neuron")
            want, got = fn(torch.stack([x, x], 1)[:, 0] if strided else x), fn(dev).cpu()
            if strided:  # and as a [1, n] view: its size-1 dim is dropped (op suite ci profile: std of b0[..., ::2])
                cpu2d = torch.stack([x, x], 1).reshape(1, 2 * n)[..., ::2]
                dev2d = torch.stack([x, x], 1).reshape(1, 2 * n).to("neuron")[..., ::2]
                w2, g2 = fn(cpu2d), fn(dev2d).cpu()
                assert torch.equal(w2.isnan(), g2.isnan()) and torch.equal(w2.isinf(), g2.isinf()), (scale, w2, g2)
            assert torch.equal(want.isnan(), got.isnan()) and torch.equal(want.isinf(), got.isinf()), (scale, want, got)
            torch.testing.assert_close(got, want, equal_nan=True)
    assert moments._cpu_float_sum(x.numpy(), cpu_host.rowwise_moments_lanes()) == torch.sum(x).item() or \
        torch.sum(x).isnan()


def test_var_std_variants():
    x = values((4, 6), torch.float32)
    check(lambda t: t.var(0, correction=5), x)  # n - correction < 0: inf like CPU
    check(lambda t: t.var(correction=0.5), x)
    check(lambda t: t.var([]), x)
    check(lambda t: t.std([0, 1]), x)
    check(lambda t: torch.var(t, 0, out=torch.empty(6, dtype=torch.float16, device=t.device)), x)
    check(lambda t: torch.std(t, 1, out=torch.empty(4, device=t.device)), x)
    check(lambda t: t.var(), values((5,), torch.int32))  # refused like CPU
    check(lambda t: t.var(0), values((0, 3), torch.float32))
    check(lambda t: t.std(), values((0,), torch.float32))
    check(lambda t: t.var(1), torch.tensor([[1.0, NAN, 2.0], [INF, 1.0, 2.0], [1e4, 1e4 + 1, 1e4 + 2]]))
    cpu, dev = pair((40, 70), torch.float32, "transposed")
    check(lambda t: t.var(1), cpu, neuron_args=(dev,), tol=(1e-5, 1e-5))  # Welford in double on CPU
    check(lambda t: t.var(0), cpu, neuron_args=(dev,), tol=(1e-5, 1e-5))


@pytest.mark.parametrize("shape, dim", [((129, 513), 1), ((129, 513), 0), ((3, 2049), (0, 1)), ((3, 9000), 1),
                                        ((2, 3, 4), (1, 2)), ((5,), 0), ((), 0)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS + (torch.int32, torch.bool), ids=str)
def test_logsumexp(shape, dim, dtype):
    x = values(shape, dtype)
    # bf16/fp16: CPU rounds every intermediate (x - max, exp, sum) to the input dtype; neuron rounds once
    tol = {torch.bfloat16: (3e-2, 3e-2), torch.float16: (2e-3, 2e-3)}.get(dtype)
    check(lambda t: torch.logsumexp(t, dim), x, tol=tol)
    check(lambda t: torch.logsumexp(t, dim, keepdim=True), x, tol=tol)


def test_logsumexp_special_and_out():
    x = torch.tensor([[1.0, NAN, 3.0], [INF, 2.0, -1.0], [-INF, -INF, -INF], [INF, -INF, 1.0], [100.0, 100.0, 1.0]])
    check(lambda t: torch.logsumexp(t, 1), x)
    check(lambda t: torch.logsumexp(t, 0), x)
    check(lambda t: torch.logsumexp(t, 0), values((0, 3), torch.float32))
    check(lambda t: torch.logsumexp(t, 1), values((0, 3), torch.float32))
    check(lambda t: torch.logsumexp(t, []), values((2, 3), torch.float32))
    i = values((3, 4), torch.int32)
    check(lambda t: torch.logsumexp(t, 0, out=torch.empty(4, dtype=torch.int64, device=t.device)), i)
    check(lambda t: torch.logsumexp(t, 0, out=torch.empty(4, dtype=torch.float16, device=t.device)), i)
    cpu, dev = pair((6, 130), torch.float32, "sliced")
    check(lambda t: torch.logsumexp(t, 1), cpu, neuron_args=(dev,))


# --- cumsum / cumprod ------------------------------------------------------------------------

# CPU's scans carry their running value in at::acc_type (double for float32, float for bfloat16/float16) and
# round each prefix once; neuron does the same (a float32 scan runs in double on GpSimd), so the default
# tolerances hold (the bit-exact test below pins it).
CUMSUM_TOL = None

@pytest.mark.parametrize("shape, dim", [((129, 513), 1), ((129, 513), 0), ((3, 2049), 1), ((3, 5000), -1),
                                        ((511,), 0), ((2, 3, 4), 1), ((), 0), ((0, 3), 0)], ids=str)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_cumsum(shape, dim, dtype):
    x = values(shape, dtype)
    tol = CUMSUM_TOL if dtype == torch.float32 else None
    check(lambda t: torch.cumsum(t, dim), x, tol=tol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_cumsum_of_negative_zeros_is_positive_zero(dtype):
    """CPU's loop starts its running sum at +0.0, so a prefix of -0.0 sums to +0.0 (0.0 + -0.0); a scan that
    starts from the first element kept -0.0 (found by the op suite)."""
    x = torch.tensor([[-0.0, -0.0, 1.0, -1.0, -0.0], [-0.0, 2.0, -2.0, -0.0, 3.0]], dtype=dtype)
    for dim in (0, 1):
        got = torch.cumsum(x.to("neuron"), dim).cpu()
        want = torch.cumsum(x, dim)
        assert torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want)), (dim, got, want)


@pytest.mark.parametrize("op", [torch.cumsum, torch.cumprod], ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape, dim", [((3, 5000), 1), ((2049, 3), 0)], ids=str)
def test_float32_scan_accumulates_in_double_as_cpu(op, shape, dim):
    """Bit-identical with CPU: its float32 scan carries the running value in double (at::acc_type on CPU), so an
    fp32 scan is tens of ULP off after a few thousand terms (the designed case cumsum-float32-*-2047 found 87
    ULP; cumsum's gradient is a reversed cumsum and was 3248 ULP off)."""
    x = values(shape, torch.float32, seed=3)
    if op is torch.cumprod:
        x = 1 + x / 1000  # keeps the product finite and away from zero over thousands of terms
    got = op(x.to("neuron"), dim).cpu()
    want = op(x, dim)
    assert torch.equal(got, want), int((got != want).sum())
    g = values(shape, torch.float32, seed=4)
    leaf_c, leaf_n = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    torch.cumsum(leaf_c, dim).backward(g)
    torch.cumsum(leaf_n, dim).backward(g.to("neuron"))
    assert torch.equal(leaf_n.grad.cpu(), leaf_c.grad)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_cumprod(dtype):
    x = values((7, 20), dtype, "unit" if dtype.is_floating_point else "normal")
    check(lambda t: torch.cumprod(t, 1), x)
    check(lambda t: torch.cumprod(t, 0), x)


def test_scan_variants():
    x = values((5, 7), torch.float32)
    i = values((5, 7), torch.int32)
    check(lambda t: torch.cumsum(t, 0, dtype=torch.float16), x)
    check(lambda t: torch.cumsum(t, 0, dtype=torch.int64), x)
    check(lambda t: torch.cumsum(t, 1, dtype=torch.float32), i)
    check(lambda t: torch.cumsum(t, 0, out=torch.empty(5, 7, dtype=torch.int64, device=t.device)), x)
    check(lambda t: torch.cumsum(t, 0, out=torch.empty(0, device=t.device)), i)
    check(lambda t: t.clone().cumsum_(1), x)
    check(lambda t: t.clone().cumsum_(0), i)
    check(lambda t: t.clone().cumsum_(0, dtype=torch.int64), x)  # refused like CPU
    check(lambda t: t.clone().cumprod_(1), x)
    check(lambda t: torch.cumsum(t, 2), x)
    check(lambda t: torch.cumsum(t, 1), torch.tensor([[1.0, NAN, 2.0, 3.0], [INF, -INF, 1.0, 2.0]]))
    for layout in LAYOUTS:
        cpu, dev = pair((6, 130), torch.float32, layout)
        check(lambda t: torch.cumsum(t, 1), cpu, neuron_args=(dev,), tol=CUMSUM_TOL)
        check(lambda t: torch.cumsum(t, 0), cpu, neuron_args=(dev,))


# --- softmax / log_softmax and gradients ---------------------------------------------------------

@pytest.mark.parametrize("shape, dim", [((129, 513), 1), ((129, 513), 0), ((3, 2049), -1), ((2, 9000), 1),
                                        ((2, 3, 5, 7), 1), ((511,), 0), ((128, 1), 1), ((), 0), ((0, 4), 1)],
                         ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_softmax_forward(shape, dim, dtype):
    x = values(shape, dtype) * 3
    check(lambda t: torch.softmax(t, dim), x)
    # CPU's last-dim log_softmax kernel rounds the exp-sum, its log and x - max to bf16/fp16
    # (LogSoftmaxKernelImpl.h); neuron rounds once, so they differ by up to an ulp of |x - max|
    tol = {torch.bfloat16: (1.6e-2, 3e-2), torch.float16: (1e-3, 4e-3)}.get(dtype)
    check(lambda t: torch.log_softmax(t, dim), x, tol=tol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape, dim", [((129, 513), 1), ((3, 2049), 0), ((2, 9000), 1), ((2, 3, 5), 1)], ids=str)
def test_softmax_gradients(dtype, shape, dim):
    x = values(shape, dtype)
    if dtype == torch.float32:
        check(_grad(lambda t: torch.softmax(t, dim)), x)
        check(_grad(lambda t: torch.log_softmax(t, dim)), x)
    # In bf16/fp16 the gradient g - exp(y) * sum(g) cancels, so an ulp of difference in the forward
    # output is amplified; the backward kernels are compared on identical inputs instead.
    g = values(shape, dtype, seed=3)
    y = torch.softmax(x.float(), dim).to(dtype)
    check(lambda a, b: A._softmax_backward_data(a, b, dim, dtype), g, y)
    check(lambda a, b: A._log_softmax_backward_data(a, b, dim, dtype), g, y.float().log().to(dtype))


def test_softmax_special_values_and_variants():
    x = torch.tensor([[1.0, NAN, 3.0], [INF, 2.0, -1.0], [-INF, -INF, -INF], [-INF, 0.0, 1.0], [1e4, -1e4, 0.0]])
    check(lambda t: torch.softmax(t, 1), x)
    check(lambda t: torch.log_softmax(t, 1), x)
    check(lambda t: torch.softmax(t, 0), x)
    check(lambda t: A._safe_softmax(t, 1), x)
    check(lambda t: A._safe_softmax(t, 1, torch.float16), x)
    check(lambda t: torch.softmax(t, 1, dtype=torch.float32), values((4, 5), torch.bfloat16))
    check(lambda t: torch.softmax(t, 1), values((4, 5), torch.int32))  # refused like CPU
    check(lambda t: A._softmax(t, 1, True), values((4, 5), torch.float16))  # half_to_float refused like CPU
    check(lambda t: torch.softmax(t, 2), values((4, 5), torch.float32))
    check(lambda t: A._softmax(t, 1, False, out=torch.empty(4, 5, device=t.device)), values((4, 5), torch.float32))
    check(lambda t: A._softmax(t, 1, False, out=torch.empty(4, 5, dtype=torch.float16, device=t.device)),
          values((4, 5), torch.float32))
    g, y = values((4, 5), torch.float32, seed=1), torch.softmax(values((4, 5), torch.float32), 1)
    check(lambda a, b: A._softmax_backward_data(a, b, 1, torch.float32), g, y)
    check(lambda a, b: A._log_softmax_backward_data(a, b, 0, torch.float32), g, y)
    check(lambda a, b: A._softmax_backward_data(a, b.half(), 1, torch.float32), g, y)
    for layout in LAYOUTS:
        cpu, dev = pair((6, 130), torch.float32, layout)
        check(lambda t: torch.softmax(t, 1), cpu, neuron_args=(dev,))
        check(lambda t: torch.log_softmax(t, 0), cpu, neuron_args=(dev,))
        check(_grad(lambda t: torch.softmax(t, 0)), cpu, neuron_args=(dev,))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape, dim", [((127, 1), 0), ((3, 5, 17), 1)], ids=str)
def test_softmax_backward_sums_in_a_fused_chain_along_other_dims(shape, dim, dtype):
    """Along a dim that is not the last, CPU's _vec_softmax_backward accumulates sum(g * y) as
    ``sum = fma(g, y, sum)`` column after column where its kernels fuse (cpu_host.fused_multiply_add): a product
    beyond float's range stays exact inside the multiply-add, so the sum ends +-inf, never inf - inf = NaN (drawn
    case of the direct _softmax_backward_data spec: 127 NaN on the old device kernel, whose products were rounded
    to fp32 first). Rounding each product separately also moves float32 sums an ulp: the bits must agree."""
    g = values(shape, torch.float32, "unit", seed=4) * 3e38
    y = values(shape, torch.float32, "unit", seed=5).abs() * 3
    g, y = g.to(dtype), y.to(dtype)
    check(lambda a, b: A._softmax_backward_data(a, b, dim, dtype), g, y)
    check(lambda a, b: A._softmax_backward_data(a, b, dim, dtype), values(shape, dtype, seed=6),
          torch.softmax(values(shape, torch.float32, seed=7), dim).to(dtype), tol=(0.0, 0.0))


@pytest.mark.parametrize("shape, dim", [((5, 1, 7), 1), ((40, 1), 1), ((1, 40), 0)], ids=str)
def test_log_softmax_backward_is_one_fused_step(shape, dim):
    """CPU's log_softmax backward forms g - exp(y) * sum(g) with one rounding (vec::fmadd, contracted) where
    its kernels fuse: along a dim of size 1, with g the smallest denormal and exp(y) > 1, the exact result is a negative below half a
    denormal, so CPU writes -0.0 where rounding the product first gives g - g = +0.0 (designed case
    log_softmax_backward_data-float32-denormal-offset-2047: 72 zeros of the wrong sign on the old kernel)."""
    g = torch.full(shape, 1.401298464324817e-45)
    y = values(shape, torch.float32, "unit", seed=8).abs() * 0.3
    check(lambda a, b: A._log_softmax_backward_data(a, b, dim, torch.float32), g, y)


# y values where the float32 exps part ways (engine/expf.py): exp(+-2^-24) is 1 + 2^-23 / 1 - 2^-24 by libm's expf
# and 1.0 / 1 - 2^-24 by SLEEF's expf_u10 and numpy's float32 exp; numpy's is one ULP below both at -2.03e-6;
# libm and SLEEF part at 0.00363, 0.1462, -0.1006, 8.71, -67.25 (ULP figures: engine/expf.py's docstring)
_EXP_PARTS = (2.0 ** -24, -(2.0 ** -24), -2.0265579223632812e-06, 0.003635406494140625, 0.146240234375,
              -0.1005859375, 8.7109375, -67.25, 0.0)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("shape, dim", [((2, 511), 0), ((2, 3, 511), 1), ((2, 64), 0), ((7, 2, 1), 1), ((9, 2), 1)],
                         ids=str)
def test_log_softmax_backward_calls_cpus_exp(shape, dim, dtype):
    """CPU's log_softmax backward is ``g - exp(y) * sum(g)`` with the exp its loop calls on this host: SLEEF's
    expf_u10 in the AVX2/AVX-512 vector loop, libm's expf under DEFAULT and in the scalar tail of a dim that is
    not the last (the last ``inner % Vec::size()`` inner positions: cpu_host.vector_exp, scalar_exp,
    softmax_backward_vector). With g = 1 at index 0 of ``dim`` and 0 elsewhere the sum is 1, so the gradient
    is ``1 - exp(y)`` and ``-exp(y)``, exact in float32: the bits (tol 0, zero signs too) are the exp's. Drawn
    case log_softmax_backward_data-float16-denormal-overlapping-511 under ATEN_CPU_CAPABILITY=default: 2 zeros of
    the wrong sign, the device's numpy exp giving exp(2^-24) = 1.0 where CPU's libm gives 1 + 2^-23."""
    y = torch.tensor(_EXP_PARTS)[torch.arange(math.prod(shape)) % len(_EXP_PARTS)].reshape(shape).to(dtype)
    g = torch.zeros(shape)
    g.select(dim, 0).fill_(1.0)
    check(lambda a, b: A._log_softmax_backward_data(a, b, dim, dtype), g.to(dtype), y, tol=(0.0, 0.0))


def test_log_softmax_backward_exp_over_every_float16():
    """As test_log_softmax_backward_calls_cpus_exp, over every finite float16 value and a tail of 7 (the
    gradient's second row is -exp(y) bit for bit; on the device's former ScalarE exp, numpy's float32 loop,
    17384 of the 63488 values differed natively, 17314 under ATEN_CPU_CAPABILITY=default)."""
    h = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    y = h[torch.isfinite(h)]
    y = torch.cat([y, y[:7]])  # 63488 + 7 positions: a scalar tail of 7 for a vector of any 2^k >= 8 floats
    g = torch.zeros(2, y.numel())
    g[0] = 1
    y = torch.stack([torch.zeros_like(y), y])
    check(lambda a, b: A._log_softmax_backward_data(a, b, 0, torch.float32), g, y, tol=(0.0, 0.0))


def test_softmax_long_rows_stream():
    # rows too long to stay in SBUF take the one-pass running max/sum; whole chunks of -inf first must not
    # turn the running sum into nan
    x = values((5, 20000), torch.float32) * 3
    x[1, :6000] = -INF
    x[2, :] = -INF
    x[3, 15000] = NAN
    x[4, 19999] = 80.0
    for fn in (lambda t: torch.softmax(t, 1), lambda t: torch.log_softmax(t, 1), lambda t: A._safe_softmax(t, 1),
               lambda t: torch.logsumexp(t, 1)):
        check(fn, x)
    check(lambda t: torch.softmax(t, 1), x.bfloat16())
    check(_grad(lambda t: torch.log_softmax(t, 1)), values((2, 20000), torch.float32))


def test_sdpa_math_path_is_native():
    q, k, v = (values((2, 3, 17, 16), torch.float32, seed=s) for s in (1, 2, 3))
    mask = values((17, 17), torch.bool)
    check(F.scaled_dot_product_attention, q, k, v)
    check(lambda a, b, c, m: F.scaled_dot_product_attention(a, b, c, attn_mask=m), q, k, v, mask)
    check(_grad(F.scaled_dot_product_attention), q, k, v)


# --- layer norm -------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, normalized", [((129, 513), (513,)), ((3, 2049), (2049,)), ((2, 5000), (5000,)),
                                               ((4, 3, 5), (3, 5)), ((127, 128), (128,)), ((1, 1), (1,))],
                         ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, normalized, dtype, affine):
    x = values(shape, dtype) * 2 + 1
    w = values(normalized, dtype, seed=1) if affine else None
    b = values(normalized, dtype, seed=2) if affine else None
    # fp32: CPU computes the row moments with a different (Welford/cascade) accumulation
    tol = (1e-5, 1e-5) if dtype == torch.float32 else None
    if shape == (1, 1):  # x - mean is exactly 0; CPU's fused multiply-add leaves the product's rounding residue
        tol = (1.6e-2, 1e-4)
    check(lambda t, *p: A.native_layer_norm(t, normalized, *p, 1e-5), x, w, b, tol=tol)
    if affine:
        check(lambda t, a_, b_: F.layer_norm(t, normalized, a_.float(), b_.float()), x, w, b, tol=tol)  # mixed


@pytest.mark.parametrize("shape, normalized", [((129, 513), (513,)), ((3, 2049), (2049,)), ((2, 5000), (5000,)),
                                               ((4, 3, 5), (3, 5))], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_layer_norm_gradients(shape, normalized, dtype):
    x = values(shape, dtype)
    w, b = values(normalized, dtype, seed=1), values(normalized, dtype, seed=2)
    if dtype == torch.float32:
        # weight gradients sum over the rows in a different order (TensorE ones-matmul vs CPU loops)
        check(_grad(lambda t, a_, b_: F.layer_norm(t, normalized, a_, b_)), x, w, b, tol=sum_tol(shape[0] * 10))
        check(_grad(lambda t: F.layer_norm(t, normalized)), x, tol=(1e-5, 1e-5))
    # bf16/fp16: compare the backward kernel on identical inputs (through autograd the rounded forward
    # outputs differ by an ulp and the gradient amplifies it)
    dy = values(shape, dtype, seed=3)
    axis = x.dim() - len(normalized)
    mean = x.float().mean(tuple(range(axis, x.dim())), keepdim=True)
    rstd = (x.float().var(tuple(range(axis, x.dim())), keepdim=True, correction=0) + 1e-5).rsqrt()
    tol = (2e-2, 2e-2) if dtype == torch.bfloat16 else (2e-3, 2e-3) if dtype == torch.float16 else (1e-5, 1e-5)
    check(lambda g_, t, m, r, a_, b_: A.native_layer_norm_backward(g_, t, normalized, m, r, a_, b_,
                                                                  [True, False, False]),
          dy, x, mean, rstd, w.float(), b.float(), tol=tol)  # x - mean rounded once vs per step on CPU
    if dtype != torch.float32:
        # CPU accumulates dgamma/dbeta of bf16/fp16 inputs in the input dtype (errors of 0.5 here); the
        # engines accumulate in fp32, so these are compared with CPU's float32 computation instead
        args = (dy, x, mean, rstd, w.float(), b.float())
        dev = A.native_layer_norm_backward(*(t.to("neuron") if i < 2 else t.to("neuron") for i, t in
                                             enumerate(args[:2])), normalized, *(t.to("neuron") for t in args[2:]),
                                           [False, True, True])
        ref = A.native_layer_norm_backward(dy.float(), x.float(), normalized, mean, rstd, w.float(), b.float(),
                                           [False, True, True])
        for got, want in zip(dev[1:], ref[1:]):
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=sum_tol(shape[0] * 10)[1])


@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_layer_norm_zero_signs_of_underflowing_products(affine):
    """CPU's layer norm output is fma(fma(x, rstd, -mean * rstd), gamma, beta) where its kernels fuse: a
    product that underflows (gamma denormal) plus beta = 0.0 is -0.0 there, +0.0 when rounded twice (the
    designed case layer_norm-float32-denormal-offset-2047: 59 zeros with the wrong sign). Under
    ATEN_CPU_CAPABILITY=default both round twice."""
    x = values((4, 2047), torch.float32, seed=6)
    w = torch.where(torch.arange(2047) % 3 == 0, 1.4e-45, values((2047,), torch.float32, seed=7))
    b = torch.where(torch.arange(2047) % 2 == 0, 0.0, 1.4e-45)
    args = {"both": (w, b), "weight": (w, None), "none": (None, None)}[affine]
    check(lambda t: F.layer_norm(t, (2047,), *[a.to(t.device) if a is not None else None for a in args]), x,
          tol=(1e-5, 1e-5))


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_layer_norm_statistics_are_cpus_welford(affine):
    """CPU's float32 layer norm takes its statistics from RowwiseMoments (moments.RowwiseMoments: Welford in vector
    lanes, NaN where a lane merge multiplies an overflowing delta * delta by 0) and rstd = 1 / sqrt(var + eps) in
    float: for rows near float's maximum CPU's mean, rstd and output are NaN or its bits where the device's two
    passes gave a finite mean, rstd 0 and the bias. Rows of 1 to 4100 elements (streamed in chunks that split
    Welford's), a transposed input."""
    gen = torch.Generator().manual_seed(0)
    for shape, k in [((4, 7), 1), ((3, 2049), 1), ((2, 3, 1000), 2), ((5, 16), 1), ((2, 8), 1), ((3, 9), 1),
                     ((1, 4100), 1), ((6, 1), 1)]:
        norm = shape[len(shape) - k:]
        for scale in (1.0, 1e19, 2e19, 1e30, 3e38):
            x = torch.randn(shape, generator=gen) * scale
            w = torch.randn(norm, generator=gen) if affine else None
            b = torch.randn(norm, generator=gen) if affine else None
            want = A.native_layer_norm(x, norm, w, b, 1e-5)
            xd = x.to("neuron") if len(shape) < 3 else x.transpose(0, 1).contiguous().to("neuron").transpose(0, 1)
            got = A.native_layer_norm(xd, norm, *(None if t is None else t.to("neuron") for t in (w, b)), 1e-5)
            for g_, e in zip(got, want):
                g_ = g_.cpu()
                assert torch.equal(g_.isnan(), e.isnan()), (shape, scale, g_, e)
                torch.testing.assert_close(g_, e, equal_nan=True, msg=lambda m: f"{shape} {scale}: {m}")
            assert torch.equal(got[1].cpu().nan_to_num(), want[1].nan_to_num())  # the mean: CPU's bits
            assert torch.equal(got[2].cpu().nan_to_num(), want[2].nan_to_num())  # rstd: CPU's bits
    # a constant row near float's maximum (an expanded input; 127 elements: a scalar tail, so a finite rstd):
    # CPU's (x + (-mean)) * rstd is 0 and the output the bias, where x * rstd + (-mean * rstd) was inf - inf
    x = torch.full((1, 1), 2.4830113e38).expand(1, 127)
    w, b = torch.randn(127, generator=gen), torch.randn(127, generator=gen)
    want = F.layer_norm(x, (127,), w, b)
    got = F.layer_norm(x.to("neuron"), (127,), w.to("neuron"), b.to("neuron")).cpu()
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_layer_norm_of_reduced_floats_takes_cpus_welford(dtype):
    """CPU's bfloat16/float16 layer norm takes its statistics from RowwiseMoments too, in float with each
    Vectorized<BFloat16> split into two float vectors merged in turn (moments.RowwiseMoments ``halves``): a row
    shorter than one vector merges empty lanes, so a value whose square overflows float gives rstd NaN (op suite ci
    profile: layer_norm bfloat16 [1, 1] near 4.6e29, NaN on CPU, finite on the device)."""
    gen = torch.Generator().manual_seed(0)
    big = 4.6e29 if dtype == torch.bfloat16 else 3e4
    for shape in [(1, 1), (1, 3), (2, 40), (3, 17), (2, 300)]:
        for scale in (1.0, big):
            x = (torch.randn(shape, generator=gen) * scale).to(dtype)
            if scale > 1 and shape[1] > 1 and dtype == torch.float16:
                continue  # float16 rows of 3e4 overflow float16 outputs differently, a different question
            want = A.native_layer_norm(x, shape[1:], None, None, 1e-5)
            got = A.native_layer_norm(x.to("neuron"), shape[1:], None, None, 1e-5)
            for g_, e in zip(got[1:], want[1:]):  # mean and rstd
                g_ = g_.cpu()
                assert torch.equal(g_.isnan(), e.isnan()), (shape, scale, g_, e)
                torch.testing.assert_close(g_, e, equal_nan=True)


@pytest.mark.parametrize("rows", [1, 2, 8])
def test_layer_norm_weight_gradient_of_huge_rows_is_cpus(rows):
    """CPU's layer-norm backward forms the weight gradient's x_hat as rstd * x + (-rstd * mean), fused on AVX2/AVX-512:
    for a constant row near float's maximum -rstd * mean is -inf, so each row adds dy * -inf and rows whose dy
    differ in sign give NaN (one row: +-inf, no NaN); the device's x * rstd + shift rounded the product first
    (inf - inf: NaN everywhere; op suite ci profile: layer_norm gradient[1], NaN at 127 positions on the device,
    0 on CPU)."""
    gen = torch.Generator().manual_seed(0)
    for n in (16, 127):
        x = torch.full((rows, n), 2.4830113e38)
        w, b, dy = torch.randn(n, generator=gen), torch.randn(n, generator=gen), torch.randn(rows, n, generator=gen)
        _, mean, rstd = A.native_layer_norm(x, (n,), w, b, 1e-5)
        want = A.native_layer_norm_backward(dy, x, (n,), mean, rstd, w, b, [True, True, True])
        got = A.native_layer_norm_backward(*(t.to("neuron") for t in (dy, x)), (n,),
                                           *(t.to("neuron") for t in (mean, rstd, w, b)), [True, True, True])
        for g_, e in zip(got, want):
            g_ = g_.cpu()
            assert torch.equal(g_.isnan(), e.isnan()) and torch.equal(g_.isinf(), e.isinf()), (n, g_, e)
            torch.testing.assert_close(g_, e, equal_nan=True)


def test_layer_norm_variants_and_errors():
    x = values((4, 3, 5), torch.float32)
    w = values((5,), torch.float32)
    check(lambda t, a_: A.native_layer_norm(t, [6], a_, None, 1e-5), x, w)
    check(lambda t, a_: A.native_layer_norm(t, [5], a_[:4], None, 1e-5), x, w)
    check(lambda t: A.native_layer_norm(t, [], None, None, 1e-5), x)
    check(lambda t: A.native_layer_norm(t.int(), [5], None, None, 1e-5), x)
    check(lambda t, a_: A.native_layer_norm(t.bfloat16(), [5], a_, None, 1e-5), x, w)
    check(lambda t, a_: A.native_layer_norm(t, [5], a_.bfloat16(), None, 1e-5), x, w)
    check(lambda t, a_: A.native_layer_norm(t[:0], [5], a_, None, 1e-5), x, w)
    check(lambda t: A.native_layer_norm(t[:, :, :0], [0], None, None, 1e-5), x)
    check(lambda t: F.layer_norm(t, (5,)), values((3, 5), torch.float32, "special"))
    for layout in LAYOUTS:
        cpu, dev = pair((6, 130), torch.float32, layout)
        # expanded rows are constant: x - mean is exactly 0 and CPU's fused multiply-add leaves a residue
        tol = (1e-5, 1e-4) if layout == "expanded" else (1e-5, 1e-5)
        check(lambda t: F.layer_norm(t, (130,)), cpu, neuron_args=(dev,), tol=tol)
        if layout != "expanded":  # 0 * (1 / sqrt(eps)) gradients of a constant row amplify the residue
            check(_grad(lambda t: F.layer_norm(t, (130,))), cpu, neuron_args=(dev,), tol=(1e-5, 1e-5))
    mean, rstd = x.mean(-1, keepdim=True), x.var(-1, keepdim=True).rsqrt()
    check(lambda g_, t, m, r, a_: A.native_layer_norm_backward(g_, t, [5], m, r, a_, None, [True, False, False]),
          x, x, mean, rstd, w)
    check(lambda g_, t, m, r, a_: A.native_layer_norm_backward(g_, t, [5], m, r, a_, None, [True, True, True]),
          x, x, mean, rstd, w)
    check(lambda g_, t, m, r: A.native_layer_norm_backward(g_, t, [5], m, r, None, None, [False, True, False]),
          x, x, mean, rstd)


# --- group norm -------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["sliced", "transposed", "channels_last"])
def test_native_group_norm_input_layouts_follow_cpu(layout):
    """CPU's native_group_norm requires its input dense in its suggested memory format (F.group_norm passes a
    contiguous one; a direct call may not): a strided input is its RuntimeError, a channels_last one computes."""
    base = values((2, 4, 6, 6), torch.float32)
    make = {"sliced": lambda t: t[:, :, :, ::2], "transposed": lambda t: t.transpose(2, 3),
            "channels_last": lambda t: t.contiguous(memory_format=torch.channels_last)}[layout]
    results = []
    for device in ("cpu", "neuron"):
        x = make(base.to(device))
        hw = x.shape[2] * x.shape[3]
        try:
            results.append(A.native_group_norm(x, None, None, 2, 4, hw, 2, 1e-5)[0].cpu())
        except RuntimeError as error:
            results.append(type(error))
    assert (results[0] is RuntimeError) == (layout != "channels_last")
    if layout == "channels_last":
        torch.testing.assert_close(results[1], results[0], rtol=1e-5, atol=1e-5)
    else:
        assert results[1] is RuntimeError


@pytest.mark.parametrize("shape, groups", [((2, 6, 129), 3), ((3, 4, 8, 8), 2), ((2, 32, 5), 32), ((1, 3, 2049), 1),
                                           ((5, 4), 2), ((129, 2, 3), 1)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_group_norm(shape, groups, dtype):
    x = values(shape, dtype) + 0.5
    c = shape[1]
    w, b = values((c,), dtype, seed=1), values((c,), dtype, seed=2)
    tol = (1e-5, 1e-5) if dtype == torch.float32 else None  # moments: Welford (CPU) vs two-pass
    check(lambda t, a_, b_: F.group_norm(t, groups, a_, b_), x, w, b, tol=tol)
    check(lambda t: F.group_norm(t, groups), x, tol=tol)
    hw = math.prod(shape[2:])
    check(lambda t, a_: A.native_group_norm(t, a_.float(), None, shape[0], c, hw, groups, 1e-5), x, w, tol=tol)
    if dtype == torch.float32:
        check(_grad(lambda t, a_, b_: F.group_norm(t, groups, a_, b_)), x, w, b, tol=sum_tol(x.numel()))
        check(_grad(lambda t: F.group_norm(t, groups)), x, tol=(1e-5, 1e-5))
    else:  # the backward kernel on identical inputs (see test_layer_norm_gradients)
        dy = values(shape, dtype, seed=3)
        xs = x.float().reshape(shape[0], groups, -1)
        mean, rstd = xs.mean(-1), (xs.var(-1, correction=0) + 1e-5).rsqrt()
        tol = (2e-2, 2e-2) if dtype == torch.bfloat16 else (2e-3, 2e-3)
        check(lambda g_, t, m, r, a_: A.native_group_norm_backward(g_, t, m, r, a_, shape[0], c, hw, groups,
                                                                   [True, False, False]), dy, x, mean, rstd,
              w.float(), tol=tol)


@pytest.mark.parametrize("affine", [False, True], ids=["plain", "affine"])
def test_group_norm_statistics_are_cpus_welford(affine):
    """CPU's contiguous float32 group norm takes its statistics from RowwiseMoments (Welford in Vectorized<float>
    lanes, cascade merges, a scalar tail: moments.RowwiseMoments), whose lane merges multiply an overflowing
    delta * delta by 0 (NaN) for groups without a scalar tail; the device's two passes gave a finite mean and an
    infinite variance there (output = bias), and a weight near float's maximum made CPU's fused scale * x + bias
    finite where the device's rounded product was infinite (op suite ci profile: group_norm float32 [1, 2]
    near_overflow weight). Mean, rstd and output: CPU's bits, NaN and infinities, groups of 1 to 1000 elements."""
    gen = torch.Generator().manual_seed(0)
    for (n, c, spatial, groups) in [(1, 2, (), 1), (2, 6, (5,), 2), (3, 4, (3, 4), 4), (1, 1, (300,), 1),
                                    (2, 16, (17,), 2), (1, 3, (), 1), (1, 9, (), 1), (1, 3, (1000,), 1)]:
        hw = math.prod(spatial)
        for scale in (1.0, 1e19, 2e19, 1e30, 3e38):
            x = torch.randn((n, c) + spatial, generator=gen) * scale
            w = torch.randn(c, generator=gen) * (3e38 if scale == 1.0 else 1.0) if affine else None
            b = torch.randn(c, generator=gen) if affine else None
            want = A.native_group_norm(x, w, b, n, c, hw, groups, 1e-5)
            dev = [None if t is None else t.to("neuron") for t in (x, w, b)]
            got = A.native_group_norm(*dev, n, c, hw, groups, 1e-5)
            for g_, e in zip(got, want):
                assert torch.equal(g_.cpu().view(torch.int32), e.view(torch.int32)) or \
                    torch.equal(g_.cpu().nan_to_num(), e.nan_to_num()) and torch.equal(g_.cpu().isnan(), e.isnan()), \
                    ((n, c, spatial, groups, scale), g_.cpu(), e)


def test_group_norm_variants_and_errors():
    x = values((2, 6, 5), torch.float32)
    w = values((6,), torch.float32)
    check(lambda t: F.group_norm(t, 4), x)
    check(lambda t, a_: F.group_norm(t, 3, a_[:5]), x, w)
    check(lambda t: A.native_group_norm(t.int(), None, None, 2, 6, 5, 3, 1e-5), x)
    check(lambda t, a_: A.native_group_norm(t, a_.bfloat16(), None, 2, 6, 5, 3, 1e-5), x, w)
    check(lambda t: A.native_group_norm(t[:0], None, None, 0, 6, 5, 3, 1e-5), x)
    mean, rstd = x.reshape(2, 3, -1).mean(-1), x.reshape(2, 3, -1).var(-1).rsqrt()
    check(lambda g_, t, m, r: A.native_group_norm_backward(g_, t, m, r, None, 2, 6, 5, 3, [True, True, True]),
          x, x, mean, rstd)
    check(lambda g_, t, m, r, a_: A.native_group_norm_backward(g_, t, m, r, a_, 2, 6, 5, 3, [False, True, True]),
          x, x, mean, rstd, w)
    for layout in ("transposed", "sliced", "offset"):
        cpu, dev = pair((4, 6, 9), torch.float32, layout)
        check(lambda t: F.group_norm(t, 3), cpu, neuron_args=(dev,), tol=(1e-5, 1e-5))
        check(_grad(lambda t: F.group_norm(t, 2)), cpu, neuron_args=(dev,), tol=(1e-5, 1e-5))


# --- batch norm -------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(4, 3, 5), (2, 129, 7), (16, 8, 16, 16), (3, 5), (2, 2, 2049)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_batch_norm(shape, dtype):
    x = values(shape, dtype) * 2 + 0.5
    c = shape[1]
    w, b = values((c,), dtype, seed=1), values((c,), dtype, seed=2)
    rm, rv = values((c,), dtype, seed=3), values((c,), dtype, "positive", seed=4)
    # fp32: CPU accumulates the moments in double. bf16/fp16: the moments' float sums are order-dependent
    # (bit identity on order-free inputs: test_batch_norm_reduced_precision_is_bit_identical_to_cpu)
    tol = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 8e-3), torch.float16: (1e-3, 1e-3)}[dtype]

    def train(t, a_, b_, m, v):
        out = F.batch_norm(t, m, v, a_, b_, training=True, momentum=0.3)
        return out, m, v  # the running statistics are updated in place

    check(train, x, w, b, rm, rv, tol=tol)
    check(lambda t, a_, b_, m, v: F.batch_norm(t, m, v, a_, b_, training=False), x, w, b, rm, rv, tol=tol)
    check(lambda t: F.batch_norm(t, None, None, training=True), x, tol=tol)
    check(lambda t, m, v: A._native_batch_norm_legit(t, None, None, m, v, True, 0.1, 1e-5) + (m, v), x, rm, rv,
          tol=tol)
    check(lambda t, m, v: A._native_batch_norm_legit_no_training(t, None, None, m, v, 0.1, 1e-5), x, rm, rv, tol=tol)
    check(lambda t: A._native_batch_norm_legit.no_stats(t, None, None, True, 0.1, 1e-5), x, tol=tol)
    if dtype != torch.float32:  # mixed: fp32 parameters and statistics with a reduced-precision input
        check(train, x, w.float(), b.float(), rm.float(), rv.float())
    if dtype == torch.float32:
        check(_grad(lambda t, a_, b_: F.batch_norm(t, None, None, a_, b_, training=True)), x, w, b,
              tol=sum_tol(x.numel()))
        check(_grad(lambda t, a_, b_, m, v: F.batch_norm(t, m, v, a_, b_, training=False), 0, 1, 2), x, w, b, rm, rv,
              tol=sum_tol(x.numel()))
    else:  # the backward kernel on identical inputs (see test_layer_norm_gradients)
        dy = values(shape, dtype, seed=5)
        dims = [0] + list(range(2, len(shape)))
        mean, inv = x.float().mean(dims), (x.float().var(dims, correction=0) + 1e-5).rsqrt()
        tol = (2e-2, 2e-2) if dtype == torch.bfloat16 else (2e-3, 2e-3)
        check(lambda g_, t, a_, m, i: A.native_batch_norm_backward(g_, t, a_, None, None, m, i, True, 1e-5,
                                                                   [True, True, True]), dy, x, w.float(), mean, inv,
              tol=tol)
        check(lambda g_, t, a_, m, v: A.native_batch_norm_backward(g_, t, a_, m, v, None, None, False, 1e-5,
                                                                   [True, True, True]), dy, x, w.float(), rm.float(),
              rv.float(), tol=tol)


@pytest.mark.parametrize("layout", ["contiguous", "sliced", "channels_last"])
def test_batch_norm_statistics_of_huge_values_follow_cpu(layout):
    """CPU's float32 batch-norm statistics accumulate in double (acc_type): contiguous (N, C, HW) inputs sum x
    in double (a channel of values near 3e38 has a finite mean, not the inf/NaN of an fp32 sum) but store the
    sum of squared deviations as float (inf: invstd 0, the output is the bias); strided inputs keep var_sum / n
    in double, so a channel of |x| ~ 1e29 has a finite invstd (the op suite's batch_norm case: 2 elements,
    the device returned the bias, CPU the normalised values). Found by the designed near_overflow cases."""
    # (the strided mean is at::mean and channels last sums in float, as the engines do: near 3e38 which partial
    # sum overflows first is order-dependent there, so those layouts take only the 1e29 case)
    for seed, scale in ((0, 3e38), (1, 1e29)) if layout == "contiguous" else ((1, 1e29),):
        x = values((3, 4, 3, 4), torch.float32, "unit", seed=seed) * scale
        w, b = values((4,), torch.float32, seed=2), values((4,), torch.float32, seed=3)
        if layout == "sliced":
            base = values((3, 4, 3, 8), torch.float32, "unit", seed=seed) * scale
            cpu, dev = base[..., ::2], base.to("neuron")[..., ::2]
        elif layout == "channels_last":
            cpu = x.contiguous(memory_format=torch.channels_last)
            dev = cpu.to("neuron")
        else:
            cpu, dev = x, x.to("neuron")
        check(lambda t, w_, b_: A._native_batch_norm_legit(t, w_, b_, True, 0.1, 1e-5), cpu, w, b,
              neuron_args=(dev, w.to("neuron"), b.to("neuron")))
        # without weight and bias an output of exactly 0 (invstd 0) takes its sign from x * 0 + (0 - mean * 0),
        # whose last operation differs from CPU's (the op spec's _BN_ZERO)
        check(lambda t: A._native_batch_norm_legit(t, None, None, True, 0.1, 1e-5), cpu, neuron_args=(dev,),
              zero_sign=False)


def test_batch_norm_output_is_fused_multiply_add_as_cpu():
    """CPU's contiguous float32 batch norm applies x * alpha + beta with vec::fmadd where its kernels fuse: with
    x * alpha beyond float's range and beta = -inf the output is -inf; rounding the product first gives
    inf - inf = NaN (designed case batch_norm_legit-float32-near_overflow). Under ATEN_CPU_CAPABILITY=default
    CPU rounds twice and the device follows (cpu_host.fused_multiply_add)."""
    x = values((3, 3, 3, 4), torch.float32, "unit", seed=5) * 3e38
    rm = torch.tensor([2.5798e+38, -1e38, 3.0]);  rv = torch.tensor([2.2441e+38, 1e30, 1.0])
    w = torch.tensor([2.1423e+38, 3e38, 1.0]); b = torch.tensor([2.1194e+38, -3e38, 0.5])
    check(lambda t, w_, b_, m, v: A._native_batch_norm_legit_no_training(t, w_, b_, m, v, 0.1, 1e-5)[0],
          x, w, b, rm, rv)


def _bn_exact_input(shape, dtype, layout, seed):
    """(cpu, neuron) inputs whose statistics every summation order gets exactly: per channel an offset on a 1/4 grid
    plus deviations +-d (d on a 1/4 grid) that cancel in pairs, so every sum CPU and the device form is exact."""
    g = torch.Generator().manual_seed(seed)
    c, n = shape[1], math.prod(shape) // shape[1]
    half = torch.randint(-8, 9, (c, n // 2), generator=g).float() / 4
    d = torch.cat([half, -half] + ([torch.zeros(c, 1)] if n % 2 else []), 1)
    d = torch.stack([row[torch.randperm(n, generator=g)] for row in d])
    vals = d + torch.randint(-120, 121, (c, 1), generator=g).float() / 4
    base = vals.reshape([c, shape[0], *shape[2:]]).transpose(0, 1).contiguous().to(dtype)
    if layout == "strided":
        big = torch.stack([base, base], -1)
        return big[..., 0], big.to("neuron")[..., 0]
    if layout == "channels_last":
        base = base.contiguous(memory_format=torch.channels_last if len(shape) == 4 else torch.channels_last_3d)
    return base, base.to("neuron")


@pytest.mark.parametrize("mixed", [False, True], ids=["same_dtype", "fp32_params"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_batch_norm_reduced_precision_is_bit_identical_to_cpu(dtype, mixed):
    """bf16/fp16 batch norm follows CPU's roundings bit for bit (OpInfo's first native_batch_norm sample was off by
    14 bf16 ULPs where x * alpha and beta cancel: the device normalised with the unrounded fp32 statistics). CPU:
    alpha = float(invstd * w), beta = float(b - float(mean * alpha)) from the statistics rounded to the parameter
    dtype, out = x * alpha + beta fused and rounded once (contiguous / channels last), or ((x - mean) * invstd) * w + b
    each step rounded to the parameter dtype (strided); running statistics and eval invstd per _bn_reduced_params.
    The statistics' float sums are order-dependent on CPU (vector lanes, threads), so the inputs make them exact."""
    for shape in [(5, 5, 5), (4, 3, 40), (3, 5), (2, 3, 4, 5), (2, 40, 3, 3), (2, 3, 2, 3, 4)]:
        for layout in ["contiguous", "strided"] + (["channels_last"] if len(shape) > 3 else []):
            for affine, training, seed in itertools.product((True, False), (True, False), range(3)):
                x, xd = _bn_exact_input(shape, dtype, layout, seed)
                c, pdt = shape[1], torch.float32 if mixed else dtype
                g = torch.Generator().manual_seed(100 + seed)
                w = (torch.randn(c, generator=g) * 2).to(dtype).to(pdt) if affine else None
                b = (torch.randn(c, generator=g) * 20).to(dtype).to(pdt) if affine else None
                rm = (torch.randn(c, generator=g) * 20).to(dtype).to(pdt)
                rv = (torch.rand(c, generator=g) * 3 + 0.01).to(dtype).to(pdt)
                dev = [t.to("neuron") if t is not None else None for t in (w, b, rm, rv)]
                cpu_args = (x, w, b, rm.clone(), rv.clone())
                expected = A.native_batch_norm(*cpu_args, training, 0.3, 1e-3) + cpu_args[3:]
                got = A.native_batch_norm(xd, *dev, training, 0.3, 1e-3) + tuple(dev[2:])
                for name, e, a in zip(("out", "save_mean", "save_invstd", "running_mean", "running_var"),
                                      expected, got):
                    where = (shape, layout, affine, training, seed, name)
                    if layout == "strided" and not training and mixed:
                        # CPU's strided eval invstd is 1 / at::sqrt(running_var + eps) on the fp32 tensor, and its
                        # vectorized sqrt is not correctly rounded (1 fp32 ulp off for some values on this host):
                        # the output may then round to the neighbouring bf16/fp16 value
                        torch.testing.assert_close(a.cpu(), e, rtol=2 ** -7 if dtype == torch.bfloat16 else 2 ** -10,
                                                   atol=0, msg=str(where))
                    else:
                        assert torch.equal(a.cpu(), e), where


def test_batch_norm_opinfo_bfloat16_sample_is_bit_identical():
    from torch.testing._internal.common_methods_invocations import op_db

    op = next(o for o in op_db if o.name == "native_batch_norm")
    s = next(iter(op.sample_inputs("cpu", torch.bfloat16)))
    x, w, b, rm, rv, tr, mom, eps = s.input, *s.args
    cpu = A.native_batch_norm(x, w, b, rm.clone(), rv.clone(), tr, mom, eps)
    dev = A.native_batch_norm(*[t.to("neuron") for t in (x, w, b, rm, rv)], tr, mom, eps)
    for e, a in zip(cpu, dev):
        assert torch.equal(a.cpu(), e)


def test_batch_norm_variants_and_errors():
    x = values((4, 3, 5), torch.float32)
    rm, rv = values((3,), torch.float32), values((3,), torch.float32, "positive")
    check(lambda t, m, v: A.native_batch_norm(t[:0], None, None, m, v, True, 0.1, 1e-5), x, rm, rv)
    check(lambda t: A.native_batch_norm(t.int(), None, None, None, None, True, 0.1, 1e-5), x)
    check(lambda t: A.native_batch_norm(t[0, 0], None, None, None, None, True, 0.1, 1e-5), x)
    check(lambda t: A.native_batch_norm(t[0], None, None, None, None, True, 0.1, 1e-5), x)
    check(lambda t, m, v: A.native_batch_norm(t[:1, :, :1], None, None, m, v, True, 0.1, 1e-5) + (m, v), x, rm, rv)
    check(lambda t: A.native_batch_norm(t, None, None, None, None, True, 0.1, 1e-5,
                                        out=torch.empty(0, device=t.device), save_mean=torch.empty(0, device=t.device),
                                        save_invstd=torch.empty(0, device=t.device)), x)
    check(lambda g_, t, m, v: A.native_batch_norm_backward(g_, t, None, m, v, None, None, False, 1e-5,
                                                           [True, True, True]), x, x, rm, rv)
    check(lambda t: F.batch_norm(t, None, None, training=True), values((4, 3, 5), torch.float32, "special"))
    for layout in LAYOUTS:
        cpu, dev = pair((6, 4, 9), torch.float32, layout)
        check(lambda t: F.batch_norm(t, None, None, training=True), cpu, neuron_args=(dev,), tol=(1e-5, 1e-5))
        if layout != "expanded":  # constant channels: (x - mean) is exactly 0, CPU's residue gets amplified
            check(_grad(lambda t: F.batch_norm(t, None, None, training=True)), cpu, neuron_args=(dev,),
                  tol=(1e-5, 1e-5))
    cl = values((2, 3, 4, 5), torch.float32).to(memory_format=torch.channels_last)
    check(lambda t: F.batch_norm(t, None, None, training=True), cl, tol=(1e-5, 1e-5))


# --- losses -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss(dtype, reduction):
    x, y = values((129, 33), dtype, seed=1), values((129, 33), dtype, seed=2)
    tol = sum_tol(x.numel(), dtype)
    if dtype == torch.float16:  # CPU's Half kernel rounds x - y to fp16 before squaring; neuron rounds once
        tol = (2e-3, tol[1])
    check(lambda a_, b_: F.mse_loss(a_, b_, reduction=reduction), x, y, tol=tol)
    check(_grad(lambda a_, b_: F.mse_loss(a_, b_, reduction=reduction), 0), x, y, tol=tol)


def test_mse_loss_variants():
    x = values((4, 3, 5), torch.float32)
    check(lambda a_, b_: A.mse_loss(a_, b_), x, x.bfloat16())
    check(lambda a_, b_: A.mse_loss(a_, b_[0], 0), x, x)  # broadcast target
    check(lambda a_, b_: A.mse_loss(a_, b_), x.int(), x.int())
    check(lambda a_, b_: A.mse_loss(a_[:0], b_[:0], 1), x, x)
    check(lambda a_, b_: A.mse_loss(a_[:0], b_[:0], 2), x, x)
    check(lambda g_, a_, b_: A.mse_loss_backward(g_, a_, b_, 1), values((), torch.float32), x, x[0])
    check(lambda a_, b_: A.mse_loss(a_, b_, 1, out=torch.empty((), device=a_.device)), x, x * 2)
    cpu, dev = pair((6, 130), torch.float32, "transposed")
    y = values((6, 130), torch.float32, seed=4)
    check(lambda a_, b_: F.mse_loss(a_, b_), cpu, y, neuron_args=(dev, y.to("neuron")))


def _targets(n, c, ignore=None, seed=0, shape=None):
    t = torch.randint(0, c, shape or (n,), generator=torch.Generator().manual_seed(seed))
    if ignore is not None:
        t.view(-1)[::3] = ignore
    return t


@pytest.mark.parametrize("n, c", [(5, 7), (129, 513), (3, 2049), (1, 1)], ids=str)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_cross_entropy(n, c, reduction, dtype):
    x = values((n, c), dtype) * 2
    t = _targets(n, c)
    w = values((c,), dtype, "positive", seed=5)
    # log_softmax: CPU rounds its intermediates to bf16/fp16 (see test_softmax_forward)
    tol = {torch.bfloat16: (1.6e-2, 3e-2), torch.float16: (1e-3, 4e-3)}.get(dtype, sum_tol(n * 10))
    check(lambda a_, b_: F.cross_entropy(a_, b_, reduction=reduction), x, t, tol=tol)
    check(lambda a_, b_, c_: F.cross_entropy(a_, b_, weight=c_, reduction=reduction, ignore_index=1), x, t, w, tol=tol)
    if dtype == torch.float32:
        check(_grad(lambda a_, b_: F.cross_entropy(a_, b_, reduction=reduction), 0), x, t, tol=tol)
        check(_grad(lambda a_, b_, c_: F.cross_entropy(a_, b_, weight=c_, reduction=reduction, ignore_index=2), 0),
              x, t, w, tol=tol)
    else:  # nll_loss's own kernels on identical log-probabilities
        lp = torch.log_softmax(x.float(), 1).to(dtype)
        check(lambda a_, b_, c_: F.nll_loss(a_, b_, weight=c_, reduction=reduction), lp, t, w, tol=sum_tol(n, dtype))
        check(_grad(lambda a_, b_: F.nll_loss(a_, b_, reduction=reduction), 0), lp, t, tol=sum_tol(n, dtype))


def test_nll_loss_variants_and_errors():
    lp = torch.log_softmax(values((6, 4), torch.float32), 1)
    t = _targets(6, 4, ignore=-100)
    check(lambda a_, b_: F.nll_loss(a_, b_), lp, t)  # some targets ignored
    check(lambda a_, b_: F.nll_loss(a_, b_, ignore_index=0), lp, _targets(6, 4, ignore=0))
    check(lambda a_, b_: F.nll_loss(a_, b_), lp, torch.full((6,), -100))  # every target ignored: nan
    check(lambda a_, b_: F.nll_loss(a_, b_, reduction="sum"), lp, torch.full((6,), -100))
    check(lambda a_, b_: F.nll_loss(a_, b_), lp, torch.tensor([0, 5, 1, 1, 2, 3]))  # out of range: IndexError
    check(lambda a_, b_: F.nll_loss(a_, b_), lp, torch.tensor([0, -1, 1, 1, 2, 3]))
    check(lambda a_, b_: A.nll_loss_forward(a_, b_, None, 1, -100), lp, t.int())
    check(lambda a_, b_: A.nll_loss_forward(a_, b_, None, 1, -100), lp, t.to(torch.uint8).clamp(max=3))
    check(lambda a_, b_: A.nll_loss_forward(a_[0], b_[0], None, 1, -100), lp, t.clamp(min=0))  # no batch dim
    check(lambda a_, b_: A.nll_loss_forward(a_[0], b_[0], None, 0, -100), lp, t.clamp(min=0))
    check(lambda a_, b_: A.nll_loss_forward(a_[:0], b_[:0], None, 1, -100), lp, t)
    check(lambda a_, b_: A.nll_loss_forward(a_[:0], b_[:0], None, 2, -100), lp, t)
    check(lambda a_, b_: A.nll_loss_forward(a_[:5], b_, None, 1, -100), lp, t)
    check(lambda a_, b_, c_: A.nll_loss_forward(a_, b_, c_[:3], 1, -100), lp, t, values((4,), torch.float32))
    check(lambda a_, b_: F.cross_entropy(a_, b_, label_smoothing=0.1), values((6, 4), torch.float32), t.clamp(min=0))
    check(lambda a_, b_: F.cross_entropy(a_, b_), values((6, 4), torch.float32), torch.softmax(lp, 1))  # soft targets
    for layout in ("transposed", "sliced", "offset"):
        cpu, dev = pair((6, 130), torch.float32, layout)
        tt = _targets(6, 130, seed=3)
        check(lambda a_, b_: F.cross_entropy(a_, b_), cpu, tt, neuron_args=(dev, tt.to("neuron")))
        check(_grad(lambda a_, b_: F.cross_entropy(a_, b_), 0), cpu, tt, neuron_args=(dev, tt.to("neuron")))


def test_nll_loss_reads_weight_grad_and_total_weight_in_the_inputs_dtype():
    """CPU's nll_loss kernels read weight, grad_output and a reduction's total_weight as the input's dtype: a float32
    one beside a bfloat16 input is its RuntimeError ("expected scalar type BFloat16 but found Float"); reduction
    none never reads total_weight."""
    lp, t = torch.log_softmax(values((6, 4), torch.float32), 1).bfloat16(), _targets(6, 4, ignore=-100).clamp(min=0)
    one, w = torch.tensor(1.0, dtype=torch.bfloat16), torch.ones(4, dtype=torch.bfloat16)
    check(lambda a_, b_, c_: A.nll_loss_forward(a_, b_, c_, 1, -100), lp, t, w.float())
    check(lambda a_, b_, c_: A.nll_loss2d_forward(a_, b_, c_, 1, -100), lp[None, :, :, None].transpose(0, 1).
          reshape(1, 6, 4, 1).transpose(1, 2).contiguous(), t.reshape(1, 6, 1).clamp(max=3), w.float())
    for red, g, c, tw in ((1, one, None, torch.tensor(6.0)), (2, one.float(), None, torch.tensor(6.0).bfloat16()),
                          (0, torch.ones(6), None, torch.tensor(6.0)), (0, torch.ones(6).bfloat16(), w.float(), None),
                          (0, torch.ones(6).bfloat16(), None, torch.tensor(6.0))):
        check(lambda a_, b_, g_, tw_: A.nll_loss_backward(g_, a_, b_, None if c is None else c.to(a_.device), red,
                                                          -100, tw_), lp, t, g, tw if tw is not None else one)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss2d_and_spatial_cross_entropy(reduction):
    x = values((2, 5, 4, 3), torch.float32)
    t = _targets(0, 5, ignore=-100, shape=(2, 4, 3))
    w = values((5,), torch.float32, "positive", seed=2)
    check(lambda a_, b_: F.cross_entropy(a_, b_, reduction=reduction), x, t)
    check(_grad(lambda a_, b_, c_: F.cross_entropy(a_, b_, weight=c_, reduction=reduction), 0), x, t, w)
    lp = torch.log_softmax(x, 1)
    check(lambda a_, b_: A.nll_loss2d_forward(a_, b_, None, 1, -100), lp, t)
    check(lambda a_, b_: A.nll_loss2d_forward(a_[0], b_[0], None, 1, -100), lp, t)  # 3-D input refused
    check(lambda a_, b_: A.nll_loss2d_forward(a_, b_[:, :3], None, 1, -100), lp, t)  # size mismatch


# --- constant rows: exact moments ---------------------------------------------------------------------
# sum / n of a constant row carries the sum's rounding (1.7 x 1000 / 1000 = 1.7000003); rstd = 1/sqrt(eps)
# amplifies that into outputs ~1e-4 away from the bias. CPU's moments are exact there, and so the device's.

CONSTANTS = (0.3, 1.7, -123.456, 3.14159)


@pytest.mark.parametrize("c", CONSTANTS)
@pytest.mark.parametrize("n", (7, 1000, 4099, 70000))
def test_constant_rows_normalise_to_exactly_the_bias(c, n):
    x = torch.full((1, n), c).expand(3, n)  # one value expanded, as a broadcast activation
    w, b = values((n,), torch.float32, seed=1), values((n,), torch.float32, seed=2)
    out = check(lambda x, w, b: A.native_layer_norm(x, [n], w, b, 1e-5), x, w, b, tol=(0.0, 0.0))
    assert torch.equal(out[0].cpu(), b.expand(3, n)) and torch.equal(out[1].cpu(), torch.full((3, 1), c))
    check(lambda x: F.group_norm(x.reshape(3, 1, n), 1), x, tol=(0.0, 0.0))
    for dim in (1, None):  # CPU's full reduction of a constant is not exact (std up to ~5e-5); the device's is
        check(lambda x: torch.var(x, dim), x, tol=(0.0, 0.0) if dim else (0.0, 1e-4))
        check(lambda x: torch.std(x, dim), x, tol=(0.0, 0.0) if dim else (0.0, 1e-4))
        check(lambda x: torch.var_mean(x, dim)[1], x, tol=(0.0, 0.0))


@pytest.mark.parametrize("c", CONSTANTS)
def test_constant_channels_batch_norm_statistics_are_cpus(c):
    """CPU's batch_norm of an (N, C) input (its channels-last statistics kernel) sums a channel in float, per
    thread run of rows when N exceeds the thread count (1.7 x 1000 gives mean 1.7000078, so constant channels
    normalise to ~2e-3 instead of 0): the device's statistics are CPU's, bit for bit (they were exact, and so
    differed from CPU's, before the kernel followed CPU's collect_stats; see _bn_stats_channels_last)."""
    x = torch.full((1000, 3), c)
    w, b = values((3,), torch.float32, seed=1), values((3,), torch.float32, seed=2)
    want = A.native_batch_norm(x, w, b, torch.zeros(3), torch.ones(3), True, 1.0, 1e-5)
    dev = [t.to("neuron") for t in (x, w, b, torch.zeros(3), torch.ones(3))]
    got = A.native_batch_norm(*dev, True, 1.0, 1e-5)
    assert torch.equal(got[1].cpu(), want[1]) and torch.equal(got[2].cpu(), want[2]), (got[1:], want[1:])
    torch.testing.assert_close(got[0].cpu(), want[0])


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "channels_last", "matrix"])
def test_batch_norm_statistics_and_gradients_near_overflow_follow_cpus_order(layout):
    """Values near float's maximum, where each result's infinity or NaN is the summation order's: CPU's training
    statistics of an (N, C) / channels-last input are per-thread float sums added in double (finite where one float
    sum is not: _native_batch_norm_legit [3, 2] near_overflow, save_mean), and its eval-mode weight gradient
    sum((x - mean) * dy) is formed per image by the vector reductions (contiguous: batch_norm [2, 1, 5]
    near_overflow, gradient[1]), per thread with fused multiply-adds (channels last), or in double (the generic
    loop: a transposed input, _native_batch_norm_legit_no_training [3, 2], gradient[1]); the device's engine sums
    gave other infinities and NaNs. Op suite ci profile."""
    gen = torch.Generator().manual_seed(0)
    shapes = {"contiguous": [(2, 1, 5), (4, 3, 7), (2, 3, 9), (2, 2, 20)], "transposed": [(3, 2), (4, 3, 7)],
              "channels_last": [(5, 4, 2, 3), (3, 2, 1, 1)], "matrix": [(3, 2), (300, 2), (2, 1)]}[layout]
    for shape in shapes:
        def draw():
            sign = torch.where(torch.rand(shape, generator=gen) > 0.4, 1.0, -1.0)
            return (torch.rand(shape, generator=gen) * 0.5 + 0.5) * 3.4e38 * sign

        x, dy = draw(), draw()
        c = shape[1]
        w, rm, rv = torch.randn(c, generator=gen), torch.randn(c, generator=gen), torch.rand(c, generator=gen) + 0.5

        def place(t, dev):
            t = t.to(dev)
            if layout == "transposed":
                return t.transpose(0, -1).contiguous().transpose(0, -1)
            return t.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else t

        def same(got, want, what):
            got = got.cpu()
            assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf()) and \
                torch.equal(got[got.isinf()], want[want.isinf()]), (shape, what, got, want)

        if layout != "transposed":  # training statistics
            want = A._native_batch_norm_legit(place(x, "cpu"), w, torch.zeros(c), torch.zeros(c), torch.ones(c), True, 0.1,
                                              1e-5)
            got = A._native_batch_norm_legit(place(x, "neuron"), w.to("neuron"), torch.zeros(c, device="neuron"),
                                             torch.zeros(c, device="neuron"), torch.ones(c, device="neuron"),
                                             True, 0.1, 1e-5)
            same(got[1], want[1], "save_mean")
        args = lambda dev: (place(dy, dev), place(x, dev), w.to(dev), rm.to(dev), rv.to(dev), None, None, False,
                            1e-5, [True, True, False])
        want = A.native_batch_norm_backward(*args("cpu"))
        got = A.native_batch_norm_backward(*args("neuron"))
        same(got[1], want[1], "grad_weight (eval)")
        same(got[0], want[0], "grad_input (eval)")


@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_with_a_strided_parameter_transforms_stepwise(training):
    """A non-contiguous weight, bias or running statistic sends CPU's batch_norm_cpu_transform_input_template to its
    generic loop, ((x - mean) * invstd) * w + b step by step, even for a contiguous input: with a weight near float's
    maximum the fused x * alpha + beta made inf - inf NaN where CPU's steps stay infinite (op suite ci profile:
    _native_batch_norm_legit, _no_training and running_stats, output[0], NaN at 1 position on the device)."""
    x = torch.tensor([[1.5409961, -0.2934289], [-2.1787894, 0.5684313]])
    w = torch.tensor([2.4830113e38, -3.2679826e38])
    b_base = torch.tensor([1.5409961, -0.2934289, -2.1787894, 0.5684313])
    rm, rv = torch.tensor([-0.0812341, 0.8414954]), torch.tensor([1.5909961, 0.3434289])
    want = A._native_batch_norm_legit(x, w, b_base[::2], rm.clone(), rv.clone(), training, 0.1, 1e-5)
    got = A._native_batch_norm_legit(x.to("neuron"), w.to("neuron"), b_base.to("neuron")[::2], rm.to("neuron"),
                                     rv.to("neuron"), training, 0.1, 1e-5)
    for g_, e in zip(got, want):
        torch.testing.assert_close(g_.cpu(), e, equal_nan=True)


def test_batch_norm_generic_backward_weight_gradient_is_double():
    """A transposed cotangent sends CPU's batch-norm backward to its generic loop, which sums (x - mean) * dy in
    double and forms grad_weight = dotp * invstd in double before rounding: finite where a float dotp overflows
    (op suite ci profile: batch_norm [3, 2] near_overflow, eval, transposed cotangent: gradient[1] infinities
    differ)."""
    x = torch.tensor([[2.4856144e38, 2.9066328e38], [2.6878499e38, 2.5464474e38], [-2.5697699e38, -2.2620909e38]])
    dy = torch.tensor([[0.9, -1.2], [1.1, 0.4], [-0.3, 2.0]]).t().contiguous().t()
    w, rm, rv = torch.tensor([1.54, -0.29]), torch.tensor([0.72, 0.31]), torch.tensor([4.0, 4.0])
    want = A.native_batch_norm_backward(dy, x, w, rm, rv, None, None, False, 1e-5, [True, True, True])
    dyd = dy.t().contiguous().to("neuron").t()
    got = A.native_batch_norm_backward(dyd, *(t.to("neuron") for t in (x, w, rm, rv)), None, None, False, 1e-5,
                                       [True, True, True])
    for g_, e in zip(got, want):
        torch.testing.assert_close(g_.cpu(), e, equal_nan=True)


def _error(result: torch.Tensor, reference: torch.Tensor) -> float:
    return (result.cpu().double() - reference).abs().max().item()


def test_compensated_moments_elsewhere_no_worse_than_cpu():
    """On ordinary and near-constant rows the compensation only removes rounding residue: the device
    stays within the dtype tolerance of CPU, and as close to a float64 reference as CPU is."""
    x = values((7, 3000), torch.float32)
    check(lambda x: A.native_layer_norm(x, [3000], None, None, 1e-5), x)
    check(lambda x: torch.var_mean(x, 1), x)
    near = x * 1e-3 + 50.0  # spread 1e-3 on 50: x - mean keeps few bits
    for fn in (lambda t: A.native_layer_norm(t, [3000], None, None, 1e-5)[0], lambda t: torch.var(t, 1),
               lambda t: F.group_norm(t.reshape(7, 3, 1000), 3)):
        reference = fn(near.double())
        assert _error(fn(near.to("neuron")), reference) <= 1.5 * _error(fn(near), reference) + 1e-9


def test_compensation_leaves_zero_centred_rows_alone():
    """On rows centred near zero, x - mean rounds as much as the first sum did, so a correction would be
    noise: this group_norm (an opsuite case; weight 7e29 amplifies the mean's last bit) must stay within
    float32 tolerance of CPU."""
    x = torch.tensor([1.5409960746765137, -0.293428897857666, -2.1787893772125244, 0.5684312582015991,
                      -1.0845223665237427]).reshape(1, 1, 5)
    w, b = torch.tensor([7.282186814568073e+29]), torch.tensor([1.5409960746765137])
    check(lambda x, w, b: F.group_norm(x, 1, w, b), x, w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape,dim", [((6, 37), 1), ((6, 37), 0), ((5, 5), -1), ((2, 3, 2100), -1)])
def test_log_softmax_of_reduced_floats_is_bit_identical_to_cpu(dtype, shape, dim):
    """Along the last dim CPU keeps the row's sum of exps and its log in the input dtype (OpInfo's bf16
    sample: the row's max element gives exactly 0, float64 -0.0038); other dims accumulate in float."""
    g = torch.Generator().manual_seed(7)
    for _ in range(5):
        x = (torch.randn(shape, generator=g) * 4).to(dtype)
        assert torch.equal(torch.log_softmax(x.to("neuron"), dim).cpu(), torch.log_softmax(x, dim))


# --- found by the designed cases of issue 18 (a dim out of range, whole-tensor max/min, nll_loss2d's -0.0) ---

@pytest.mark.parametrize("name", ["any", "all"])
def test_any_all_out_dtype_checked_before_the_dim(name):
    """CPU rejects a non-bool out= before it wraps the dim: RuntimeError, not the dim's IndexError."""
    fn = getattr(torch, name)
    check(lambda t: fn(t, 4, out=torch.empty(0, dtype=torch.int64, device=t.device)), values((2, 3, 4), torch.int64))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int16, torch.uint8, torch.bool])
@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_unary_out_of_empty_is_the_identity(name, dtype):
    """max/min.unary_out of an empty tensor write -inf/+inf (the integer min/max, False/True); the functional
    form raises on both sides."""
    op = getattr(A, name)
    check(lambda t: op.unary_out(t, out=torch.empty(0, dtype=t.dtype, device=t.device)), values((0,), dtype))
    check(lambda t: op.default(t), values((0,), dtype))


@pytest.mark.parametrize("value", [-0.0, 0.0, NAN, -INF])
def test_nll_loss2d_picks_the_zero_sign(value):
    """reduction='none' is -x[target]: x[target] = -0.0 gives +0.0 (the masked pick once summed over +0.0)."""
    x = torch.full((2, 3, 1, 2), value)
    x[0, 0] = 7.0
    target = torch.tensor([[[1, 0]], [[2, -100]]])
    for reduction in ("none", "sum", "mean"):
        check(lambda a, t: F.nll_loss(a, t, reduction=reduction), x, target)


@pytest.mark.parametrize("pos", [0, 3, 128])
@pytest.mark.parametrize("dim", [1, 0, None])
@pytest.mark.parametrize("name", ["var_mean", "std_mean"])
def test_var_mean_float32_mean_after_an_infinity_is_nan(name, dim, pos):
    """CPU's Welford mean turns NaN at the first element after an infinity: only a lone infinity in the
    row's last element leaves it infinite (the device's float32 path returned sum / n = inf)."""
    x = values((3, 129), torch.float32, seed=3)
    x[1, pos] = INF
    x[2, pos], x[2, 0] = -INF, INF
    check(lambda t: getattr(torch, name)(t, dim=dim), x, tol=sum_tol(129))


@pytest.mark.parametrize("fn", [torch.std, torch.var], ids=["std", "var"])
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16], ids=str)
def test_var_std_out_of_a_narrower_float_reduce_in_its_dtype(fn, out_dtype):
    """ATen's std_var_out reduces in out's dtype (make_reduction casts self to it), so a float16 out of a float32
    input holds the statistic of the float16-rounded values; the old kernel rounded the float32 statistic
    (1 ULP apart on 5x5x5 normal values, within float16's tolerance: found by the contract's castable-float
    out_dtype check)."""
    x = values((5, 5, 5), torch.float32)
    check(lambda t: fn(t, 1, out=torch.empty(0, dtype=out_dtype, device=t.device)), x, tol=(0.0, 0.0))


@pytest.mark.parametrize("op", [torch.var, torch.std, torch.var_mean, torch.std_mean], ids=lambda f: f.__name__)
def test_float32_moments_are_cpus_double_welford(op):
    """CPU computes float32 var/std (and the mean beside them) as Welford in double, rounded once: rows near the top
    of the range stay finite (std_mean of [3e38, 3e38, -3e38, 2e38]: 2.87e38, mean 1.25e38, where float32 sums
    overflow), and the mean turns NaN after an infinity unless it is the last element. The device's float32 passes
    gave inf there."""
    inf = float("inf")
    extreme = torch.tensor([[3e38, 3e38, -3e38, 2e38], [1.0, inf, 2.0, 3.0], [1.0, 2.0, 3.0, inf],
                            [1.0, 2.0, 4.0, 8.0]])
    ordinary = torch.randn(64, 513, generator=torch.Generator().manual_seed(7)) * 3 + 1
    for x, dim in ((extreme, 1), (ordinary, 1), (ordinary, (0, 1)), (ordinary, 0)):
        want, got = op(x, dim=dim), op(x.to("neuron"), dim=dim)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            # CPU's order of combining partial Welford states follows its loop over the reduced dims: within tolerance
            torch.testing.assert_close(g.cpu(), w, equal_nan=True, rtol=1.3e-6, atol=1e-5)


@pytest.mark.parametrize("shape, fmt", [((1, 4, 3, 4), torch.channels_last), ((2, 6, 3, 5), torch.channels_last),
                                        ((2, 4, 2, 3, 2), torch.channels_last_3d)], ids=["cl", "cl-2", "cl3d"])
@pytest.mark.parametrize("dtype", (torch.float32, torch.float16), ids=str)
def test_group_norm_output_keeps_the_inputs_memory_format(shape, fmt, dtype):
    """CPU's native_group_norm allocates Y as ``empty_like(X)`` in ``X.suggest_memory_format()``: a channels-last
    input gives a channels-last output (designed group_norm-float16-near_zero-channels_last-512: CPU (48, 1, 16, 4));
    the device's was contiguous. (The backward's grad_input cannot follow: autograd hands a non-CPU device's
    backward a contiguous copy of the input, derivatives.yaml's native_group_norm entry.)"""
    host = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype).contiguous(memory_format=fmt)
    w, b = torch.randn(shape[1], dtype=dtype), torch.randn(shape[1], dtype=dtype)
    expected = torch.nn.functional.group_norm(host, 2, w, b)
    got = torch.nn.functional.group_norm(host.to("neuron"), 2, w.to("neuron"), b.to("neuron"))
    assert got.stride() == expected.stride()
    torch.testing.assert_close(got.cpu(), expected, rtol=2e-3 if dtype == torch.float16 else 1e-5, atol=1e-3)


@pytest.mark.parametrize("how", ["transposed", "permuted", "expanded", "channels_last"])
def test_group_norm_backward_grad_input_is_laid_out_as_cpus(how):
    """CPU's native_group_norm_backward allocates grad_input ``empty_like(X)`` in ``X.suggest_memory_format()``:
    a direct call's X that is not dense in it (transposed, permuted, expanded) gives a contiguous grad_input, where
    the device's followed X's order. Layouts only: CPU's kernel reads such an X as if it were contiguous."""
    g = torch.Generator().manual_seed(0)
    x = {"transposed": lambda: torch.randn(2, 4, 3, 5, generator=g).transpose(2, 3),
         "permuted": lambda: torch.randn(2, 5, 4, 3, generator=g).permute(0, 2, 1, 3),
         "expanded": lambda: torch.randn(2, 4, 1, 3, generator=g).expand(2, 4, 5, 3),
         "channels_last": lambda: torch.randn(2, 4, 5, 3, generator=g).contiguous(memory_format=torch.channels_last)}[how]()
    dy = torch.randn(2, 4, 5, 3, generator=g)
    _, mean, rstd = torch.ops.aten.native_group_norm(x.contiguous(), None, None, 2, 4, 15, 2, 1e-5)
    expected = torch.ops.aten.native_group_norm_backward(dy, x, mean, rstd, None, 2, 4, 15, 2, [True, False, False])[0]
    got = torch.ops.aten.native_group_norm_backward(*(t.to("neuron") for t in (dy, x, mean, rstd)), None, 2, 4, 15, 2,
                                                    [True, False, False])[0]
    assert got.stride() == expected.stride()


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "transposed"])
def test_batch_norm_training_grad_input_follows_cpus_order(layout):
    """Training-mode grad_input is CPU's (dy - grad_mean - (x - mean) * k) * invstd * w, left to right (the fused
    kernels contract the subtraction of (x - mean) * k into a multiply-add where the host fuses): with a weight
    near float's maximum CPU's result stays finite where invstd * w first overflows (op suite ci profile:
    batch_norm [2, 1] near_overflow weight, gradient[0]: 2 NaNs on the device), and given CPU's saved statistics
    the device's grad_input is CPU's bit for bit on the fused paths for these shapes ([2, 1], whose result is all
    cancellation, also hangs on the sums' last bits, which are not all followed: close there)."""
    gen = torch.Generator().manual_seed(3)
    shapes = {"contiguous": [(2, 1), (3, 24, 4, 4), (8, 16, 1, 1)], "channels_last": [(3, 24, 4, 4), (8, 16, 1, 1)],
              "transposed": [(2, 1, 3, 3)]}[layout]
    for shape in shapes:
        for scale in (1.0, 3e38):
            x = torch.randn(shape, generator=gen) * 3 + 1
            dy = torch.randn(shape, generator=gen)
            w = torch.rand(shape[1], generator=gen) * scale

            def place(t, dev):
                t = t.to(dev)
                if layout == "channels_last":
                    return t.contiguous(memory_format=torch.channels_last)
                return t.transpose(-1, -2).contiguous().transpose(-1, -2) if layout == "transposed" else t

            _, sm, si = A.native_batch_norm(place(x, "cpu"), w, None, None, None, True, 0.1, 1e-5)
            args = lambda dev: (place(dy, dev), place(x, dev), w.to(dev), None, None, sm.to(dev), si.to(dev), True,
                                1e-5, [True, False, False])
            want = A.native_batch_norm_backward(*args("cpu"))[0]
            got = A.native_batch_norm_backward(*args("neuron"))[0].cpu()
            assert not got.isnan().any() and torch.equal(got.isinf(), want.isinf()), (shape, scale, got, want)
            if layout != "transposed" and shape != (2, 1):  # the generic loop's sum(dy) is at::sum's order
                assert torch.equal(got.contiguous().view(torch.int32), want.contiguous().view(torch.int32)), \
                    (shape, scale, (got != want).sum())
            else:
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6 * max(scale, 1.0))
