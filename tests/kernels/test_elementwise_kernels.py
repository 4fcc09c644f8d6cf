"""Elementwise kernels against CPU eager: every op, its dtypes, tile-edge shapes, layouts, special values."""

import pytest
import torch

from diff import ALL_DTYPES, EDGE_SHAPES, FLOATS, INTS, LAYOUTS, check, pair, values

F = torch.nn.functional

UNARY_FLOAT = {  # op -> input domain
    "exp": "normal", "exp2": "normal", "expm1": "normal", "log": "positive", "log2": "positive",
    "log10": "positive", "log1p": "positive", "sqrt": "positive", "rsqrt": "positive", "sin": "normal",
    "cos": "normal", "tan": "unit", "asin": "unit", "acos": "unit", "atan": "normal", "sinh": "normal",
    "cosh": "normal", "tanh": "normal", "asinh": "normal", "atanh": "unit", "sigmoid": "normal", "erf": "normal",
    "erfc": "normal", "reciprocal": "positive", "erfinv": "unit",
}
UNARY_ANY = ("abs", "neg", "sign", "floor", "ceil", "trunc", "round", "isnan", "isinf", "logical_not")
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
    "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
    "ge": torch.ge, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor, "atan2": torch.atan2,
}


@pytest.mark.parametrize("op", sorted(UNARY_FLOAT))
@pytest.mark.parametrize("dtype", FLOATS + (torch.int32,), ids=str)
def test_unary_float_ops(op, dtype):
    domain = UNARY_FLOAT[op] if dtype.is_floating_point else "positive"
    x = values((3, 129), dtype, domain)
    check(getattr(torch, op), x)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
def test_rsqrt_of_reduced_floats_rounds_as_cpus_loops(dtype):
    """Bit for bit over every positive finite value: CPU's scalar lambda rounds the square root to the dtype
    before dividing (every element under ATEN_CPU_CAPABILITY=default, tails and strided runs otherwise), its
    AVX2/AVX-512 vector lambda rounds 1 / sqrt(x) once; the two differ on about 8400 float16 inputs."""
    top = 0x7C00 if dtype == torch.float16 else 0x7F80
    x = torch.arange(1, top, dtype=torch.int32).to(torch.int16).view(dtype)[:top - 1 - 5]  # a scalar tail
    check(torch.rsqrt, x, tol=(0.0, 0.0))
    check(lambda t: torch.rsqrt(t[:, 0]), torch.stack([x, x], 1), tol=(0.0, 0.0))  # strided: scalar lambda
    check(torch.rsqrt, x[:63 * 200].reshape(200, 63), tol=(0.0, 0.0))  # a tail per row


@pytest.mark.parametrize("op", UNARY_ANY)
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_unary_any_dtype(op, dtype):
    check(getattr(torch, op), values((2, 65), dtype, "normal"))


@pytest.mark.parametrize("op", ["exp", "abs", "floor", "sigmoid", "isnan", "sign", "round", "neg"])
def test_special_values(op):
    check(getattr(torch, op), values((4, 8), torch.float32, "special"))


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("dtype", FLOATS + INTS + (torch.bool,), ids=str)
def test_binary_ops(name, dtype):
    if name == "atan2" and dtype == torch.bool:
        pytest.skip("atan2 on bool is not defined on CPU either")
    a = values((5, 33), dtype, "normal", seed=1)
    b = values((5, 33), dtype, "positive" if name == "div" else "normal", seed=2)
    check(BINARY[name], a, b)


@pytest.mark.parametrize("shapes", [((3, 1), (1, 4)), ((2, 3, 4), (4,)), ((5, 1, 7), (3, 1)), ((), (3, 3)),
                                    ((129, 1), (1, 513))])
def test_broadcasting(shapes):
    a, b = (values(s, torch.float32, seed=i) for i, s in enumerate(shapes))
    check(torch.add, a, b)
    check(torch.mul, b, a)


@pytest.mark.parametrize("shape", EDGE_SHAPES, ids=str)
def test_tile_edge_shapes(shape):
    check(lambda x: torch.sigmoid(x) * 2 + x, values(shape, torch.float32))
    check(lambda x: x + 1, values(shape, torch.int64))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.int32), ids=str)
def test_layouts(layout, dtype):
    a_cpu, a_dev = pair((6, 130), dtype, layout, seed=1)
    b_cpu, b_dev = pair((6, 130), dtype, layout, seed=2)
    check(torch.add, a_cpu, b_cpu, neuron_args=(a_dev, b_dev))
    check(torch.abs, a_cpu, neuron_args=(a_dev,))


