"""torch.compile(backend="neuron"): models compile, run on the device and match CPU; the shape contract;
recompiles per shape; graph breaks; fallback and its strict mode; device errors.

Compiled programs run under the host-compute guard (tests/conftest.py): a compiled graph that
computed with torch CPU kernels would raise.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import device_impl.compiler as compiler
from device_impl import engine
from harness.models import DecoderBlock
from support import run_python, warm_call_ns


@pytest.fixture
def stats():
    """Compiler counters from zero; settings re-read (tests change the environment)."""
    from device_impl.compiler import backend

    torch._dynamo.reset()
    compiler.reset_stats()
    compiler.clear_cache()
    backend.reload_settings()
    yield compiler
    torch._dynamo.reset()
    compiler.reset_stats()
    backend.reload_settings()


@pytest.fixture(autouse=True)
def no_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path / "neff"))


def _compiled_launches() -> dict[str, dict]:
    return {name: s for name, s in engine.stats().items() if name.startswith("neff:")}


def test_backend_name_is_registered_without_loading_dynamo_or_torch_mlir():
    code = ("import sys, torch, device_impl\n"
            "print('torch._dynamo' in sys.modules, 'torch_mlir' in sys.modules)\n"
            "import torch._dynamo\n"
            "print('neuron' in torch._dynamo.list_backends(), 'torch_mlir' in sys.modules)\n")
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True", "False"]


def test_decoder_block_forward_and_gradients_match_cpu(stats):
    torch.manual_seed(0)
    reference = DecoderBlock(hidden=256, heads=4, kv_heads=2, seq=128)
    model = DecoderBlock(hidden=256, heads=4, kv_heads=2, seq=128).to("neuron")
    model.load_state_dict(reference.state_dict())
    x = torch.randn(2, 128, 256)
    expected = reference(x)
    expected.pow(2).mean().backward()

    engine.reset_stats()
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    out = compiled(x.to("neuron"))
    out.pow(2).mean().backward()

    torch.testing.assert_close(out.detach().cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(reference.named_parameters(), model.named_parameters()):
        scale = p.grad.abs().max().item()
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-3, atol=1e-4 * scale, msg=name)
    s = stats.stats()
    assert s["fallbacks"] == 0 and s["compiles"] == 2  # the forward and the backward graph
    launches = _compiled_launches()
    assert any(name.endswith("_forward") for name in launches) and any(name.endswith("_backward")
                                                                       for name in launches)


def test_recompiles_once_per_static_shape_and_counts_the_shapes(stats):
    def f(x):
        return torch.softmax(x * 2, dim=-1)

    compiled = torch.compile(f, backend="neuron")
    for rows in (4, 8, 4, 16):
        x = torch.randn(rows, 32)
        torch.testing.assert_close(compiled(x.to("neuron")).cpu(), f(x))
    s = stats.stats()
    assert s["recompiles"] == 2  # 8 and 16 rows; the second 4 reuses the first program
    records = s["recompiles_by_cause"]["shape"]
    assert [r["shape"] for r in records] == [[8, 32], [16, 32]]
    assert all(r["previous"][1] == 32 for r in records)
    assert s["fallbacks"] == 0


# op families called at three sizes under torch.compile's default (dynamic=None): after the second size Dynamo's
# automatic dynamic shapes retrace with symbolic sizes, running the device's own C++ and Python that Dynamo
# traces through (csrc/attention.cpp's SDPA backend choice once threw there); the backend then compiles each
# size statically. {name: (function, inputs at size n)}
SIZE_SWEEP = {
    "sdpa": (lambda q: F.scaled_dot_product_attention(q, q, q, is_causal=True), lambda n: [torch.randn(1, 2, n, 8)]),
    "matmul": (lambda x: x @ x.transpose(-1, -2), lambda n: [torch.randn(2, n, 8)]),
    "layer_norm": (lambda x: F.layer_norm(x, x.shape[-1:]), lambda n: [torch.randn(3, n)]),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), lambda n: [torch.randn(1, 2, n, n), torch.randn(3, 2, 3, 3)]),
    "embedding": (lambda i, w: F.embedding(i, w), lambda n: [torch.randint(0, 10, (n,)), torch.randn(10, 4)]),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t), lambda n: [torch.randn(n, 5), torch.randint(0, 5, (n,))]),
    "cat_index_select": (lambda x, i: torch.cat([x, x * 2]).index_select(0, i),
                         lambda n: [torch.randn(n, 3), torch.arange(n) % 3]),
    "topk_sort": (lambda x: x.topk(2, -1).values + x.sort(-1).values[..., :2], lambda n: [torch.randn(3, n + 2)]),
    "interpolate_pool": (lambda x: F.max_pool2d(F.interpolate(x, scale_factor=2, mode="bilinear"), 2),
                         lambda n: [torch.randn(1, 1, n, n)]),
}


@pytest.mark.parametrize("name", sorted(SIZE_SWEEP))
def test_a_new_size_under_automatic_dynamic_shapes_recompiles_statically(stats, name):
    fn, make = SIZE_SWEEP[name]
    compiled = torch.compile(fn, backend="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a graph the compiler cannot lower would run eagerly
        for n in (4, 6, 9):
            args = make(n)
            torch.testing.assert_close(compiled(*[a.to("neuron") for a in args]).cpu(), fn(*args),
                                       rtol=1e-4, atol=1e-5)
    s = stats.stats()
    assert s["fallbacks"] == 0 and s["recompiles"] >= 2, s


def _size_and_tensor(x):
    return x.sin(), x.shape[-1] * 2  # a size Dynamo computes in the graph once the size is symbolic


def _size_after_a_graph_break(x):
    n = x.shape[-1]
    torch._dynamo.graph_break()
    return x.cos(), n * 3 // 2  # the continuation's graph: a symbolic int input, arithmetic on it, no tensor op


@pytest.mark.parametrize("fn", [_size_and_tensor, _size_after_a_graph_break])
def test_a_size_the_symbolic_graph_returns_is_a_python_int_at_every_size(stats, fn):
    """harness.dynamic's set_ sequence: specialized per call, such a graph returned a Python int the StableHLO
    import could not type (torch-mlir's ValueError 'Cannot cast type to RankedTensorType (from Type(i64))') from
    the second size on."""
    compiled = torch.compile(fn, backend="neuron")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no graph may fall back to eager
        for n in (4, 6, 9):
            x = torch.randn(2, n)
            tensor, size = compiled(x.to("neuron"))
            expected = fn(x)
            assert type(size) is int and size == expected[1]
            torch.testing.assert_close(tensor.cpu(), expected[0])
    assert stats.stats()["fallbacks"] == 0


def test_a_specialized_graph_keeps_a_transposed_clones_strides_at_every_size(stats):
    """harness.dynamic (transposed): specialized outside Dynamo's tracing context, the symbolic graph's outputs
    came back contiguous from the second size on, where eager's clone keeps x's strides."""
    compiled = torch.compile(lambda x: x.clone(), backend="neuron")
    for n in (4, 6, 9):
        x = torch.randn(n, 5).t()
        out = compiled(x.to("neuron"))
        assert out.stride() == x.clone().stride() == (1, 5)
        torch.testing.assert_close(out.cpu(), x, rtol=0, atol=0)


def test_an_in_place_random_fill_of_a_transposed_tensor_matches_eager_at_every_size(stats):
    """harness.dynamic (transposed): the symbolic graph skipped the strided-random-fill rule (run as Dynamo traced
    it), so from the second size on bernoulli_ filled the transposed clone in logical order, not eager's."""
    fn = lambda x: x.clone().bernoulli_(0.3)  # noqa: E731
    compiled = torch.compile(fn, backend="neuron")
    for n in (4, 6, 9):
        x = torch.rand(n, 5, device="neuron").t()
        torch.neuron.manual_seed(n)
        got = compiled(x)
        torch.neuron.manual_seed(n)
        assert torch.equal(got.cpu(), fn(x).cpu())


def test_dynamic_true_raises_shape_contract_error_naming_input_and_dimension(stats):
    compiled = torch.compile(lambda x: x + 1, backend="neuron", dynamic=True)
    with pytest.raises(compiler.ShapeContractError) as info:
        compiled(torch.randn(5, 3).to("neuron"))
    message = str(info.value)
    assert "L['x']" in message and "dimension 0" in message
    assert "static shapes" in message and "bucket" in message


def test_mark_dynamic_raises_shape_contract_error(stats):
    x = torch.randn(6, 2).to("neuron")
    torch._dynamo.mark_dynamic(x, 0)
    with pytest.raises(compiler.ShapeContractError, match="dimension 0"):
        torch.compile(lambda t: t * 3, backend="neuron")(x)


def test_graph_breaks_compile_each_subgraph(stats):
    def f(x):
        y = torch.exp(x)
        torch._dynamo.graph_break()
        return y.sum(dim=0) * 2

    x = torch.randn(16, 8)
    out = torch.compile(f, backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), f(x))
    s = stats.stats()
    assert s["graphs"] == 2 and s["compiles"] == 2 and s["fallbacks"] == 0


