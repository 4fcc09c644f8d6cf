"""Cut whole or decomposed, chosen by modelled device time at compile time (compiler/costed.py): gather and
reflection padding's backward, whose eager programs beat the compiler's decomposition for some shapes and lose to
it for others (issue 21's spec sweep, benches/compiled_vs_eager_specs.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from device_impl.compiler import costed
from support import compiled_run, eager_run

pytestmark = pytest.mark.usefixtures("no_neff_cache")

aten = torch.ops.aten


def _randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _gather(x, i):
    return torch.gather(x, -1, i)


def _pad_backward(n: int, padding: tuple[int, ...]):
    op = getattr(aten, f"reflection_pad{n}d_backward")
    return lambda g, x: op(g, x, padding)


def _embedding_backward(rows: int):
    return lambda g, i: aten.embedding_dense_backward(g, i, rows, -1, False)


BF16 = torch.bfloat16
# (name, fn, inputs, the step kinds the cheaper form makes): the sweep's designed cases
COSTED = [
    # cut: the eager program's indirect rows (1.513 us) against iotas + concatenate + gather (1.580)
    ("gather_fp32", _gather, lambda: (_randn(2, 2, 513), torch.tensor([[[512, 0]]])), ["gather_whole"]),
    # decomposed: 4 indices of one row, torch-mlir's gather (1.343) against the eager program (1.513)
    ("gather_bf16", _gather, lambda: (_randn(513, dtype=BF16), torch.tensor([3, 500, 0, 512])),
     ["concatenate", "gather"]),
    # cut: the eager kernel's per-dim folds (2.203) against moves' 17 padded edge blocks summed (2.289)
    ("reflection_pad3d_backward_fp32", _pad_backward(3, (1, 1, 0, 1, 1, 1)),
     lambda: (_randn(4, 7, 3, 5, seed=1), _randn(4, 5, 2, 3)), ["reflection_pad_backward"]),
    # decomposed: moves' blocks (1.513) against the eager kernel's folds (2.575)
    ("reflection_pad2d_backward_fp32", _pad_backward(2, (1, 0, 1, 0)),
     lambda: (_randn(5, 6, 4, 7, seed=1), _randn(5, 6, 3, 6)), ["pad", "pad", "pad", "fused"]),
    # cut: 1.329 against 1.398
    ("reflection_pad1d_backward_bf16", _pad_backward(1, (1, 0)),
     lambda: (_randn(6, 5, dtype=BF16, seed=1), _randn(6, 4, dtype=BF16)), ["reflection_pad_backward"]),
    # without scale_grad_by_freq, cut: 6 rows into 129 (the eager program 1.705 against the decomposition's 2.467)
    ("embedding_dense_backward_bf16", _embedding_backward(129),
     lambda: (_randn(2, 3, 16, dtype=BF16), torch.tensor([[1, 5, 128], [0, 5, 7]])), ["embedding_dense_backward"]),
    # decomposed: 300 rows into 50 (one zero fill and one scatter, 4.46 us, against the program's 7.00)
    ("embedding_dense_backward_many_rows", _embedding_backward(50),
     lambda: (_randn(300, 64), torch.randint(0, 50, (300,), generator=torch.Generator().manual_seed(2))),
     ["fill", "fused", "fused", "fused", "scatter"]),
]


@pytest.mark.parametrize("name,fn,make,kinds", COSTED, ids=[c[0] for c in COSTED])
def test_a_costed_op_compiles_to_the_cheaper_of_its_cut_and_its_decomposition(name, fn, make, kinds):
    """The compiled call is whichever of the two forms ``costed.cut_wins`` modelled as faster, so its device time
    is at most the eager kernel's (which the cut runs) and at most the decomposition's; where it is cut, the eager
    kernel's bits, else CPU's values within tolerance."""
    inputs = make()
    got, compiled_ns, steps = compiled_run(fn, *inputs)
    assert [s["kind"] for s in steps] == kinds, [s["kind"] for s in steps]
    want, eager_ns = eager_run(fn, *inputs)
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)
    args = (inputs[0], -1, inputs[1]) if fn is _gather else (*inputs, ())
    op = aten.gather.default if fn is _gather else None
    if op is not None:  # the same decision the compile made, from the two one-op programs' modelled time
        from device_impl.compiler import costed, costing

        cut_ns, decomposed_ns = (costing.call_ns(op, args, {}, cut=c) for c in (True, False))
        assert costed.cut_wins(op, args) == (cut_ns < decomposed_ns)
        assert ("gather_whole" in kinds) == (cut_ns < decomposed_ns)
    if {"reflection_pad_backward", "gather_whole", "embedding_dense_backward"} & set(kinds):
        view = torch.int32 if got.dtype == torch.float32 else torch.int16
        assert np.array_equal(got.view(view).numpy(), want.view(view).numpy())
    torch.testing.assert_close(got, fn(*inputs), equal_nan=True)


def test_a_costing_is_forced_while_it_compiles_its_own_forms_and_remembered_on_disk(tmp_path, monkeypatch):
    """``cut_wins`` answers its own one-op compiles from the forced decision (no recursion), memoises the answer per
    call signature, and stores it in the compile cache so a later process costs nothing."""
    from device_impl.compiler import backend, costed, costing

    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", raising=False)
    backend.reload_settings()
    try:
        monkeypatch.setattr(costed, "_MEMO", {})
        x, i = torch.empty(2, 3, 513), torch.zeros(1, 1, 2, dtype=torch.int64)
        with costed.forcing(aten.gather.default, False):
            assert costed.cut_wins(aten.gather.default, (x, -1, i)) is False
        assert costed._MEMO == {}  # forced: nothing costed
        first = costed.cut_wins(aten.gather.default, (x, -1, i))
        assert list(costed._MEMO.values()) == [first]
        assert len(list(tmp_path.rglob("*.json"))) == 1
        monkeypatch.setattr(costed, "_MEMO", {})

        def refuse(*args, **kwargs):
            raise AssertionError("costed again")

        monkeypatch.setattr(costed, "_INSTALLED", [costed.Coster(refuse, costing.load, costing.store)])
        assert costed.cut_wins(aten.gather.default, (x, -1, i)) is first
    finally:  # the fixture's settings again (monkeypatch restores the environment after the fixture's teardown)
        monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
        backend.reload_settings()


def test_a_transposed_convolution_with_unreached_outputs_is_cut_with_cpus_zero_signs():
    """The sweep's bfloat16 ``conv_transpose3d`` (stride 2, padding 1, a 1x1x1 kernel) is modelled cheaper as the eager
    kernel's program (1.380 us against torch-mlir's convolution and bias add, 1.515). Half its outputs sum no
    product; the eager program forms them as CPU does, 0 + bias (``kernels.spatial.conv._unreached``), so a -0.0
    bias gives +0.0 there: it is cut, with CPU's zero signs (it stayed imported while a guard assumed the program
    wrote the bias itself)."""
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    x, w = (torch.randn(s, generator=g).to(BF16) for s in [(2, 1, 3, 8, 2), (1, 1, 1, 1, 1)])
    b = torch.tensor([-0.0], dtype=BF16)

    def fn(x, w, b):
        return F.conv_transpose3d(x, w, b, stride=2, padding=1)

    got, _, steps = compiled_run(fn, x, w, b)
    assert [s["kind"] for s in steps] == ["convolution_overrideable"], [s["kind"] for s in steps]
    want = fn(x, w, b)
    assert torch.equal(got, want) and torch.equal(torch.signbit(got), torch.signbit(want))


def test_a_plain_convolution_backward_is_cut_where_the_eager_program_is_cheaper():
    """A 3x3, padding 1 training step: torch-mlir imports its ``convolution_backward`` as a weight-gradient
    convolution, a bias reduction and a copy (the step's backward program 13.46 us for [4, 3, 16, 16] into 8
    channels; the whole step 22.5 us against eager's 16.0); costed, it is cut as the eager kernel's launch body
    (7.38 us; the step 17.0 us), whose gradients are the eager kernel's bits."""
    import torch.nn.functional as F

    from device_impl.compiler import breakdown

    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 3, 16, 16, generator=g).to("neuron")

    def parameters():
        w = torch.randn(8, 3, 3, 3, generator=torch.Generator().manual_seed(1)).to("neuron").requires_grad_()
        return w, torch.randn(8, generator=torch.Generator().manual_seed(2)).to("neuron").requires_grad_()

    def step(x, w, b):
        y = F.conv2d(x, w, b, padding=1)
        y.sum().backward()
        return y

    w, b = parameters()
    step(x, w, b)
    compiled = torch.compile(step, backend="neuron", dynamic=False)
    cw, cb = parameters()
    with breakdown.capture() as calls:
        compiled(x, cw, cb)
        torch.neuron.synchronize()
    kinds = [[s["kind"] for s in executable.program.steps] for executable, _ in calls]
    assert any("convolution_backward" in k for k in kinds), kinds
    assert torch.equal(cw.grad.cpu(), w.grad.cpu()) and torch.equal(cb.grad.cpu(), b.grad.cpu())


def test_a_costing_answer_is_kept_per_thread_count():
    """An upsample cut's program follows CPU's kernel choice, which for 3-channel 2-d input depends on
    torch.get_num_threads(): the memo key includes the count, so a count changed within a process costs again
    instead of reusing an answer about another program."""
    x = torch.empty(1, 3, 8, 8)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = costed.signature(torch.ops.aten.upsample_bilinear2d.vec, (x, [16, 16], False, None), {})
        torch.set_num_threads(2)
        two = costed.signature(torch.ops.aten.upsample_bilinear2d.vec, (x, [16, 16], False, None), {})
    finally:
        torch.set_num_threads(before)
    assert one != two