def test_output_strides_follow_the_inputs():
    cpu, dev = pair((4, 6), torch.float32, "transposed")
    assert (dev + 1).stride() == (cpu + 1).stride()
    cl = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    assert (cl.to("neuron") * 2).stride() == (cl * 2).stride()
    check(lambda t: t * 2, cl)


# Elementwise ops with no out= overload (kernels.registry._functional_kernel), each on a transposed and a
# channels-last operand: CPU's result is TensorIterator's output, laid out as the operands.
FUNCTIONAL_ONLY = {
    "relu": torch.relu,
    "hardtanh": lambda t: torch.ops.aten.hardtanh(t),
    "isnan": torch.isnan,
    "isinf": torch.isinf,
    "logit": lambda t: torch.logit(t, eps=0.25),
    "where": lambda t: torch.where(t > 0, t, -t),
    "floor_divide": lambda t: torch.floor_divide(t, 0.75),
    "remainder_scalar_tensor": lambda t: torch.remainder(2.0, t),
    "silu_backward": lambda t: torch.ops.aten.silu_backward(t, t),
    "hardtanh_backward": lambda t: torch.ops.aten.hardtanh_backward(t, t, -1.0, 1.0),
    "angle": torch.angle,
    "lshift": lambda t: t.int() << 2,
}


@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
@pytest.mark.parametrize("op", FUNCTIONAL_ONLY, ids=list(FUNCTIONAL_ONLY))
def test_a_functional_only_ops_result_is_laid_out_as_cpus(op, layout):
    """relu of a channels-last activation stays channels-last, as on CPU (it came back contiguous: every later
    op of a channels-last network then saw another layout than CPU's)."""
    fn = FUNCTIONAL_ONLY[op]
    host = torch.randn(2, 5, 4, 3, generator=torch.Generator().manual_seed(3))
    host = host.transpose(1, 3) if layout == "transposed" else host.contiguous(memory_format=torch.channels_last)
    expected, got = fn(host), fn(host.to("neuron"))
    assert got.stride() == expected.stride()
    check(fn, host)


# Elementwise ops called with an empty out= (resized by the call), and the functional forms ATen routes through
# out= (abs, logical_not, logical_and): CPU's TensorIterator gives the resized out the operands' layout.
RESIZED_OUT = {
    "sin": (torch.sin, 1, None), "exp": (torch.exp, 1, None), "abs": (torch.abs, 1, None),
    "sqrt": (torch.sqrt, 1, None), "round": (torch.round, 1, None), "gelu": (torch.nn.functional.gelu, 1, None),
    "signbit": (torch.signbit, 1, torch.bool), "logical_not": (torch.logical_not, 1, torch.bool),
    "add": (torch.add, 2, None), "mul": (torch.mul, 2, None), "div": (torch.div, 2, None),
    "pow": (torch.pow, 2, None), "maximum": (torch.maximum, 2, None), "atan2": (torch.atan2, 2, None),
    "remainder": (torch.remainder, 2, None), "xlogy": (torch.xlogy, 2, None), "lt": (torch.lt, 2, torch.bool),
    "logical_and": (torch.logical_and, 2, torch.bool), "lerp": (lambda a, b, **k: torch.lerp(a, b, 0.3, **k), 2, None),
}


@pytest.mark.parametrize("form", ["out", "functional"])
@pytest.mark.parametrize("layout", ["transposed", "channels_last"])
@pytest.mark.parametrize("op", RESIZED_OUT, ids=list(RESIZED_OUT))
def test_a_resized_outs_layout_is_cpus(op, layout, form):
    """``torch.sin(h, out=torch.empty(0))`` of a channels-last h is channels-last on CPU; the device's resized out
    was contiguous for every elementwise op but five (and so were abs/logical_not/logical_and's functional
    results, which ATen computes through out=)."""
    fn, arity, out_dtype = RESIZED_OUT[op]
    g = torch.Generator().manual_seed(5)
    hosts = [torch.rand(2, 5, 4, 3, generator=g) + 0.25 for _ in range(arity)]
    hosts = [h.transpose(1, 3) if layout == "transposed" else h.contiguous(memory_format=torch.channels_last)
             for h in hosts]

    def call(tensors):
        if form == "functional":
            return fn(*tensors)
        out = torch.empty(0, dtype=out_dtype or torch.float32, device=tensors[0].device)
        result = fn(*tensors, out=out)
        assert result is out
        return out

    expected, got = call(hosts), call([h.to("neuron") for h in hosts])
    assert got.stride() == expected.stride()
    assert torch.equal(got.cpu(), expected) or torch.allclose(got.cpu(), expected, rtol=1.3e-6, atol=1e-5)
    again = call([h.to("neuron") for h in hosts])  # a recurring call (served by a plan where one exists)
    assert again.stride() == expected.stride()


