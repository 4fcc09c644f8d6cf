"""Random sampling, dropout and value factories on neuron.

Sampling: determinism from (seed, offset, shape), generator offsets, state replay, explicit and per-core
generators, loose statistical bounds on large samples, dtypes, shapes and layouts, and CPU's argument
errors. Dropout: mask/scale semantics against a CPU reference built from the returned mask, and autograd.
Factories (arange, linspace, logspace, eye, full, scalar_tensor, ...): bit-exact against CPU.
"""

import math
import warnings

import pytest
import torch

from device_impl import dispatch
from device_impl.dispatch import TABLE, Tier
from diff import EDGE_SHAPES, FLOATS, INTS, check, values

F = torch.nn.functional
DEV = "neuron"
EXACT = (0.0, 0.0)


def no_fallback(fn, *args, **kwargs):
    """Run ``fn`` and assert no op took the CPU fallback."""
    dispatch.reset_stats()
    result = fn(*args, **kwargs)
    fallbacks = {op: c["fallback"] for op, c in dispatch.stats().items() if c["fallback"]}
    assert not fallbacks, f"ops fell back to the CPU: {fallbacks}"
    return result


# (name, sampler(shape, dtype, generator) -> neuron tensor, float dtypes only)
SAMPLERS = {
    "uniform_": lambda s, d, g: torch.empty(s, dtype=d, device=DEV).uniform_(-2, 3, generator=g),
    "normal_": lambda s, d, g: torch.empty(s, dtype=d, device=DEV).normal_(1, 2, generator=g),
    "bernoulli_": lambda s, d, g: torch.empty(s, dtype=d, device=DEV).bernoulli_(0.3, generator=g),
    "bernoulli_tensor": lambda s, d, g: torch.bernoulli(torch.full(s, 0.6, device=DEV), generator=g).to(d),
    "exponential_": lambda s, d, g: torch.empty(s, dtype=d, device=DEV).exponential_(2.0, generator=g),
    "geometric_": lambda s, d, g: torch.empty(s, dtype=d, device=DEV).geometric_(0.3, generator=g),
    "log_normal_": lambda s, d, g: torch.empty(s, dtype=d, device=DEV).log_normal_(0.5, 0.5, generator=g),
    "cauchy_": lambda s, d, g: torch.empty(s, dtype=d, device=DEV).cauchy_(0.0, 1.0, generator=g),
    "random_": lambda s, d, g: torch.empty(s, dtype=d, device=DEV).random_(-7, 100, generator=g),
    "rand": lambda s, d, g: torch.rand(s, dtype=d, device=DEV, generator=g),
    "randn": lambda s, d, g: torch.randn(s, dtype=d, device=DEV, generator=g),
    "randint": lambda s, d, g: torch.randint(3, 50, s, dtype=d, device=DEV, generator=g),
    "normal_tensor": lambda s, d, g: torch.normal(torch.zeros(s, dtype=d, device=DEV),
                                                  torch.ones(s, dtype=d, device=DEV), generator=g),
    "dropout": lambda s, d, g: torch.native_dropout(torch.ones(s, dtype=d, device=DEV), 0.4, True)[1],
}


def sample(name, shape=(3, 129), dtype=torch.float32, generator=None):
    return no_fallback(SAMPLERS[name], shape, dtype, generator).cpu()


# --- determinism, generators, state ---------------------------------------------------

@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_same_seed_same_values_different_seed_different_values(name):
    torch.neuron.manual_seed(11)
    a = sample(name)
    torch.neuron.manual_seed(11)
    b = sample(name)
    torch.neuron.manual_seed(12)
    c = sample(name)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert not torch.equal(sample(name), b)  # the next draw moves on


@pytest.mark.parametrize("name", ["uniform_", "normal_", "random_", "bernoulli_"])
def test_values_depend_only_on_seed_offset_and_shape(name):
    g = torch.Generator(DEV)
    g.manual_seed(3)
    g.set_offset(400)
    a = sample(name, (1000,), generator=g)
    torch.rand(77, device=DEV)  # other draws on the default generator change nothing
    g.manual_seed(3)
    g.set_offset(400)
    assert torch.equal(sample(name, (1000,), generator=g), a)


def _reserved(draws):
    return (draws + 3) // 4 * 4


def test_generator_offset_advances_by_the_draws_used():
    g = torch.Generator(DEV).manual_seed(0)
    expected = 0
    for fn, draws in [
        (lambda: torch.rand(10, device=DEV, generator=g), 10),
        (lambda: torch.randn(3, 5, device=DEV, generator=g), 15),
        (lambda: torch.empty(7, device=DEV).bernoulli_(0.5, generator=g), 7),
        (lambda: torch.randint(0, 5, (9,), device=DEV, generator=g), 9),
        (lambda: torch.empty(6, dtype=torch.int64, device=DEV).random_(generator=g), 12),  # 63-bit range: 2 draws
        (lambda: torch.randperm(100, device=DEV, generator=g), 100),
        (lambda: torch.multinomial(torch.ones(2, 5, device=DEV), 3, generator=g), 10),
        (lambda: torch.multinomial(torch.ones(2, 5, device=DEV), 4, True, generator=g), 8),
        (lambda: torch.empty(0, device=DEV).uniform_(generator=g), 0),
    ]:
        fn()
        expected += _reserved(draws) if draws else 0
        assert g.get_offset() == expected


def _state_offset():
    """The default generator's offset, from its 16-byte state (seed, offset)."""
    return int.from_bytes(bytes(torch.neuron.get_rng_state()[8:].tolist()), "little")


def test_default_generator_offset_and_dropout_draws():
    torch.neuron.manual_seed(1)
    assert _state_offset() == 0
    F.dropout(torch.ones(33, device=DEV), 0.5)
    assert _state_offset() == _reserved(33)
    torch.empty(5, dtype=torch.float16, device=DEV).random_()
    assert _state_offset() == _reserved(33) + _reserved(5)


