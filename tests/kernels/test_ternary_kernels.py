"""addcmul, addcdiv and lerp (AdamW's update) against CPU eager: every overload (functional, out=,
in-place), type promotion, broadcasting, layouts, host scalars, special values and CPU's errors.

Float results are compared bit for bit (``EXACT``): CPU rounds addcmul and lerp once through a fused
multiply-add, and a kernel that rounded the product first would differ in the last bit of about a
quarter of the elements.
"""

import pytest
import torch

from diff import FLOATS, INTS, LAYOUTS, check, pair, values

EXACT = (0.0, 0.0)
OPS = {
    "addcmul": lambda x, a, b, **kw: torch.addcmul(x, a, b, **kw),
    "addcdiv": lambda x, a, b, **kw: torch.addcdiv(x, a, b, **kw),
}


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("value", [1, 0.1, -3.3, 1e-3, True])
def test_float_results_are_bit_exact(op, dtype, value):
    x, a, b = (values((37, 129), dtype, seed=s) for s in (1, 2, 3))
    check(lambda x, a, b: OPS[op](x, a, b, value=value), x, a, b, tol=EXACT)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_special_values(op, dtype):
    special = values((4, 12), dtype, "special")
    normal = values((4, 12), dtype, seed=4)
    for args in ((special, normal, normal), (normal, special, normal), (normal, normal, special)):
        check(lambda x, a, b: OPS[op](x, a, b, value=0.5), *args, tol=EXACT)


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("value", [1, 3, -2, 2.7, -2.7, True, 300])
def test_addcmul_integers_wrap_and_truncate_value(dtype, value):
    x, a, b = (values((5, 33), dtype, "full", seed=s) for s in (1, 2, 3))
    check(lambda x, a, b: torch.addcmul(x, a, b, value=value), x, a, b)


def test_bool_and_integer_errors():
    b = values((7,), torch.bool)
    check(torch.addcmul, b, b, b)  # NotImplementedError: "addcmul_cpu_out" not implemented for 'Bool'
    i = values((7,), torch.int32)
    f = values((7,), torch.float32)
    check(torch.addcdiv, i, i, i)  # integer division is refused
    check(torch.addcdiv, f, i, b)
    check(torch.addcdiv, f, b, b)
    check(torch.addcdiv, i, f, i)  # one float divisor operand: true division in float
    check(torch.addcdiv, b, f, f)
    check(lambda x: torch.addcmul(x, x, x, value=1e40), f)  # value overflows float
    check(lambda x: torch.addcmul(x, x, x, value=1e40), f.half())  # (checked against float, CPU's opmath)
    check(lambda x: torch.addcmul(x, x, x, value=7e4), f.half())  # fits float: inf in half, not an error
    check(lambda x: torch.addcmul(x, x, x, value=300), i.to(torch.int8))
    check(lambda x: torch.addcmul(x, x, x, value=-2.5), i.to(torch.uint8))
    check(lambda x: torch.addcmul(x, x, x, value=1j), f)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("dtypes", [(torch.int32, torch.float16, torch.int64), (torch.bfloat16, torch.float32,
                                    torch.float32), (torch.uint8, torch.int8, torch.int16),
                                    (torch.bfloat16, torch.bfloat16, torch.int64)], ids=str)
def test_type_promotion(op, dtypes):
    x, a, b = (values((3, 17), dt, "positive", seed=s) for s, dt in enumerate(dtypes))
    check(lambda x, a, b: OPS[op](x, a, b, value=2), x, a, b)


@pytest.mark.parametrize("op", sorted(OPS))
def test_zero_dim_and_host_scalar_operands(op):
    x = values((4, 9), torch.bfloat16, seed=1)
    t = values((), torch.float32, "positive", seed=2)  # a 0-dim tensor of a higher type does not promote
    check(lambda x, t: OPS[op](x, t, t, value=0.1), x, t, tol=EXACT)
    check(lambda x, t: OPS[op](t, x, t, value=0.1), x, t, tol=EXACT)