@pytest.mark.parametrize("a_dtype, b", [(torch.int32, 2.5), (torch.int8, 300), (torch.float16, 1e-3),
                                        (torch.bfloat16, torch.tensor(3.0, dtype=torch.float64)),
                                        (torch.uint8, torch.tensor(1, dtype=torch.int64)), (torch.bool, 1)])
def test_type_promotion_with_scalars(a_dtype, b):
    a = values((4, 5), a_dtype)
    check(torch.add, a, b)
    check(torch.mul, a, b)


@pytest.mark.parametrize("pair_", [(torch.int8, torch.float16), (torch.uint8, torch.int8), (torch.bool, torch.int32),
                                   (torch.bfloat16, torch.float16), (torch.int64, torch.float32)])
def test_type_promotion_between_tensors(pair_):
    a, b = values((3, 7), pair_[0], seed=1), values((3, 7), pair_[1], seed=2)
    check(torch.add, a, b)
    check(torch.maximum, a, b)
    check(torch.eq, a, b)


def test_zero_dim_tensor_operands():
    check(torch.add, values((4,), torch.float16), values((), torch.float32))
    check(torch.mul, values((), torch.int64), values((), torch.float32))


@pytest.mark.parametrize("mode", [None, "floor", "trunc"])
@pytest.mark.parametrize("dtype", (torch.float32, torch.int64, torch.int32, torch.int8), ids=str)
def test_division_signs(mode, dtype):
    a = torch.tensor([7, -7, 7, -7, 0, 5, -5], dtype=dtype)
    b = torch.tensor([2, 2, -2, -2, 3, 5, 3], dtype=dtype)
    check(lambda x, y: torch.div(x, y, rounding_mode=mode), a, b)


@pytest.mark.parametrize("mode", ["floor", "trunc"])
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
@pytest.mark.parametrize("divisor", ["number", "Scalar_mode", "0-dim", "expanded", "tensor"])
def test_reduced_float_rounding_division_by_a_scalar_divides_in_fp32(mode, dtype, divisor):
    """ATen's div_floor/div_trunc take a scalar divisor (iter.is_scalar(2)) of a bfloat16/float16 tensor at its
    original value in fp32 and round once, a tensor divisor in the dtype step by step: the device rounded
    -1.5627435 to fp16 and gave 122 of 20,000 floor quotients off by one (designed div_scalar_mode-float16-tails)."""
    s = -1.5627435445785522
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 30).to(dtype)
    calls = {
        "number": lambda t: torch.div(t, s, rounding_mode=mode),
        "Scalar_mode": lambda t: torch.ops.aten.div.Scalar_mode(t, s, rounding_mode=mode),
        "0-dim": lambda t: torch.div(t, torch.tensor(s, dtype=dtype, device=t.device), rounding_mode=mode),
        "expanded": lambda t: torch.div(t, torch.tensor([s], dtype=dtype, device=t.device).expand(t.shape),
                                        rounding_mode=mode),
        "tensor": lambda t: torch.div(t, torch.full_like(t, s), rounding_mode=mode),
    }
    check(calls[divisor], x)


@pytest.mark.parametrize("op", [torch.remainder, torch.fmod, torch.floor_divide])
@pytest.mark.parametrize("dtype", (torch.float32, torch.int64, torch.int16), ids=str)
def test_remainder_signs(op, dtype):
    a = torch.tensor([7, -7, 7, -7, 0, 6, -6], dtype=dtype)
    b = torch.tensor([3, 3, -3, -3, 2, 4, -4], dtype=dtype)
    check(op, a, b)
    check(lambda x: op(x, -3), a)


@pytest.mark.parametrize("op", [torch.remainder, torch.fmod, torch.floor_divide,
                                lambda x, y: torch.div(x, y, rounding_mode="trunc")])
def test_integer_division_by_zero_raises_like_cpu(op):
    check(op, torch.tensor([1, 2, 3]), torch.tensor([1, 0, 1]))