def test_rng_state_replays_every_sampler():
    torch.neuron.manual_seed(99)
    state = torch.neuron.get_rng_state()
    first = [sample(n) for n in sorted(SAMPLERS)]
    torch.neuron.set_rng_state(state)
    second = [sample(n) for n in sorted(SAMPLERS)]
    for n, a, b in zip(sorted(SAMPLERS), first, second):
        assert torch.equal(a, b), n


def test_torch_manual_seed_reaches_the_device():
    torch.manual_seed(2024)
    a = torch.rand(50, device=DEV).cpu()
    p = torch.randperm(50, device=DEV).cpu()
    torch.manual_seed(2024)
    assert torch.equal(torch.rand(50, device=DEV).cpu(), a)
    assert torch.equal(torch.randperm(50, device=DEV).cpu(), p)


def test_explicit_generator_leaves_the_default_alone():
    torch.neuron.manual_seed(5)
    before = torch.neuron.get_rng_state()
    g = torch.Generator(DEV).manual_seed(5)
    a = torch.randn(100, device=DEV, generator=g).cpu()
    assert torch.equal(torch.neuron.get_rng_state(), before)
    assert torch.equal(torch.randn(100, device=DEV).cpu(), a)  # same seed, same offset: same numbers


@pytest.mark.parametrize("fn", [
    lambda g: torch.rand(4, device=DEV, generator=g),
    lambda g: torch.empty(4, device=DEV).normal_(generator=g),
    lambda g: torch.empty(4, device=DEV).bernoulli_(0.5, generator=g),
    lambda g: torch.empty(4, device=DEV).random_(generator=g),
    lambda g: torch.randint(0, 3, (4,), device=DEV, generator=g),
    lambda g: torch.randperm(4, device=DEV, generator=g),
    lambda g: torch.multinomial(torch.ones(4, device=DEV), 2, generator=g),
    lambda g: torch.empty(4, device=DEV).exponential_(generator=g),
], ids=["rand", "normal_", "bernoulli_", "random_", "randint", "randperm", "multinomial", "exponential_"])
def test_cpu_generator_is_refused(fn):
    with pytest.raises(RuntimeError, match="neuron"):
        fn(torch.Generator())


def test_cores_have_independent_generators():
    torch.neuron.manual_seed_all(8)
    first = torch.rand(64, device="neuron:1").cpu()
    torch.neuron.manual_seed_all(8)
    torch.rand(1000, device="neuron:0")
    torch.randperm(10, device="neuron:0")
    assert torch.equal(torch.rand(64, device="neuron:1").cpu(), first)
    assert torch.rand(4, device="neuron:1").device == torch.device("neuron", 1)


# --- distributions ----------------------------------------------------------------------------

N = 200_000


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_continuous_distributions(dtype):
    torch.neuron.manual_seed(0)
    tol = 0.02 if dtype == torch.float32 else 0.05
    u = torch.empty(N, dtype=dtype, device=DEV).uniform_(2, 5).cpu().double()
    assert u.min() >= 2 and u.max() < 5  # a value rounding up to `to` becomes `from`, as on CPU
    assert abs(u.mean() - 3.5) < tol and abs(u.std() - 3 / math.sqrt(12)) < tol
    r = torch.rand(N, dtype=dtype, device=DEV).cpu().double()
    assert r.min() >= 0 and r.max() < 1  # narrow floats never round up to 1 (CPU keeps `digits` bits)
    n = torch.empty(N, dtype=dtype, device=DEV).normal_(-1, 3).cpu().double()
    assert abs(n.mean() + 1) < 3 * tol and abs(n.std() - 3) < 3 * tol
    z = torch.randn(N, dtype=dtype, device=DEV).cpu().double()
    assert abs(z.mean()) < tol and abs(z.std() - 1) < tol and abs((z.abs() < 1).double().mean() - 0.6827) < 0.01
    e = torch.empty(N, dtype=dtype, device=DEV).exponential_(4.0).cpu().double()
    assert e.min() >= 0 and abs(e.mean() - 0.25) < tol and abs(e.std() - 0.25) < tol
    ln = torch.empty(N, dtype=dtype, device=DEV).log_normal_(1.0, 0.5).cpu().double()
    assert ln.min() > 0 and abs(ln.log().mean() - 1.0) < tol and abs(ln.log().std() - 0.5) < tol
    c = torch.empty(N, dtype=dtype, device=DEV).cauchy_(2.0, 0.5).cpu().double()
    q = torch.quantile(c[:100_000], torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert torch.allclose(q, torch.tensor([1.5, 2.0, 2.5], dtype=torch.float64), atol=3 * tol)


@pytest.mark.parametrize("dtype", FLOATS + (torch.int32, torch.uint8, torch.bool), ids=str)
def test_bernoulli_frequencies(dtype):
    torch.neuron.manual_seed(1)
    for p in (0.0, 0.1, 0.5, 0.9, 1.0):
        b = torch.empty(N, dtype=dtype, device=DEV).bernoulli_(p).cpu()
        assert b.dtype == dtype
        assert set(b.double().unique().tolist()) <= {0.0, 1.0}
        assert abs(b.double().mean().item() - p) < 0.01
    probs = torch.linspace(0, 1, 11).repeat(20_000)
    b = torch.bernoulli(probs.to(dtype if dtype.is_floating_point else torch.float32).to(DEV)).cpu().double()
    freq = b.view(-1, 11).mean(0)
    assert torch.allclose(freq, torch.linspace(0, 1, 11, dtype=torch.float64), atol=0.02)
    assert freq[0] == 0 and freq[-1] == 1


def test_bernoulli_broadcast_probabilities():
    torch.neuron.manual_seed(2)
    p = torch.tensor([0.0, 0.5, 1.0], device=DEV)
    b = torch.empty(50_000, 3, device=DEV).bernoulli_(p).cpu()
    assert b[:, 0].sum() == 0 and b[:, 2].sum() == 50_000 and abs(b[:, 1].mean() - 0.5) < 0.01
    assert torch.bernoulli(torch.full((4, 5), 0.5, device=DEV), p=1.0).cpu().eq(1).all()  # bernoulli.p


def test_geometric_distribution():
    torch.neuron.manual_seed(3)
    for dtype in (torch.float32, torch.int64, torch.int32):
        g = torch.empty(N, dtype=dtype, device=DEV).geometric_(0.25).cpu().double()
        assert g.min() >= 1 and g.eq(g.round()).all()
        assert abs(g.mean() - 4.0) < 0.05 and abs((g == 1).double().mean() - 0.25) < 0.01


RANDOM_DEFAULT_RANGE = {torch.float32: 2 ** 24, torch.float16: 2 ** 11, torch.bfloat16: 2 ** 8,
                        torch.int64: 2 ** 63 - 1, torch.int32: 2 ** 31 - 1, torch.int16: 2 ** 15 - 1,
                        torch.int8: 127, torch.uint8: 255, torch.bool: 1}


@pytest.mark.parametrize("dtype", sorted(RANDOM_DEFAULT_RANGE, key=str), ids=str)
def test_random_default_covers_the_dtype_range(dtype):
    torch.neuron.manual_seed(4)
    x = no_fallback(lambda: torch.empty(N, dtype=dtype, device=DEV).random_()).cpu()
    top = RANDOM_DEFAULT_RANGE[dtype]
    xs = x.double() if dtype != torch.int64 else x
    assert xs.min() >= 0 and xs.max() <= top
    if top < 2 ** 20:
        assert xs.max() >= top * 0.99 and xs.min() <= top * 0.01
    else:
        assert xs.max() > top * 0.99 and xs.min() < top * 0.01
    if dtype == torch.uint8:
        assert x.unique().numel() == 256


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.int8, torch.uint8),
                         ids=str)
