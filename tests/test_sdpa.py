"""scaled_dot_product_attention on neuron: the OVERRIDEABLE backend and its flash-style tile kernels.

csrc/attention.cpp makes ``_fused_sdp_choice`` answer OVERRIDEABLE; kernels/attention.py implements
``_scaled_dot_product_fused_attention_overrideable`` and its backward on the engine. Without either,
the choice test fails (CPU's FLASH, or MATH) and the native-count checks fail.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from device_impl import dispatch, engine
from device_impl.kernels import cpu_host

FORWARD = "aten::_scaled_dot_product_fused_attention_overrideable"
BACKWARD = "aten::_scaled_dot_product_fused_attention_overrideable_backward"
# bf16: inputs rounded once, P and dS fed to TensorE in bf16 (as flash kernels), vs CPU's own bf16 path
TOL = {torch.float32: dict(rtol=1e-4, atol=2e-5), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


def _inputs(shape_q, shape_k, shape_v, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dtype) for s in (shape_q, shape_k, shape_v)]


def _on_device(tensors, grad=True):
    return [t.to("neuron").detach().requires_grad_(grad) for t in tensors]


def _compare(cpu_args, mask=None, causal=False, gqa=False, dropout=0.0, dtype=torch.float32, grad=True):
    """Forward and backward on CPU and neuron; returns the max errors (out, dq, dk, dv)."""
    cpu = [t.clone().requires_grad_(grad) for t in cpu_args]
    dev = _on_device(cpu_args, grad)
    dev_mask = None if mask is None else mask.to("neuron")
    dispatch.reset_stats()
    expected = F.scaled_dot_product_attention(*cpu, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
    actual = F.scaled_dot_product_attention(*dev, attn_mask=dev_mask, is_causal=causal, enable_gqa=gqa)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, **TOL[dtype])
    errors = [(actual.cpu().float() - expected.float()).abs().max().item()]
    if grad:
        g = torch.randn(expected.shape, generator=torch.Generator().manual_seed(7)).to(dtype)
        expected.backward(g)
        actual.backward(g.to("neuron"))
        for c, d in zip(cpu, dev):
            torch.testing.assert_close(d.grad.cpu(), c.grad, **TOL[dtype])
            errors.append((d.grad.cpu().float() - c.grad.float()).abs().max().item())
    stats = dispatch.stats()
    assert stats[FORWARD]["native"] == 1
    if grad:
        assert stats[BACKWARD]["native"] == 1
    assert not [op for op, counts in stats.items() if counts["fallback"]], stats
    return errors


def test_fused_sdp_choice_is_overrideable_on_neuron():
    q, k, v = _on_device(_inputs((2, 4, 8, 16), (2, 4, 8, 16), (2, 4, 8, 16), torch.float32), grad=False)
    assert torch._fused_sdp_choice(q, k, v) == SDPBackend.OVERRIDEABLE.value
    mask = torch.ones(8, 8, dtype=torch.bool, device="neuron")
    assert torch._fused_sdp_choice(q, k, v, mask, 0.1, False) == SDPBackend.OVERRIDEABLE.value
    k2, v2 = k[:, :2], v[:, :2]
    assert torch._fused_sdp_choice(q, k2, v2, enable_gqa=True) == SDPBackend.OVERRIDEABLE.value
    assert torch._fused_sdp_choice(q, k2, v2) == SDPBackend.MATH.value  # math raises PyTorch's error
    assert torch._fused_sdp_choice(q.double(), k.double(), v.double()) == SDPBackend.MATH.value


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["plain", "bool_mask", "float_mask", "causal"])
@pytest.mark.parametrize("L, S, E, Ev", [(37, 45, 16, 24), (129, 130, 64, 64), (1, 1, 8, 8)])
def test_outputs_and_gradients_match_cpu(dtype, case, L, S, E, Ev):
    args = _inputs((2, 3, L, E), (2, 3, S, E), (2, 3, S, Ev), dtype, seed=L + S)
    mask = None
    g = torch.Generator().manual_seed(3)
    if case == "bool_mask":
        mask = torch.rand(L, S, generator=g) > 0.3
        mask[:, 0] = True  # CPU's fused path and the math path disagree on fully masked rows
    elif case == "float_mask":
        mask = torch.randn(2, 1, L, S, generator=g).to(dtype)
    _compare(args, mask=mask, causal=case == "causal", dtype=dtype)


def test_float_mask_gradient_matches_cpu():
    q, k, v = _inputs((1, 2, 20, 16), (1, 2, 30, 16), (1, 2, 30, 16), torch.float32)
    bias = torch.randn(1, 2, 20, 30)
    cpu_bias, dev_bias = bias.clone().requires_grad_(), bias.to("neuron").requires_grad_()
    F.scaled_dot_product_attention(q, k, v, attn_mask=cpu_bias).sum().backward()
    F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), attn_mask=dev_bias).sum().backward()
    torch.testing.assert_close(dev_bias.grad.cpu(), cpu_bias.grad, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grouped_query_attention(dtype):
    args = _inputs((2, 8, 33, 32), (2, 2, 40, 32), (2, 2, 40, 32), dtype)
    _compare(args, gqa=True, causal=True, dtype=dtype)
    q, k, v = _on_device(args, grad=False)
    with pytest.raises(RuntimeError):  # as CPU: heads must match without enable_gqa
        F.scaled_dot_product_attention(q, k, v)
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(*args)


def test_fully_masked_rows_give_zero_as_cpu():
    q, k, v = _inputs((1, 2, 8, 16), (1, 2, 10, 16), (1, 2, 10, 16), torch.float32)
    mask = torch.rand(8, 10, generator=torch.Generator().manual_seed(1)) > 0.5
    mask[3] = False
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    actual = F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"),
                                            attn_mask=mask.to("neuron")).cpu()
    torch.testing.assert_close(actual, expected, **TOL[torch.float32])
    assert torch.equal(actual[0, :, 3], torch.zeros(2, 16))


def test_scores_never_reach_hbm():
    L = S = 512
    q, k, v = _on_device(_inputs((1, 1, L, 16), (1, 1, S, 16), (1, 1, S, 16), torch.float32), grad=False)
    engine.reset_stats()
    F.scaled_dot_product_attention(q, k, v)
    traffic = engine.stats()["sdpa_flash_fwd"]["hbm_bytes"]
    io = 4 * L * 16 * 4 + L * 4  # q, k, v, out and logsumexp, fp32
    assert traffic < L * S * 4  # the score matrix alone would be 1 MiB
    assert traffic <= 2 * io + (L // 128) * S * 16 * 4 * 2  # K and V streamed once per query block


def _reference_with_mask(q, k, v, keep, p):
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    return (weights * keep / (1 - p)) @ v


def test_dropout_uses_the_device_generator_and_one_mask_for_both_passes():
    p = 0.3
    args = _inputs((2, 2, 40, 16), (2, 2, 50, 16), (2, 2, 50, 16), torch.float32)
    dev = _on_device(args)
    torch.neuron.manual_seed(1234)
    out, *_, keep = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        *dev, None, p, False, True)
    keep_cpu = keep.cpu()
    assert keep_cpu.shape == (2, 2, 40, 50)
    assert set(keep_cpu.unique().tolist()) <= {0.0, 1.0}
    assert abs(1 - keep_cpu.mean().item() - p) < 0.05  # about p of the weights dropped
    cpu = [t.clone().requires_grad_() for t in args]
    expected = _reference_with_mask(*cpu, keep_cpu, p)
    torch.testing.assert_close(out.cpu(), expected, **TOL[torch.float32])
    g = torch.randn(expected.shape, generator=torch.Generator().manual_seed(2))
    expected.backward(g)
    out.backward(g.to("neuron"))  # regenerates the same mask from the saved seed and offset
    for c, d in zip(cpu, dev):
        torch.testing.assert_close(d.grad.cpu(), c.grad, **TOL[torch.float32])
    torch.neuron.manual_seed(1234)
    again = F.scaled_dot_product_attention(*[t.detach() for t in dev], dropout_p=p)
    torch.testing.assert_close(again.cpu(), out.detach().cpu())  # same seed, same mask
    different = F.scaled_dot_product_attention(*[t.detach() for t in dev], dropout_p=p)
    assert not torch.equal(different.cpu(), again.cpu())  # the generator moved on


COMPILED_FORMS = {
    "causal": dict(heads=(2, 2), causal=True),
    "float_mask_with_grad": dict(heads=(2, 2), mask="float"),
    "bool_mask": dict(heads=(2, 2), mask="bool"),
    "gqa": dict(heads=(4, 2), causal=True),
    "3d": dict(heads=None),
}


@pytest.mark.parametrize("form", COMPILED_FORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_matches_cpu(dtype, form):
    """torch.compile traces the overrideable op and its backward (the OVERRIDEABLE choice) and compiles
    both (compiler/numerics.py's decompositions): no graph runs eagerly, and results match CPU."""
    from device_impl import compiler

    opts = COMPILED_FORMS[form]
    if opts["heads"] is None:
        args = _inputs((3, 24, 16), (3, 20, 16), (3, 20, 8), dtype)
    else:
        hq, hk = opts["heads"]
        args = _inputs((2, hq, 24, 16), (2, hk, 20, 16), (2, hk, 20, 8), dtype)
    mask = None
    if opts.get("mask") == "float":
        mask = torch.randn(24, 20, generator=torch.Generator().manual_seed(3)).to(dtype).requires_grad_()
    elif opts.get("mask") == "bool":
        mask = torch.rand(24, 20, generator=torch.Generator().manual_seed(3)) > 0.3
        mask[5] = False  # a row with no key: 0 output and gradient, as PyTorch's _safe_softmax
    causal, gqa = bool(opts.get("causal")), opts["heads"] is not None and opts["heads"][0] != opts["heads"][1]
    cpu = [t.clone().requires_grad_() for t in args]
    dev = _on_device(args)
    dev_mask = None if mask is None else mask.detach().to("neuron").requires_grad_(mask.requires_grad)

    def fn(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, enable_gqa=gqa)

    torch._dynamo.reset()
    compiler.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a graph the compiler cannot lower would run eagerly
        actual = torch.compile(fn, backend="neuron")(*dev, dev_mask)
        actual.backward(torch.ones_like(actual))
    expected = fn(*cpu, mask)
    expected.backward(torch.ones_like(expected))
    torch.testing.assert_close(actual.cpu(), expected.detach(), **TOL[dtype])
    for c, d in zip(cpu, dev):
        torch.testing.assert_close(d.grad.cpu(), c.grad, **TOL[dtype])
    if mask is not None and mask.requires_grad:
        torch.testing.assert_close(dev_mask.grad.cpu(), mask.grad, **TOL[dtype])
    stats = compiler.stats()
    assert stats["fallbacks"] == 0, stats["fallbacks_by_op"]
    assert stats["executions"] >= 2  # forward and backward programs


@pytest.mark.parametrize("gqa", [False, True])
def test_compiled_attention_recompiles_statically_for_a_new_sequence_length(gqa):
    """torch.compile(backend="neuron") called with a second, then a third sequence length: Dynamo's automatic
    dynamic shapes retrace with symbolic sizes, and asks csrc/attention.cpp's backend choice with fake tensors
    of those sizes (size()/numel() threw there: "Cannot call numel() on tensor with symbolic sizes", a
    TorchRuntimeError on the second length). Every length runs, compiled (no eager fallback), matching CPU, and
    the compiler recompiles for each new static shape. dynamic=True still gets the shape contract's error."""
    from device_impl import compiler
    from device_impl.compiler.errors import ShapeContractError

    hq, hk = (4, 2) if gqa else (2, 2)

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    torch._dynamo.reset()
    compiler.reset_stats()
    compiled = torch.compile(fn, backend="neuron")
    for seq in (16, 7, 129):
        args = _inputs((2, hq, seq, 16), (2, hk, seq, 16), (2, hk, seq, 16), torch.float32, seed=seq)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # a graph the compiler cannot lower would run eagerly
            actual = compiled(*_on_device(args, grad=False))
        torch.testing.assert_close(actual.cpu(), fn(*args), **TOL[torch.float32])
    stats = compiler.stats()
    assert stats["fallbacks"] == 0 and stats["recompiles"] == 2, stats
    torch._dynamo.reset()
    with pytest.raises(ShapeContractError, match="static shapes only"):
        torch.compile(fn, backend="neuron", dynamic=True)(*_on_device(args, grad=False))



def _laid(shape: tuple, how: str, seed: int, device: str) -> torch.Tensor:
    """A float32 (B, H, L, E) tensor in one of the layouts CPU's sdpa lays its results out from, made on
    ``device`` (the same values on either)."""
    g = torch.Generator().manual_seed(seed)
    b, h, s, d = shape
    make = {"transposed": lambda: torch.randn(tuple(reversed(shape)), generator=g).to(device).permute(3, 2, 1, 0),
            "bshd": lambda: torch.randn(b, s, h, d, generator=g).to(device).transpose(1, 2),
            "overlapping": lambda: torch.randn(sum(shape), generator=g).to(device).as_strided(shape, (1, 1, 1, 1)),
            "expanded": lambda: torch.randn(b, h, 1, d, generator=g).to(device).expand(shape),
            "contiguous": lambda: torch.randn(shape, generator=g).to(device)}
    return make[how]()


def _significant(t: torch.Tensor) -> list:
    return [s for s, n in zip(t.stride(), t.shape) if n > 1]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "bshd", "overlapping", "expanded"])
