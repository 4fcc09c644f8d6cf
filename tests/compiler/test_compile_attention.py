"""Compiled attention is one tiled kernel (issue 21): SDPA's fused op is cut out of the graph around
torch-mlir (compiler/opaque.py) and runs as one ``attention`` step, the eager flash tile program, so
scores and probabilities never reach HBM and the compiled op costs exactly what its eager kernel does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import device_impl.compiler as compiler
from device_impl import engine
from device_impl.compiler import ir, opaque
from device_impl.kernels import attention

SDPA = F.scaled_dot_product_attention


def _programs() -> list:
    return [exe.program for exe in compiler.cache._MEMORY.values()]


def _neuron(*xs):
    return [x.to("neuron") for x in xs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_sdpa_is_the_eager_flash_kernel(fresh, dtype, monkeypatch):
    """Same bits as the eager kernel's launch; no product step, no scores or probabilities in HBM (the
    program's only buffers are the inputs, O and logsumexp). Nothing reads this inference graph's logsumexp
    (steps.lse_read), so the program does not compute it: less device time than the eager launch, which
    writes it; made to compute it, the program costs exactly the eager launch's device time."""
    from device_impl.compiler import backend, steps

    g = torch.Generator().manual_seed(0)
    q, k, v = _neuron(*(torch.randn(1, 4, 128, 64, generator=g).to(dtype) for _ in range(3)))

    def f(q, k, v):
        return SDPA(q, k, v, is_causal=True)

    engine.reset_stats()
    eager = f(q, k, v)
    torch.neuron.synchronize()
    (eager_stats,) = [s for name, s in engine.stats().items() if name == "sdpa_flash_fwd"]

    def compiled_run():
        compiled = torch.compile(f, backend="neuron", fullgraph=True)
        compiled(q, k, v)  # compiles, records the schedule
        engine.reset_stats()
        out = compiled(q, k, v)  # the static replay
        torch.neuron.synchronize()
        (neff_stats,) = [s for name, s in engine.stats().items() if name.startswith("neff:")]
        return out, neff_stats

    out, neff_stats = compiled_run()
    assert torch.equal(out.cpu(), eager.cpu())
    assert neff_stats["device_ns"] < eager_stats["device_ns"]
    (program,) = _programs()
    assert [step["kind"] for step in program.steps] == ["attention"]
    assert not steps.lse_read(program.steps[0], program)
    scratch = sum(b.get("nbytes", 0) for b in program.buffers.values() if b["kind"] == "scratch")
    assert scratch == 4 * 128 * 4  # logsumexp (float32 [1, 4, 128]) only: no [128, 128] scores
    # the eager launch writes logsumexp to HBM; the program's scratch arena is kept in SBUF
    assert program.memory["arena"] == "sbuf"
    assert neff_stats["hbm_bytes"] == eager_stats["hbm_bytes"] - scratch
    assert compiler.stats()["fallbacks"] == 0

    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
    backend.reload_settings()
    torch._dynamo.reset()
    compiler.clear_cache()
    monkeypatch.setattr(steps, "lse_read", lambda step, program: True)
    written, written_stats = compiled_run()
    assert torch.equal(written.cpu(), eager.cpu())
    assert written_stats["device_ns"] == eager_stats["device_ns"]


def _gqa(q, k, v):
    return SDPA(q, k[:, :2], v[:, :2], is_causal=True, enable_gqa=True)


CASES = {
    "float_mask": (lambda q, k, v, m: SDPA(q, k, v, attn_mask=m), "float"),
    "bool_mask": (lambda q, k, v, m: SDPA(q, k, v, attn_mask=m), "bool"),
    "gqa_causal": (lambda q, k, v, m: _gqa(q, k, v), None),
    "scale_permuted": (lambda q, k, v, m: SDPA(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=0.3)
                       .transpose(1, 2).relu() * 2, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_options_match_cpu(fresh, case, dtype):
    """Masks, grouped-query heads, an explicit scale, permuted operands (views the step's DMAs read) and
    groups around the step: compiled without fallback, within the tolerances of tests/test_sdpa.py."""
    f, mask_kind = CASES[case]
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 200, 64, generator=g).to(dtype) for _ in range(3))
    mask = (torch.randn(200, 200, generator=g).to(dtype) if mask_kind == "float"
            else torch.rand(2, 1, 200, 200, generator=g) > 0.3 if mask_kind == "bool" else torch.zeros(()))
    expected = f(q.float(), k.float(), v.float(), mask.float() if mask_kind == "float" else mask)
    out = torch.compile(f, backend="neuron", fullgraph=True)(*_neuron(q, k, v, mask))
    assert compiler.stats()["fallbacks"] == 0
    assert any(step["kind"] == "attention" for p in _programs() for step in p.steps)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(out.cpu().float(), expected, **tol)