def test_random_from_to_ranges(dtype):
    torch.neuron.manual_seed(5)
    lo = 0 if dtype == torch.uint8 else -5
    x = torch.empty(N, dtype=dtype, device=DEV).random_(lo, 12).cpu().long()
    assert set(x.unique().tolist()) == set(range(lo, 12))
    r = torch.randint(7, (N,), dtype=dtype, device=DEV).cpu().long()
    assert set(r.unique().tolist()) == set(range(7))
    counts = torch.bincount(r, minlength=7).double() / N
    assert torch.allclose(counts, torch.full((7,), 1 / 7, dtype=torch.float64), atol=0.01)


def test_random_int64_wide_ranges():
    torch.neuron.manual_seed(6)
    full = torch.empty(N, dtype=torch.int64, device=DEV).random_(-2 ** 63, None).cpu()
    assert (full < 0).double().mean().sub(0.5).abs() < 0.01 and full.max() > 2 ** 62 and full.min() < -2 ** 62
    above = torch.empty(N, dtype=torch.int64, device=DEV).random_(-5, None).cpu()  # span 2^63 + 5
    assert above.min() >= -5 and above.max() > 2 ** 62
    wide = torch.empty(N, dtype=torch.int64, device=DEV).random_(-2 ** 62, 2 ** 62 + 3).cpu()  # span > 2^62
    assert wide.min() >= -2 ** 62 and wide.max() < 2 ** 62 + 3 and (wide < 0).double().mean().sub(0.5).abs() < 0.01
    top = torch.empty(N, dtype=torch.int64, device=DEV).random_(2 ** 63 - 10, None).cpu()
    assert set(top.unique().tolist()) == set(range(2 ** 63 - 10, 2 ** 63))
    f = torch.empty(1000, dtype=torch.float32, device=DEV).random_(-2 ** 63, None).cpu()
    assert f.abs().max() > 2 ** 60


