"""Compiled graphs compute what CPU eager computes where torch-mlir's lowering or a decomposition rounds, promotes
or orders differently (the op suite's compiled mode, numerics group: promotion, zero signs, NaN/inf positions).

Each test failed before its rewrite or decomposition (device_impl/compiler/numerics.py)."""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _compiled(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", dynamic=False)(*[a.to("neuron") for a in args])


def _same_bits(fn, *args):
    """Compiled on neuron and eager on CPU agree bit for bit: values, NaN and infinity positions, zero signs."""
    got, want = _compiled(fn, *args).cpu(), fn(*args)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    if want.is_floating_point():
        zeros = want == 0  # the sign of zero (a NaN's sign bit is no part of its value)
        assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros]))


@pytest.mark.parametrize("op", [torch.le, torch.lt, torch.ge, torch.gt, torch.eq, torch.ne],
                         ids=lambda op: op.__name__)
@pytest.mark.parametrize("other", [1, 200], ids=["uint8-1", "uint8-200"])
def test_signed_and_unsigned_compare_in_atens_promoted_dtype(op, other):
    """int8 against a 0-d uint8 compares in int8 (a 0-d tensor does not widen a dimensioned one): 200 is -56.
    torch-mlir compared both as unsigned, so -1 <= 1 was False (op suite le int8 int_edges)."""
    a = torch.tensor([-128, -56, -1, 0, 1, 2, 127], dtype=torch.int8)
    _same_bits(op, a, torch.tensor(other, dtype=torch.uint8))
    _same_bits(op, a, torch.tensor([other] * 7, dtype=torch.uint8))  # int16 both sides


def _lerp_operands(dtype):
    """start, end, weight of 3 * 6 elements whose lerp is a zero whose sign the two lambdas of CPU's loop
    give differently (end -0.0, weight 1: lerp_vec +0.0, the scalar Lerp.h -0.0) or that a fused multiply-add
    keeps (start +0.0, a product underflowing to -0.0)."""
    start = torch.tensor([-0.0, 0.0, -0.0, 0.0, 1.0, 0.0] * 3, dtype=torch.float32)
    end = torch.tensor([-0.0, -0.0, 0.0, -0.0, -0.0, -9.18e-41] * 3, dtype=torch.float32)
    weight = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.01e-39] * 3, dtype=torch.float32)
    return [t.to(dtype) for t in (start, end, weight)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "transposed"])
def test_lerp_keeps_the_zero_signs_of_cpus_vector_and_scalar_lambdas(layout, dtype):
    """CPU's vector lambda runs on whole blocks of contiguous runs, its scalar lambda on a run's tail (18
    elements: the last 2 in float32) and on every element of a strided operand; PyTorch's decomposition is the
    vector lambda everywhere (op suite lerp_tensor sliced/channels_last). Made on the device in the layout, as a
    user's view is."""
    view = {"contiguous": lambda t: t, "sliced": lambda t: torch.stack([t, t], -1)[..., 0],
            "transposed": lambda t: t.view(3, 6).t()}[layout]
    operands = _lerp_operands(dtype)
    want = torch.lerp(*[view(t) for t in operands])
    torch._dynamo.reset()
    got = torch.compile(torch.lerp, backend="neuron", dynamic=False)(*[view(t.to("neuron")) for t in operands])
    got = got.cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert torch.equal(torch.signbit(got), torch.signbit(want))


def test_lerp_with_a_scalar_weight_keeps_cpus_zero_signs():
    """lerp.Scalar: the branch is the weight's, the lambda the element's (a tail of 2 after 16 in float32)."""
    start, end, _ = _lerp_operands(torch.float32)
    _same_bits(lambda s, e: torch.lerp(s, e, 1.0), start, end)
    _same_bits(lambda s, e: torch.lerp(s, e, 0.25), start, end)


@pytest.mark.parametrize("op", [torch.add, torch.sub], ids=lambda op: op.__name__)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_add_with_alpha_overflows_where_cpus_scalar_lambda_rounds_the_product(dtype, op):
    """CPU's vector lambda fuses ``other * alpha + self`` in float32; its scalar lambda (a run's tail: the last 3
    of 35 elements, 32 a block) rounds ``alpha * other`` to the dtype first, so 2 * 32767 is inf in float16 even
    where self brings the sum back (op suite add_alpha float16 + int16: NaN and inf at other positions)."""
    big = 32767 if dtype == torch.float16 else 2 ** 126
    x = torch.tensor([-60000.0, 1.5, float("inf"), -0.0, 3.0] * 7).to(dtype)
    if dtype == torch.bfloat16:
        x = torch.tensor([-3e38, 1.5, float("inf"), -0.0, 3.0] * 7).to(dtype)
    y = torch.tensor([big, -big, big, 0, -2] * 7, dtype=torch.int16 if dtype == torch.float16 else dtype)
    _same_bits(lambda a, b: op(a, b, alpha=2), x, y)