def test_fullgraph_with_a_graph_break_is_refused_by_dynamo(stats):
    def f(x):
        torch._dynamo.graph_break()
        return x + 1

    with pytest.raises(Exception, match="graph_break|graph break"):
        torch.compile(f, backend="neuron", fullgraph=True)(torch.randn(3).to("neuron"))


def test_unlowerable_op_falls_back_to_eager_and_warns_once(stats):
    def f(x):
        return torch.lgamma(x * 0.5) + 1  # torch-mlir has no StableHLO lowering for lgamma

    x = torch.rand(64) * 2 - 1
    compiled = torch.compile(f, backend="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = compiled(x.to("neuron"))
        compiled(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), f(x))
    mentions = [w for w in caught if "lgamma" in str(w.message) and "eagerly" in str(w.message)]
    assert len(mentions) == 1
    s = stats.stats()
    assert s["fallbacks"] == 1 and list(s["fallbacks_by_op"]) == ["torch.aten.lgamma"]


@pytest.mark.parametrize("fn,op", [
    # AOT's graph, eagerly: compiled around angle (compiler/eager_cut.py) it would take two launches where adaptive
    # eager fuses the three ops into one, so the whole graph keeps its eager run
    (lambda a, b: torch.angle(torch.add(a, b) * 2), "torch.aten.angle"),
    (lambda a, b: F.softshrink(a, 0.5) * b + 1, "softshrink of torch.float32"),  # Dynamo's graph, eagerly
], ids=["aot_graph", "dynamo_graph"])
def test_a_graph_run_eagerly_is_queued_and_fused_as_adaptive_eager(stats, fn, op):
    """compiler/fallback.py runs a graph the compiler cannot lower in adaptive eager mode, flushed when it returns:
    its elementwise ops fuse into one launch as adaptive eager fuses them, so the compiled call costs no more
    device time than the better eager mode (issue 21; the out= specs' graph with an add beside a bitcast, before
    bitcasts compiled, took one launch per op, 2.64 us against adaptive's 1.47 us). The process's mode is back to
    plain eager afterwards."""
    def device_ns(call):
        ns, result = warm_call_ns(call)
        return ns, result.cpu()

    x, y = torch.randn(3, 513).to("neuron"), torch.randn(3, 513).to("neuron")
    eager_ns, want = device_ns(lambda: fn(x, y))
    with torch.neuron.eager_mode("adaptive"):
        adaptive_ns, _ = device_ns(lambda: fn(x, y))
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled_ns, got = device_ns(lambda: compiled(x, y))
    assert list(stats.stats()["fallbacks_by_op"]) == [op]
    assert torch.equal(got, want)
    assert adaptive_ns < eager_ns and compiled_ns <= adaptive_ns, (eager_ns, adaptive_ns, compiled_ns)
    assert torch.neuron.get_eager_mode() == "eager"


