"""Compiled data movement and full reductions against their eager kernels (issue 21's spec sweep,
benches/compiled_vs_eager_specs.py): the compiled program does the eager kernel's work, not more."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from device_impl import engine
from support import compile_traced, compiled_run, eager_run

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int32).numpy() if t.dtype == torch.float32 else t.numpy()


def _randn(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0))


def _compiled_steps(fn, *inputs: torch.Tensor) -> tuple[torch.Tensor, set[str]]:
    """``support.compiled_run``'s output and the kinds of its programs' steps."""
    out, _, steps = compiled_run(fn, *inputs)
    return out, {step["kind"] for step in steps}


# one row of 7695 (or 5130) columns: the shapes of the sweep's designed cases
FULL_REDUCTIONS = [
    ("min", torch.min, [(3, 1, 5, 513)]),
    ("any", lambda x: torch.any(x > 1.5), [(3, 1, 5, 513)]),
    ("sum", torch.sum, [(3, 1, 5, 513)]),
    ("mse_loss", lambda x, y: F.mse_loss(x, y), [(2, 5, 513), (2, 5, 513)]),
    # three phases: the largest magnitude (numerics' scaling), the mean, the squared deviations from it
    # x - mean: a full op reading a per-row value, in a later phase (float32 std itself is cut whole as the eager
    # kernel's program now, compiler/opaque_moments.py, so the fused group is reached through its formula)
    ("centred", lambda x: ((x - x.mean(dim=None, keepdim=True)) ** 2).sum(dim=None, keepdim=True).sqrt(), [(513,)]),
    ("centred_prime", lambda x: ((x - x.mean()) ** 2).sum().sqrt(), [(4099,)]),
    # few rows: each row's 513 columns as [27, 19] on 27 partitions of its own
    ("all_rows", lambda x: torch.all(x > -3.0, dim=-1, keepdim=True), [(3, 513)]),
    ("softmax_rows", lambda x: torch.softmax(x, -1), [(2, 1024)]),
]


@pytest.mark.parametrize("name,fn,shapes", FULL_REDUCTIONS, ids=[c[0] for c in FULL_REDUCTIONS])
def test_a_full_reduction_runs_on_the_partitions_as_the_eager_kernel(name, fn, shapes):
    """groups.GroupRunner._folded: a group reducing everything to one value works on [p, f] pieces of its
    columns and finishes across partitions, as the eager flat tiling does, instead of every op over one
    partition's 7695 elements (torch.min: 8.4 us against the eager kernel's 1.7 us); a full op reading a
    per-row value (std's x - mean) runs in a later phase, the value broadcast to the partitions. 4099 columns
    (a prime) take the flat tiling's [128, 33] + [1, 23] pieces."""
    inputs = [_randn(*s) for s in shapes]
    run = compile_traced(fn, *inputs)[0]
    device = [t.to("neuron") for t in inputs]
    engine.reset_stats()
    (first,) = run(device)
    (launch,) = [v for k, v in engine.stats().items() if k.startswith("neff:")]
    (second,) = run(device)  # the static replay's wide core: the same pieces, the same bits
    expected, eager_ns = eager_run(fn, *inputs)
    assert launch["device_ns"] <= eager_ns * 1.01, (name, launch["device_ns"], eager_ns)
    assert np.array_equal(_bits(first.cpu()), _bits(second.cpu()))
    torch.testing.assert_close(first.cpu(), fn(*inputs))
    torch.testing.assert_close(first.cpu(), expected)


WHOLE_ARG_REDUCTIONS = [
    ("argmax", lambda x: torch.argmax(x), (3, 513), None),  # the sweep's case: 2.60 us against the kernel's 2.52
    ("argmin_ties", lambda x: torch.argmin(x), (2049,), "ties"),  # the first of equal minima
    ("argmax_nan", lambda x: torch.argmax(x, dim=0), (4097,), "nan"),  # the first NaN
    # values read: stored
    ("max_dim", lambda x: (lambda r: r.values * 2 + r.indices)(torch.max(x, dim=-1)), (1, 1600), None),
]


@pytest.mark.parametrize("name,fn,shape,values", WHOLE_ARG_REDUCTIONS, ids=[c[0] for c in WHOLE_ARG_REDUCTIONS])
def test_a_whole_tensor_arg_reduction_takes_the_eager_kernels_flat_tiling(name, fn, shape, values):
    """steps._arg_reduce: a whole-tensor argmax/argmin of many columns runs the eager kernel's flat tiling
    (kernels.reduction.extrema.arg_program: the columns over the partitions, the best index found across them)
    instead of VectorE's arg_reduce over one partition's columns, and stores the values only where something reads
    them; its device time at most the eager kernel's, its indices CPU's."""
    x = _randn(*shape)
    if values == "ties":
        x = x.round().clamp(-2, 2)
    elif values == "nan":
        x.view(-1)[[700, 3000]] = float("nan")
    expected, eager_ns = eager_run(fn, x)
    got, compiled_ns, steps = compiled_run(fn, x)
    assert steps[0]["kind"] == ("argmin" if name.startswith("argmin") else "argmax")
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)
    assert torch.equal(got, expected) and torch.equal(got, fn(x))