@pytest.mark.parametrize("shape", [(1, 2, 7, 16), (2, 1, 33, 16), (2, 3, 1, 8)], ids=str)
def test_output_and_gradients_are_laid_out_as_cpus(shape, layout, causal):
    """CPU's sdpa runs its flash kernel (output and gradients laid out (B, L, H, E), transposed) or, for the
    layouts it refuses (a last dim of stride other than 1), its math path, whose matmuls lay them out (an
    overlapping (2, 1, 33, 16) query gives an output of strides (1, 1, 32, 2)); the device's followed the query
    (CUDA's rule) and empty_like for the gradients. cpu_host.sdpa_layouts asks the running torch which path and
    layout, so this holds whichever kernel this host's CPU picks."""
    cpu = [_laid(shape, layout, seed, "cpu").detach().requires_grad_() for seed in range(3)]
    dev = [_laid(shape, layout, seed, "neuron").detach().requires_grad_() for seed in range(3)]
    expected = F.scaled_dot_product_attention(*cpu, is_causal=causal)
    got = F.scaled_dot_product_attention(*dev, is_causal=causal)
    expected_grads = torch.autograd.grad(expected, cpu, _laid(shape, layout, 3, "cpu"))
    got_grads = torch.autograd.grad(got, dev, _laid(shape, layout, 3, "neuron"))
    values = layout != "overlapping"  # CPU reads an overlapping query wrongly (harness/specs.py, sdpa_backward)
    if values:
        torch.testing.assert_close(got.detach().cpu(), expected.detach(), **TOL[torch.float32])
    assert _significant(got) == _significant(expected), (got.stride(), expected.stride())
    for g_dev, g_cpu in zip(got_grads, expected_grads):
        if values:
            torch.testing.assert_close(g_dev.cpu(), g_cpu, **TOL[torch.float32])
        assert _significant(g_dev) == _significant(g_cpu), (g_dev.stride(), g_cpu.stride())


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_an_overrideable_only_call_runs_though_cpu_has_no_kernel_for_it(layout):
    """``sdpa_kernel([SDPBackend.OVERRIDEABLE])`` leaves CPU neither flash nor math, so asking CPU's choice for the
    layouts (cpu_host.sdpa_layouts) raised CPU's "No viable backend" out of the device's own fused kernel, which
    serves the call; the layout question answers None there and the kernel keeps its own layout."""
    from torch.nn.attention import sdpa_kernel

    shape = (2, 3, 7, 16)
    cpu = [_laid(shape, layout, seed, "cpu").detach().requires_grad_() for seed in range(3)]
    dev = [_laid(shape, layout, seed, "neuron").detach().requires_grad_() for seed in range(3)]
    expected = F.scaled_dot_product_attention(*cpu)
    expected_grads = torch.autograd.grad(expected, cpu, _laid(shape, layout, 3, "cpu"))
    with sdpa_kernel([SDPBackend.OVERRIDEABLE]):
        got = F.scaled_dot_product_attention(*dev)
        got_grads = torch.autograd.grad(got, dev, _laid(shape, layout, 3, "neuron"))
    torch.testing.assert_close(got.detach().cpu(), expected.detach(), **TOL[torch.float32])
    for g_dev, g_cpu in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(g_dev.cpu(), g_cpu, **TOL[torch.float32])


