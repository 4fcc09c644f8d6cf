"""Compiled graphs answer as CPU eager does where tracing or AOTAutograd used to change the answer: arguments
CPU refuses (relu of bool, FFT arguments the meta functions check differently), an in-place write to an input
whose elements share memory, a graph constant on the device, and numerics a lowering or decomposition
changed (var_mean of a scalar, nll_loss's gradient zero signs). Each was a compiled-mode op-suite failure."""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch
import torch.nn.functional as F

from support import run_python

aten = torch.ops.aten


def _compiled(fn, *args):
    torch._dynamo.reset()
    return torch.compile(fn, backend="neuron", dynamic=False)(*args)


def _raises_as_cpu(fn, *args) -> None:
    """fn raises on CPU, and its compiled run on neuron raises an exception of CPU's class."""
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001 - CPU's class is the expectation
        expected = type(error)
    else:
        raise AssertionError("CPU accepted the call: the test needs an input CPU refuses")
    with pytest.raises(expected):
        _compiled(fn, *[a.to("neuron") for a in args])


def test_relu_of_bool_raises_as_cpu(fresh):
    _raises_as_cpu(torch.relu, torch.tensor([True, False]))
    x = torch.tensor([-1.0, 2.0])  # the check refuses bool only
    assert torch.equal(_compiled(torch.relu, x.to("neuron")).cpu(), torch.relu(x))


@pytest.mark.parametrize("call", [
    lambda t: aten._fft_r2c(t, [], 0, True),  # CPU: RuntimeError (dim.back()); the meta function: IndexError
    lambda t: aten._fft_c2r(torch.fft.rfft(t), [-1], 0, 0),  # a signal length of 0: the meta function accepted it
    lambda t: aten._fft_r2c(t.int(), [-1], 0, True),  # an integer input
], ids=["r2c_empty_dim", "c2r_length_0", "r2c_int"])
def test_fft_arguments_cpu_refuses_raise_as_cpu(fresh, call):
    _raises_as_cpu(call, torch.randn(2, 7))


def test_fft_accepted_arguments_still_compile(fresh):
    x = torch.randn(2, 7)
    out = _compiled(lambda t: torch.fft.irfft(torch.fft.rfft(t), 7), x.to("neuron"))
    torch.testing.assert_close(out.cpu(), torch.fft.irfft(torch.fft.rfft(x), 7), atol=1e-5, rtol=1e-5)