PADS = [
    ("reflect1d", (1, 2), "reflect", (4, 6, 9)),
    ("reflect2d", (1, 1, 2, 0), "reflect", (2, 6, 5, 7)),
    ("reflect3d", (0, 0, 1, 1, 0, 0), "reflect", (6, 5, 6, 6, 4)),
    ("replicate1d", (3, 0), "replicate", (4, 6, 9)),
    ("replicate2d", (1, 1, 1, 1), "replicate", (2, 6, 5, 7)),
    ("replicate3d", (0, 0, 2, 1, 0, 0), "replicate", (2, 5, 6, 6, 4)),
    ("replicate3d_all", (2, 1, 0, 1, 1, 0), "replicate", (2, 5, 6, 6, 4)),
]


@pytest.fixture
def pads_decomposed(monkeypatch):
    """compiler.moves' decompositions of padding, which the calls opaque_pads does not cut whole keep (float64, a
    call the eager kernel refuses): every call decomposed, as before the cut."""
    from device_impl.compiler import opaque_pads

    monkeypatch.setattr(opaque_pads, "WHOLE_DTYPES", frozenset())
    monkeypatch.setattr(opaque_pads, "BACKWARD_DTYPES", frozenset())
    monkeypatch.setattr(opaque_pads, "IM2COL_DTYPES", frozenset())


@pytest.mark.parametrize("name,pad,mode,shape", PADS, ids=[c[0] for c in PADS])
def test_reflect_and_replicate_pads_compile_to_one_step_of_the_eager_kernels_moves(name, pad, mode, shape):
    """compiler.opaque_pads: a reflection or replication pad is cut whole, one step running the eager kernel's
    moves (``_Pad.forward_program``: every box of the padded dims' pieces straight from the input), so its device
    time is the eager kernel's, where moves' one concatenation per padded dim waited for each one's stores (the
    sweep's 2-d reflect: 1.167 us against 1.090); CPU's bits (NaN and -0.0 included), through the
    instruction-level run and the static replay."""
    x = _randn(*shape)
    x.view(-1)[::7] = -0.0
    x.view(-1)[3::11] = float("nan")

    def fn(t):
        return F.pad(t, pad, mode=mode)

    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    first = compiled(x.to("neuron"))  # at the instruction level, recording the schedule
    out, compiled_ns, steps = compiled_run(fn, x)  # replayed
    assert [step["kind"] for step in steps] == ["edge_pad"], [step["kind"] for step in steps]
    for got in (first, out):
        assert np.array_equal(_bits(got.cpu()), _bits(fn(x)))
    _, eager_ns = eager_run(fn, x)
    assert compiled_ns <= eager_ns, (name, compiled_ns, eager_ns)