@pytest.mark.parametrize("n", [0, 1, 2, 127, 128, 129, 2048, 2049, 300_001], ids=str)
def test_randperm_is_a_permutation(n):
    torch.neuron.manual_seed(7)
    p = no_fallback(lambda: torch.randperm(n, device=DEV)).cpu()
    assert p.dtype == torch.int64 and p.shape == (n,)
    assert torch.equal(p.sort().values, torch.arange(n))
    if n > 100:
        assert not torch.equal(p, torch.arange(n))
        assert abs(p[: n // 2].double().mean() - (n - 1) / 2) < n * 0.02


def test_randperm_beyond_sbuf_is_a_uniform_permutation():
    n = 1_100_000  # the two-level bucket permutation
    torch.neuron.manual_seed(8)
    p = torch.randperm(n, device=DEV).cpu()
    assert torch.equal(p.sort().values, torch.arange(n))
    chunks = p.view(11, -1).double().mean(1)  # every region holds values from everywhere
    assert (chunks - (n - 1) / 2).abs().max() < n * 0.01
    torch.neuron.manual_seed(8)
    assert torch.equal(torch.randperm(n, device=DEV).cpu(), p)


@pytest.mark.parametrize("dtype", (torch.int32, torch.int16, torch.uint8, torch.float32, torch.float16,
                                   torch.bfloat16), ids=str)
def test_randperm_dtypes(dtype):
    n = 200 if dtype != torch.uint8 else 256
    p = no_fallback(lambda: torch.randperm(n, dtype=dtype, device=DEV)).cpu()
    assert p.dtype == dtype
    assert torch.equal(p.long().sort().values, torch.arange(n).to(dtype).long().sort().values)


def test_randperm_out_and_position_uniformity():
    out = torch.empty(5, dtype=torch.int32, device=DEV)
    torch.randperm(10, out=out)
    assert out.shape == (10,) and torch.equal(out.cpu().sort().values, torch.arange(10, dtype=torch.int32))
    torch.neuron.manual_seed(9)
    firsts = torch.stack([torch.randperm(5, device=DEV).cpu()[0] for _ in range(2000)])
    assert (torch.bincount(firsts, minlength=5).double() / 2000 - 0.2).abs().max() < 0.04


def test_multinomial():
    torch.neuron.manual_seed(10)
    probs = torch.tensor([[0.0, 1.0, 2.0, 0.0, 7.0], [5.0, 0.0, 0.0, 5.0, 0.0]])
    dev = probs.to(DEV)
    s = no_fallback(lambda: torch.multinomial(dev, 3)).cpu()  # without replacement: distinct, nonzero classes
    assert s.shape == (2, 3) and s.dtype == torch.int64
    assert sorted(s[0].tolist()) == [1, 2, 4]
    w = no_fallback(lambda: torch.multinomial(dev, 50_000, replacement=True)).cpu()
    freq = torch.stack([torch.bincount(row, minlength=5) for row in w]).double() / 50_000
    assert torch.allclose(freq, probs.double() / probs.sum(1, keepdim=True), atol=0.01)
    one = torch.stack([torch.multinomial(dev[0], 1).cpu() for _ in range(400)]).flatten()
    assert set(one.tolist()) <= {1, 2, 4} and (one == 4).double().mean() > 0.55
    rows = torch.rand(200, 33).to(DEV)  # more rows than partitions
    s = torch.multinomial(rows, 33).cpu()
    assert torch.equal(s.sort(1).values, torch.arange(33).expand(200, 33))
    out = torch.empty(0, dtype=torch.int64, device=DEV)
    torch.multinomial(dev[1], 4, True, out=out)
    assert out.shape == (4,) and set(out.cpu().tolist()) <= {0, 3}


def test_multinomial_wide_rows():
    torch.neuron.manual_seed(11)
    probs = torch.rand(3, 10_000)
    probs[:, ::3] = 0
    dev = probs.to(DEV)
    s = no_fallback(lambda: torch.multinomial(dev, 3000)).cpu()
    assert s.shape == (3, 3000) and all(len(set(row.tolist())) == 3000 for row in s) and (s % 3 != 0).all()
    w = no_fallback(lambda: torch.multinomial(dev, 200_000, True)).cpu()
    assert (w % 3 != 0).all()
    freq = torch.stack([torch.bincount(row, minlength=10_000) for row in w]).double() / 200_000
    assert (freq - probs.double() / probs.sum(1, keepdim=True)).abs().max() < 0.002
    assert (no_fallback(lambda: torch.multinomial(dev[0], 1)).cpu() % 3 != 0).all()
    check(torch.multinomial, torch.cat([torch.tensor([-1.0]), torch.ones(5000)]), 2, True)
    check(torch.multinomial, torch.zeros(5000), 2)


@pytest.mark.parametrize("args", [
    (torch.tensor([1.0, -1.0]), 1, False), (torch.tensor([1.0, float("nan")]), 1, False),
    (torch.tensor([0.0, 0.0]), 1, False), (torch.tensor([1.0, float("inf")]), 2, True),
    (torch.tensor([1.0, -1.0]), 2, True), (torch.tensor([0.0, 0.0]), 2, True),
    (torch.tensor([1.0, 2.0]), 3, False), (torch.tensor([1.0, 2.0]), 0, True),
    (torch.tensor(1.0), 1, False), (torch.ones(2, 2, 2), 1, False), (torch.tensor([1, 2]), 1, False),
], ids=str)
def test_multinomial_errors(args):
    check(torch.multinomial, *args)


# --- dtypes, shapes, layouts, errors ------------------------------------------------------------

@pytest.mark.parametrize("shape", EDGE_SHAPES + ((300_000,),), ids=str)
@pytest.mark.parametrize("name", ["uniform_", "normal_", "bernoulli_", "random_", "dropout"])
def test_shapes(name, shape):
    torch.neuron.manual_seed(12)
    x = sample(name, shape)
    assert x.shape == shape
    if x.numel() > 1 and name != "bernoulli_" and name != "dropout":
        assert x.unique().numel() > 1


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", ["uniform_", "normal_", "exponential_", "log_normal_", "cauchy_", "rand", "randn",
                                  "randint", "bernoulli_", "random_", "geometric_", "normal_tensor"])
def test_float_dtypes(name, dtype):
    x = sample(name, (2, 300), dtype)
    assert x.dtype == dtype
    if name != "cauchy_":
        assert torch.isfinite(x).all()


@pytest.mark.parametrize("dtype", INTS + (torch.bool,), ids=str)
def test_integer_dtypes(dtype):
    if dtype != torch.bool:
        x = no_fallback(lambda: torch.randint(0, 5, (500,), dtype=dtype, device=DEV)).cpu()
        assert x.dtype == dtype and set(x.unique().tolist()) == set(range(5))
    b = no_fallback(lambda: torch.empty(500, dtype=dtype, device=DEV).bernoulli_(0.5)).cpu()
    assert set(b.long().unique().tolist()) == {0, 1}


def test_in_place_on_views_writes_only_the_view():
    base = torch.zeros(6, 10, device=DEV)
    base.t()[2:5].uniform_(1, 2)  # a transposed slice: non-contiguous
    host = base.cpu()
    assert (host[:, 2:5] >= 1).all() and (host[:, :2] == 0).all() and (host[:, 5:] == 0).all()
    strided = torch.zeros(20, device=DEV)
    strided[::2].normal_()
    assert (strided.cpu()[1::2] == 0).all() and (strided.cpu()[::2] != 0).all()


def _inplace(method, *args, dtype=torch.float32, shape=(4,)):
    def fn(x):
        return getattr(x, method)(*args)

    return fn, torch.empty(shape, dtype=dtype)