def test_host_scalar_operands():
    """A CPU 0-dim tensor next to neuron tensors: addcmul's TensorIterator takes it (as on CUDA),
    addcdiv's does not (PyTorch raises in its meta function; the out= kernel raises the same)."""
    x = values((4, 9), torch.bfloat16, seed=1)
    host = torch.tensor(1.7)
    check(lambda x: torch.addcmul(x, host, x, value=0.3), x, tol=EXACT)
    check(lambda x: torch.addcmul(host, x, x.flip(0), value=0.3), x, tol=EXACT)
    d = x.to("neuron")
    for call in (lambda: torch.addcdiv(d, host, d), lambda: torch.addcdiv(d, d, host, out=torch.empty_like(d))):
        with pytest.raises(RuntimeError, match="same device"):
            call()


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("shapes", [((3, 1), (1, 4), (4,)), ((), (2, 3), (3, 1, 1)), ((129, 1), (1, 513), ()),
                                    ((0, 3), (3,), (1, 3))], ids=str)
def test_broadcasting(op, shapes):
    x, a, b = (values(s, torch.float32, "positive", seed=i) for i, s in enumerate(shapes))
    check(lambda x, a, b: OPS[op](x, a, b, value=-0.7), x, a, b, tol=EXACT)


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts(op, layout):
    (x, xd), (a, ad), (b, bd) = (pair((6, 130), torch.float32, layout, "positive", seed=s) for s in (1, 2, 3))
    check(lambda x, a, b: OPS[op](x, a, b, value=0.25), x, a, b, neuron_args=(xd, ad, bd), tol=EXACT)


@pytest.mark.parametrize("op", sorted(OPS))
def test_out_and_inplace_variants(op):
    x, a, b = (values((5, 7), torch.float32, "positive", seed=s) for s in (1, 2, 3))
    fn = getattr(torch, op)
    check(lambda x, a, b: fn(x, a, b, value=0.5, out=torch.empty(5, 7, device=x.device)), x, a, b, tol=EXACT)
    check(lambda x, a, b: fn(x, a, b, value=0.5, out=torch.empty(0, device=x.device)), x, a, b, tol=EXACT)
    check(lambda x, a, b: fn(x, a, b, out=torch.empty(5, 7, dtype=torch.int64, device=x.device)), x, a, b)
    check(lambda x, a, b: getattr(x, op + "_")(a, b, value=-2.0), x, a, b, tol=EXACT)
    check(lambda x, a, b: (getattr(x, op + "_")(a, b, value=-2.0), x)[1], x, a, b, tol=EXACT)
    check(lambda x, a: getattr(x, op + "_")(x, a), x, a, tol=EXACT)  # self aliased with an operand: allowed
    check(lambda x, a, b: getattr(x[:1], op + "_")(a, b), x, a, b)  # needs broadcasting self: error
    flat = values((35,), torch.float32, "positive")
    check(lambda x: getattr(x[:20], op + "_")(x[5:25], x[:20]), flat)  # partial overlap: error
    i = values((5, 7), torch.int64, "positive")
    check(lambda i, x: getattr(i, op + "_")(x, x), i, x)  # float result into a Long self: error


def test_adamw_update_sequence():
    """AdamW's per-parameter update (torch.optim.adamw._single_tensor_adamw), on bf16 and fp32 state."""
    for dtype in (torch.float32, torch.bfloat16):
        p, g, m, v = (values((64, 33), dtype, seed=s) for s in range(4))
        v = v.abs()

        def step(p, g, m, v):
            p.mul_(1 - 1e-3 * 1e-2)
            m.lerp_(g, 1 - 0.9)
            v.mul_(0.999).addcmul_(g, g, value=1 - 0.999)
            denom = (v.sqrt() / (1 - 0.999) ** 0.5).add_(1e-8)
            p.addcdiv_(m, denom, value=-1e-3 / (1 - 0.9))
            return p, m, v

        check(step, p, g, m, v)


# --- lerp ------------------------------------------------------------------------------------------