def test_options_outside_the_stablehlo_key_the_cache(fresh):
    """Two graphs whose StableHLO is the same text (the cut op's options are not in it) are two programs."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 64, 32, generator=g) for _ in range(3))
    outs = [torch.compile(lambda q, k, v, s=s: SDPA(q, k, v, scale=s), backend="neuron")(*_neuron(q, k, v))
            for s in (0.1, 0.9)]
    assert compiler.stats()["compiles"] == 2
    for s, out in zip((0.1, 0.9), outs):
        torch.testing.assert_close(out.cpu(), SDPA(q, k, v, scale=s), atol=1e-5, rtol=1e-5)


TRAINING = {  # case -> (SDPA keyword arguments from (key heads, mask), key/value heads, mask, backward step?)
    "causal": ({"is_causal": True}, 2, None, True),
    "gqa_bool_mask": ({"enable_gqa": True}, 1, "bool", True),
    # a float bias that needs its gradient: the decomposed backward (the eager kernel sums dS with torch)
    "float_bias_gradient": ({}, 2, "float", False),
}


@pytest.mark.parametrize("case", sorted(TRAINING))
def test_training_compiles_forward_and_backward(fresh, case):
    """The forward graph holds the cut forward (O and logsumexp saved), the backward graph the cut
    backward (the eager flash backward: the same bits as eager), except where a float bias needs its
    gradient; gradients match CPU, nothing falls back."""
    kwargs, kv_heads, mask_kind, backward_step = TRAINING[case]
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(1, 2, 150, 32, generator=g)] + [torch.randn(1, kv_heads, 150, 32, generator=g)
                                                       for _ in range(2)]
    if mask_kind == "bool":
        xs.append(torch.rand(150, 150, generator=g) > 0.3)
    elif mask_kind == "float":
        xs.append(torch.randn(150, 150, generator=g))
    grads = mask_kind == "float"

    def f(q, k, v, *mask):
        return SDPA(q, k, v, attn_mask=mask[0] if mask else None, **kwargs)

    def run(fn, device):
        leaves = [x.detach().clone().to(device).requires_grad_(i < 3 or grads) for i, x in enumerate(xs)]
        (fn(*leaves) * 3).sum().backward()
        found = [x.grad for x in leaves if x.requires_grad]
        assert len(found) == (4 if grads else 3) and all(g is not None for g in found)
        return [g.cpu() for g in found]

    compiled = run(torch.compile(f, backend="neuron"), "neuron")
    assert compiler.stats()["fallbacks"] == 0
    kinds = [step["kind"] for p in _programs() for step in p.steps]
    assert "attention" in kinds and ("attention_backward" in kinds) == backward_step
    for d, c in zip(compiled, run(f, "cpu")):
        torch.testing.assert_close(d, c, atol=1e-5, rtol=1e-5)
    if backward_step:
        assert all(torch.equal(d, e) for d, e in zip(compiled, run(f, "neuron")))


def test_dropout_keeps_the_eager_fallback(fresh):
    """The compiler does not model the device's dropout stream: that graph runs eagerly, counted."""
    q, k, v = _neuron(*(torch.randn(1, 2, 16, 8) for _ in range(3)))
    with pytest.warns(RuntimeWarning, match="cannot be compiled"):
        torch.compile(lambda q, k, v: SDPA(q, k, v, dropout_p=0.5), backend="neuron")(q, k, v)
    assert "torch.aten._scaled_dot_product_fused_attention_overrideable" in compiler.stats()["fallbacks_by_op"]


def test_splice_orders_the_cut_op_between_producers_and_users():
    """torch-mlir orders a user of a cut op's result (a graph input then) before the producer of its
    operand; splice re-sorts so the op sits after its operands' producers and before its results' users."""
    t = ir.TensorType((2, 2), "float32")
    # inputs: 0 (own), 1 (the cut op's result); outputs: 3 (own), 2 (the cut op's operand)
    graph = ir.Graph(inputs=[0, 1], outputs=[3, 2], ops=[ir.Op("exponential", (1,), (3,), (t,)),
                                                         ir.Op("negate", (0,), (2,), (t,))],
                     types={i: t for i in range(4)})
    cut = opaque.Cut("attention", operands=[1], results=[1], result_types=[([2, 2], "float32")])
    opaque.splice(graph, [cut], n_inputs=1, n_outputs=1)
    assert graph.inputs == [0] and graph.outputs == [3]
    assert [op.name for op in graph.ops] == ["negate", "attention", "exponential"]
    assert graph.ops[1].operands == (2,) and graph.ops[1].results == (1,)