@pytest.mark.usefixtures("pads_decomposed")
@pytest.mark.parametrize("name,pad,mode,shape", PADS, ids=[c[0] for c in PADS])
def test_reflect_and_replicate_pads_compile_to_copies_of_views(name, pad, mode, shape):
    """compiler.moves (the calls not cut whole): a reflection or replication pad is one concatenation of the input
    and its (reversed or broadcast) edge slices per padded dim, strided DMA copies, not index tensors and gathers (a
    3-d reflection pad: 19.6 us against the eager kernel's 1.2 us), with CPU's bits (NaN and -0.0 included)."""
    x = _randn(*shape)
    x.view(-1)[::7] = -0.0
    x.view(-1)[3::11] = float("nan")

    def fn(t):
        return F.pad(t, pad, mode=mode)

    out, kinds = _compiled_steps(fn, x)
    (launch,) = [v for k, v in engine.stats().items() if k.startswith("neff:")]
    assert kinds == {"concatenate"}, kinds
    assert np.array_equal(_bits(out.cpu()), _bits(fn(x)))
    _, eager_ns = eager_run(fn, x)
    # each padded dim is one copy of the tensor: a pad of two dims (7% over the eager kernel) or three (17%)
    # copies it two or three times, where the eager kernel writes each output element once
    padded = sum(1 for i in range(0, len(pad), 2) if pad[i] or pad[i + 1])
    assert launch["device_ns"] <= eager_ns * (1.0 + 0.1 * (padded - 1)) * 1.01, (name, launch["device_ns"], eager_ns)


IM2COL = [
    ("padded", (1, 1, 2, 513), dict(kernel_size=(2, 2), dilation=(1, 1), padding=(1, 1), stride=(1, 1))),
    ("strided_dilated", (2, 3, 9, 11), dict(kernel_size=(3, 2), dilation=(2, 1), padding=(1, 0), stride=(2, 3))),
    ("unbatched", (3, 7, 8), dict(kernel_size=(4, 4), dilation=(1, 1), padding=(0, 0), stride=(1, 1))),
]


@pytest.mark.parametrize("name,shape,args", IM2COL, ids=[c[0] for c in IM2COL])
def test_im2col_compiles_to_one_step_of_the_eager_kernels_copies(name, shape, args):
    """compiler.opaque_pads: im2col is cut whole, one step running the eager kernel's program (the input padded in
    scratch, one strided copy per kernel offset: ``kernels.spatial.fold.im2col_program``), so its device time is at
    most the eager kernel's, where moves' pad step and concatenate step each waited for the last one's stores (the
    sweep's 2x2 padded case: 1.342 us against 1.217); CPU's bits."""
    x = _randn(*shape)
    x.view(-1)[::5] = -0.0
    x.view(-1)[2::13] = float("nan")

    def fn(t):
        return torch.ops.aten.im2col(t, args["kernel_size"], args["dilation"], args["padding"], args["stride"])

    out, compiled_ns, steps = compiled_run(fn, x)
    assert [step["kind"] for step in steps] == ["im2col"], [step["kind"] for step in steps]
    assert np.array_equal(_bits(out.cpu()), _bits(fn(x)))
    _, eager_ns = eager_run(fn, x)
    assert compiled_ns <= eager_ns, (name, compiled_ns, eager_ns)


@pytest.mark.usefixtures("pads_decomposed")
@pytest.mark.parametrize("name,shape,args", IM2COL, ids=[c[0] for c in IM2COL])
def test_im2col_compiles_to_window_copies(name, shape, args):
    """compiler.moves (the calls not cut whole): im2col is each kernel offset's strided window of the (zero-padded) input, stacked, not index
    tensors and a gather (the sweep's 2x2 padded case: 9.9 us against the eager kernel's 1.2 us); CPU's bits."""
    x = _randn(*shape)
    x.view(-1)[::5] = -0.0
    x.view(-1)[2::13] = float("nan")

    def fn(t):
        return torch.ops.aten.im2col(t, args["kernel_size"], args["dilation"], args["padding"], args["stride"])

    out, kinds = _compiled_steps(fn, x)
    assert not kinds & {"gather", "iota"}, kinds
    assert np.array_equal(_bits(out.cpu()), _bits(fn(x)))


