"""Fusion beyond elementwise: reductions fed by their producers' tiles, elementwise epilogues on a
matmul's PSUM evacuation. Each case checks that the fused launch happened (statistics, launch
count) and that every result is bit-identical to plain eager on the device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from device_impl import eager
from device_impl.engine import core


def _host(shape, seed: int = 0, dtype=torch.float32, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()]) if t.dtype.is_floating_point else t


def _run(mode: str, program, inputs):
    args = [t.to("neuron") for t in inputs]
    with torch.neuron.eager_mode(mode):
        out = program(*args)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        return [o.cpu() for o in outs]


def _identical(program, *inputs) -> dict:
    """Run eager then adaptive; assert bit identity; return adaptive's statistics and launch count."""
    expected = _run("eager", program, inputs)
    eager.reset_stats()
    core.reset_stats()
    got = _run("adaptive", program, inputs)
    stats = eager.stats()
    stats["launches"] = sum(entry["launches"] for entry in core.stats().values())
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.shape == e.shape and g.dtype == e.dtype
        assert torch.equal(_bits(g), _bits(e)), f"output {i} differs from eager"
    return stats


# --- reductions fused into their producers ---------------------------------------------------------

@pytest.mark.parametrize("rows, cols", [(2, 3), (37, 129), (128, 513), (300, 2048), (130, 5000), (17, 4095)])
def test_rms_norm_chain_fuses_the_mean_into_the_square(adaptive, rows, cols):
    def rms_norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    stats = _identical(rms_norm, _host((rows, cols)), _host((cols,), seed=1))
    assert stats["reductions_fused"] == 1 and stats["splits"] == 0
    # pow+mean, then add+rsqrt on [rows, 1], then the two products: three launches instead of six
    assert stats["launches"] == 3
    assert stats["stores_elided"] >= 1  # x^2 never reaches HBM


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "amin"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_last_dim_reductions_fuse(adaptive, op, dtype):
    def program(x, y):
        z = torch.tanh(x * 0.5) + y
        return getattr(torch, op)(z, -1), z

    stats = _identical(program, _host((64, 300), dtype=dtype), _host((300,), seed=1, dtype=dtype))
    assert stats["reductions_fused"] == 1 and stats["launches"] == 1


def test_integer_and_dtype_argument_reductions_fuse(adaptive):
    def program(i, x):
        return (i * 3 - 1).sum(-1), (x * 2).sum(-1, dtype=torch.float16), (x > 0).sum(-1)

    stats = _identical(program, torch.randint(-9, 9, (50, 77), dtype=torch.int32,
                                              generator=torch.Generator().manual_seed(0)), _host((50, 77)))
    assert stats["reductions_fused"] == 3


def test_reductions_the_fuser_cannot_take_still_match(adaptive):
    def program(x):
        a = (x + 1).sum(0)  # not the last dimension: runs at the call after a barrier
        b = (x * 2).t().sum(-1)  # a non-contiguous input: queued alone, not fused
        c = (x - 1).reshape(1, -1).sum(-1)  # one row: the kernel's flat tiling, not fused
        return a, b, c

    stats = _identical(program, _host((40, 30)))
    assert stats["reductions_fused"] == 0


def test_a_reduction_of_an_external_input_runs_alone(adaptive):
    stats = _identical(lambda x: (x.amax(-1), x + 1), _host((20, 20)))
    assert stats["reductions_fused"] == 0 and stats["ops_queued"] == 2


def test_softmax_by_hand_and_log_softmax_kernel(adaptive):
    def program(x, mask):
        s = x * 0.125 + mask
        m = s.amax(-1, keepdim=True)
        e = torch.exp(s - m)
        return e / e.sum(-1, keepdim=True), F.log_softmax(s, -1)

    mask = torch.zeros(96, 200).masked_fill(torch.rand(96, 200, generator=torch.Generator().manual_seed(3)) > 0.8,
                                            float("-inf"))
    stats = _identical(program, _host((96, 200)), mask)
    assert stats["reductions_fused"] == 2