def test_device_code_run_eagerly_inside_a_compiled_function_is_not_traced(stats):
    """Graph-break regions and fallback graphs run neuron ops eagerly while Dynamo's frame hook is on;
    the device's own Python (kernels, the CPU fallback, torch.neuron's RNG state) must run as code,
    not be traced as user graphs (it was: Dynamo refused the fallback's host tensor, and turned the
    generator state into a fake tensor inside the fallback)."""
    def f(x):
        state = torch.neuron.get_rng_state()
        noisy = torch.nn.functional.rrelu(x, 0.1, 0.3, training=True)  # a random op the compiler cannot lower
        torch.neuron.set_rng_state(state)
        again = torch.nn.functional.rrelu(x, 0.1, 0.3, training=True)
        return noisy, again

    x = torch.linspace(-2, 2, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        noisy, again = torch.compile(f, backend="neuron", dynamic=False)(x.to("neuron"))
    noisy, again = noisy.cpu(), again.cpu()
    torch.testing.assert_close(noisy, again)  # the restored state replays the same noise
    slopes = noisy[x < 0] / x[x < 0]
    assert ((slopes >= 0.1 - 1e-6) & (slopes <= 0.3 + 1e-6)).all() and torch.equal(noisy[x >= 0], x[x >= 0])


def test_arguments_cpu_refuses_raise_as_in_eager(stats):
    """Fake-tensor tracing skips checks CPU kernels run (torch.sub(bool, 0) traced with an int64 result and
    compiled); compiler/parity.py re-runs them, and the program raises CPU's exception class when called."""
    x, f = torch.tensor([True, False]), torch.tensor([1.5])
    refused = [(lambda t: torch.sub(t, 0), (x,), RuntimeError, "with a bool tensor is not supported"),
               (torch.floor, (x,), NotImplementedError, "floor_vml_cpu"),
               (lambda t: torch.bitwise_xor(t, 1), (f,), NotImplementedError, "bitwise_xor_cpu"),
               (torch.bitwise_and, (f, f), NotImplementedError, "bitwise_and_cpu"),  # a two-input program
               (lambda t: torch.pow(t, -1), (x.long(),), RuntimeError, "negative integer powers")]
    for fn, args, kind, message in refused:
        with pytest.raises(kind, match=message):
            fn(*args)
        torch._dynamo.reset()
        with pytest.raises(kind, match=message):
            torch.compile(fn, backend="neuron", dynamic=False)(*[a.to("neuron") for a in args])
    y = torch.tensor([1, 2])  # the check refuses bool only
    out = torch.compile(lambda t: torch.sub(t, 1), backend="neuron", dynamic=False)(y.to("neuron"))
    assert torch.equal(out.cpu(), y - 1)


def test_out_dtypes_cpu_refuses_raise_as_in_eager(stats):
    """AOTAutograd turns op(..., out=o) into the functional op and a casting copy, so an out= dtype CPU's kernel
    refuses (softmax into float16) came back computed; parity.out_refusal probes each out= call on CPU. An out=
    CPU accepts still runs compiled, and a probed random op leaves CPU's generator where it was."""
    x = torch.randn(4, 5)

    def softmax_into(t, out):
        return torch.softmax(t, 1, out=out) if False else torch.ops.aten.softmax.int_out(t, 1, out=out)

    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
        softmax_into(x, torch.empty(4, 5, dtype=torch.float16))
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
        torch.compile(softmax_into, backend="neuron")(x.to("neuron"), torch.empty(4, 5, dtype=torch.float16,
                                                                                device="neuron"))
    torch._dynamo.reset()
    out = torch.empty(4, 5, dtype=torch.float16, device="neuron")
    torch.compile(lambda t, o: torch.exp(t, out=o), backend="neuron")(x.to("neuron"), out)
    torch.testing.assert_close(out.cpu(), torch.exp(x).half())
    torch._dynamo.reset()
    state = torch.get_rng_state()
    torch.compile(lambda m, o: torch.normal(m, 1.0, out=o), backend="neuron")(x.to("neuron"),
                                                                            torch.empty(4, 5, device="neuron"))
    assert torch.equal(torch.get_rng_state(), state)


def test_an_out_sized_from_a_symbolic_shape_is_probed_at_the_traced_sizes(stats):
    """A graph Dynamo traces with dynamic sizes (a second size seen) whose out= tensor is made from its input's
    shape: parity.out_refusal's probe made CPU zeros of the symbolic sizes, and the compile raised "SymIntArrayRef
    expected to contain only concrete integers" (the op suite's add_out_sized/mul_out_sized under harness.dynamic).
    The probe runs at the traced call's sizes; a refused out dtype still raises CPU's error at any size."""
    def into_float64(x, y):
        out = torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=torch.float64, device=x.device)
        return torch.mul(x, y, out=out)

    def softmax_into_half(x):
        out = torch.empty(x.shape, dtype=torch.float16, device=x.device)
        return torch.ops.aten.softmax.int_out(x, 1, out=out)

    torch._dynamo.reset()
    compiled = torch.compile(into_float64, backend="neuron")
    for n in (5, 11, 130):
        x, y = torch.randn(2, n), torch.randn(2, n)
        assert torch.equal(compiled(x.to("neuron"), y.to("neuron")).cpu(), torch.mul(x, y).double())
    torch._dynamo.reset()
    compiled = torch.compile(softmax_into_half, backend="neuron")
    for n in (5, 11):
        with pytest.raises(RuntimeError, match="Expected out tensor to have dtype float"):
            compiled(torch.randn(2, n, device="neuron"))