def _grad(fn, x, device, view=lambda t: t):
    leaf = x.detach().to(device).requires_grad_()
    out = fn(view(leaf))
    out.backward(torch.ones_like(out))
    return leaf.grad.cpu()


@pytest.mark.parametrize("layout", ["contiguous", "sliced"])
def test_elu_gradient_of_nan_follows_cpus_lambda(layout):
    """CPU's elu_backward vector lambda gives a NaN input a NaN gradient (``x > 0`` false: the exp branch), its
    scalar lambda the gradient itself (``x <= 0`` false): the last 4 of 36 float32 elements (a block is 16 or 32,
    by the host's capability), and every element of a sliced input, take the scalar one (op suite elu special
    sliced: 48 NaN on the device, none on CPU). The values within float32's tolerance (exp's last bit)."""
    x = torch.tensor([float("nan"), -1.0, 2.0] * 12)
    view = (lambda t: t) if layout == "contiguous" else (lambda t: t[::2])
    fn = lambda t: torch.nn.functional.elu(t, alpha=0.5)  # noqa: E731
    want = _grad(fn, x, "cpu", view)
    torch._dynamo.reset()
    got = _grad(torch.compile(fn, backend="neuron", dynamic=False), x, "neuron", view)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "sliced", "2-d", "transposed"])
def test_hardtanh_gradient_of_nan_follows_cpus_lambda(dtype, layout):
    """CPU's hardtanh_backward vector lambda keeps the gradient where ``min < x < max`` (0 for a NaN input), its
    scalar lambda drops it where ``x <= min || x >= max`` (the gradient for a NaN input): a run's tail past the last
    whole vector block, and every element of a strided run, take the scalar one (op suite hardtanh and
    hardtanh_backward special, compiled: PyTorch's decomposition, the scalar lambda everywhere)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 37, generator=g) * 2).to(dtype)
    x[:, ::3] = float("nan")
    grad = torch.randn(5, 37, generator=g).to(dtype)
    view = {"contiguous": lambda t: t.reshape(-1), "sliced": lambda t: t.reshape(-1)[::2], "2-d": lambda t: t,
            "transposed": lambda t: t.t()}[layout]
    _same_bits(lambda a, b: torch.ops.aten.hardtanh_backward(view(a), view(b), -1.0, 1.0), grad, x)
    fn = lambda t: torch.nn.functional.hardtanh(t, -1.0, 1.0)  # noqa: E731
    want = _grad(fn, x, "cpu", view)
    torch._dynamo.reset()
    got = _grad(torch.compile(fn, backend="neuron", dynamic=False), x, "neuron", view)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)


def test_float16_scatter_add_accumulates_in_float32_as_cpu():
    """CPU accumulates a float16 scatter_add in float32 and rounds once; the engine's scatter rounded each block of
    rows into the float16 destination, so a partial sum overflowed (op suite scatter_add float16 near_overflow)."""
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(2, 300, generator=g) * 120000 - 60000).to(torch.float16)
    index = torch.randint(0, 2, (6, 300), generator=g)
    src = (torch.rand(6, 300, generator=g) * 120000 - 60000).to(torch.float16)
    _same_bits(lambda a, i, s: torch.scatter_add(a, 0, i, s), x, index, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_scatter_add_adds_duplicates_in_order(dtype):
    """CPU adds each source element to the destination in turn: 3e38 + 3e38 overflows before -3e38 comes (inf);
    the engine's scatter summed the duplicates first (3e38 + -3e38 = 0) and gave 3e38 (op suite scatter_add
    bfloat16 near_overflow: bfloat16 accumulates in float32, whose range is its own)."""
    x = torch.tensor([3e38, 1.0, -0.0]).to(dtype)
    index = torch.tensor([0, 0, 2, 1])
    src = torch.tensor([3e38, -3e38, -0.0, 2.0]).to(dtype)
    _same_bits(lambda a, i, s: torch.scatter_add(a, 0, i, s), x, index, src)


def test_float16_avg_pool2d_sums_its_windows_in_float32():
    """CPU's avg_pool2d sums a float16 window in float32 and rounds the mean once; the lowering summed in float16,
    which overflows for four values near 60000 (op suite avg_pool2d float16 near_overflow: inf where CPU is finite)."""
    x = torch.tensor([[51072.0, 47328.0, 59520.0, 62112.0], [44448.0, 38272.0, -60992.0, -56800.0]] * 2)
    x = x.to(torch.float16).reshape(1, 1, 4, 4)
    _same_bits(lambda t: torch.nn.functional.avg_pool2d(t, 2, 2), x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("divisor", [-0.0123, 1.500014066696167, -3.33, "0-d"])
def test_reduced_float_floor_divide_by_a_scalar_is_cpus_float32_formula_rounded_once(dtype, divisor):
    """CPU's floor division of a float16/bfloat16 tensor by a divisor it reads at one place (a Python scalar, a
    0-d tensor) runs c10's div_floor_floating in float32 with the divisor's original value and rounds once; the
    rewrite ran it op by op in the tensor's dtype (3 // 1.500014 gave 2 for 1, -34.125 // -0.0123 was 4 off: op
    suite floor_divide_scalar_overload). Two reduced-float tensors keep CPU's per-step rounding."""
    a = torch.tensor([26.828125, -22.859375, -34.125, -13.7890625, 32.0625, -13.484375, -25.890625, 26.875,
                      3.0, -2.5, 1.0, -0.0, 0.0, 0.318359375, -0.294921875, 33.25, -17.5, 37.75, -11.125,
                      float("inf"), -1.6953125], dtype=torch.float32).to(dtype)
    if divisor == "0-d":
        _same_bits(lambda x, y: torch.floor_divide(x, y), a, torch.tensor(-3.33, dtype=torch.float32))
    else:
        _same_bits(lambda x: torch.ops.aten.floor_divide.Scalar(x, divisor), a)
        _same_bits(lambda x: torch.floor_divide(x, divisor), a)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [0, -1])