def test_in_place_write_to_an_expanded_input_follows_cpu(fresh):
    """AOTAutograd copies a mutated input's new values back with copy_, which refuses a destination whose
    elements share memory; CPU's zero_ fills the shared element. The graph runs as traced, eagerly, so
    each in-place op keeps CPU's own rule: add_ on the same view still raises."""
    import device_impl.compiler as compiler

    base = torch.tensor([1.0]).to("neuron")
    x = base.expand(6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = _compiled(lambda t: t.zero_(), x)
    assert torch.equal(out.cpu(), torch.zeros(6)) and torch.equal(base.cpu(), torch.zeros(1))
    assert compiler.stats()["fallbacks_by_op"].get("write to an overlapping input") == 1
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.tensor([1.0]).expand(6).add_(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            _compiled(lambda t: t.add_(1), torch.tensor([1.0]).to("neuron").expand(6))
    y = torch.ones(6).to("neuron")  # a dense input is still compiled
    before = compiler.stats()["fallbacks"]
    _compiled(lambda t: t.zero_(), y)
    assert torch.equal(y.cpu(), torch.zeros(6)) and compiler.stats()["fallbacks"] == before


def test_a_graph_constant_on_the_device_compiles(fresh):
    """A tensor made on the device inside the compiled code is a real tensor among AOTAutograd's fake ones:
    the FX key's digest raised "Please convert all Tensors to FakeTensors", and the import fell back."""
    import device_impl.compiler as compiler

    x = torch.randn(5)
    out = _compiled(lambda t: t * torch.tensor(3.0, device=t.device), x.to("neuron"))
    assert torch.equal(out.cpu(), x * 3.0)
    assert compiler.stats()["fallbacks"] == 0 and compiler.stats()["compiles"] == 1


def test_std_mean_of_a_scalar_does_not_crash():
    """torch-mlir's var_mean lowering killed the process (SIGSEGV) on a 0-d input; in a subprocess, so a
    regression fails this test instead of the session."""
    code = """
import json, torch, device_impl
x = torch.tensor(1.5)
got = [torch.compile(lambda t: torch.std_mean(t, dim=(0,), correction=c), backend="neuron", dynamic=False)(
    x.to("neuron")) for c in (0, 1)]
print(json.dumps([[float(v.cpu()) for v in pair] for pair in got]))
"""
    result = run_python(code, PYTHONPATH=os.getcwd(), TORCH_NEURONX_DISABLE_NEFF_CACHE="1")
    assert result.returncode == 0, result.stderr[-2000:]
    (std0, mean0), (std1, mean1) = json.loads(result.stdout.strip().splitlines()[-1])
    assert (std0, mean0, mean1) == (0.0, 1.5, 1.5) and std1 != std1  # correction 1 of one element: NaN, as CPU


def test_var_mean_matches_cpu(fresh):
    x = torch.randn(4, 9, dtype=torch.float32)
    var, mean = _compiled(lambda t: torch.var_mean(t, dim=1, correction=1, keepdim=True), x.to("neuron"))
    ref_var, ref_mean = torch.var_mean(x, dim=1, correction=1, keepdim=True)
    torch.testing.assert_close(var.cpu(), ref_var)
    torch.testing.assert_close(mean.cpu(), ref_mean)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_loss_backward_zero_signs_match_cpu(fresh, reduction):
    """CPU's gradient is +0.0 off the targets' classes (and at an ignored target); the decomposition's
    one-hot product gave -0.0 there for a negative gradient."""
    x = torch.randn(4, 3)
    target = torch.tensor([0, 2, -100, 1])
    grad = -torch.rand(4) - 0.5 if reduction == 0 else torch.tensor(-0.75)
    total = torch.tensor(3.0)
    call = lambda g, s, t, w: aten.nll_loss_backward(g, s, t, None, reduction, -100, w)  # noqa: E731
    expected = call(grad, x, target, total)
    got = _compiled(call, grad.to("neuron"), x.to("neuron"), target.to("neuron"), total.to("neuron")).cpu()
    torch.testing.assert_close(got, expected)
    assert torch.equal(torch.signbit(got), torch.signbit(expected))


def test_nll_loss2d_gradient_zero_signs_match_cpu(fresh):
    x = torch.randn(2, 3, 2, 2)
    target = torch.tensor([[[0, 1], [2, -100]], [[1, 1], [0, 2]]])
    cot = -torch.rand(2, 2, 2) - 0.5

    def grad_of(inp, tgt, c, fn):
        inp = inp.clone().requires_grad_()
        (F.nll_loss(inp, tgt, reduction="none") * c).sum().backward() if fn is None else fn(inp, tgt, c).backward()
        return inp.grad

    expected = grad_of(x, target, cot, None)
    compiled = torch.compile(lambda i, t, c: (F.nll_loss(i, t, reduction="none") * c).sum(), backend="neuron",
                             dynamic=False)
    torch._dynamo.reset()
    got = grad_of(x.to("neuron"), target.to("neuron"), cot.to("neuron"), compiled).cpu()
    torch.testing.assert_close(got, expected)
    assert torch.equal(torch.signbit(got), torch.signbit(expected))


def test_narrow_copy_dim_out_of_range_raises_as_cpu(fresh):
    _raises_as_cpu(lambda t: torch.narrow_copy(t, 2, 0, 1), torch.randn(3, 4))


@pytest.mark.parametrize("call", [
    lambda a, i, s: torch.scatter(a, 0, i, s),
    lambda a, i, s: torch.scatter_add(a, 0, i, s),
    lambda a, i, s: torch.gather(a, 1, i),
], ids=["scatter", "scatter_add", "gather"])
def test_gather_scatter_out_of_range_raise_cpu_class(fresh, call):
    """CPU's gather/scatter kernels refuse an out-of-range index with RuntimeError; the compiled program's
    gather/scatter steps raise IndexError, which stays right for index, index_select and nll_loss."""
    args = torch.zeros(3, 4), torch.tensor([[0, 1, 7, 2]]), torch.ones(1, 4)
    _raises_as_cpu(call, *args)
    _raises_as_cpu(lambda a, t: F.nll_loss(a, t), torch.randn(3, 4), torch.tensor([0, 9, 1]))  # IndexError on CPU
    ok = torch.tensor([[0, 1, 2, 2]])  # in range: compiled and correct
    expected = call(args[0], ok, args[2])
    assert torch.equal(_compiled(call, args[0].to("neuron"), ok.to("neuron"), args[2].to("neuron")).cpu(), expected)


def test_moments_follow_cpu_double_accumulation_and_welford(fresh):
    """bfloat16 rows near the top of the range: CPU's std and mean (double accumulation) stay finite where
    float32 sums overflow; var_mean's mean is Welford's (NaN after an infinity unless it is the last element)."""
    inf = float("inf")
    x = torch.tensor([[3e38, 3e38, -3e38, 2e38], [1.0, inf, 2.0, 3.0], [1.0, 2.0, 3.0, inf], [1.0, 2.0, 4.0, 8.0]])
    for dtype in (torch.bfloat16, torch.float32):
        for op in (torch.std_mean, torch.var_mean):
            xx = x.to(dtype)
            expected = op(xx, dim=1)
            got = _compiled(lambda t: op(t, dim=1), xx.to("neuron"))  # noqa: B023 - compiled at once
            for g, e in zip(got, expected):
                torch.testing.assert_close(g.cpu(), e, equal_nan=True, rtol=2e-2, atol=1e-5)


def test_scatter_add_keeps_signed_zeros(fresh):
    """The program's scatter-add (DMA compute-on-write) summed duplicates from +0.0: a -0.0 row receiving only
    -0.0 became +0.0, where CPU's one-by-one additions keep -0.0."""
    x = torch.tensor([-0.0, 1.0, 0.0]).reshape(1, 3, 1).expand(1, 3, 4)
    index = torch.tensor([[[0, 1, 0, 2]]])
    src = torch.tensor([-0.0]).reshape(1, 1, 1).expand(1, 1, 4)
    call = lambda a, i, s: torch.scatter_add(a, -2, i, s)  # noqa: E731
    expected = call(x, index, src)
    got = _compiled(call, x.to("neuron"), index.to("neuron"), src.to("neuron")).cpu()
    assert torch.equal(got, expected) and torch.equal(torch.signbit(got), torch.signbit(expected))


@pytest.mark.parametrize("call, grad", [
    (lambda g: aten.reflection_pad1d_backward(g, torch.zeros_like(g), (0, 0)),
     torch.tensor([[-0.0, 1.0, -0.0, 2.0, -0.0]])),  # accumulated into +0.0 on CPU
    (lambda g: aten.unfold_backward(g, (7,), -1, 3, 3), torch.tensor([[-0.0, 1.0, -0.0], [-0.0, 2.0, 3.0]])),  # copied
    (lambda g: aten.unfold_backward(g, (7,), -1, 3, 2), torch.full((3, 3), -0.0)),  # overlapping: added
], ids=["reflection_pad1d_backward", "unfold_backward_disjoint", "unfold_backward_overlapping"])
def test_backward_zero_signs_follow_cpu_accumulation(fresh, call, grad):
    expected = call(grad)
    got = _compiled(call, grad.to("neuron")).cpu()
    assert torch.equal(got, expected) and torch.equal(torch.signbit(got), torch.signbit(expected))


def test_native_dropout_of_an_empty_input_has_a_mask_of_its_dtype(fresh):
    x = torch.empty(0, 3)
    out, mask = _compiled(lambda t: torch.native_dropout(t, 0.0, True), x.to("neuron"))
    expected = torch.native_dropout(x, 0.0, True)
    assert (out.dtype, mask.dtype, tuple(mask.shape)) == (expected[0].dtype, expected[1].dtype, (0, 3))


def test_mse_loss_gradient_overflows_as_cpu_in_float16(fresh):
    """CPU's backward computes norm * (x - y) * g in float16 op by op: x - y overflows to inf before the scaling by
    2 / numel; PyTorch's decomposition computed in float32 and came back finite."""
    x = torch.tensor([[60000.0, -60000.0] + [1.0] * 62], dtype=torch.float16)
    y = torch.tensor([[-60000.0, 60000.0] + [0.5] * 62], dtype=torch.float16)

    def grad_of(inp, fn):
        inp = inp.clone().requires_grad_()
        fn(inp, y.to(inp.device)).backward()
        return inp.grad

    expected = grad_of(x, F.mse_loss)
    torch._dynamo.reset()
    got = grad_of(x.to("neuron"), torch.compile(F.mse_loss, backend="neuron", dynamic=False)).cpu()
    assert torch.isinf(expected[0, :2]).all()
    torch.testing.assert_close(got, expected)


def test_pow_scalar_follows_cpu_dtype_and_exponent_rounding(fresh):
    """bool ** True is bool on CPU (the meta function said int64); a float16 base takes the exponent rounded to
    float16 (1.4e-45 is 0: x ** 0 is 1, not NaN for a negative x)."""
    b = torch.tensor([True, False, True])
    for exponent in (True, False):
        got = _compiled(lambda t: torch.pow(t, exponent), b.to("neuron")).cpu()  # noqa: B023 - compiled at once
        assert got.dtype == torch.bool and torch.equal(got, torch.pow(b, exponent))
    h = torch.tensor([-26.640625, 3.0], dtype=torch.float16)
    got = _compiled(lambda t: torch.pow(t, 1.401298464324817e-45), h.to("neuron")).cpu()
    assert torch.equal(got, torch.pow(h, 1.401298464324817e-45))


def test_integer_scalars_and_unsigned_extrema_follow_cpu(fresh):
    """remainder(uint8, -4) divides by -4 converted to uint8 (252); a uint8 max/min reduction started from the
    signed type's identity in torch-mlir's lowering (a max of values below 128 gave 128); scatter of -0.5 into
    uint8 raises CPU's RuntimeError."""
    u = torch.tensor([[254, 3, 7], [1, 2, 100]], dtype=torch.uint8)
    for call in (lambda t: torch.remainder(t, -4), torch.max, torch.min, lambda t: torch.amax(t, 1),
                 lambda t: torch.amin(t, 0)):
        assert torch.equal(_compiled(call, u.to("neuron")).cpu(), call(u))
    _raises_as_cpu(lambda t, i: torch.scatter(t, 1, i, -0.5), u, torch.zeros(2, 3, dtype=torch.int64))


def test_a_float32_scan_accumulates_in_double_as_cpu_and_eager(fresh):
    """CPU's float32 cumsum carries the running value in double (acc_type); the compiled scan runs the eager
    kernel's GpSimd double scan, so its bits are eager's (and CPU's), where an fp32 scan drifted by ~90 ULP
    (designed case cumsum-float32-signed_zero-expanded-511). (torch-mlir does not lower cumprod.)"""
    x = torch.randn(5, 3, 4097) * 3
    x[0, 0, :40] = -0.0

    def fn(a):
        return torch.cumsum(a, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # compiled, not the eager fallback
        got = _compiled(fn, x.to("neuron")).cpu()
    eager = fn(x.to("neuron")).cpu()
    assert torch.equal(got.view(torch.int32), eager.view(torch.int32))
    assert torch.equal(got.view(torch.int32), fn(x).view(torch.int32))


def test_a_scan_longer_than_sbuf_holds_runs_in_chunks(fresh):
    """masked_scatter's int64 cumsum over a flattened 20k-element mask (160 KB a partition, twice) overflowed SBUF;
    the scan now runs in chunks carrying the running value, with the whole-row scan's result."""
    x0 = torch.randn(5, 2, 2048, dtype=torch.float16)
    mask = torch.randn(5, 2, 1).expand(5, 2, 2048) > 0
    src = torch.randn(20482, dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # compiled, not the eager fallback
        got = _compiled(lambda a, m, s: a.masked_scatter(m, s), x0.to("neuron"), mask.to("neuron"),
                        src.to("neuron"))
    assert torch.equal(got.cpu(), x0.masked_scatter(mask, src))
    ints = torch.randint(-3, 4, (2, 9000))
    assert torch.equal(_compiled(lambda a: torch.cumsum(a, 1), ints.to("neuron")).cpu(), torch.cumsum(ints, 1))
    narrow = torch.randn(3, 9000, dtype=torch.bfloat16)  # CPU carries a float running value, rounded per prefix
    got = _compiled(lambda a: torch.cumsum(a, 1), narrow.to("neuron")).cpu()
    assert torch.equal(got.view(torch.int16), torch.cumsum(narrow, 1).view(torch.int16))