@pytest.mark.parametrize("rows, cols", [(96, 200), (3 * 7, 129), (130, 5000)])  # resident and streamed rows
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_kernels_take_their_input_from_its_producers(adaptive, rows, cols, dtype):
    def program(x, mask):
        s = x * 0.125 + mask
        return torch.softmax(s, -1), F.log_softmax(s * 2, -1)

    mask = torch.zeros(rows, cols).masked_fill(
        torch.rand(rows, cols, generator=torch.Generator().manual_seed(3)) > 0.8, float("-inf")).to(dtype)
    stats = _identical(program, _host((rows, cols), dtype=dtype), mask)
    assert stats["reductions_fused"] == 2 and stats["splits"] == 0
    assert stats["launches"] == 2  # [mul, add, softmax], [mul, log_softmax]
    assert stats["stores_elided"] == 2  # x * 0.125 and s * 2 never reach HBM (s does: the second group reads it)


@pytest.mark.parametrize("shape, normalized", [((96, 200), (200,)), ((4, 33, 129), (129,)), ((6, 8, 20), (8, 20))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_takes_its_input_from_the_residual_add(adaptive, shape, normalized, dtype):
    def program(x, r, w, b):
        h = x + r * 0.5
        return F.layer_norm(h, normalized, w, b), F.layer_norm(h * 2, normalized)

    stats = _identical(program, _host(shape, dtype=dtype), _host(shape, seed=1, dtype=dtype),
                       _host(normalized, seed=2, dtype=dtype), _host(normalized, seed=3, dtype=dtype))
    assert stats["reductions_fused"] == 2 and stats["launches"] == 2


def test_layer_norm_weights_written_in_place_after_queuing(adaptive):
    def program(x, w):
        y = F.layer_norm(x + 1, (64,), w)
        w.mul_(2)  # an optimizer-style update of a weight the queued layer_norm reads
        return y, F.layer_norm(x + 1, (64,), w)

    _identical(program, _host((32, 64)), _host((64,), seed=1))


@pytest.mark.parametrize("shape", [(2, 4, 128, 128), (2, 3, 33, 40), (3, 5, 7, 300)])
def test_a_mask_broadcast_over_batch_and_heads_feeds_the_softmax(adaptive, shape):
    """The mask's rows do not flatten into one stride (stride 0 over batch and heads): its row blocks
    are loaded as runs within the last leading dimension (blocks of 128 rows cross 33- and 7-row runs)."""
    def program(s, keep):
        return torch.softmax((s * 0.5).masked_fill(~keep, float("-inf")), -1), F.layer_norm(s + keep, shape[-1:])

    keep = torch.rand(shape[-2:], generator=torch.Generator().manual_seed(4)) > 0.3
    stats = _identical(program, _host(shape), keep)
    assert stats["reductions_fused"] == 2 and stats["splits"] == 0


def test_softmax_over_a_non_last_dimension_is_queued_alone(adaptive):
    stats = _identical(lambda x: torch.softmax(x * 2, 0), _host((40, 30)))
    assert stats["reductions_fused"] == 0 and stats["ops_queued"] == 2


# --- matmul epilogues -------------------------------------------------------------------------------

def test_linear_bias_gelu_epilogue(adaptive):
    def mlp(x, w1, b1, w2, b2):
        return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)

    stats = _identical(mlp, _host((64, 96)), _host((160, 96), seed=1, scale=0.1), _host((160,), seed=2),
                       _host((96, 160), seed=3, scale=0.1), _host((96,), seed=4))
    assert stats["epilogue_ops"] == 1 and stats["launches"] == 2, stats  # addmm+gelu, addmm
    assert stats["stores_elided"] == 1  # the first product never reaches HBM


@pytest.mark.parametrize("m, k, n", [(1, 1, 1), (129, 127, 513), (256, 300, 130), (5, 600, 7)])
def test_matmul_residual_and_activation_epilogue(adaptive, m, k, n):
    def program(a, b, r):
        y = a @ b
        return torch.relu(y * 0.5 + r) - y, y

    stats = _identical(program, _host((m, k)), _host((k, n), seed=1), _host((m, n), seed=2))
    assert stats["epilogue_ops"] == 4 and stats["launches"] == 1


def test_addmm_with_alpha_beta_and_bf16_epilogue(adaptive):
    def program(bias, a, b):
        y = torch.addmm(bias, a, b, beta=0.5, alpha=2.0)
        return torch.sigmoid(y).to(torch.float32) * 3

    stats = _identical(program, _host((40,), dtype=torch.bfloat16), _host((33, 70), seed=1, dtype=torch.bfloat16),
                       _host((70, 40), seed=2, dtype=torch.bfloat16))
    assert stats["epilogue_ops"] == 3


def test_batched_matmul_epilogue_through_a_view(adaptive):
    def attention_scores(q, k, bias):
        s = torch.matmul(q, k.transpose(-1, -2))  # bmm on [b*h, s, s], viewed back as [b, h, s, s]
        return s * 0.125 + bias

    stats = _identical(attention_scores, _host((2, 3, 40, 16)), _host((2, 3, 40, 16), seed=1),
                       _host((40, 40), seed=2))
    assert stats["epilogue_ops"] >= 1


def test_epilogue_never_writes_what_the_matmul_reads(adaptive):
    def program(a, b):
        y = a @ b
        a.add_(1)  # writes the matmul's input: must not run inside its evacuation
        return y, a * y.sum()

    stats = _identical(program, _host((64, 64)), _host((64, 64), seed=1))
    assert stats["epilogue_ops"] == 0


def test_epilogue_reading_the_product_transposed_is_not_fused(adaptive):
    def program(a, b):
        y = a @ b
        return y.t() + y  # reads other blocks than the one leaving PSUM

    stats = _identical(program, _host((48, 48)), _host((48, 48), seed=1))
    assert stats["epilogue_ops"] == 0


# --- products of one operand in one launch ------------------------------------------------------------

@pytest.mark.parametrize("m, k", [(64, 96), (130, 260)])
def test_projections_of_one_activation_share_a_launch(adaptive, m, k):
    """q, k, v of one activation (and gate/up with their epilogues): one launch, A^T's tiles made once."""
    def program(h, wq, wk, wv, wg, wu):
        q, kk, v = F.linear(h, wq), F.linear(h, wk), F.linear(h, wv)
        return q, kk, v, F.silu(F.linear(h, wg)) * F.linear(h, wu)

    weights = [_host((n, k), seed=s, scale=0.1) for s, n in enumerate((64, 32, 32, 80, 80), start=1)]
    stats = _identical(program, _host((m, k)), *weights)
    assert stats["lhs_shared"] == 4 and stats["launches"] == 1, stats
    assert stats["epilogue_ops"] == 2  # silu on the gate product, the multiply on the up product


def test_a_recurring_flush_takes_its_shared_runs_from_its_plan(adaptive, monkeypatch):
    """Which groups share A's tiles follows from the flush plan's key (layouts, coinciding storages): a flush
    that recurs takes the runs its plan found and asks ``shared_lhs_end`` no more, with the same launches."""
    from device_impl.eager import programs

    def program(h, wq, wk, wv):
        return F.linear(h, wq) + 1, F.linear(h, wk), F.linear(h, wv)

    inputs = [_host((64, 96))] + [_host((n, 96), seed=s, scale=0.1) for s, n in enumerate((64, 32, 32), start=1)]
    first = _identical(program, *inputs)
    assert first["lhs_shared"] == 2 and first["launches"] == 1
    asked = []
    found = programs.shared_lhs_end
    monkeypatch.setattr(programs, "shared_lhs_end", lambda ready, i: asked.append(i) or found(ready, i))
    again = _identical(program, *inputs)
    assert asked == [] and again["lhs_shared"] == 2 and again["launches"] == 1


def test_a_product_after_a_write_of_its_operand_loads_it_again(adaptive):
    """A write of A between two of its products (its own launch: no epilogue writes what its product reads)
    ends the run: the next product reads A's new values from HBM, not the first one's tiles."""
    def program(a, w1, w2):
        y = a @ w1
        a.mul_(y)
        return y, a @ w2, a

    stats = _identical(program, _host((48, 48)), _host((48, 48), seed=1), _host((48, 48), seed=2))
    assert stats["lhs_shared"] == 0


def test_products_of_one_operand_with_other_layouts_do_not_share(adaptive):
    def program(a, w1, w2):
        return a @ w1, a[:, :32] @ w2, a.t() @ w1  # three views of one storage: three launches

    stats = _identical(program, _host((48, 48)), _host((48, 48), seed=1), _host((32, 48), seed=2))
    assert stats["lhs_shared"] == 0 and stats["launches"] == 3


# --- real models ------------------------------------------------------------------------------------

def test_decoder_block_forward_is_bit_identical(adaptive):
    from harness.models import DecoderBlock

    torch.manual_seed(0)
    block = DecoderBlock(hidden=64, heads=4, kv_heads=2, seq=32, intermediate=128)
    x = _host((2, 32, 64))
    expected = None
    for mode in ("eager", "adaptive"):
        model = block.to("neuron")
        with torch.no_grad(), torch.neuron.eager_mode(mode):
            if mode == "adaptive":
                eager.reset_stats()
            out = model(x.to("neuron")).cpu()
        if expected is None:
            expected = out
    assert torch.equal(_bits(out), _bits(expected))
    stats = eager.stats()
    assert stats["ops_queued"] > 20 and stats["fused_groups"] > 0 and stats["reductions_fused"] >= 2


def test_program_cache_is_reused_across_steps(adaptive):
    def step(x, w):
        return F.relu(x @ w) * 2, (x * x).mean(-1)

    x, w = _host((32, 64)).to("neuron"), _host((64, 64), seed=1).to("neuron")
    for _ in range(3):
        out = step(x, w)
        torch.neuron.synchronize()
    stats = eager.stats()
    assert stats["programs_cached"] == 2 and stats["cache_hits"] == 4
    assert out[0].shape == (32, 64)


# --- where fusion does not pay, the queue costs nothing ----------------------------------------------

def _device_ns() -> int:
    from device_impl._core import C
    return C.device_time_ns(0)


def test_device_copies_fusion_leaves_alone_run_as_eager_copies(adaptive):
    """Same-dtype device copies (contiguous() of transposed q, k, v) are queued, since a consumer may fuse
    them; left alone, or grouped only with each other, each runs as eager's C++ copy: no engine launch,
    the same simulated time as eager, the same bits."""
    def program(q, k, v):
        return [t.t().contiguous() for t in (q, k, v)]

    inputs = [_host((64, 96), seed=s) for s in range(3)]
    args = [t.to("neuron") for t in inputs]
    times = {}
    for mode in ("eager", "adaptive"):
        with torch.neuron.eager_mode(mode):
            core.reset_stats()
            start = _device_ns()
            outs = program(*args)
            torch.neuron.synchronize()
            times[mode] = _device_ns() - start
            launches = sum(entry["launches"] for entry in core.stats().values())
            assert launches == 0, f"{mode}: {core.stats()}"
            assert all(torch.equal(o.cpu(), t.t()) for o, t in zip(outs, inputs))
    assert eager.stats()["ops_queued"] == 3
    assert times["adaptive"] == times["eager"]


def test_a_copy_feeding_a_fused_consumer_still_fuses(adaptive):
    def program(x):
        return torch.softmax(x.t().contiguous() * 0.5, dim=-1)

    stats = _identical(program, _host((48, 80)))
    assert stats["fused_ops"] >= 2 and stats["launches"] == 1


def _queued_steps(program, *inputs):
    """The steps ``program`` queues (left queued: the caller flushes)."""
    from device_impl.eager.queue import QUEUE

    program(*inputs)
    return list(QUEUE.steps)


def test_a_recurring_flush_reuses_its_plan_and_computes_the_same(adaptive, monkeypatch):
    from device_impl.eager import fusion

    def block(x, w):
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
        return torch.softmax(h * 0.5, dim=-1) + x

    x, w = _host((64, 96)).to("neuron"), _host((96,), seed=1).to("neuron")
    with torch.neuron.eager_mode("eager"):
        expected = block(x, w).cpu()
    core.reset_stats()
    first = block(x, w).cpu()
    launches = sum(entry["launches"] for entry in core.stats().values())
    planned = eager.stats()["programs_cached"]
    partitions = []
    partition = fusion.partition
    monkeypatch.setattr(fusion, "partition", lambda steps: partitions.append(len(steps)) or partition(steps))
    for _ in range(2):
        core.reset_stats()
        again = block(x, w).cpu()
        assert torch.equal(_bits(again), _bits(expected))
        assert sum(entry["launches"] for entry in core.stats().values()) == launches
    assert torch.equal(_bits(first), _bits(expected))
    assert eager.stats()["programs_cached"] == planned  # nothing planned again
    assert partitions == []  # the flushes reused the first call's grouping


def test_the_flush_plan_key_sees_aliasing(adaptive):
    from device_impl.eager import programs

    x = _host((32, 48)).to("neuron")
    chained = _queued_steps(lambda t: (t + 1) * 2, x)
    signature = programs.flush_signature(chained)
    eager.flush()
    apart = _queued_steps(lambda t: (t + 1, t * 2), x)  # same kernels and layouts; the second reads x
    assert programs.flush_signature(apart) != signature
    eager.flush()
    y = _host((32, 48), seed=3).to("neuron")  # other tensors, same pattern: the same plan
    assert programs.flush_signature(_queued_steps(lambda t: (t + 1) * 2, y)) == signature
    eager.flush()


def _block(x, w1, w2):
    """An RMS norm, two projections of it (one launch), a softmax fed from an epilogue-free product."""
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    a, b = F.linear(h, w1), F.linear(h, w2)
    return torch.softmax(a * 0.5, dim=-1) + b


def _in_place(x, w1, w2):  # the same ops, with an in-place write of a pending product
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    a, b = F.linear(h, w1), F.linear(h, w2)
    a.mul_(2)
    return torch.softmax(a * 0.5, dim=-1) + b


def _synced(x, w1, w2):  # the same ops, synchronized in the middle
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    torch.neuron.synchronize()
    a, b = F.linear(h, w1), F.linear(h, w2)
    return torch.softmax(a * 0.5, dim=-1) + b


_DIVERGENT = {  # how a recurring sequence diverges: (program, input shapes, dtype)
    "shape": (_block, [(48, 96), (80, 96), (80, 96)], torch.float32),
    "dtype": (_block, [(64, 96), (80, 96), (80, 96)], torch.bfloat16),
    "in_place": (_in_place, [(64, 96), (80, 96), (80, 96)], torch.float32),
    "synchronize": (_synced, [(64, 96), (80, 96), (80, 96)], torch.float32),
}


@pytest.mark.parametrize("how", sorted(_DIVERGENT))
def test_a_divergent_sequence_is_planned_again_and_computes_the_same(adaptive, monkeypatch, how):
    """A recurring sequence's flush plan and recorded launches are keyed by every step's op, layouts, dtypes and
    aliasing: a sequence that diverges from it (another shape, another dtype, an in-place write of a pending
    tensor, a synchronize in the middle) misses them, is planned and recorded again, and computes eager's bits;
    the recurring sequence, run again after it, still reuses its own plan and computes its bits."""
    from device_impl.eager import fusion

    def inputs(shapes, dtype):
        return [_host(shape, seed=s, scale=0.1 if s else 1.0, dtype=dtype).to("neuron")
                for s, shape in enumerate(shapes)]

    base = inputs([(64, 96), (80, 96), (80, 96)], torch.float32)
    program, shapes, dtype = _DIVERGENT[how]
    other = inputs(shapes, dtype)
    with torch.neuron.eager_mode("eager"):
        expected = _bits(_block(*base))
        expected_other = _bits(program(*other))
    for _ in range(2):  # planned and recorded, then replayed
        assert torch.equal(_bits(_block(*base)), expected)
    partitions = []
    partition = fusion.partition
    monkeypatch.setattr(fusion, "partition", lambda steps: partitions.append(len(steps)) or partition(steps))
    replayed = eager.stats()["programs_replayed"]
    assert torch.equal(_bits(program(*other)), expected_other)
    assert partitions, "the divergent sequence reused the recurring sequence's flush plan"
    assert torch.equal(_bits(program(*other)), expected_other)  # now itself recurring
    partitions.clear()
    assert torch.equal(_bits(_block(*base)), expected)
    assert partitions == [] and eager.stats()["programs_replayed"] > replayed


# --- a recurring fused launch: its recorded figures, its arithmetic ----------------------------------

def _launch_figures(report) -> tuple:
    return (report.kernel, report.device_ns, report.busy_ns, report.hbm_bytes_read, report.hbm_bytes_written,
            report.flops, report.instructions, report.sbuf_peak_bytes)


@pytest.mark.parametrize("numel", [1000, 300_000])  # one tile; several tiles of the widest width
def test_a_recurring_fused_chain_replays_its_recorded_figures(adaptive, numel):
    """The first run of a fused elementwise program is instruction-level and its figures are kept; later runs
    of the same program (same emits, scalars, views, stores) go through the same tiles on the replay core and
    report those figures: the same launch, bit for bit, as the first; NEURON_STATIC_REPLAY=0's
    instruction-level runs report the same figures too."""
    from device_impl.kernels import replay

    def program(x, y):
        return torch.sigmoid(torch.tanh(x * 1.5 - 0.25) + y).pow(2)

    x, y = _host((numel,)).to("neuron"), _host((numel,), seed=1).to("neuron")
    with torch.neuron.eager_mode("eager"):
        expected = _bits(program(x, y))
    reports = []
    for run in range(3):
        out = program(x, y)
        torch.neuron.synchronize()
        reports.append(_launch_figures(core.last_launch()))
        assert torch.equal(_bits(out), expected), f"run {run}"
    assert eager.stats()["fused_groups"] == 3 and eager.stats()["programs_replayed"] == 2
    assert reports[0][0].startswith("fused[") and reports[1] == reports[0] and reports[2] == reports[0]
    previous = replay.set_enabled(False)
    try:
        out = program(x, y)
        torch.neuron.synchronize()
    finally:
        replay.set_enabled(previous)
    assert _launch_figures(core.last_launch()) == reports[0] and torch.equal(_bits(out), expected)
    assert eager.stats()["programs_replayed"] == 2


def test_a_fused_replay_is_keyed_by_its_scalars(adaptive):
    """pow(x, 2) and pow(x, 3) may issue other instructions (a square, a power): a program recorded with one
    exponent is never replayed for the other."""
    x = _host((4096,)).to("neuron")
    for exponent in (2, 3, 2, 3):
        out = (x * 0.5).pow(exponent) + 1
        torch.neuron.synchronize()
        with torch.neuron.eager_mode("eager"):
            expected = (x * 0.5).pow(exponent) + 1
        assert torch.equal(_bits(out), _bits(expected)), exponent
    assert eager.stats()["programs_replayed"] == 2


def _products(x, w1, w2, r, w3, w4):
    """Three launches: a lone product of a transposed weight (TensorE transposes: the schedule's choices), one
    with an epilogue, and two products of one activation sharing a launch (programs.run_shared)."""
    lone = x @ w1.t()
    fused = torch.relu(F.linear(lone, w2) + r)
    return lone, fused, F.linear(fused, w3), F.linear(fused, w4)


def _product_inputs():
    shapes = [(130, 200), (96, 200), (64, 96), (130, 64), (48, 64), (32, 64)]
    return [_host(shape, seed=s).to("neuron") for s, shape in enumerate(shapes)]


def _rows(s, mask, x, w, r):
    """Three row launches: a softmax fed from its producers (a masked fill; its scale goes to whichever engine
    frees first: a choice), a fused reduction (an RMS norm's mean of squares) and a lone softmax."""
    scores = torch.softmax((s * 0.125).masked_fill(~mask, float("-inf")), dim=-1)
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    return scores, h, torch.softmax(r, dim=-1)


def _row_inputs():
    mask = torch.ones(96, 96, dtype=torch.bool).tril().to("neuron")
    return [_host((2, 3, 96, 96)).to("neuron"), mask, _host((130, 200), seed=1).to("neuron"),
            _host((200,), seed=2).to("neuron"), _host((140, 300), seed=3).to("neuron")]


# program, inputs, recurring launches the flush replays per call
_RECORDED = {"matmul": (_products, _product_inputs, 3), "rows": (_rows, _row_inputs, 5)}


@pytest.mark.parametrize("kind", sorted(_RECORDED))
def test_a_recurring_launch_replays_its_figures_and_choices(adaptive, kind):
    """The first run of a product (alone, with its epilogue, or sharing A with the next), of a row kernel (alone
    or fed from its producers) or of a fused reduction is instruction-level and keeps its figures and its
    scheduling choices; later runs take those choices on the replay core and report the figures: the same
    launches, bit for bit, as the first and as NEURON_STATIC_REPLAY=0's."""
    from device_impl.eager import programs
    from device_impl.kernels import replay

    program, make, launches = _RECORDED[kind]
    inputs = make()
    with torch.neuron.eager_mode("eager"):
        expected = [_bits(t) for t in program(*inputs)]
    figures = []
    for run in range(3):
        core.reset_stats()
        eager.reset_stats()
        outs = program(*inputs)
        torch.neuron.synchronize()
        assert all(torch.equal(_bits(o), e) for o, e in zip(outs, expected)), f"run {run}"
        figures.append(core.stats())
        if run:
            assert eager.stats()["programs_replayed"] >= launches, eager.stats()
    assert figures[1] == figures[0] and figures[2] == figures[0]
    if kind == "matmul":
        assert eager.stats()["lhs_shared"] == 1 and eager.stats()["epilogue_ops"] == 2
        assert eager.stats()["ops_run_alone"] == 0  # a lone product waits for the flush, which replays it
    assert any(script for _, script in programs._LAUNCHES.values())  # the schedule made choices
    previous = replay.set_enabled(False)
    try:
        core.reset_stats()
        eager.reset_stats()
        outs = program(*inputs)
        torch.neuron.synchronize()
    finally:
        replay.set_enabled(previous)
    assert core.stats() == figures[0] and all(torch.equal(_bits(o), e) for o, e in zip(outs, expected))
    assert eager.stats()["programs_replayed"] == 0


@pytest.mark.parametrize("kind", sorted(_RECORDED))
def test_a_replay_whose_choices_differ_runs_again(adaptive, kind):
    """A replay that asks for other choices than its recording made (here: one more than was recorded) issued
    other instructions: nothing is reported for it, it runs again at the instruction level with the
    recording's bits and figures, and that key is never replayed again."""
    from device_impl.eager import programs

    program, make, launches = _RECORDED[kind]
    inputs = make()
    with torch.neuron.eager_mode("eager"):
        expected = [_bits(t) for t in program(*inputs)]
    outs = program(*inputs)
    torch.neuron.synchronize()
    core.reset_stats()
    outs = program(*inputs)  # recorded and replayed by now (outputs held: the same stores as below)
    torch.neuron.synchronize()
    first = core.stats()
    recorded = {key: entry for key, entry in programs._LAUNCHES.items() if entry[1]}
    assert recorded
    for key, (figures, script) in recorded.items():
        programs._LAUNCHES[key] = (figures, script[:-1])
    core.reset_stats()
    eager.reset_stats()
    outs = program(*inputs)
    torch.neuron.synchronize()
    assert all(torch.equal(_bits(o), e) for o, e in zip(outs, expected))
    replayed = eager.stats()["programs_replayed"]
    assert replayed <= launches - len(recorded)
    assert all(key in programs._REFUSED and key not in programs._LAUNCHES for key in recorded)
    assert core.stats() == first  # the instruction-level reruns: each launch reported once, as recorded
    eager.reset_stats()
    outs = program(*inputs)
    torch.neuron.synchronize()
    assert eager.stats()["programs_replayed"] == replayed
    assert all(torch.equal(_bits(o), e) for o, e in zip(outs, expected))


def test_a_copy_inside_a_fused_chain_issues_no_instruction(adaptive):
    """``x.clone()`` followed by in-place ops fuses into one launch in which the copy is the loaded tile
    itself: the launch issues the instructions of ``x * 2 + 1`` alone, and computes the same bits."""
    def cloned(x):
        y = x.clone()
        y.mul_(2)
        return y.add_(1)

    stats = _identical(cloned, _host((5000,)))
    assert stats["fused_ops"] == 3 and stats["launches"] == 1
    with_copy = core.last_launch().instructions
    _identical(lambda x: x * 2 + 1, _host((5000,)))
    assert core.last_launch().instructions == with_copy


def test_a_copy_stored_from_inside_a_fused_chain(adaptive):
    """A same-dtype copy whose result is observed (kept by the caller) is stored from its operand's tile; a
    broadcast source is copied as the output's elements."""
    def program(x, b):
        y = torch.empty_like(x)
        y.copy_(b)  # b broadcast over x's rows
        return y, torch.tanh(y + x)

    _identical(program, _host((64, 96)), _host((96,), seed=1))


# --- calls whose launch always ran alone -----------------------------------------------------------------

def test_a_call_whose_launch_always_ran_alone_runs_at_the_call(adaptive):
    """``x * 2`` heads each flush and runs alone there (its consumer reads it transposed, so nothing fuses
    with it): from the second call on it runs at the call, with nothing queued before it, as eager runs it,
    and computes the same bits; what follows it still queues and fuses."""
    x = _host((64, 64)).to("neuron")

    def step():
        a = x * 2
        return torch.tanh(a.t() + 1) * 3

    with torch.neuron.eager_mode("eager"):
        expected = _bits(step())
    for call in range(4):
        eager.reset_stats()
        out = step()
        torch.neuron.synchronize()
        assert torch.equal(_bits(out), expected), f"call {call}"
        stats = eager.stats()
        assert stats["ops_run_alone"] == (call > 0) and stats["fused_groups"] == 1


def test_a_call_that_heads_a_fused_group_keeps_waiting(adaptive):
    x = _host((64, 64)).to("neuron")
    for _ in range(4):
        out = torch.tanh(x * 2 + 1)
        torch.neuron.synchronize()
    stats = eager.stats()
    assert stats["ops_run_alone"] == 0 and stats["fused_groups"] == 4 and stats["fused_ops"] == 12
    with torch.neuron.eager_mode("eager"):
        assert torch.equal(_bits(out), _bits(torch.tanh(x * 2 + 1)))