def test_reduced_float_index_add_on_cpus_scatter_path_sums_in_float32(dtype, dim):
    """index_add of a >1-D float16/bfloat16 tensor along its first or last dim, alpha 1, int64 index, is CPU's
    scatter_add: the repeated rows sum in float32 and round once (1 + 3 * 2^-11 is 1 + 2^-10 there, 1 when each add
    rounds to float16); the decomposition (index_put) rounded each add (op suite index_add designed bfloat16)."""
    tiny = 2.0 ** (-11 if dtype == torch.float16 else -9)
    self = torch.ones(3, 4, dtype=dtype)
    source = torch.full((3, 4), tiny, dtype=dtype)
    if dim == -1:
        self, source = self.t().contiguous(), source.t().contiguous()
    index = torch.tensor([1, 1, 1])
    _same_bits(lambda s, i, src: torch.index_add(s, dim, i, src), self, index, source)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [0, 1])
def test_index_add_with_alpha_rounds_cpus_multiply_add_once(dtype, dim):
    """CPU's index_add with alpha 2 is a loop of add_(slice, alpha) whose vector lambda rounds ``a + 2 * b``
    once (vec::fmadd; float32 for float16/bfloat16) and whose tail rounds ``2 * b`` to the dtype first: a
    near-overflow ``big - 2 * (big * 0.7)`` stays finite on CPU where the decomposition's rounded product
    overflowed (inf - inf gave NaN in float32: op suite index_add near_overflow). 33 columns: 32 in CPU's vector
    block for float16/bfloat16, one on the tail; a repeated index adds twice (down, then back up), rounded
    in between."""
    big = torch.finfo(dtype).max * 0.9
    self = torch.full((3, 33), big, dtype=torch.float32).to(dtype)
    source = torch.full((3, 33), -big * 0.7, dtype=torch.float32).to(dtype)
    source[1] = 3.0
    source[2] = big * 0.7  # index 2's second add: back near big, from -0.36 * big
    index = torch.tensor([2, 0, 2])
    if dim == 1:
        self, source = self.t().contiguous(), source.t().contiguous()
    _same_bits(lambda s, i, src: torch.index_add(s, dim, i, src, alpha=2), self, index, source)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("stride, padding, groups, output_padding", [(2, 0, 1, 0), (2, 0, 2, 0), (1, 0, 1, 0),
                                                                     (3, 1, 2, 1)])