def test_integer_overflow_wraps():
    info = torch.iinfo(torch.int32)
    a = torch.tensor([info.max, info.min, 100], dtype=torch.int32)
    check(lambda x: x + 1, a)
    check(lambda x: x * 3, a)
    check(torch.abs, torch.tensor([-128, 127, 0], dtype=torch.int8))
    check(lambda x: x + x, torch.tensor([200, 100], dtype=torch.uint8))


def test_nan_propagation_and_signed_zero():
    x = torch.tensor([float("nan"), 1.0, -0.0, 0.0, float("inf")])
    y = torch.tensor([0.0, float("nan"), 0.0, -0.0, float("nan")])
    for op in (torch.add, torch.mul):
        check(op, x, y)
    # maximum/minimum of two tensors on a tie of zeros: CPU's vector loop returns the second operand, its scalar
    # tail (these 5 elements) the first; the device follows the vector loop. Values and NaNs must match here,
    # zero signs are checked on a length CPU runs entirely through its vector loop.
    for op in (torch.maximum, torch.minimum):
        check(op, x, y, zero_sign=False)
        check(op, torch.tensor([-0.0, 0.0] * 32), torch.tensor([0.0, -0.0] * 32))
    check(lambda t: torch.clamp(t, -1, 1), x)
    check(torch.neg, x)
    check(lambda t: t * -1, torch.tensor([0.0, -0.0]))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_scalar_bounds_keep_the_value_on_a_tie(dtype):
    """relu(-0.0), clamp(-0.0, min=0.0), hardtanh(0.0, -0.0, 1) keep the value's zero, at every position, as CPU.

    (maximum/minimum between two tensors is different: CPU's vector loop gives the second operand.)
    Long enough (40 elements) that CPU's vectorized loop, not only its scalar tail, decides."""
    x = torch.tensor([-0.0, 0.0] * 20, dtype=dtype)
    for fn in (torch.relu, F.relu6, lambda t: F.hardtanh(t, 0.0, 1.0), lambda t: F.hardtanh(t, -0.0, 1.0),
               lambda t: torch.clamp(t, min=0.0), lambda t: torch.clamp(t, min=-0.0),
               lambda t: torch.clamp(t, max=0.0), lambda t: torch.clamp(t, max=-0.0),
               lambda t: torch.clamp_min(t, 0.0), lambda t: torch.clamp(t, -0.0, 0.0)):
        got = check(fn, x)
        assert torch.equal(torch.signbit(got.cpu()), torch.signbit(x))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_hardtanh_backward_of_nan_follows_cpus_vector_and_scalar_lambdas(dtype):
    """CPU's hardtanh_backward gives a NaN input 0 in its vectorized loop ((x > min) & (x < max) & grad) and the
    incoming gradient in its scalar tail (x <= min || x >= max ? 0 : grad): NaN inputs in the body and the tail of
    a 40-element run, and of a strided one (scalar everywhere), get what CPU's loop gives each."""
    x = torch.linspace(-2, 2, 40, dtype=dtype)
    x[::3] = float("nan")
    g = torch.linspace(-1, 1, 40, dtype=dtype) + 0.5
    check(lambda a, b: torch.ops.aten.hardtanh_backward(a, b, -1.0, 1.0), g, x)
    for step in (1, 2):  # the strided views made on the device (a copy to it would be contiguous)
        want = torch.ops.aten.hardtanh_backward(g[::step], x[::step], -1.0, 1.0)
        got = torch.ops.aten.hardtanh_backward(g.to("neuron")[::step], x.to("neuron")[::step], -1.0, 1.0).cpu()
        assert torch.equal(got == 0, want == 0) and torch.equal(got.isnan(), want.isnan()), step


def test_pow_variants():
    check(torch.pow, values((4, 5), torch.float32, "positive"), values((4, 5), torch.float32, "unit"))
    check(lambda x: x ** 2, values((4, 5), torch.int64))
    check(lambda x: x ** 0.5, values((4, 5), torch.float32, "positive"))
    check(lambda x: 2 ** x, values((4, 5), torch.float32, "unit"))
    check(lambda x: x ** -1, values((4, 5), torch.int64, "positive"))  # CPU refuses: same error class


@pytest.mark.parametrize("dtype", INTS + (torch.bool,), ids=str)
def test_bitwise_ops(dtype):
    a, b = values((3, 9), dtype, "full", 1), values((3, 9), dtype, "full", 2)
    for op in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        check(op, a, b)
        check(lambda x: op(x, 5 if dtype != torch.bool else True), a)
    check(torch.bitwise_not, a)


def test_bitwise_on_floats_refused_like_cpu():
    check(torch.bitwise_and, values((3,), torch.float32), values((3,), torch.float32))
    check(torch.bitwise_not, values((3,), torch.float32))