@pytest.mark.parametrize("case", [
    _inplace("uniform_", 3, 1), _inplace("uniform_", dtype=torch.int64), _inplace("uniform_", -60000, 60000,
                                                                                  dtype=torch.float16),
    _inplace("normal_", 0, -1), _inplace("normal_", dtype=torch.int32), _inplace("bernoulli_", 1.5),
    _inplace("bernoulli_", -0.1), _inplace("exponential_", 0), _inplace("exponential_", dtype=torch.int32),
    _inplace("geometric_", 0), _inplace("geometric_", 1), _inplace("log_normal_", 1, 0),
    _inplace("log_normal_", dtype=torch.int64), _inplace("cauchy_", 0, -1), _inplace("cauchy_", dtype=torch.int64),
    _inplace("random_", 5, 2), _inplace("random_", -1, 5, dtype=torch.uint8), _inplace("random_", 0, 257,
                                                                                       dtype=torch.uint8),
    _inplace("random_", 0, 129, dtype=torch.int8), _inplace("random_", 0, 70000, dtype=torch.float16),
    _inplace("random_", 0, 3, dtype=torch.bool), _inplace("random_", 0), _inplace("random_", -2 ** 63, None,
                                                                                  dtype=torch.int8),
    _inplace("random_", -2 ** 63, None, dtype=torch.bool), _inplace("random_", 2 ** 24, None),
    _inplace("random_", 5, None, dtype=torch.bool),
], ids=lambda c: "")
def test_argument_errors_match_cpu(case):
    fn, x = case
    check(fn, x)


def test_errors_on_overlapping_and_bad_probability_tensors():
    for method in ("uniform_", "normal_", "random_", "bernoulli_", "exponential_"):
        check(lambda x: getattr(x, method)(*((0.5,) if method == "bernoulli_" else ())), torch.zeros(1).expand(3),
              neuron_args=(torch.zeros(1, device=DEV).expand(3),))
    check(lambda x, p: x.bernoulli_(p), torch.zeros(3), torch.tensor([0.5, 1.5, 0.2]))
    check(lambda x, p: x.bernoulli_(p), torch.zeros(3), torch.tensor([0.5, 0.5]))
    check(lambda x, p: x.bernoulli_(p), torch.zeros(3), torch.tensor([1, 0, 1]))
    check(torch.bernoulli, torch.tensor([0.2, float("nan")]))
    check(lambda m, s: torch.normal(m, s), torch.zeros(3), torch.tensor([1.0, -1.0, 1.0]))
    check(lambda m: torch.normal(m, -1.0), torch.zeros(3))
    check(lambda m: torch.normal(m, 1.0), torch.zeros(3, dtype=torch.int64))
    with pytest.warns(UserWarning, match="out of bounds"):
        torch.empty(3, device=DEV).random_(0, 2 ** 30)


def test_random_from_to_casts_bounds_into_float_dtypes():
    # CPU's update_from/update_to: the bounds move to values the dtype represents
    torch.neuron.manual_seed(13)
    for dtype, lo, hi in ((torch.bfloat16, 250, 270), (torch.float16, 2040, 2060)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            x = torch.empty(20_000, dtype=dtype, device=DEV).random_(lo, hi).cpu()
            expected = torch.empty(20_000, dtype=dtype).random_(lo, hi)
        assert set(x.float().unique().tolist()) == set(expected.float().unique().tolist())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda t: t.random_(257, 258), torch.empty(3, dtype=torch.bfloat16))
    y = torch.empty(20_000, dtype=torch.float32, device=DEV).random_(2 ** 24 - 1).cpu()
    assert y.min() >= 0 and y.max() < 2 ** 24 - 1


def test_normal_tensor_overloads():
    torch.neuron.manual_seed(14)
    mean = torch.tensor([0.0, 10.0, -10.0], device=DEV)
    std = torch.tensor([1.0, 0.0, 2.0], device=DEV)
    x = no_fallback(lambda: torch.normal(mean.expand(30_000, 3), std)).cpu()
    assert x.shape == (30_000, 3)
    assert (x[:, 1] == 10).all() and abs(x[:, 0].std() - 1) < 0.03 and abs(x[:, 2].mean() + 10) < 0.05
    y = no_fallback(lambda: torch.normal(mean, 3.0)).cpu()
    assert y.shape == (3,) and y.dtype == torch.float32
    z = no_fallback(lambda: torch.normal(2.0, std)).cpu()
    assert z[1] == 2
    w = no_fallback(lambda: torch.normal(1.0, 2.0, (5, 4), device=DEV)).cpu()
    assert w.shape == (5, 4)
    out = torch.empty(0, dtype=torch.bfloat16, device=DEV)
    no_fallback(lambda: torch.normal(mean.to(torch.bfloat16), std.to(torch.bfloat16), out=out))
    assert out.shape == (3,) and out.dtype == torch.bfloat16
    h = torch.normal(torch.zeros(100_000, dtype=torch.float16, device=DEV), 1.0).cpu().double()
    assert abs(h.std() - 1) < 0.02


def test_composite_factories_reach_native_kernels():
    for fn in [lambda: torch.rand(3, 4, device=DEV), lambda: torch.randn(3, dtype=torch.bfloat16, device=DEV),
               lambda: torch.randint(5, (3,), device=DEV), lambda: torch.randint_like(torch.empty(3, device=DEV), 9),
               lambda: torch.rand_like(torch.empty(2, 2, device=DEV)),
               lambda: torch.randn_like(torch.empty(2, 2, device=DEV)),
               lambda: torch.randperm(9, device=DEV), lambda: torch.normal(0.0, 1.0, (3,), device=DEV),
               lambda: torch.bernoulli(torch.rand(4, device=DEV)), lambda: torch.empty(3, device=DEV).random_(9),
               lambda: torch.nn.init.kaiming_uniform_(torch.empty(8, 8, device=DEV)),
               lambda: torch.nn.init.normal_(torch.empty(8, 8, device=DEV))]:
        no_fallback(fn)


# --- dropout ----------------------------------------------------------------------------------