def test_transposed_convolution_never_multiplies_the_zeros_it_inserts_or_pads(dtype, stride, padding, groups,
                                                                              output_padding):
    """CPU's transposed convolution (col2im, oneDNN's deconvolution) forms only products of real inputs and
    weights; torch-mlir's form inserts zeros between the inputs (lhs dilation) and pads them, and the step
    multiplied those zeros, so an infinite weight gave NaN wherever its tap met one (op suite conv_transpose2d
    special: 174 NaN on the device, 46 on CPU). Stride 1 too: the padding of (K - 1) zeros."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(1, 2, 3, 6, generator=g).to(dtype)
    w = torch.randn(2, 4 // groups, 2, 3, generator=g).to(dtype)
    b = torch.randn(4, generator=g).to(dtype)
    x[0, 0, 0, 0], x[0, 1, 2, 3] = float("inf"), float("nan")
    w[0, 0, 1, 1], w[1, 0, 0, 2] = float("-inf"), float("inf")

    def fn(x, w, b):
        return torch.nn.functional.conv_transpose2d(x, w, b, stride=stride, padding=padding, groups=groups,
                                                    output_padding=output_padding)

    got, want = _compiled(fn, x, w, b).cpu(), fn(x, w, b)
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    # the finite values: a sum in another order, within the op spec's convolution tolerance (harness/specs.py
    # _CONV_TOL: CPU's native float16 path rounds its partial sums to float16)
    rtol, atol = {torch.float32: (1e-5, 1e-4), torch.float16: (1e-3, 5e-3)}[dtype]
    torch.testing.assert_close(got, want, equal_nan=True, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("mode, size", [("trilinear", (4, 5, 15)), ("trilinear", (6, 20, 30)), ("bilinear", (5, 15)),
                                        ("bilinear", (40, 100)), ("linear", (15,))])
def test_reduced_float_interpolation_gradient_is_cpus_float32_sum_rounded_once(dtype, mode, size):
    """CPU's linear/bilinear/trilinear backward accumulates every output's gradient, weighed by float32 weights,
    into a float32 buffer and rounds to float16/bfloat16 once. The gradient AOTAutograd derived from the
    decomposition rounded each corner's gradient to the input dtype and summed the corners there (op suite
    interpolate_trilinear3d float16 gradient: 20 of 56 outside rtol=1e-3, 957 ULP near zero), and where CPU's
    forward takes its generic kernel (few outputs take the vectorized one: resample._vectorized_cond) it
    weighed by the forward's weights rounded to the dtype (a cancelling sum 3% off in float16)."""
    g = torch.Generator().manual_seed(2)
    shape = {"trilinear": (1, 2, 2, 2, 14), "bilinear": (1, 2, 2, 14), "linear": (1, 2, 14)}[mode]
    x = torch.randn(shape, generator=g).to(dtype)
    cot = torch.randn(shape[:2] + size, generator=g).to(dtype)

    def fn(t):
        return torch.nn.functional.interpolate(t, size=size, mode=mode, align_corners=True)

    want = _grad_of(fn, x, cot, "cpu")
    torch._dynamo.reset()
    got = _grad_of(torch.compile(fn, backend="neuron", dynamic=False), x, cot, "neuron")
    torch.testing.assert_close(got, want)  # float16/bfloat16's default tolerances: a float32 sum in another order


def _grad_of(fn, x, cotangent, device):
    leaf = x.detach().to(device).requires_grad_()
    (grad,) = torch.autograd.grad(fn(leaf), leaf, cotangent.to(device))
    return grad.cpu()


def _addcdiv_in_place(x, t1, t2):
    out = x.clone()
    out.addcdiv_(t1, t2, value=0.001)
    return out


@pytest.mark.parametrize("fn", [lambda x, t1, t2: torch.addcdiv(x, t1, t2, value=0.001), _addcdiv_in_place],
                         ids=["functional", "in_place"])