# --- written-out attention (compiler/patterns.py) -----------------------------------------------------


def _rewrites(f, *xs) -> tuple[int, torch.Tensor]:
    """How many chains ``patterns.rewrite_attention`` replaces in the graph Dynamo traces from ``f``, and
    what the rewritten graph computes on CPU (CPU's own SDPA: the rewrite must keep the function)."""
    from device_impl.compiler import patterns

    found = []

    def backend(gm, example_inputs):
        found.append(patterns.rewrite_attention(gm))
        return gm.forward

    torch._dynamo.reset()
    out = torch.compile(f, backend=backend, fullgraph=True)(*xs)
    torch._dynamo.reset()
    return sum(found), out


def _qkv(heads: int = 2, kv_heads: int = 2, seq: int = 128, dim: int = 32):
    g = torch.Generator().manual_seed(4)
    return (torch.randn(2, heads, seq, dim, generator=g), torch.randn(2, kv_heads, seq, dim, generator=g),
            torch.randn(2, kv_heads, seq, dim, generator=g))


def _causal(q, k, v):
    scores = (q @ k.transpose(-1, -2)) * 0.125
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=-1) @ v


def _float_mask(q, k, v):  # transformers' eager attention: softmax in float32, dropout that does nothing
    mask = torch.zeros(q.shape[-2], k.shape[-2]).masked_fill(torch.eye(q.shape[-2], dtype=torch.bool), -1e4)
    w = torch.matmul(q, k.transpose(2, 3)) / 4.0 + mask
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(F.dropout(w, p=0.0, training=False), v)


def _grouped(q, k, v):
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


def _repeat_kv(q, k, v):  # transformers' repeat_kv
    b, h, s, d = k.shape
    k = k[:, :, None].expand(b, h, 2, s, d).reshape(b, h * 2, s, d)
    v = v[:, :, None].expand(b, h, 2, s, d).reshape(b, h * 2, s, d)
    return torch.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-1) @ v


def _any_bool_mask(q, k, v):  # a row may be fully masked: NaN written out, 0 in SDPA
    keep = (q[..., :1] @ k[..., :1].transpose(-1, -2)) > 0
    return torch.softmax((q @ k.transpose(-1, -2)).masked_fill(~keep, float("-inf")), dim=-1) @ v


def _probabilities_returned(q, k, v):
    p = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
    return p @ v, p


def _other_dim(q, k, v):
    return torch.softmax(q @ k.transpose(-1, -2), dim=-2) @ v


def _training_dropout(q, k, v):
    return F.dropout(torch.softmax(q @ k.transpose(-1, -2), dim=-1), p=0.1, training=True) @ v


PATTERNS = {  # chain -> (rewritten?, inputs)
    "causal": (_causal, True, {}),
    "float_mask_fp32_softmax": (_float_mask, True, {}),
    "grouped_repeat_interleave": (_grouped, True, {"heads": 4}),
    "grouped_repeat_kv": (_repeat_kv, True, {"heads": 4}),
    "any_bool_mask": (_any_bool_mask, False, {}),
    "probabilities_returned": (_probabilities_returned, False, {}),
    "softmax_over_queries": (_other_dim, False, {}),
    "dropout_in_training": (_training_dropout, False, {}),
    "fewer_queries_than_partitions": (_causal, False, {"seq": 64}),
}


@pytest.mark.parametrize("case", sorted(PATTERNS))
def test_written_out_attention_becomes_sdpa_only_where_it_is_the_same_function(case):
    f, rewritten, shape = PATTERNS[case]
    q, k, v = _qkv(kv_heads=shape.get("heads", 4) // 2 if "heads" in shape else 2, heads=shape.get("heads", 2),
                   seq=shape.get("seq", 128))
    count, out = _rewrites(f, q, k, v)
    assert count == (1 if rewritten else 0)
    if rewritten:
        torch.testing.assert_close(out, f(q, k, v), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_decoder_block_compiles_its_attention_to_one_step(fresh, dtype):
    """harness.models.DecoderBlock writes attention out (grouped heads, causal mask): compiled, it is one
    attention step, and the block still matches CPU (issue 21's decoder-block numerics)."""
    from harness.models import DecoderBlock

    torch.manual_seed(0)
    model = DecoderBlock().eval().to(dtype)
    x = torch.randn(2, 128, 256).to(dtype)
    with torch.no_grad():
        expected = model(x)
        out = torch.compile(model.to("neuron"), backend="neuron", fullgraph=True)(x.to("neuron"))
    assert compiler.stats()["fallbacks"] == 0
    (program,) = _programs()
    assert [step["kind"] for step in program.steps].count("attention") == 1
    tol = {"atol": 6e-2, "rtol": 5e-2} if dtype == torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-5}
    torch.testing.assert_close(out.cpu().float(), expected.float(), **tol)