def _dropout_reference(x, mask, p):
    """CPU's native_dropout output from the mask it drew: input * mask * (1 / (1 - p))."""
    scale = 0.0 if p == 1 else 1.0 / (1.0 - p)
    return x.mul(mask).mul_(scale)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("p", [0.0, 0.2, 0.5, 1.0])
def test_native_dropout_train(dtype, p):
    torch.neuron.manual_seed(15)
    x = values((3, 1000), dtype, "special")
    out, mask = no_fallback(lambda: torch.native_dropout(x.to(DEV), p, True))
    out, mask = out.cpu(), mask.cpu()
    assert mask.dtype == torch.bool and out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out, _dropout_reference(x, mask, p), rtol=0, atol=0, equal_nan=True)
    if p == 0:
        assert mask.all()
    elif p == 1:
        assert not mask.any()
    else:
        assert abs((~mask).double().mean() - p) < 0.03


def test_native_dropout_eval_and_empty_and_layouts():
    x = values((4, 6), torch.float32)
    out, mask = no_fallback(lambda: torch.native_dropout(x.to(DEV), 0.5, False))
    assert torch.equal(out.cpu(), x) and mask.dtype == torch.bool and mask.cpu().all()
    e_out, e_mask = torch.native_dropout(torch.empty(0, 3, device=DEV), 0.5, True)
    c_out, c_mask = torch.native_dropout(torch.empty(0, 3), 0.5, True)
    assert e_out.shape == c_out.shape and e_mask.dtype == c_mask.dtype
    t = x.to(DEV).t()
    out, mask = torch.native_dropout(t, 0.3, None)  # train=None means train
    assert out.stride() == torch.native_dropout(x.t(), 0.3, None)[0].stride() and mask.stride() == out.stride()
    torch.testing.assert_close(out.cpu(), _dropout_reference(x.t(), mask.cpu(), 0.3), rtol=0, atol=0)
    out, mask = torch.native_dropout(torch.arange(6, device=DEV), 0.5, False)
    assert torch.equal(out.cpu(), torch.arange(6)) and out.dtype == torch.int64
    check(lambda v: torch.native_dropout(v, 0.5, True), torch.arange(6))
    check(lambda v: torch.native_dropout(v, 1.5, True), torch.ones(6))
    check(lambda v: torch.native_dropout(v, -0.5, True), torch.ones(6))


def test_functional_dropout_and_module_run_natively():
    torch.neuron.manual_seed(16)
    x = torch.randn(64, 65, device=DEV)
    y = no_fallback(lambda: F.dropout(x, 0.25)).cpu()
    kept = y != 0
    torch.testing.assert_close(y[kept], (x.cpu() * (1 / 0.75))[kept], rtol=0, atol=0)
    assert abs((~kept).double().mean() - 0.25) < 0.02
    for p in (0.0, 1.0):  # PyTorch's composite handles these without native_dropout
        no_fallback(lambda: F.dropout(x, p))
    assert torch.equal(no_fallback(lambda: F.dropout(x, 0.5, training=False)).cpu(), x.cpu())
    m = torch.nn.Dropout(0.5)
    no_fallback(lambda: m(x))
    m.eval()
    assert torch.equal(no_fallback(lambda: m(x)).cpu(), x.cpu())
    z = x.clone()
    no_fallback(lambda: F.dropout(z, 0.5, inplace=True))
    no_fallback(lambda: F.dropout2d(torch.randn(2, 4, 3, 3, device=DEV), 0.5))
    no_fallback(lambda: F.alpha_dropout(x, 0.5, training=True))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_dropout_gradient_matches_cpu_reference(dtype):
    torch.neuron.manual_seed(17)
    x_cpu = values((5, 130), dtype)
    x = x_cpu.to(DEV).requires_grad_()
    grad = values((5, 130), dtype, seed=3)
    out, mask = torch.native_dropout(x, 0.3, True)
    no_fallback(lambda: out.backward(grad.to(DEV)))
    reference = x_cpu.clone().requires_grad_()
    ref_out = reference.mul(mask.cpu()).mul(1 / 0.7)
    ref_out.backward(grad)
    torch.testing.assert_close(x.grad.cpu(), reference.grad, rtol=0, atol=0)
    y = x.detach().clone().requires_grad_()  # through F.dropout
    F.dropout(y, 0.4).sum().backward()
    kept = y.grad.cpu() != 0
    torch.testing.assert_close(y.grad.cpu()[kept], torch.full_like(x_cpu, 1 / 0.6)[kept], rtol=0, atol=0)


@pytest.mark.parametrize("grad_dtype,mask_dtype,scale", [
    (torch.float32, torch.bool, 2.0), (torch.float16, torch.bool, 1 / 0.7), (torch.bfloat16, torch.bool, 1.25),
    (torch.float32, torch.float32, 2.0), (torch.float16, torch.float32, 3.0), (torch.int64, torch.bool, 2.5),
    (torch.float16, torch.float16, 1 / 0.3),
], ids=str)
def test_native_dropout_backward(grad_dtype, mask_dtype, scale):
    g = values((4, 129), grad_dtype)
    m = values((4, 129), torch.bool, seed=5).to(mask_dtype)
    if mask_dtype == torch.float16:
        m = values((4, 129), torch.float16, seed=5)
    check(torch.ops.aten.native_dropout_backward, g, m, scale, tol=EXACT)
    check(torch.ops.aten.native_dropout_backward, g, m[0], scale, tol=EXACT)  # broadcast mask
    check(torch.ops.aten.native_dropout_backward, g.t(), m.t(), scale, tol=EXACT)
    check(torch.ops.aten.native_dropout_backward, g, m[:2], scale)  # shape error


# --- factories --------------------------------------------------------------------------------

