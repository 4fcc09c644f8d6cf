"""Issue 21's compute losers (benches/compiled_vs_eager_specs.py): the compiled programs of the sweep's cases whose
device time exceeded the eager kernel's, each for a cause in the compiler's planning, and the structure that fixed
it. Device times are the simulator's (deterministic)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from device_impl import engine
from device_impl.compiler import breakdown, iotas

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _inputs(dtype, *shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g).to(dtype).to("neuron") for s in shapes]


def _compiled(fn, *inputs):
    """(outputs on CPU, the program, its launch's device ns) of a warm compiled call."""
    torch._dynamo.reset()
    run = torch.compile(fn, backend="neuron", dynamic=False)
    run(*inputs)
    torch.neuron.synchronize()
    with breakdown.capture() as calls:
        engine.reset_stats()
        out = run(*inputs)
        torch.neuron.synchronize()
    stats = engine.stats()
    (name,) = [k for k in stats if k.startswith("neff:")]
    outs = out if isinstance(out, tuple) else (out,)
    return [o.cpu() for o in outs], calls[-1][0].program, stats[name]["device_ns"]


def _eager_ns(fn, *inputs) -> float:
    with torch.neuron.eager_mode("eager"):
        fn(*inputs)
        torch.neuron.synchronize()
        engine.reset_stats()
        held = fn(*inputs)
        torch.neuron.synchronize()
        del held
    return sum(s["device_ns"] for s in engine.stats().values())


def _flat_groups(program, numel: int) -> list[dict]:
    return [s for s in program.steps if s["kind"] == "fused" and s["reduce_dims"] is None
            and int(np.prod(s["shape"], dtype=np.int64)) == numel]


def test_a_broadcast_operands_convert_runs_beside_the_flat_group_it_would_split():
    """fusion.Planner.place_aside beside a flat group: bf16 addcmul of [1, 1, 1] x0/x2 widens each to fp32
    between the product and the sum; as groups of their own the converts cut the [1, 5, 2, 513] chain in two, the
    product going to scratch and back. Now one group over the large shape, the converts run before it."""
    x0, x1, x2 = _inputs(torch.bfloat16, (1, 1, 1), (1, 5, 2, 513), (1, 1, 1))

    def fn(a, b, c):
        return torch.addcmul(a, b, c, value=-1.5)

    (out,), program, _ = _compiled(fn, x0, x1, x2)
    assert len(_flat_groups(program, 5 * 2 * 513)) == 1, [s.get("shape") for s in program.steps]
    expected = torch.addcmul(x0.cpu().float(), x1.cpu().float(), x2.cpu().float(), value=-1.5)
    torch.testing.assert_close(out.float(), expected, rtol=1.6e-2, atol=1e-5)


def test_an_aside_beside_a_flat_group_reads_only_inputs():
    """A small op reading a value another step computes is not set aside: the open flat group would wait for
    that step before it starts. Nearest-exact interpolation's source index is a [261] chain whose clamp reads a
    [1, 1] bound computed from a [1] group; set aside, the bound's chain moved in front of the merged [261]
    group, which then waited for both (2.405 -> 2.456 us): the [261] chain stays two groups, the first
    running beside the bound's."""
    (x,) = _inputs(torch.float32, (1, 1, 2, 513))

    def fn(a):
        return F.interpolate(a, size=(1, 261), mode="nearest-exact")

    (out,), program, _ = _compiled(fn, x)
    assert len(_flat_groups(program, 261)) == 2, [(s["kind"], s.get("shape")) for s in program.steps]
    torch.testing.assert_close(out, fn(x.cpu()), rtol=0, atol=0)


def test_a_compute_bound_group_takes_one_exact_tile_instead_of_a_ragged_tail():
    """iotas.exact_tile: lerp of [513] is 23 ops; flat_tiles' [102, 5] block and [1, 3] tail made every op issue
    twice (3.22 us against eager's 3.19). One [57, 9] tile: each op once, the same elements' same instructions."""
    x0, x1, x2 = _inputs(torch.bfloat16, (513,), (), (513,))

    def fn(a, b, c):
        return torch.lerp(a, b, c)

    (out,), program, compiled_ns = _compiled(fn, x0, x1, x2)
    (group,) = _flat_groups(program, 513)
    assert iotas.ranges(group) == [(0, 513, 57, 9)]
    with torch.neuron.eager_mode("eager"):
        expected = torch.lerp(x0, x1, x2).cpu()
    np.testing.assert_array_equal(out.view(torch.int16).numpy(), expected.view(torch.int16).numpy())
    assert compiled_ns <= _eager_ns(fn, x0, x1, x2)


def test_a_dma_bound_group_keeps_its_tail_under_the_blocks_store():
    """A lone multiply: the tail's one instruction runs while the block is stored, so one wider tile would only
    lengthen the compute before that store (1.805 -> 1.819 us): the block and its tail stay."""
    x, y = _inputs(torch.float32, (5, 2, 2, 513), (5, 2, 2, 513))
    _, program, _ = _compiled(torch.mul, x, y)
    (group,) = _flat_groups(program, 10260)
    assert len(iotas.ranges(group)) == 2


def test_a_pipelined_group_splits_into_even_tiles_unless_a_load_is_a_broadcast():
    """memory.group_plan(balance=True): round of [3, 5, 5, 513] bf16 is split for pipelining; its tiles were
    [128, 256], [22, 256] and a ragged row (2.085 us against eager's 2.038), now two even ones of 151 columns. A
    group broadcasting a 0-d tensor onto every element is DMA-bound and keeps the uneven split."""
    (x,) = _inputs(torch.bfloat16, (3, 5, 5, 513))
    _, program, compiled_ns = _compiled(torch.round, x)
    (group,) = _flat_groups(program, 38475)
    assert group["tiles"]["free"] == 151
    assert compiled_ns <= _eager_ns(torch.round, x)
    s, y = _inputs(torch.float32, (), (3, 5, 5, 513))
    _, program, _ = _compiled(torch.heaviside, s, y)
    (group,) = _flat_groups(program, 38475)
    assert group["tiles"]["free"] == 256


def test_a_small_products_bias_add_is_its_epilogue():
    """build.attach_epilogues: F.linear's [6, 17] @ [17, 3] is evacuated in one block, so its bias add runs on
    the evacuation instead of being a step of its own after the product's store (1.885 us against eager addmm's
    1.740)."""
    x, w, b = _inputs(torch.float32, (2, 3, 17), (3, 17), (3,))
    (out,), program, compiled_ns = _compiled(F.linear, x, w, b)
    assert [s["kind"] for s in program.steps if s["kind"] in ("dot_general", "fused")] == ["dot_general"]
    assert "epilogue" in program.steps[[s["kind"] for s in program.steps].index("dot_general")]
    torch.testing.assert_close(out, F.linear(x.cpu(), w.cpu(), b.cpu()))
    assert compiled_ns <= _eager_ns(F.linear, x, w, b)


def test_small_batched_products_still_keep_their_group_separate():
    """The one-block exception is one matrix: Llama's 8 x [32, 32] scores keep their softmax a group of its own."""
    q, k = _inputs(torch.float32, (8, 32, 16), (8, 32, 16))
    _, program, _ = _compiled(lambda a, b: torch.softmax(a @ b.transpose(-1, -2), -1), q, k)
    assert not [s for s in program.steps if "epilogue" in s]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_topk_is_one_sort_step_writing_only_its_prefix(dtype):
    """topk was a sort of (x, iota) and two slices; the iota was a step nothing read and the slices two copy steps
    after the sort (3.42 us against eager's 3.19). Now one sort step storing the first k of each row into the
    outputs: topk is cut whole, for CPU's tie order (opaque._topk, a ``sort_whole`` step), so this no longer
    exercises sort_prefix.sort_prefixes (test_compile_passes.py's
    test_a_sort_read_through_prefix_slices_writes_only_the_prefix does)."""
    (x,) = _inputs(dtype, (3, 1, 2, 513))

    def fn(a):
        return torch.topk(a, 2, dim=0, largest=False)

    (values, indices), program, compiled_ns = _compiled(fn, x)
    assert [s["kind"] for s in program.steps] == ["sort_whole"]
    expected = torch.topk(x.cpu(), 2, dim=0, largest=False)
    torch.testing.assert_close(values, expected.values, rtol=0, atol=0)
    torch.testing.assert_close(indices, expected.indices, rtol=0, atol=0)
    assert compiled_ns <= _eager_ns(fn, x)


def test_a_full_sort_keeps_its_whole_results():
    """A sort read whole (or through a slice that is not a prefix of the sorted dim) is not narrowed."""
    (x,) = _inputs(torch.float32, (4, 37))
    (values, indices), program, _ = _compiled(lambda a: torch.sort(a, dim=-1), x)
    expected = torch.sort(x.cpu(), dim=-1)
    torch.testing.assert_close(values, expected.values, rtol=0, atol=0)
    torch.testing.assert_close(indices, expected.indices, rtol=0, atol=0)
    (v,), program, _ = _compiled(lambda a: torch.sort(a, dim=-1).values[1:, 3:9], x)
    torch.testing.assert_close(v, expected.values[1:, 3:9], rtol=0, atol=0)


def test_an_output_fill_runs_first():
    """schedule.finish: a constant output (a training SDPA's 0-d zeros for the backward's dropout seed and offset)
    is filled before the other steps, under their loads, not after them (2.54 us against eager's 2.42)."""
    q, k, v = (t.requires_grad_() for t in _inputs(torch.float32, (1, 1, 7, 16), (1, 1, 7, 16), (1, 1, 7, 16)))
    outs, program, compiled_ns = _compiled(F.scaled_dot_product_attention, q, k, v)
    kinds = [s["kind"] for s in program.steps]
    assert "attention" in kinds and kinds.count("fill") >= 1, kinds
    assert kinds[:kinds.count("fill")] == ["fill"] * kinds.count("fill"), kinds
    torch.testing.assert_close(outs[0], F.scaled_dot_product_attention(q.detach().cpu(), k.detach().cpu(),
                                                                       v.detach().cpu()))
    assert compiled_ns <= _eager_ns(F.scaled_dot_product_attention, q, k, v)