def test_addcdiv_scales_before_it_divides_as_cpu(fn):
    """CPU's addcdiv is ``self + value * t1 / t2``: the product first, so 3.5 * 0.001 / 1e-38 is 3.5e35. Dynamo
    rewrote torch.addcdiv into ``self + (t1 / t2) * value`` (addcdiv_ into an fma of t1 / t2) while it traced:
    3.5 / 1e-38 overflowed to inf (op suite addcdiv float32 denormal). float16/bfloat16 compute in float32."""
    x = torch.tensor([0.0, 1.0, -2.0, 5e-39] * 9)
    t1 = torch.tensor([3.5, -3.0, 1e-40, -3.4] * 9)
    _same_bits(fn, x, t1, torch.tensor(1e-38))
    _same_bits(fn, x, t1, torch.full((36,), -1e-38))
    for dtype, big, small in ((torch.float16, 60000.0, 1e-4), (torch.bfloat16, 3e38, 1e-36)):
        narrow = [t.to(dtype) for t in (torch.tensor([1.0, -0.0] * 18), torch.tensor([big, -big / 3] * 18),
                                        torch.tensor([small, 3 * small] * 18))]
        _same_bits(fn, *narrow)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_compiled_erf_is_the_eager_kernels_erf(dtype):
    """torch-mlir expands erf into a rational approximation rounded op by op (56% of the float32 values of
    [-5, 5] came out other bits than the eager kernel's, ScalarE's erf); the compiled program evaluates the
    eager kernel's function (compiler/expansions.py). ndtr's cancellation near erf = -1 made one ULP of erf
    1% of its result: the compiled ndtr out= float16 was not the eager result cast (op suite contract
    special.ndtr out_dtype)."""
    x = torch.linspace(-5, 5, 20001).to(dtype)
    eager = torch.erf(x.to("neuron")).cpu()
    got = _compiled(torch.erf, x).cpu()
    assert torch.equal(got.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                       eager.view(torch.int16 if dtype == torch.bfloat16 else torch.int32))
    tail = torch.tensor([-4.3228, -3.9730, -4.7024, 0.5, -1.0])
    out = torch.empty(5, dtype=torch.float16, device="neuron")
    torch._dynamo.reset()
    torch.compile(lambda a, o: torch.special.ndtr(a, out=o), backend="neuron", dynamic=False)(tail.to("neuron"), out)
    assert torch.equal(out.cpu(), torch.special.ndtr(tail.to("neuron")).cpu().half())


@pytest.mark.parametrize("fn, low, high", [(torch.asinh, -30, 30), (torch.acosh, 1, 30), (torch.atanh, -1, 1),
                                           (torch.asin, -1, 1), (torch.acos, -1, 1)],
                         ids=["asinh", "acosh", "atanh", "asin", "acos"])
def test_compiled_inverse_functions_are_the_eager_kernels(fn, low, high):
    """chlo's formulas for asinh (14 ops), acosh, atanh, asin and acos (through atan2) rounded op by op and cost a
    pass over the tiles each (compiled acosh took 3x the eager kernel's device time); the compiled program
    evaluates the eager kernel's one ScalarE function (compiler/expansions.py): the same bits, signed zeros and
    the domain's ends included."""
    x = torch.cat([torch.linspace(low, high, 4001), torch.tensor([0.0, -0.0, low, high, 1e-30, -1e-30])])
    eager = fn(x.to("neuron")).cpu()
    got = _compiled(fn, x).cpu()
    assert torch.equal(got.view(torch.int32), eager.view(torch.int32))


@pytest.mark.parametrize("fn", [torch.floor_divide, lambda a, b: torch.div(a, b, rounding_mode="floor"),
                                torch.remainder, lambda a, b: torch.trunc(a),
                                lambda a, b: torch.floor_divide(a, 0.06572719663381577),
                                lambda a, b: torch.div(a, -3.7891721725463867, rounding_mode="floor"),
                                lambda a, b: torch.remainder(a, -2), lambda a, b: torch.remainder(a, 1e-3)],
                         ids=["floor_divide", "div_floor", "remainder", "trunc", "floor_divide_scalar",
                              "div_floor_negative_scalar", "remainder_negative_int", "remainder_scalar"])