@pytest.mark.parametrize("fn,eager_graph", [(lambda x, s, o: torch.slice_scatter(x, s, 0, 0, 6, 1, out=o), True),
                                            (lambda x, s, o: torch.add(x, s, out=o), False)],
                         ids=["slice_scatter", "add"])
def test_an_out_of_another_shape_is_resized_as_in_eager_on_every_compile(stats, fn, eager_graph):
    """Dynamo breaks the graph at an out= of another shape than the result the first time; after
    torch._dynamo.reset() it traced the same code into a graph, and AOTAutograd's copy back into the out tensor
    raised "The size of tensor a (7) must match the size of tensor b (6)" where eager resizes it
    (the op suite's contract check out_resize, run alone). Such a graph runs eagerly, counted as a fallback."""
    x, s = torch.randn(6, 5, 6), torch.randn(6, 5, 6)
    expected = fn(x, s, torch.empty(6, 5, 7))
    for _ in range(2):
        torch._dynamo.reset()
        out = torch.empty(6, 5, 7, device="neuron")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = torch.compile(fn, backend="neuron", dynamic=False)(x.to("neuron"), s.to("neuron"), out)
        assert out.shape == expected.shape and torch.equal(out.cpu(), expected) and result is out
    # add: Dynamo breaks the graph each time (nothing to compile); slice_scatter's second trace is a graph, run eagerly
    assert (stats.stats()["fallbacks_by_op"].get("out= of another shape than the result", 0) == 1) == eager_graph