REFLECTION_BACKWARD = [
    (1, (3, 5, 9), (2, 3)),
    (2, (2, 3, 5, 6), (4, 4, 4, 4)),
    (3, (4, 5, 2, 3), (1, 1, 0, 1, 1, 1)),
]


@pytest.mark.usefixtures("pads_decomposed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("dims,shape,pad", REFLECTION_BACKWARD, ids=[f"{c[0]}d" for c in REFLECTION_BACKWARD])
def test_reflection_pad_backward_adds_edge_blocks_in_cpus_order(dims, shape, pad, dtype):
    """compiler.moves (the calls not cut whole): reflection_pad{1,2,3}d_backward as the row-major sum of its reversed edge blocks, zero-padded
    (no index tensors, no scatter; the 3-d case: 15.1 us before against the eager kernel's 2.2 us), bit for bit
    CPU's sum from +0 in grad_output's order: -0.0 and NaN included, pads as long as the dim less one."""
    x = _randn(*shape).to(dtype)
    forward = getattr(torch.ops.aten, f"reflection_pad{dims}d")
    g = torch.randn(forward(x, pad).shape, generator=torch.Generator().manual_seed(1)).to(dtype)
    g.view(-1)[::3] = -0.0
    g.view(-1)[::17] = float("nan")
    backward = getattr(torch.ops.aten, f"reflection_pad{dims}d_backward")

    def fn(go, t):
        return backward(go, t, pad)

    out, kinds = _compiled_steps(fn, g, x)
    assert not kinds & {"gather", "scatter", "iota"}, kinds
    expected = fn(g, x)
    view = torch.int32 if dtype == torch.float32 else torch.int16
    assert np.array_equal(out.cpu().view(view).numpy(), expected.view(view).numpy())


@pytest.mark.usefixtures("pads_decomposed")
def test_pads_of_one_program_share_one_memset_constant():
    """steps._held_constant: the 3-d reflection pad backward's 17 pads of edge blocks each memset a tile of zeros,
    a chain of 17 VectorE instructions ahead of the sum (3.06 us against the eager kernel's 2.20); one tile, memset
    once and kept for the launch, serves them all (2.29 us), as the eager kernels keep one zero tile for their
    stores. The same bits as CPU's, through the instruction-level run and the static replay (whose steps memset
    their own)."""
    from device_impl.compiler import breakdown

    x, pad = _randn(4, 5, 2, 3), (1, 1, 0, 1, 1, 1)
    g = torch.randn(torch.ops.aten.reflection_pad3d(x, pad).shape, generator=torch.Generator().manual_seed(1))
    g.view(-1)[::3] = -0.0

    def fn(go, t):
        return torch.ops.aten.reflection_pad3d_backward(go, t, pad)

    device = [g.to("neuron"), x.to("neuron")]
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    first = compiled(*device)  # at the instruction level, recording the schedule
    with breakdown.capture() as calls:
        second = compiled(*device)  # replayed
    torch.neuron.synchronize()
    expected = fn(g, x)
    assert np.array_equal(_bits(first.cpu()), _bits(expected)) and np.array_equal(_bits(second.cpu()), _bits(expected))
    rows = [row for executable, args in calls for row in breakdown.step_figures(executable, args)]
    pads = [row for row in rows if row.kind == "pad"]
    assert len(pads) == 17 and sum(1 for row in pads if row.busy["vector"] > 0) == 1, [r.busy for r in pads]


ROLLS = [((2, 1, 513), 3, 0), ((4, 5, 6), (2, -7), (0, 2)), ((4, 5, 6), 5, ()), ((3, 4), (1, 1), (1, 1))]


@pytest.mark.parametrize("shape,shifts,dims", ROLLS, ids=["one_dim", "two_dims", "flat", "same_dim_twice"])
def test_roll_compiles_to_copies(shape, shifts, dims):
    """compiler.moves: roll is a concatenation of the input's two pieces per rolled dim, not computed indices and a
    gather (the sweep's case: 2.0 us against the eager kernel's 1.1 us); CPU's bits."""
    x = _randn(*shape)
    x.view(-1)[::3] = -0.0

    def fn(t):
        return torch.roll(t, shifts, dims)

    out, kinds = _compiled_steps(fn, x)
    assert not kinds & {"gather", "iota"}, kinds
    assert np.array_equal(_bits(out.cpu()), _bits(fn(x)))


SELECT_SCATTERS = [((2, 1, 513), 0, -1), ((4, 5, 6), 1, 2), ((4, 5, 6), 2, 0), ((3,), 0, 1)]


@pytest.mark.parametrize("shape,dim,index", SELECT_SCATTERS, ids=["last", "middle", "first", "one_dim"])
def test_select_scatter_compiles_to_a_concatenation(shape, dim, index):
    """compiler.moves: select_scatter is x before the index, src, x after it, concatenated, not an iota compared
    with the index and a select over the whole tensor (the sweep's case: 1.7x the eager kernel); CPU's bits."""
    x = _randn(*shape)
    src = torch.randn(shape[:dim] + shape[dim + 1:], generator=torch.Generator().manual_seed(2))
    src.view(-1)[::2] = -0.0

    def fn(a, b):
        return torch.select_scatter(a, b, dim, index)

    out, kinds = _compiled_steps(fn, x, src)
    assert not kinds & {"iota", "fused"}, kinds
    assert np.array_equal(_bits(out.cpu()), _bits(fn(x, src)))


FOLDS = [
    ("kernel_1", (2, 3, 12), (3, 4), (1, 1), 1, 0, 1),
    ("overlapping", (2, 12, 20), (5, 6), (2, 2), 1, 0, 1),
    ("strided_dilated_padded", (1, 12, 24), (7, 9), (2, 3), (2, 1), (1, 2), (2, 2)),
    ("unbatched", (8, 4), (3, 3), (2, 2), 1, 1, 2),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name,shape,size,kernel,dilation,padding,stride", FOLDS, ids=[c[0] for c in FOLDS])
def test_fold_adds_kernel_offsets_in_cpus_order(name, shape, size, kernel, dilation, padding, stride, dtype):
    """compiler.moves: col2im (F.fold) as each kernel offset's block spread and placed in the padded image, added in
    CPU's order from +0, not index tensors and an accumulating scatter (the sweep's case: 3.0 us against the
    eager kernel's 1.2 us); CPU's bits, -0.0 and NaN included."""
    x = _randn(*shape).to(dtype)
    x.view(-1)[::3] = -0.0
    x.view(-1)[5::11] = float("nan")

    def fn(t):
        return F.fold(t, size, kernel, dilation=dilation, padding=padding, stride=stride)

    out, kinds = _compiled_steps(fn, x)
    assert not kinds & {"gather", "scatter", "iota"}, kinds
    view = torch.int32 if dtype == torch.float32 else torch.int16
    assert np.array_equal(out.cpu().view(view).numpy(), fn(x).view(view).numpy())


def test_a_few_row_reduction_without_an_exact_piece_stays_on_its_rows():
    """Two rows of 127 (a prime) columns have no [q, f] piece of at most 64 partitions each: the flat tiling's
    [127, 1] piece for each would need 254 partitions, so the group keeps its rows (the layer_norm backward
    of the op suite's bf16 'tails' case raised EngineError before)."""
    x = _randn(2, 127)
    def fn(t):
        return torch.sum(torch.abs(t * 1.5 + t) - t * t, -1)

    run = compile_traced(fn, x)[0]
    (out,) = run([x.to("neuron")])
    torch.testing.assert_close(out.cpu(), fn(x))