def test_rounding_divisions_fold_into_one_alu_op_with_cpus_bits(fn):
    """numerics writes floor division, remainder and trunc out as CPU's c10 formulas (floor division ~16 ops, 3x
    the eager kernel's device time); the compiled program folds each back into VectorE's one ALU op, whose steps
    are the same formula (compiler/expansions.py REWRITTEN): CPU's bits, signed zeros, division by zero,
    infinities and NaN included, and a program of one op; a Python scalar divisor of either sign too."""
    from device_impl.compiler import cache

    a = torch.tensor([5.0, -5.0, 5.0, -5.0, 0.0, -0.0, float("inf"), -float("inf"), float("nan"), 7.5, -1e30, 3.0,
                      0.5, -0.5, 1e-38, 6.0] * 9)
    b = torch.tensor([3.0, 3.0, -3.0, -3.0, 2.0, 2.0, 1.0, -1.0, 1.0, 0.0, -0.0, float("inf"),
                      -float("inf"), 0.25, 3e-39, -2.0] * 9)
    _same_bits(fn, a, b)
    (executable,) = [e for e in cache._MEMORY.values() if e.program.name.startswith(("g", "graph"))][-1:]
    (step,) = executable.program.steps
    assert [op["op"] for op in step["ops"]] in (["floor_divide"], ["python_remainder"], ["trunc"])


@pytest.mark.parametrize("fn", [lambda a, b: torch.div(a, b, rounding_mode="floor"), torch.remainder],
                         ids=["div_floor", "remainder"])
@pytest.mark.parametrize("divisor_dtype", [torch.float32, torch.int16], ids=str)
def test_rounding_division_by_a_broadcast_divisor_of_another_dtype_folds(fn, divisor_dtype):
    """A [6] divisor of a [3, 6] tensor: torch-mlir says floor division's ``where(b == 0, ...)`` as a reshape to
    [1, 6] and a broadcast, and numerics' remainder read an int16 divisor's sign before its conversion, so
    neither matched its template and the 16-op formula ran (op suite spec div, remainder: 3.26x and 1.75x the
    eager kernel's device time). Both fold now into the one ALU op: CPU's bits, and the program's elementwise
    steps are at most a conversion of the divisor and that op."""
    from device_impl.compiler import cache

    a = torch.tensor([[5.0, -5.0, 5.0, -5.0, 0.0, -0.0], [float("inf"), -float("inf"), float("nan"), 7.5, -1e30, 3.0],
                      [0.5, -0.5, 1e-38, 6.0, -7.0, 7.0]])
    b = torch.tensor([3, -3, 0, 2, -1, 1]).to(divisor_dtype)
    _same_bits(fn, a, b)
    (executable,) = [e for e in cache._MEMORY.values() if e.program.name.startswith(("g", "graph"))][-1:]
    ops = [op["op"] for step in executable.program.steps for op in step["ops"]]
    assert ops in (["floor_divide"], ["python_remainder"], ["convert", "floor_divide"], ["convert", "python_remainder"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [-2, -1])
def test_reduced_float_log_softmax_rounds_at_cpus_points(dtype, dim):
    """CPU's log_softmax of float16/bfloat16 computes in float32 and rounds once (a middle dim) or rounds the
    sum of exps and its log to the dtype first (the last dim); torch-mlir's lowering rounded op by op in the
    dtype. The gradient reads the saved output: one ULP there was 3 in ``g - exp(y) * sum(g)`` (op suite
    log_softmax float16 positive expanded: these inputs and cotangent)."""
    x = torch.tensor([0.88720703125, 0.53369140625, 1.025390625, 1.2001953125, 0.779296875, 0.93359375,
                      0.70361328125, 0.86474609375, 0.7314453125, 0.1546630859375]).reshape(5, 2, 1)
    x = (x + torch.linspace(-3, 3, 24)).to(dtype)  # (5, 2, 24)
    cotangent = torch.randn(5, 2, 24, generator=torch.Generator().manual_seed(46643)).to(dtype)

    def run(fn, device):
        leaf = x.to(device).requires_grad_()
        out = fn(leaf)
        (grad,) = torch.autograd.grad(out, leaf, cotangent.to(device))
        return out.detach().cpu(), grad.cpu()

    fn = lambda t: torch.log_softmax(t, dim)  # noqa: E731
    want = run(fn, "cpu")
    torch._dynamo.reset()
    got = run(torch.compile(fn, backend="neuron", dynamic=False), "neuron")
    for g, w in zip(got, want):
        assert torch.equal(g.view(torch.int16), w.view(torch.int16))


def _zero_signs_and_values(fn, *args):
    """Compiled on neuron vs eager CPU: values within float32's tolerance, NaN positions and zero signs exact."""
    got, want = _compiled(fn, *args).cpu(), fn(*args)
    torch.testing.assert_close(got, want, equal_nan=True)
    zeros = (want == 0) & (got == 0)
    assert int(zeros.sum()) > 0
    assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros]))