@pytest.mark.parametrize("dtype", FLOATS + (torch.int32, torch.int8), ids=str)
def test_clamp(dtype):
    x = values((4, 33), dtype)
    check(lambda t: torch.clamp(t, -1, 1), x)
    check(lambda t: torch.clamp(t, min=0), x)
    check(lambda t: torch.clamp(t, max=0.5), x)
    check(lambda t: torch.clamp(t, 2, -2), x)  # min > max gives max
    lo, hi = values((4, 33), dtype, seed=3), values((1, 33), dtype, seed=4)
    check(torch.clamp, x, lo, hi)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_activations(dtype):
    x = values((7, 130), dtype)
    check(torch.relu, x)
    check(F.gelu, x)
    check(lambda t: F.gelu(t, approximate="tanh"), x)
    check(F.silu, x)
    check(F.hardtanh, x)
    check(lambda t: F.hardtanh(t, -0.5, 2.0), x)
    check(lambda t: F.leaky_relu(t, 0.2), x)
    check(F.elu, x)
    check(lambda t: F.elu(t, alpha=0.5), x)
    check(torch.selu, x)


def test_relu_on_integers_and_bool():
    check(torch.relu, values((9,), torch.int32))
    check(torch.relu, values((9,), torch.bool))


def test_activation_dtype_refusals_match_cpu():
    check(F.gelu, values((3,), torch.int64))
    check(F.silu, values((3,), torch.int32))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "hardtanh", "leaky_relu",
                                 "elu"])
def test_activation_gradients(dtype, act):
    fn = {"relu": torch.relu, "gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu,
          "sigmoid": torch.sigmoid, "tanh": torch.tanh, "hardtanh": F.hardtanh,
          "leaky_relu": lambda t: F.leaky_relu(t, 0.1), "elu": F.elu}[act]
    x = values((5, 40), dtype)

    def grad(t):
        t = t.detach().requires_grad_()
        out = fn(t)
        (out * 0 + out).backward(torch.ones_like(out))
        return t.grad

    check(grad, x, allow_fallback=("aten::elu_backward.grad_input",))


