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

SDPA = F.scaled_dot_product_attention


def _programs() -> list:
    return [exe.program for exe in compiler.cache._MEMORY.values()]


def _neuron(*xs):
    return [x.to("neuron") for x in xs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_compiled_sdpa_is_the_eager_flash_kernel(fresh, dtype):
    """Same bits, same device time and HBM bytes as the eager kernel's launch; no product step, no
    scores or probabilities in HBM (the program's only buffers are the inputs, O and logsumexp)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = _neuron(*(torch.randn(1, 4, 128, 64, generator=g).to(dtype) for _ in range(3)))

    def f(q, k, v):
        return SDPA(q, k, v, is_causal=True)

    engine.reset_stats()
    eager = f(q, k, v)
    torch.neuron.synchronize()
    (eager_stats,) = [s for name, s in engine.stats().items() if name == "sdpa_flash_fwd"]
    compiled = torch.compile(f, backend="neuron", fullgraph=True)
    compiled(q, k, v)  # compiles, records the schedule
    engine.reset_stats()
    out = compiled(q, k, v)  # the static replay
    torch.neuron.synchronize()
    (neff_stats,) = [s for name, s in engine.stats().items() if name.startswith("neff:")]
    assert torch.equal(out.cpu(), eager.cpu())
    assert neff_stats["device_ns"] == eager_stats["device_ns"]
    assert neff_stats["hbm_bytes"] == eager_stats["hbm_bytes"]
    (program,) = _programs()
    assert [step["kind"] for step in program.steps] == ["attention"]
    scratch = sum(b.get("nbytes", 0) for b in program.buffers.values() if b["kind"] == "scratch")
    assert scratch == 4 * 128 * 4  # logsumexp (float32 [1, 4, 128]) only: no [128, 128] scores
    assert compiler.stats()["fallbacks"] == 0


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


def test_training_compiles_forward_and_backward(fresh):
    """The forward graph holds the cut op (its logsumexp saved for the backward graph, which decomposes
    the fused backward): gradients match CPU, nothing falls back."""
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(1, 2, 150, 32, generator=g) for _ in range(3)]
    cpu = [x.clone().requires_grad_() for x in xs]
    dev = [x.to("neuron").requires_grad_() for x in xs]

    def f(q, k, v):
        return SDPA(q, k, v, is_causal=True)

    (torch.compile(f, backend="neuron")(*dev) * 3).sum().backward()
    (f(*cpu) * 3).sum().backward()
    assert compiler.stats()["fallbacks"] == 0
    assert any(step["kind"] == "attention" for p in _programs() for step in p.steps)
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad, atol=1e-5, rtol=1e-5)


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