def test_layer_norm_without_affine_adds_cpus_zero_beta():
    """CPU's layer norm without gamma and beta still computes ``y * 1 + 0``, so y = -0.0 (x = -0.0 in a row whose
    mean is +0.0) is +0.0; the compiled normalisation returned y itself, -0.0."""
    rows = torch.tensor([[-0.0] * 8, [0.0, -0.0] * 4, [1.0, 2.0] * 4])
    _zero_signs_and_values(lambda t: torch.nn.functional.layer_norm(t, (8,)), rows)


def _denormal_affine_operands():
    """x [4, 2, 6] normalised over its last two dimensions, gamma and beta with denormals: products
    ``y * gamma`` that underflow to -0.0 (beta +0.0) and rounded products that cancel beta exactly."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn((4, 2, 6), generator=g)
    x[0] = torch.tensor([-0.3, 0.3] * 6).view(2, 6)
    gamma = torch.tensor([1.4e-45, -1.4e-45, 1e-40, 1.0, -3e-39, 1.4e-45] * 2).view(2, 6)
    beta = torch.tensor([0.0, 0.0, -0.0, 1.4e-45, 0.0, -1.4e-45] * 2).view(2, 6)
    return x, gamma, beta


@pytest.mark.parametrize("layout", ["contiguous", "offset"])
def test_layer_norm_affine_step_rounds_once_where_cpus_kernel_fuses(layout):
    """CPU's affine step ``y * gamma + beta`` is one fused multiply-add where the host's kernels fuse, so a
    product that underflows keeps its sign: StableHLO has no fma and the compiled program rounded twice (op
    suite layer_norm float32 denormal offset: 59 zeros of the wrong sign). native_layer_norm is now cut whole
    (compiler/opaque.py) and runs the eager kernel's tile program: CPU's zero signs (its values within float32's
    tolerance: the moments are summed in another order) and the eager kernel's bits."""
    x, gamma, beta = _denormal_affine_operands()

    def fn(t, w, b):
        return torch.nn.functional.layer_norm(t, (2, 6), w, b)

    def on_device(t):  # the offset layout: a view 3 elements into a larger buffer, as the op suite makes it
        if layout == "contiguous":
            return t.to("neuron")
        return torch.cat([torch.ones(3), t.flatten()]).to("neuron")[3:].view(t.shape)

    want = fn(x, gamma, beta)
    zeros = want == 0
    assert int(zeros.sum()) > 0
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", dynamic=False)(*[on_device(t) for t in (x, gamma, beta)]).cpu()
    eager = fn(*[on_device(t) for t in (x, gamma, beta)]).cpu()
    torch.testing.assert_close(got, want)
    both = zeros & (got == 0)
    assert torch.equal(both, zeros)
    assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros]))
    assert torch.equal(got.view(torch.int32), eager.view(torch.int32))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({torch.float32: torch.int32, torch.bfloat16: torch.int16, torch.float16: torch.int16}[t.dtype])


def _compiled_and_eager_on_device(fn, *args):
    torch._dynamo.reset()
    got = torch.compile(fn, backend="neuron", dynamic=False)(*[a.to("neuron") for a in args]).cpu()
    return got, fn(*[a.to("neuron") for a in args]).cpu()


