"""TensorE matmul kernels against CPU: mm, addmm, bmm, baddbmm, linear, matmul, layouts and tile edges."""

import pytest
import torch

from diff import FLOATS, check, pair, values
from device_impl import engine

F = torch.nn.functional
# bf16/fp16 inputs accumulate in fp32 on both sides but in different orders; the result is rounded
# once to the input dtype, so a few ULPs of the output dtype separate them for long K.
MATMUL_TOL = {torch.float32: (1e-5, 1e-4), torch.bfloat16: (1.6e-2, 2e-2), torch.float16: (1e-3, 2e-3)}

SHAPES = [(1, 1, 1), (5, 7, 3), (127, 128, 129), (128, 128, 128), (129, 513, 127), (64, 1000, 513), (3, 0, 4),
          (0, 5, 3)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("mkn", SHAPES, ids=str)
def test_mm(dtype, mkn):
    m, k, n = mkn
    check(torch.mm, values((m, k), dtype, "unit", 1), values((k, n), dtype, "unit", 2), tol=MATMUL_TOL[dtype])


@pytest.mark.parametrize("layout_a", ["contiguous", "transposed", "sliced", "offset"])
@pytest.mark.parametrize("layout_b", ["contiguous", "transposed", "expanded"])
def test_mm_layouts(layout_a, layout_b):
    a_cpu, a_dev = pair((70, 130), torch.float32, layout_a, "unit", 1)
    b_cpu, b_dev = pair((130, 140), torch.float32, layout_b, "unit", 2)
    check(torch.mm, a_cpu, b_cpu, neuron_args=(a_dev, b_dev), tol=MATMUL_TOL[torch.float32])


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_addmm_and_linear(dtype):
    x, w, bias = values((33, 129), dtype, "unit", 1), values((65, 129), dtype, "unit", 2), values((65,), dtype, seed=3)
    tol = MATMUL_TOL[dtype]
    check(F.linear, x, w, bias, tol=tol)
    check(F.linear, x, w, tol=tol)
    check(lambda b, a, c: torch.addmm(b, a, c, beta=0.5, alpha=2.0), bias, x, w.t(), tol=tol)
    check(lambda b, a, c: torch.addmm(b, a, c, beta=0), torch.full((65,), float("nan"), dtype=dtype), x, w.t(),
          tol=tol)  # beta=0 ignores self, even NaN
    check(lambda b, a, c: torch.addmm(b, a, c), values((33, 65), dtype, seed=4), x, w.t(), tol=tol)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_bmm_baddbmm_matmul(dtype):
    tol = MATMUL_TOL[dtype]
    a, b = values((3, 17, 130), dtype, "unit", 1), values((3, 130, 9), dtype, "unit", 2)
    check(torch.bmm, a, b, tol=tol)
    check(lambda c, x, y: torch.baddbmm(c, x, y, beta=0.5, alpha=-1.0), values((3, 17, 9), dtype, seed=3), a, b,
          tol=tol)
    check(torch.matmul, values((2, 3, 5, 7), dtype, "unit"), values((7, 4), dtype, "unit", 2), tol=tol)
    check(torch.matmul, values((7,), dtype, "unit"), values((7, 4), dtype, "unit", 2), tol=tol)


def _signed_zeros(shape, dtype, seed):
    """Values of ``shape`` with +0.0, -0.0 and both signs of nonzero values, so products of two of them are zeros
    of either sign."""
    g = torch.Generator().manual_seed(seed)
    pool = torch.tensor([0.0, -0.0, 1.5, -2.0, 0.0, -0.0, 0.25, -0.5], dtype=dtype)
    return pool[torch.randint(len(pool), shape, generator=g)]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("mn", [(2, 2), (130, 520), (1, 7), (7, 1), (129, 513)], ids=str)
def test_rank_one_product_zero_signs_follow_the_live_cpu(dtype, mn):
    """A contraction of one (K = 1; a batch of one's weight gradient, lstm_cell's) in CPU's gemm is each product
    itself, 0 * -1 = -0.0, for float32 results of more than one row and column (MKL's gemm; its gemv, and ATen's
    bfloat16/float16 gemm, sum from +0.0): the device's TensorE sum gave +0.0 at every such zero (lstm_cell's
    designed float32 denormal case: 11,646 wrong signs). Asked of the running torch
    (``cpu_host.rank_one_keeps_signs``); zero signs are compared bit for bit (``check``)."""
    m, n = mn
    a, b = _signed_zeros((m, 1), dtype, 1), _signed_zeros((1, n), dtype, 2)
    tol = MATMUL_TOL[dtype]
    check(torch.mm, a, b, tol=tol)
    check(torch.mm, a.t().contiguous().t(), b.t().contiguous().t(), tol=tol)  # K-major and row-major views
    check(lambda c, x, y: torch.addmm(c, x, y, beta=0, alpha=2.0), values((m, n), dtype, seed=3), a, b, tol=tol)
    for bias in (torch.full((n,), -0.0, dtype=dtype), torch.zeros(m, n, dtype=dtype)):
        check(lambda c, x, y: torch.addmm(c, x, y, beta=0.5), bias, a, b, tol=tol)
    check(lambda x, y: F.linear(x, y), a, b.t(), tol=tol)


def test_lstm_cell_batch_of_one_weight_gradient_zero_signs():
    """lstm_cell's weight gradients of a batch of one are K = 1 products (grad_gates^T @ input): CPU's keep each
    product's sign where a gate's gradient or an input is a signed zero."""
    g = torch.Generator().manual_seed(5)
    x, hx, cx = _signed_zeros((1, 5), torch.float32, 1), _signed_zeros((1, 130), torch.float32, 2), \
        torch.randn(1, 130, generator=g)
    weights = [torch.randn(520, 5, generator=g), torch.randn(520, 130, generator=g), torch.randn(520, generator=g),
               torch.randn(520, generator=g)]

    def grads(device):
        leaves = [t.to(device).requires_grad_() for t in [x, hx, cx] + weights]
        h, c = torch.lstm_cell(leaves[0], (leaves[1], leaves[2]), *leaves[3:])
        cot = [torch.randn(h.shape, generator=torch.Generator().manual_seed(7)).to(device), torch.zeros_like(c)]
        return [t.cpu() for t in torch.autograd.grad((h, c), leaves, cot)]

    want, got = grads("cpu"), grads("neuron")
    for i in (3, 4):  # grad w_ih, grad w_hh
        zeros = (want[i] == 0) & (got[i] == 0)
        assert bool(zeros.any()) and bool(want[i][zeros].signbit().any())
        assert torch.equal(want[i][zeros].signbit(), got[i][zeros].signbit()), i


def test_matmul_errors_match_cpu():
    check(torch.mm, values((2, 3), torch.float32), values((4, 5), torch.float32))
    check(torch.mm, values((2, 3), torch.float32), values((3, 5), torch.bfloat16))
    check(torch.bmm, values((2, 2, 3), torch.float32), values((3, 3, 5), torch.float32))


def test_integer_matmul_takes_the_counted_fallback(fresh_stats):
    a, b = values((4, 5), torch.int64), values((5, 3), torch.int64)
    out = torch.mm(a.to("neuron"), b.to("neuron"))
    assert torch.equal(out.cpu(), a @ b)
    assert fresh_stats.stats()["aten::mm.out"]["fallback"] == 1


@pytest.mark.parametrize("layout", ["k_major", "row_major"])
def test_matmul_cost_model_reaches_the_roofline(layout):
    """A 512^3 bf16 matmul is within 10% of the roofline whether A is stored K-major (TensorE's native
    operand layout) or row-major (a plain ``a @ b``: A's blocks are transposed on TensorE, hidden behind
    the loads): the kernel overlaps DMA with TensorE. This checks the simulated schedule, not wall-clock
    time."""
    p = engine.PLATFORM
    a = torch.randn(512, 512, dtype=torch.bfloat16, device="neuron")
    lhs = a.t().contiguous().t() if layout == "k_major" else a
    b = torch.randn(512, 512, dtype=torch.bfloat16, device="neuron")
    with engine.record_trace() as trace:
        torch.mm(lhs, b)
    report = trace.reports[-1]
    timeline = report.device_ns - p.launch_overhead_ns
    roofline = max(2 * 512**3 / p.tensor_flops_per_second, 3 * 512 * 512 * 2 / p.dma_bytes_per_second) * 1e9
    assert report.flops == 2 * 512**3
    transposes = sum(1 for engine_, name, _, _ in report.events if engine_ == "tensor" and name == "transpose")
    assert transposes == (0 if layout == "k_major" else 16)
    assert roofline / timeline >= 0.9