def _keyed(keys, layout="contiguous"):
    """q = 1 (one query, head dim 1, scale 1): the scores are the keys themselves; values 1..n. ``transposed``:
    the same values with a query whose last dim is not contiguous, for which CPU runs its math path."""
    n = len(keys)
    q = torch.ones((1, 1, 1, 1))
    if layout == "transposed":
        q = torch.ones((1, 1, 1, 2)).transpose(-1, -2)[..., :1]  # stride 2 in the last dim: CPU's math path
    k = torch.tensor(keys, dtype=torch.float32).reshape(1, 1, n, 1)
    v = torch.arange(1, n + 1, dtype=torch.float32).reshape(1, 1, n, 1)
    return q, k, v


@pytest.mark.parametrize("keys, layout", [
    ([float("nan")], "contiguous"),  # the designed suite's sdpa_backward-float32-near_overflow-contiguous-128
    ([-float("inf")] * 8 + [float("nan")], "contiguous"),  # a NaN in CPU's scalar tail: never started, 0
    ([-float("inf")] * 7 + [float("nan")], "contiguous"),  # in its vector part: NaN
    ([1.0] * 8 + [float("nan")], "contiguous"),  # a started row's NaN tail score: NaN
    ([-float("inf")] * 3, "contiguous"),  # every key masked: 0, logsumexp 0
    ([float("nan")], "transposed"),  # CPU's math path: NaN
], ids=str)
def test_nan_scores_follow_cpus_kernel(keys, layout):
    """A row's NaN scores give what CPU's kernel for the call gives: its flash forward (contiguous inputs) skips a
    NaN among the last S % w keys in its row max (cpu_host.sdpa_flash_vector), and a row whose max stays -inf
    has probabilities 0, output 0 * V and logsumexp 0; its math path keeps the NaN. Before, the device kept
    every NaN (NaN where CPU's flash gives 0) and gave logsumexp -inf to rows never started."""
    assert cpu_host.sdpa_flash_vector() == 8 or len(keys) < 8  # the cases' tail lengths assume w = 8 (AVX2, DEFAULT)
    q, k, v = _keyed(keys, layout)
    expected = F.scaled_dot_product_attention(q, k, v, scale=1.0)
    actual = F.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), scale=1.0).cpu()
    torch.testing.assert_close(actual, expected, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(actual.signbit(), expected.signbit())
    if layout == "contiguous":
        _, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, scale=1.0)
        dev = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            q.to("neuron"), k.to("neuron"), v.to("neuron"), None, 0.0, False, scale=1.0)[1].cpu()
        torch.testing.assert_close(dev, lse, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("keys", [[float("nan")], [-float("inf")] * 8 + [float("nan")],
                                  [-float("inf")] * 7 + [float("nan")], [1.0] * 8 + [float("nan")],
                                  [-float("inf")] * 3], ids=str)
def test_compiled_attention_follows_cpus_flash_rules_as_eager(keys, monkeypatch):
    """The compiled attention step asks, when the graph is cut, whether CPU runs its flash kernel for the traced
    layouts, and then applies its row-max and never-started-row rules as the eager kernel does, on both the
    instruction-level path and the static replay's wide runner (kernels.attention.forward_wide): output and
    logsumexp bit for bit the eager kernel's (before, the compiled step kept every NaN, and its device time was
    not the eager launch's)."""
    import device_impl.compiler as compiler
    from device_impl.compiler import executor

    q, k, v = (t.to("neuron") for t in _keyed(keys))
    op = torch.ops.aten._scaled_dot_product_fused_attention_overrideable
    eager = [t.cpu() for t in op(q, k, v, None, 0.0, False, scale=1.0)[:2]]
    for replay in (True, False):
        monkeypatch.setattr(executor, "STATIC_REPLAY", replay)
        torch._dynamo.reset()
        compiler.clear_cache()
        fn = torch.compile(lambda a, b, c: op(a, b, c, None, 0.0, False, scale=1.0)[:2], backend="neuron",
                           fullgraph=True)
        for _ in range(2):  # the second call takes the static replay where it is on
            got = [t.cpu() for t in fn(q, k, v)]
        for g, e in zip(got, eager):
            assert torch.equal(g.isnan(), e.isnan()) and torch.equal(torch.nan_to_num(g), torch.nan_to_num(e)), \
                (keys, replay, g, e)