@pytest.mark.parametrize("onednn", [True, False], ids=["onednn-on", "onednn-off"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gelu_gradient_gives_cpus_zero_signs(onednn, dtype):
    """CPU's gelu_backward of a contiguous float32 input runs oneDNN's backward where its forward does
    (cpu_host.onednn_gelu_backward, asked of the running torch): d = (T + 0.5) + 0.5 * erf is exactly +0.0 where
    the erf is -1 (x below about -6), so dy * d takes dy's sign, where ATen's cdf + x * pdf is a tiny negative and
    gives the opposite sign for a zero or underflowing dy (the op suite's ci profile: gelu float32 [127, 127]
    tails). Strided and single-element inputs, and oneDNN off, take ATen's form."""
    xs = torch.tensor([-100.0, -30.0, -10.0, -7.0, -6.0, -5.5, -1.0, -0.0, 0.0, 2.0, -3e38, 3e38])
    gs = torch.tensor([1.0, -1.0, 0.0, -0.0, 1e-30, -1e-30])
    x = xs.repeat_interleave(len(gs)).repeat(3).to(dtype)
    g = gs.repeat(len(xs) * 3).to(dtype)
    with torch.backends.mkldnn.flags(enabled=onednn):
        for part in (slice(None), slice(None, None, 2), slice(0, 1)):  # contiguous, strided (on both), one element
            want = torch.ops.aten.gelu_backward(g[part], x[part])
            got = torch.ops.aten.gelu_backward(g.to("neuron")[part], x.to("neuron")[part]).cpu()
            zeros = (want == 0) & (got == 0)
            assert torch.equal(torch.signbit(got[zeros]), torch.signbit(want[zeros])), (x[part], got, want)
            torch.testing.assert_close(got, want, equal_nan=True)


def test_where_and_masked_fill():
    c = values((4, 9), torch.bool)
    x, y = values((4, 9), torch.float32, seed=1), values((1, 9), torch.float32, seed=2)
    check(torch.where, c, x, y)
    check(lambda cc, xx: torch.where(cc, xx, 0.0), c, x)
    check(lambda cc, xx: torch.where(cc, 1, xx), c, x)
    check(lambda xx, cc: xx.masked_fill(cc, -1.5), x, c)
    check(lambda xx, cc: xx.masked_fill(cc, torch.tensor(2.0)), x, c)
    check(lambda xx, cc: xx.clone().masked_fill_(cc[:1], 3), x, c)
    check(torch.where, values((3,), torch.float32), x, y)  # non-bool condition: same error as CPU


@pytest.mark.parametrize("dtype_from", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("dtype_to", ALL_DTYPES, ids=str)
def test_casts(dtype_from, dtype_to):
    x = values((3, 17), dtype_from, "normal")
    if dtype_from.is_floating_point and not dtype_to.is_floating_point and dtype_to != torch.bool:
        x = torch.clamp(x, -8, 8) if dtype_to != torch.uint8 else x.abs().clamp(max=8)
    check(lambda t: t.to(dtype_to), x)


def test_cast_rounds_to_nearest_even():
    x = torch.tensor([1.00390625, 1.01171875, 1.0 + 2**-9, -1.00390625, 3.4e38, 1e-40], dtype=torch.float32)
    check(lambda t: t.to(torch.bfloat16), x)
    check(lambda t: t.to(torch.float16), x)


def test_in_place_and_out_variants():
    a, b = values((4, 5), torch.float32, seed=1), values((4, 5), torch.float32, seed=2)
    check(lambda x, y: x.clone().add_(y, alpha=0.5), a, b)
    check(lambda x, y: x.clone().mul_(y), a, b)
    check(lambda x: x.clone().exp_(), a)
    check(lambda x, y: torch.add(x, y, out=torch.empty_like(x)), a, b)
    check(lambda x, y: torch.add(x, y, out=torch.empty(0, device=x.device)), a, b)
    check(lambda x: torch.sin(x, out=torch.empty(2, 2, device=x.device)), a)  # resized with a warning
    check(lambda x, y: x.clone().add_(y.t()), a, b)  # shape mismatch: same error class
    check(lambda x: x.clone().int().add_(0.5), a)  # float result into an int tensor: refused


def test_out_dtype_rules():
    a = values((3, 4), torch.int32)
    check(lambda x: torch.add(x, 1, out=torch.empty(3, 4, dtype=torch.float32, device=x.device)), a)
    check(lambda x: torch.sqrt(x, out=torch.empty(3, 4, dtype=torch.int32, device=x.device)), a)
    check(lambda x: torch.eq(x, 1, out=torch.empty(3, 4, dtype=torch.float32, device=x.device)), a)


def test_fill_and_zero():
    for dtype in ALL_DTYPES:
        check(lambda t: t.clone().fill_(3), values((5, 6), dtype))
        check(lambda t: t.clone().zero_(), values((5, 6), dtype))
    check(lambda t: t.clone().fill_(300), values((4,), torch.int8))  # overflow refused as on CPU
    check(lambda t: t.clone().fill_(torch.tensor(2.5)), values((4,), torch.float32))
    check(lambda t, v: t.clone().fill_(v), values((4,), torch.float32), values((), torch.float32))
    check(lambda t: torch.full((3, 129), 1.5, device=t.device), values((1,), torch.float32))
    check(lambda t: torch.zeros_like(t) + torch.ones_like(t), values((2, 3), torch.bfloat16))


def test_float64_takes_the_counted_fallback(fresh_stats):
    x = torch.randn(5, dtype=torch.float64)
    out = torch.exp(x.to("neuron"))
    assert torch.equal(out.cpu(), torch.exp(x))
    counts = fresh_stats.stats()["aten::exp.out"]
    assert counts["fallback"] == 1 and counts["native"] == 0


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "atan2"])
@pytest.mark.parametrize("dtypes", [(torch.bfloat16, torch.float32), (torch.float16, torch.float32),
                                    (torch.float16, torch.bfloat16)], ids=str)
def test_narrow_results_round_before_a_wider_out(name, dtypes):
    """TensorIterator computes in the common dtype and casts to out's: bf16 + bf16 into a float32 out is
    the bf16 sum, not the fp32 intermediate."""
    low, wide = dtypes
    a, b = values((3, 129), low, seed=1), values((3, 129), low, "positive", seed=2)
    fn = BINARY[name]
    check(lambda a, b: fn(a, b, out=torch.empty(3, 129, dtype=wide, device=a.device)), a, b, tol=(0.0, 0.0))


@pytest.mark.parametrize("call", [
    lambda host, dev, out: torch.add(host, dev, out=out),
    lambda host, dev, out: torch.mul(dev, host, out=out),
    lambda host, dev, out: torch.add(host, host, out=out),
], ids=["add-host-first", "mul-host-second", "add-both-host"])
def test_out_overload_refuses_a_host_tensor_with_dimensions(call):
    """Only 0-dim CPU tensors may join device tensors (TensorIterator's rule); out= overloads reach the kernel
    without PyTorch's device check, so the kernel raises PyTorch's RuntimeError, never numpy's ValueError."""
    host, dev = torch.randn(129), torch.randn(129, device="neuron")
    out = torch.empty(129, device="neuron")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        call(host, dev, out)
    torch.add(dev, torch.tensor(2.0), out=out)  # a 0-dim host tensor is a scalar, and the device stays usable
    assert torch.equal(out.cpu(), dev.cpu() + 2.0)


def _same_bits(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Bit-identical results (NaN at the same positions, whatever its payload)."""
    ints = {4: torch.int32, 2: torch.int16}[want.element_size()]
    nan = want.isnan()
    return torch.equal(got.isnan(), nan) and torch.equal(got[~nan].contiguous().view(ints),
                                                         want[~nan].contiguous().view(ints))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("is_result", [False, True])
def test_elu_backward_is_cpus_bits(dtype, is_result):
    """elu_backward's two lambdas (a NaN input: NaN gradient in CPU's vector loop, the gradient times scale in its
    scalar tail) with CPU's own float32 exp in each: bit-identical over a run with a tail and a strided one (scalar
    everywhere), NaN, infinities and -0.0 included. Under the dtype tolerances an exp an ULP off would pass."""
    n = 3 * 64 + 7
    x = torch.linspace(-12, 4, n, dtype=torch.float32).to(dtype)
    x[::9], x[1::13], x[2::17] = float("nan"), -0.0, float("-inf")
    g = torch.linspace(-3, 3, n, dtype=torch.float32).to(dtype)
    for alpha, scale, input_scale in ((1.0, 1.0, 1.0), (1.6732632423543772, 1.0507009873554805, 1.0), (0.5, 1.0, 2.0)):
        for step in (1, 2):
            want = torch.ops.aten.elu_backward(g[::step], alpha, scale, input_scale, is_result, x[::step])
            got = torch.ops.aten.elu_backward(g.to("neuron")[::step], alpha, scale, input_scale, is_result,
                                              x.to("neuron")[::step]).cpu()
            assert _same_bits(got, want), (alpha, step)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_shrinks_follow_cpus_vector_and_scalar_lambdas(dtype):
    """softshrink inside [-l, l] is +0.0 in CPU's vector loop and x * 0 (-0.0 for a negative x) in its scalar tail;
    the shrinks' gradient of a NaN input is 0 in the vector loop, the gradient in the tail: bit-identical in a
    40-element run (body and tail) and a strided one (all tail)."""
    x = torch.linspace(-1, 1, 40, dtype=torch.float32).to(dtype)
    x[::7] = float("nan")
    x[3::11] = -0.0
    g = torch.linspace(-2, 2, 40, dtype=torch.float32).to(dtype)
    for step in (1, 2):
        xs, gs, xd, gd = x[::step], g[::step], x.to("neuron")[::step], g.to("neuron")[::step]
        assert _same_bits(torch.ops.aten.softshrink(xd, 0.5).cpu(), torch.ops.aten.softshrink(xs, 0.5)), step
        for op in (torch.ops.aten.hardshrink_backward, torch.ops.aten.softshrink_backward):
            assert _same_bits(op(gd, xd, 0.5).cpu(), op(gs, xs, 0.5)), (op, step)


# A broadcast operand decides the output's dim order where it has the dims (TensorIterator sees it expanded, stride
# 0 where it broadcasts): (operand layouts, shapes) the designed op suite found laid out otherwise.
BROADCAST_LAYOUTS = {  # (bases, views): the views made on each device from the bases moved there
    "transposed_beside_overlapping": ((torch.zeros(13), torch.randn(3, 5)),
                                      lambda a, b: (a.as_strided((3, 5, 3), (1, 1, 1)), b.t())),
    "offset_beside_channels_last": ((torch.randn(5 * 5 + 3), torch.randn(2, 5, 7, 5)),
                                    lambda a, b: (a[3:].view(5, 5, 1), b.permute(0, 3, 1, 2))),
    "expanded_beside_channels_last": ((torch.randn(2, 5, 2, 1), torch.randn(2, 2, 512, 5)),
                                      lambda a, b: (a.expand(2, 5, 2, 512), b.permute(0, 3, 1, 2))),
}


@pytest.mark.parametrize("case", BROADCAST_LAYOUTS, ids=list(BROADCAST_LAYOUTS))
def test_a_broadcast_operand_takes_part_in_the_output_layout(case):
    """``kernels.registry._ti_restride`` passes every operand, a broadcast one expanded (it passed only the operands
    of the output's shape: add of an offset (5, 5, 1) and a channels-last (2, 5, 5, 7) came back channels-last,
    CPU's is contiguous)."""
    bases, views = BROADCAST_LAYOUTS[case]
    a, b = views(*bases)
    da, db = views(*(t.to("neuron") for t in bases))
    for fn in (torch.add, torch.logical_xor, lambda x, y: torch.add(x, y, out=torch.empty(0, device=x.device))):
        expected, got = fn(a, b), fn(da, db)
        assert got.stride() == expected.stride(), (got.stride(), expected.stride())
        assert torch.equal(got.cpu(), expected)


def test_pow_of_a_scalar_base_is_contiguous_as_cpus():
    """pow.Scalar's meta sets its output with no strides: CPU's ``pow(2.0, x)`` of a channels-last x is contiguous
    (``registry.CONTIGUOUS_RESULTS``), while a 0-dim tensor base gives TensorIterator's channels-last result."""
    host = torch.rand(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    dev = host.to("neuron")
    assert torch.pow(2.0, dev).stride() == torch.pow(2.0, host).stride() == (60, 20, 5, 1)
    out = torch.empty(0, device="neuron")
    torch.pow(2.0, dev, out=out)
    assert out.stride() == (60, 20, 5, 1)
    assert torch.pow(torch.tensor(2.0), dev).stride() == torch.pow(torch.tensor(2.0), host).stride()
    check(lambda t: torch.pow(2.0, t), host)


PROMOTING = {
    "ge": torch.ge, "eq": torch.eq, "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "atan2": torch.atan2, "maximum": torch.maximum, "logical_and": torch.logical_and, "logical_xor": torch.logical_xor,
    "floor_divide": lambda a, b, **out: torch.div(a, b, rounding_mode="floor", **out),
    # the binary families registered outside binary.py (registry.promotes_to_result)
    "fmax": torch.fmax, "fmin": torch.fmin, "copysign": torch.copysign, "hypot": torch.hypot,
    "logaddexp": torch.logaddexp, "logaddexp2": torch.logaddexp2, "xlogy": torch.xlogy, "nextafter": torch.nextafter,
    "gcd": torch.gcd, "lcm": torch.lcm, "bitwise_left_shift": torch.bitwise_left_shift,
    "bitwise_right_shift": torch.bitwise_right_shift,
}
INTEGRAL = {"gcd", "lcm", "bitwise_left_shift", "bitwise_right_shift"}  # CPU refuses a float common dtype


def _cast_operands(device: str, op: str = "") -> tuple:
    small = torch.arange(1, 3, dtype=torch.uint8).reshape(1, 2, 1).to(device).expand(1, 2, 128)
    other = (torch.rand(133, generator=torch.Generator().manual_seed(4)) + 0.5)
    other = (other * 5).to(torch.int32) if op in INTEGRAL else other
    return small, other.to(device).as_strided((5, 2, 128), (1, 1, 1))


@pytest.mark.parametrize("op", PROMOTING, ids=list(PROMOTING))
def test_a_cast_operand_lays_out_the_result_as_its_cast_copy(op):
    """CPU's binary, comparison and logical iterators cast an operand of another dtype to the common one before
    they lay out the result (``promote_inputs_to_common_dtype``), so an expanded uint8 operand takes part as its
    dense cast copy: ``ge`` of an expanded (1, 2, 128) uint8 and an overlapping (5, 2, 128) float32 into an empty
    out= is (1, 5, 10) on CPU; the device laid it out from the expanded view, (2, 1, 10). Checked on an out= the
    call resizes and on the functional form of the ops whose functional form ATen routes through it (logical_*);
    a structured op's functional form is laid out by ATen's meta on the device, before any kernel runs (below)."""
    fn = PROMOTING[op]
    host, dev = _cast_operands("cpu", op), _cast_operands("neuron", op)
    expected = fn(*host)
    out_cpu, out_dev = torch.empty(0, dtype=expected.dtype), torch.empty(0, dtype=expected.dtype, device="neuron")
    fn(*host, out=out_cpu)
    fn(*dev, out=out_dev)
    assert out_dev.stride() == out_cpu.stride()
    torch.testing.assert_close(out_dev.cpu(), out_cpu)
    if op.startswith("logical_"):
        assert fn(*dev).stride() == expected.stride()