ARANGE_ARGS = [(10,), (0, 1, 0.1), (0, 2, 0.1), (-3.3, 1000, 0.37), (1, 50_000, 0.7), (10, 0, -3), (10.0, 0, -0.3),
               (0.5, 5, 1.5), (0, 5, 1.5), (5.5, 5.2, -0.1), (-2 ** 40, 2 ** 40, 2 ** 35), (0, 300), (0, 0),
               (0, 1, 0), (0, float("inf"), 1), (5, 0, 1), (0, 1e20, 1e-20), (0, 5, 0.5), (0, 5, 2 ** 63 - 1),
               (0, 2 ** 63 - 1, 2 ** 61), (-1e39, 0, 1e38), (0, 1e19, 1e18)]


@pytest.mark.parametrize("dtype", (None,) + FLOATS + INTS + (torch.bool,), ids=str)
@pytest.mark.parametrize("args", ARANGE_ARGS, ids=str)
def test_arange_matches_cpu_exactly(args, dtype):
    _check_factory(lambda d: torch.arange(*args, dtype=dtype, device=d))


def _check_factory(make, allow_host_dtype=False):
    """Compare a factory on CPU and neuron: bit-exact values (or the same exception class), no fallback."""
    try:
        expected = make("cpu")
    except Exception as error:  # noqa: BLE001
        with pytest.raises(type(error)):
            make(DEV)
        return None
    dispatch.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual = make(DEV)
    fallbacks = {op: c["fallback"] for op, c in dispatch.stats().items() if c["fallback"]}
    if not allow_host_dtype:
        assert not fallbacks, f"ops fell back to the CPU: {fallbacks}"
    assert actual.device.type == "neuron" and actual.dtype == expected.dtype and actual.shape == expected.shape
    got = actual.cpu()
    if expected.dtype.is_floating_point:
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[expected.element_size()]
        same = torch.equal(got.contiguous().reshape(-1).view(width), expected.contiguous().reshape(-1).view(width))
        assert same, f"not bit-exact:\n neuron {got.flatten()[:8]}\n cpu    {expected.flatten()[:8]}"
    else:
        assert torch.equal(got, expected)
    return actual


def test_arange_large_and_chunked_float_ranges():
    # Long ranges cross CPU's vector blocks and parallel chunks; every value must still be bit-exact.
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        _check_factory(lambda d: torch.arange(0.1, 7000.0 if dtype == torch.float16 else 90_000.0, 0.09,
                                              dtype=dtype, device=d))
    _check_factory(lambda d: torch.arange(-5.0, 1e6, 0.3, device=d))


def test_arange_out_variants():
    with pytest.warns(UserWarning, match="does not match the computed number"):
        out = torch.arange(5, out=torch.empty(3, device=DEV))
    assert out.shape == (5,)
    _check_factory(lambda d: torch.arange(6, out=torch.empty(2, 3, device=d)))  # same numel: keeps its shape
    _check_factory(lambda d: torch.arange(6, out=torch.empty(3, 4, device=d).t()[:2]))  # non-contiguous
    _check_factory(lambda d: torch.arange(1, 7, 2, out=torch.empty(0, dtype=torch.int32, device=d)))
    _check_factory(lambda d: torch.arange(0, 1, 0.25, out=torch.empty(0, dtype=torch.bfloat16, device=d)))
    assert TABLE.lookup("aten::arange.start_out").tier is Tier.NATIVE
    # float64 is storage-only: it takes the counted fallback, and is still right
    _check_factory(lambda d: torch.arange(0, 1, 0.1, dtype=torch.float64, device=d), allow_host_dtype=True)


def test_arange_dtype_inference():
    assert torch.arange(5, device=DEV).dtype == torch.int64
    assert torch.arange(5.0, device=DEV).dtype == torch.float32
    assert torch.arange(0, 5, 1.0, device=DEV).dtype == torch.float32
    torch.set_default_dtype(torch.float64)
    try:
        assert torch.arange(0.0, 1.0, 0.5, device=DEV).dtype == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


LINSPACE_ARGS = [(0, 1, 5), (0, 1, 1), (3.7, 1, 1), (0, 1, 0), (0, 1, -1), (-1e30, 1e30, 7), (0, 1, 100_001),
                 (-3.3, 77.1, 1000), (10, -10, 129), (40, -10, 10), (-3, 10 ** 12, 77), (0.5, 0.7, 2),
                 (1e-3, 1.0, 513)]


@pytest.mark.parametrize("dtype", (None,) + FLOATS + INTS + (torch.bool,), ids=str)
@pytest.mark.parametrize("args", LINSPACE_ARGS, ids=str)
def test_linspace_matches_cpu_exactly(args, dtype):
    _check_factory(lambda d: torch.linspace(*args, dtype=dtype, device=d))


def test_linspace_endpoints_and_variants():
    for steps in (2, 3, 10, 1000, 65537):
        x = _check_factory(lambda d: torch.linspace(-2.5, 7.25, steps, device=d)).cpu()
        assert x[0] == -2.5 and x[-1] == 7.25  # the symmetric formula lands on both endpoints
    _check_factory(lambda d: torch.linspace(0, 1, 70_000, dtype=torch.float16, device=d))
    _check_factory(lambda d: torch.linspace(torch.tensor(0.5), torch.tensor(3.0), 7, device=d))
    _check_factory(lambda d: torch.linspace(0, 1, 7, out=torch.empty(3, device=d)))
    _check_factory(lambda d: torch.linspace(0, 1, 4, out=torch.empty(4, 3, device=d).t()[1]))


LOGSPACE_ARGS = [(0, 3, 4), (0, 3, 1), (50, 3, 1), (-10, 10, 1001), (-2, 4, 101), (2, -3, 17), (0, 1, 0),
                 (0.5, 2.5, 33)]


@pytest.mark.parametrize("base", [10.0, 2.0, 3.3], ids=str)
@pytest.mark.parametrize("dtype", (None,) + FLOATS + (torch.int64, torch.int32, torch.uint8, torch.bool), ids=str)
@pytest.mark.parametrize("args", LOGSPACE_ARGS, ids=str)
def test_logspace_matches_cpu_exactly(args, dtype, base):
    _check_factory(lambda d: torch.logspace(*args, base=base, dtype=dtype, device=d))