def test_calls_whose_decomposition_differs_from_cpu_run_eagerly(stats):
    """backend.EAGER_CALLS: softshrink's decomposition gives x * 0 inside the band where CPU's vector loop gives +0.0,
    and hardshrink's computes integer inputs CPU refuses; such graphs run as Dynamo traced them, counted, with the
    device's kernels, which follow CPU. A float hardshrink still compiles."""
    x = torch.linspace(-1, 1, 37)
    soft = torch.compile(lambda t: F.softshrink(t, 0.5), backend="neuron", dynamic=False)(x.to("neuron")).cpu()
    expected = F.softshrink(x, 0.5)
    assert torch.equal(soft, expected) and torch.equal(soft.signbit(), expected.signbit())
    with pytest.raises(NotImplementedError, match="hardshrink"):
        torch.compile(lambda t: torch.ops.aten.hardshrink(t, 0.5), backend="neuron",
                      dynamic=False)(torch.arange(-3, 4, dtype=torch.int32, device="neuron"))
    fallbacks = stats.stats()["fallbacks_by_op"]
    assert fallbacks.get("softshrink of torch.float32") == 1 and fallbacks.get("hardshrink of torch.int32") == 1
    torch.compile(lambda t: F.hardshrink(t, 0.5), backend="neuron", dynamic=False)(x.to("neuron"))
    assert stats.stats()["fallbacks"] == 2


def test_strict_mode_raises_naming_the_op(stats, monkeypatch):
    from device_impl.compiler import backend

    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", "1")
    backend.reload_settings()
    with pytest.raises(compiler.FallbackDisabledError, match="lgamma") as info:
        torch.compile(lambda x: torch.lgamma(x), backend="neuron")(torch.rand(8).to("neuron"))
    assert "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION" in str(info.value)
    assert stats.stats()["fallbacks"] == 0


def test_cpu_inputs_are_refused_with_the_fix(stats):
    with pytest.raises(RuntimeError, match=r"input L\['x'\] is on cpu.*to\('neuron'\)"):
        torch.compile(lambda x: x * 2, backend="neuron")(torch.randn(4))


def test_inputs_on_two_cores_are_refused(stats):
    a, b = torch.randn(4).to("neuron:0"), torch.randn(4).to("neuron:1")
    with pytest.raises(RuntimeError, match="same device"):
        torch.compile(lambda x, y: x + y, backend="neuron")(a, b)


def test_program_runs_on_the_inputs_core(stats):
    x = torch.randn(32, 16)
    out = torch.compile(lambda t: torch.tanh(t) @ t.T, backend="neuron")(x.to("neuron:1"))
    assert out.device == torch.device("neuron:1")
    torch.testing.assert_close(out.cpu(), torch.tanh(x) @ x.T, rtol=1e-4, atol=1e-5)


def test_a_host_scalar_written_by_the_graph_is_refused_as_in_eager():
    """0-d host tensors may be read by a compiled graph (scalars), never written: an out= on the host
    raises PyTorch's out-device error before anything runs, and the out is left alone."""
    x = torch.randn(3, 4, device="neuron")
    outs = [torch.full((), 7.0) for _ in range(3)]
    with pytest.raises(RuntimeError, match="Expected out tensor to have device neuron"):
        torch.compile(lambda: torch.unbind_copy(x.sum(1), 0, out=outs), backend="neuron", dynamic=False)()
    assert all(o.item() == 7.0 for o in outs)