def test_softmax_backward_sums_g_times_y_as_cpus_fused_chain():
    """Along a dim that is not the last, CPU sums g * y as a chain of fused multiply-adds: -3e38 * 1 + 2e38 * 3
    is 3e38 there, each product exact inside its fma; rounded first, 2e38 * 3 is inf and the gradient NaN/inf
    (op suite softmax_backward_data compiled: NaN at different positions). The op is now cut whole
    (compiler/opaque.py) and runs the eager kernel's tile program."""
    g = torch.tensor([[-3e38, 1.0, 0.5], [2e38, -2.0, 0.25]])
    y = torch.tensor([[1.0, 0.25, 0.5], [3.0, 0.75, 0.5]])

    def fn(a, b):
        return torch.ops.aten._softmax_backward_data(a, b, 0, torch.float32)

    want = fn(g, y)
    got, eager = _compiled_and_eager_on_device(fn, g, y)
    torch.testing.assert_close(got, want, equal_nan=True)
    assert torch.equal(_bits(got), _bits(eager))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_log_softmax_backward_rounds_g_minus_exp_y_sum_once(dtype):
    """CPU forms g - exp(y) * sum(g) with one rounding where its kernels fuse: d - 1.2 * d (d the smallest
    denormal) is -0.2 d, -0.0; the product rounded first is d and the difference +0.0 (op suite
    log_softmax_backward_data compiled denormal: wrong sign). Zero signs and values are CPU's, bits the
    eager kernel's."""
    d = torch.finfo(torch.float32).smallest_normal * 2.0 ** -23
    g = torch.tensor([[d, 0.0, 0.0], [1.0, -2.0, 0.5], [0.0, -0.0, 0.0]]).to(dtype)
    y = torch.tensor([[math.log(1.2), -30.0, -30.0], [-1.0, -0.5, -2.0], [-1.0, -1.0, -1.0]]).to(dtype)

    def fn(a, b):
        return torch.ops.aten._log_softmax_backward_data(a, b, 1, dtype)

    want = fn(g, y)
    got, eager = _compiled_and_eager_on_device(fn, g, y)
    torch.testing.assert_close(got, want)
    zeros = want == 0
    assert int(zeros.sum()) > 0 and torch.equal(got == 0, zeros)
    assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros]))
    assert torch.equal(_bits(got), _bits(eager))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_layer_norm_with_an_infinite_weight_keeps_cpus_infinities(dtype):
    """An element at its row's mean times an infinite weight: CPU's kernel leaves a rounding residue there (inf), so
    a normalisation giving exactly 0 would make 0 * inf = NaN (the op suite's float16 layer_norm special, compiled,
    under ATen's two-pass decomposition); native_layer_norm is cut whole and runs the eager kernel's program."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 33, generator=g).to(dtype)
    x[:, 7] = x.float().mean(-1).to(dtype)
    w = torch.randn(33, generator=g).to(dtype)
    w[7], w[3], w[11] = float("inf"), -float("inf"), float("nan")
    b = torch.randn(33, generator=g).to(dtype)
    fn = lambda a, c, d: torch.nn.functional.layer_norm(a, (33,), c, d)  # noqa: E731
    got, want = _compiled(fn, x, w, b).cpu(), fn(x, w, b)
    assert torch.equal(torch.isnan(got), torch.isnan(want)) and torch.equal(torch.isinf(got), torch.isinf(want))
    torch.testing.assert_close(got, want, equal_nan=True)  # finite values: the summation order's last bits


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_layer_norm_backward_is_the_eager_kernels_bit_for_bit(dtype):
    """native_layer_norm_backward is cut whole and runs the eager kernel's program, reading the saved statistics as
    CPU's forward stores them (a float16/bfloat16 input without float32 parameters: in its own dtype, where the
    traced forward's meta makes float32): a compiled training step's gradients are the eager ones bit for bit.
    PyTorch's decomposition in float32 opmath, rounded per op, put grad_input's infinities elsewhere and the
    weight gradient up to 41 ULP from CPU's near float16's limits (op suite, compiled layer_norm float16 extremes)."""
    import device_impl.compiler as compiler

    g = torch.Generator().manual_seed(1)
    x = (torch.randn(8, 16, 64, generator=g) * 3).to(dtype)
    w = (torch.randn(64, generator=g) * 1.5).to(dtype)
    b = torch.randn(64, generator=g).to(dtype)
    dy = torch.randn(8, 16, 64, generator=g).to(dtype)

    def grads(compile_it: bool) -> list[torch.Tensor]:
        xs = [t.to("neuron").requires_grad_() for t in (x, w, b)]
        fn = lambda a, c, d: torch.nn.functional.layer_norm(a, (64,), c, d)  # noqa: E731
        if compile_it:
            fn = torch.compile(fn, backend="neuron", fullgraph=True)
        out = fn(*xs)
        out.backward(dy.to("neuron"))
        return [out.detach().cpu()] + [t.grad.cpu() for t in xs]

    before = compiler.stats()["fallbacks"]
    eager, compiled = grads(False), grads(True)
    assert compiler.stats()["fallbacks"] == before
    kinds = {st["kind"] for exe in compiler.cache._MEMORY.values() for st in exe.program.steps}
    assert "layer_norm_backward" in kinds
    for got, want in zip(compiled, eager):
        assert torch.equal(_bits(got), _bits(want)), (dtype, (got != want).sum())