@pytest.mark.parametrize("dtype", FLOATS + INTS + (torch.bool,), ids=str)
def test_eye_full_and_friends(dtype):
    for shape in [(0,), (1,), (3,), (300, 200), (130, 2100), (5000, 3), (-1,), (3, -1)]:
        _check_factory(lambda d: torch.eye(*shape, dtype=dtype, device=d))
    _check_factory(lambda d: torch.eye(3, dtype=dtype, out=torch.empty(4, 3, dtype=dtype, device=d).t()))
    _check_factory(lambda d: torch.eye(3, 4, dtype=dtype, out=torch.empty(5, dtype=dtype, device=d)))
    fill = 1 if dtype == torch.bool else 2.5 if dtype.is_floating_point else 7
    for shape in [(), (0,), (3, 129), (2, 3, 5)]:
        _check_factory(lambda d: torch.full(shape, fill, dtype=dtype, device=d))
    _check_factory(lambda d: torch.full_like(torch.empty(4, 2, dtype=dtype, device=d), fill))
    _check_factory(lambda d: torch.scalar_tensor(fill, dtype=dtype, device=d))
    _check_factory(lambda d: torch.zeros(3, 5, dtype=dtype, device=d))
    _check_factory(lambda d: torch.ones(2, 3, dtype=dtype, device=d))
    _check_factory(lambda d: torch.ones_like(torch.empty(4, dtype=dtype, device=d)))
    _check_factory(lambda d: torch.zeros_like(torch.empty(4, 3, dtype=dtype, device=d).t()))
    assert no_fallback(lambda: torch.empty_like(torch.empty(3, dtype=dtype, device=DEV))).shape == (3,)
    if dtype in (torch.int8, torch.uint8):
        _check_factory(lambda d: torch.full((3,), 300, dtype=dtype, device=d))


# --- the lowering table -------------------------------------------------------------------------

# overload -> the op-group module of device_impl.kernels.random that lowers it
NATIVE = {
    "continuous": ["aten::uniform_", "aten::normal_", "aten::normal.Tensor_float", "aten::normal.Tensor_float_out",
                   "aten::normal.float_Tensor", "aten::normal.float_Tensor_out", "aten::normal.Tensor_Tensor",
                   "aten::normal.Tensor_Tensor_out", "aten::exponential_", "aten::geometric_", "aten::log_normal_",
                   "aten::cauchy_"],
    "bernoulli": ["aten::bernoulli_.float", "aten::bernoulli_.Tensor", "aten::bernoulli.out"],
    "integers": ["aten::random_", "aten::random_.from", "aten::random_.to"],
    "randperm": ["aten::randperm.generator_out"],
    "multinomial": ["aten::multinomial", "aten::multinomial.out"],
    "dropout": ["aten::native_dropout", "aten::native_dropout_backward"],
    "factories": ["aten::arange.start_out", "aten::linspace.out", "aten::logspace.out", "aten::eye.out",
                  "aten::eye.m_out"],
}
COMPOSITE = ["aten::rand", "aten::randn", "aten::randint", "aten::randint.low", "aten::randperm",
             "aten::bernoulli", "aten::bernoulli.p", "aten::normal.float_float", "aten::dropout", "aten::arange",
             "aten::arange.start", "aten::arange.start_step", "aten::arange.out", "aten::linspace", "aten::logspace",
             "aten::eye", "aten::eye.m", "aten::full", "aten::full_like", "aten::scalar_tensor", "aten::zeros",
             "aten::ones", "aten::zeros_like", "aten::ones_like", "aten::rand_like", "aten::randn_like"]


def test_lowering_table():
    for group, ops in NATIVE.items():
        for op in ops:
            entry = TABLE.lookup(op)
            assert entry.tier is Tier.NATIVE and entry.source == f"device_impl.kernels.random.{group}", (op, entry)
    for op in COMPOSITE:
        entry = TABLE.lookup(op)
        assert entry.tier is Tier.NATIVE and "(via aten::" in entry.source, (op, entry)
    assert TABLE.lookup("aten::empty_like").tier in (Tier.COMPOSITE, Tier.NATIVE)


def _dropout_backward_operands(device: str):
    """(grad, mask) pairs whose layouts disagree: CPU's ``grad * mask * scale`` lays the result out from both."""
    b = torch.randn(2, 5, 1, generator=torch.Generator().manual_seed(1)).bfloat16().to(device)
    m = torch.randn(12, generator=torch.Generator().manual_seed(2)).to(device)
    x = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(3)).to(device)
    return [(b.expand(2, 5, 7), m.as_strided((2, 5, 7), (1, 1, 1)) > 0),
            (x, x.transpose(1, 3).contiguous().transpose(1, 3) > 0),
            (x.transpose(1, 3).contiguous().transpose(1, 3), x > 0),
            (x[:, :1], x.contiguous(memory_format=torch.channels_last) > 0)]


@pytest.mark.parametrize("case", range(4))
def test_native_dropout_backward_is_laid_out_as_cpus(case):
    """CPU's native_dropout_backward is ``grad * mask * scale``, laid out by the first product's TensorIterator
    from both operands; the device's took grad's layout (an expanded grad: contiguous, CPU (5, 1, 10), the designed
    native_dropout_backward-bfloat16-special-expanded-7; a contiguous grad beside a channels-last mask)."""
    (gc, mc), (gn, mn) = _dropout_backward_operands("cpu")[case], _dropout_backward_operands("neuron")[case]
    expected = torch.ops.aten.native_dropout_backward(gc, mc, 2.0)
    got = torch.ops.aten.native_dropout_backward(gn, mn, 2.0)
    assert torch.equal(got.cpu(), expected)
    assert [s for s, n in zip(got.stride(), got.shape) if n > 1] == \
        [s for s, n in zip(expected.stride(), expected.shape) if n > 1]