@pytest.mark.parametrize("batch, heads, seq, dim, handed", [
    (2, 4, 128, 32, True),  # two heads per K tile of the projection
    (1, 2, 100, 128, True),  # one head per K tile; one batch, so a partial query block still fills one M tile
    (2, 2, 100, 64, False),  # a query block would straddle two M tiles (batch 2, 100 rows)
    (2, 4, 128, 48, False),  # heads do not tile the K tiles (48 columns)
])
def test_attention_output_is_handed_to_its_projection_on_chip(batch, heads, seq, dim, handed, fresh, monkeypatch):
    """build.attention_handoffs: O read only by the next step, a product taking O.transpose(1, 2) as its A, is
    handed over in SBUF (kernels.attention.Handoff): the product transposes the attention's own output tiles
    instead of loading O back after its stores. The same bits as without the handoff, and, where it applies,
    less device time (the loads are gone); where the pieces would not line up with the product's tiles it is
    not taken."""
    import numpy as np

    from device_impl.compiler import backend, build, executor

    monkeypatch.setattr(executor, "STATIC_REPLAY", False)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, dim, generator=g) for _ in range(3))
    w = torch.randn(heads * dim, 96, generator=g) / (heads * dim) ** 0.5

    def f(q, k, v, w):
        return SDPA(q, k, v, is_causal=True).transpose(1, 2).reshape(batch * seq, heads * dim) @ w

    def run_once():
        engine.reset_stats()
        out = torch.compile(f, backend="neuron", fullgraph=True)(*_neuron(q, k, v, w))
        assert compiler.stats()["fallbacks"] == 0
        (stats,) = [s for key, s in engine.stats().items() if key.startswith("neff:")]
        (program,) = _programs()
        (step,) = [s for s in program.steps if s["kind"] == "attention"]
        return out.cpu(), stats, step

    out, stats, step = run_once()
    assert ("handoff" in step) == handed
    torch._dynamo.reset()
    compiler.clear_cache()
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(fresh / "plain"))
    backend.reload_settings()
    monkeypatch.setattr(build, "attention_handoffs", lambda steps, *args: steps)
    expected, plain, plain_step = run_once()
    assert "handoff" not in plain_step
    np.testing.assert_array_equal(out.view(torch.int32).numpy(), expected.view(torch.int32).numpy())
    if handed:
        assert stats["device_ns"] < plain["device_ns"]
    else:
        assert stats["device_ns"] == plain["device_ns"]
    torch.testing.assert_close(out, f(q, k, v, w), rtol=1e-4, atol=1e-5)


def test_the_compiler_version_covers_the_kernels_compiled_steps_run():
    """A NEFF stores the device time its steps measured; the attention step runs kernels/attention.py, so
    a kernel change must change the compiler version (the cache key), or a cache serves a stale schedule."""
    from device_impl.compiler import neff

    names = {name for name, _ in neff.digested_sources()}
    assert {"compiler/steps.py", "kernels/attention.py", "kernels/matmul.py", "engine/isa.py",
            "engine/timeline.py"} <= names