WEIGHTS = [0.0, 0.1, 0.3, 0.49999997, 0.5, 0.7, 1.0, 1.5, -0.2, -0.6, float("nan"), float("inf"), 2]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("weight", WEIGHTS, ids=str)
def test_lerp_scalar_weight_is_bit_exact(dtype, weight):
    start, end = values((37, 129), dtype, seed=1), values((37, 129), dtype, seed=2)
    check(lambda s, e: torch.lerp(s, e, weight), start, end, tol=EXACT)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_lerp_tensor_weight_is_bit_exact(dtype):
    start, end = values((37, 129), dtype, seed=1), values((37, 129), dtype, seed=2)
    weight = (torch.rand(37, 129, generator=torch.Generator().manual_seed(3)) * 2 - 0.5).to(dtype)
    weight[0, :len(WEIGHTS)] = torch.tensor(WEIGHTS, dtype=torch.float32).to(dtype)
    check(torch.lerp, start, end, weight, tol=EXACT)
    special = values((37, 129), dtype, "special")
    check(torch.lerp, special, end, weight, tol=EXACT)
    check(torch.lerp, start, special, weight, tol=EXACT)
    check(torch.lerp, start, end, special, tol=EXACT)


def test_lerp_weight_dtypes_and_errors():
    f = values((3, 5), torch.float32, seed=1)
    e = values((3, 5), torch.float32, seed=2)
    b = values((3, 5), torch.bfloat16, seed=3)
    check(torch.lerp, b, b.flip(0), torch.tensor(0.3))  # a 0-dim float weight is rounded to bf16 first
    check(lambda s, x: torch.lerp(s, x, 0.3), b, b.flip(0))  # a Scalar weight is not
    check(torch.lerp, f, e, torch.tensor(0.3, dtype=torch.float16))
    check(torch.lerp, f, e, torch.tensor(1))
    host = torch.tensor(0.3, dtype=torch.float16)  # a CPU scalar weight stays on the host
    check(lambda s, x: torch.lerp(s, x, host), f, e)
    check(torch.lerp, f, e, values((5,), torch.float16))  # a dimensioned weight must match: error
    check(torch.lerp, f, b, 0.5)  # end must match: error
    check(torch.lerp, f, e, values((2, 5), torch.float32))  # shapes: error
    i = values((3, 5), torch.int64)
    check(lambda x: torch.lerp(x, x, 0.5), i)
    check(torch.lerp, i, i, i)
    check(lambda x: torch.lerp(x, x, 0.5), values((3,), torch.bool))
    check(lambda x: torch.lerp(x, x, 1e40), f.half())
    check(lambda x: torch.lerp(x, x, 1e6), f.half())


def test_lerp_overloads_broadcasting_and_layouts():
    s, e = values((4, 1, 6), torch.float32, seed=1), values((3, 1), torch.float32, seed=2)
    w = values((6,), torch.float32, seed=3)
    check(torch.lerp, s, e, w, tol=EXACT)
    check(lambda s, e, w: torch.lerp(s, e, w, out=torch.empty(0, device=s.device)), s, e, w, tol=EXACT)
    check(lambda s, e: torch.lerp(s, e, 0.7, out=torch.empty(4, 3, 6, device=s.device)), s, e, tol=EXACT)
    big = values((4, 3, 6), torch.float32, seed=4)
    check(lambda s, e, w: (s.lerp_(e, w), s)[1], big, e, w, tol=EXACT)
    check(lambda s, e: s.lerp_(e, 0.2), big, e, tol=EXACT)
    check(lambda s, e: s.lerp_(e, 0.2), s, big)  # self would need broadcasting: error
    check(lambda s, e: torch.lerp(s, e, 0.2, out=torch.empty(4, 3, 6, dtype=torch.int32, device=s.device)), s, e)
    check(lambda s, e: torch.lerp(s, e, 0.2, out=torch.empty(4, 3, 6, device=s.device)), s.bfloat16(),
          e.bfloat16(), tol=EXACT)
    check(torch.lerp, values((), torch.float32), values((), torch.float32, seed=2), torch.tensor(0.4))
    for layout in LAYOUTS:
        (a, ad), (b, bd), (c, cd) = (pair((6, 130), torch.float32, layout, seed=i) for i in (1, 2, 3))
        check(torch.lerp, a, b, c, neuron_args=(ad, bd, cd), tol=EXACT)
        check(lambda a, b: torch.lerp(a, b, 0.6), a, b, neuron_args=(ad, bd), tol=EXACT)