def test_attention_output_is_kept_in_the_order_its_projection_reads(fresh, monkeypatch):
    """build.producer_layouts: O [B, H, S, D], read only by the output projection as [B*S, H*D] (a transpose
    first), is kept in the arena as [B, S, H, D], so the product's A is a view of the arena, not a copy made off
    the device: the same bits, O's bytes no longer read as HBM bytes, and no slower (the projection's loads wait
    for the stores of the rows they read, not for the whole attention step)."""
    import numpy as np

    from device_impl.compiler import backend, build, executor

    monkeypatch.setattr(executor, "STATIC_REPLAY", False)
    # the layout alone: the projection takes O's blocks on chip where build.attention_handoffs applies (tested
    # below), and never loads the stores this test measures
    monkeypatch.setattr(build, "attention_handoffs", lambda steps, *args: steps)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 128, 32, generator=g) for _ in range(3))
    w = torch.randn(128, 128, generator=g) / 128 ** 0.5

    def f(q, k, v, w):
        return SDPA(q, k, v, is_causal=True).transpose(1, 2).reshape(256, 128) @ w

    def run_once():
        engine.reset_stats()
        out = torch.compile(f, backend="neuron", fullgraph=True)(*_neuron(q, k, v, w))
        assert compiler.stats()["fallbacks"] == 0
        (stats,) = [s for key, s in engine.stats().items() if key.startswith("neff:")]
        (program,) = _programs()
        return out.cpu(), stats, program

    out, stats, program = run_once()
    (step,) = [s for s in program.steps if s["kind"] == "attention"]
    assert "handoff" not in step
    assert program.buffers[step["results"][0]].get("perm") == [0, 2, 1, 3]
    torch._dynamo.reset()
    compiler.clear_cache()
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(fresh / "plain"))
    backend.reload_settings()
    monkeypatch.setattr(build, "producer_layouts", lambda *args: {})
    expected, plain, plain_program = run_once()
    (plain_step,) = [s for s in plain_program.steps if s["kind"] == "attention"]
    assert "perm" not in plain_program.buffers[plain_step["results"][0]]
    np.testing.assert_array_equal(out.view(torch.int32).numpy(), expected.view(torch.int32).numpy())
    assert program.memory["arena"] == "sbuf"  # O read from the arena on chip: its bytes leave the HBM count
    assert plain["hbm_bytes"] - stats["hbm_bytes"] == 2 * 4 * 128 * 32 * 4
    assert stats["device_ns"] <= plain["device_ns"]
    torch.testing.assert_close(out, f(q, k, v, w), rtol=1e-4, atol=1e-5)


def test_rotated_q_and_k_are_read_by_the_attention_in_sbuf(fresh, monkeypatch):
    """build.attention_inputs: the decoder block's rotary runs on its q and k projections' evacuations
    (build._product_order) and the attention step reads each head's rows from those epilogues' result tiles
    (``given``) instead of loading q and k back after their stores. The same bits as without it, and less device
    time (the attention no longer waits for the stores and loads)."""
    import numpy as np

    from harness.models import DecoderBlock
    from device_impl.compiler import backend, build, executor

    monkeypatch.setattr(executor, "STATIC_REPLAY", False)
    torch.manual_seed(0)
    model = DecoderBlock().eval().to("neuron")
    x = torch.randn(2, 128, 256).to("neuron")

    def run_once():
        compiled = torch.compile(model, backend="neuron", fullgraph=True)
        with torch.no_grad():
            compiled(x)  # compiles (and records the program's schedule)
            engine.reset_stats()
            out = compiled(x)
        assert compiler.stats()["fallbacks"] == 0
        (stats,) = [s for key, s in engine.stats().items() if key.startswith("neff:")]
        (program,) = [p for p in _programs() if any(s["kind"] == "attention" for s in p.steps)]
        return out.cpu(), stats, program

    out, stats, program = run_once()
    (step,) = [s for s in program.steps if s["kind"] == "attention"]
    assert sorted(step["given"]) == ["k", "q"]
    tapped = [s for s in program.steps if s.get("attention_taps")]
    assert len(tapped) == 2 and all("order" in s["epilogue"] for s in tapped)
    torch._dynamo.reset()
    compiler.clear_cache()
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(fresh / "plain"))
    backend.reload_settings()
    monkeypatch.setattr(build, "attention_inputs", lambda steps, *args: steps)
    expected, plain, plain_program = run_once()
    assert not [s for s in plain_program.steps if "given" in s]
    np.testing.assert_array_equal(out.view(torch.int32).numpy(), expected.view(torch.int32).numpy())
    assert stats["device_ns"] < plain["device_ns"]
    assert stats["hbm_bytes"] == plain["hbm_bytes"]  # the arena is on chip: the loads it saves move no HBM bytes


def test_the_wide_attention_makes_its_causal_mask_once_per_block_geometry(fresh, monkeypatch):
    """A compiled causal SDPA's fast path (``forward_wide``) masks its score blocks with one mask per block
    geometry, made at the first execution and reused after (it was rebuilt for every block of every call); the
    bits are the eager flash kernel's. (One host thread: two batch shares could both make it at once.)"""
    from device_impl.compiler import workers

    monkeypatch.setattr(workers, "THREADS", 1)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 128, 64, generator=g).to("neuron") for _ in range(3))

    def f(q, k, v):
        return SDPA(q, k, v, is_causal=True)

    eager = f(q, k, v).cpu()
    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    compiled(q, k, v)  # compiles and records the schedule
    attention._causal_mask.cache_clear()
    for _ in range(3):
        out = compiled(q, k, v)
        assert torch.equal(out.cpu(), eager)
    info = attention._causal_mask.cache_info()
    assert info.misses == 1 and info.hits == 2
    assert not attention._causal_mask(0, 4, 4).flags.writeable
