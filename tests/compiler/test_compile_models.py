"""Whole models through torch.compile(backend="neuron", fullgraph=True): transformers' LlamaForCausalLM
(a tiny config) trains compiled and matches CPU eager in logits and every parameter gradient."""

from __future__ import annotations

import pytest
import torch

import device_impl.compiler as compiler
from device_impl.compiler import backend
from harness.models import tiny_llama_config


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", str(tmp_path))
    backend.reload_settings()
    torch._dynamo.reset()
    compiler.reset_stats()
    compiler.clear_cache()
    yield
    torch._dynamo.reset()
    backend.reload_settings()


def test_llama_for_causal_lm_logits_and_gradients_match_cpu(fresh):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = tiny_llama_config()
    reference = transformers.LlamaForCausalLM(config)
    model = transformers.LlamaForCausalLM(config).to("neuron")
    model.load_state_dict(reference.state_dict())
    ids = torch.randint(0, config.vocab_size, (2, 16))

    expected = reference(ids).logits
    expected.float().pow(2).mean().backward()
    compiled = torch.compile(model, backend="neuron", fullgraph=True)
    logits = compiled(ids.to("neuron")).logits
    logits.float().pow(2).mean().backward()

    torch.testing.assert_close(logits.detach().cpu(), expected.detach(), rtol=1e-4, atol=1e-5)
    for (name, p), (_, q) in zip(reference.named_parameters(), model.named_parameters()):
        scale = p.grad.abs().max().item()
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-3, atol=1e-4 * scale + 1e-9, msg=name)
    s = compiler.stats()
    assert s["fallbacks"] == 0, s["fallbacks_by_op"]
    assert s["compiles"] == 2  # one forward graph, one backward graph: nothing ran eagerly


def test_bfloat16_decoder_block_trains_compiled_within_bf16_tolerance(fresh):
    from harness.models import DecoderBlock

    torch.manual_seed(0)
    reference = DecoderBlock().bfloat16()
    model = DecoderBlock().bfloat16().to("neuron")
    model.load_state_dict(reference.state_dict())
    x = torch.randn(2, 128, 256).bfloat16()
    expected = reference(x)
    expected.float().pow(2).mean().backward()
    out = torch.compile(model, backend="neuron", fullgraph=True)(x.to("neuron"))
    out.float().pow(2).mean().backward()

    def relative(a, b):  # worst error relative to the tensor's scale: bf16 keeps 8 bits (0.4%)
        return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()

    assert relative(out.detach().cpu(), expected.detach()) < 1e-2
    for (name, p), (_, q) in zip(reference.named_parameters(), model.named_parameters()):
        assert relative(q.grad.cpu(), p.grad) < 2e-2, name
    assert compiler.stats()["fallbacks"] == 0


# (batch, seq, hidden, heads, kv_heads, intermediate, rotary): odd sizes a decoder block's compiled program must get
# right (partial tiles, head dims other than 64, one or three of a dim, GQA groups of 1 and 3)
ODD_DECODERS = [
    ("seq100", 2, 100, 256, 4, 2, 512, "full"),
    ("hidden192_3heads", 1, 128, 192, 3, 1, 384, "full"),
    ("head_dim48_batch3", 3, 128, 192, 4, 2, 320, "full"),
    ("batch1_seq200", 1, 200, 256, 4, 4, 512, "full"),
    ("no_rotary", 2, 128, 256, 4, 2, 512, 0),
    ("partial_rotary", 2, 100, 256, 4, 2, 512, 32),
]


@pytest.mark.parametrize("name, batch, seq, hidden, heads, kv_heads, intermediate, rotary", ODD_DECODERS,
                         ids=[c[0] for c in ODD_DECODERS])
def test_odd_shaped_decoder_blocks_match_cpu_compiled(name, batch, seq, hidden, heads, kv_heads, intermediate,
                                                      rotary, fresh):
    """A decoder block's forward compiled (fullgraph, inference) against CPU eager at shapes the tuned case does
    not have: earlier fusion changes had bugs only such shapes found."""
    from harness.models import DecoderBlock

    torch.manual_seed(0)
    sizes = dict(hidden=hidden, heads=heads, kv_heads=kv_heads, seq=seq, intermediate=intermediate,
                 rotary_dim=None if rotary == "full" else rotary)
    reference = DecoderBlock(**sizes).eval()
    model = DecoderBlock(**sizes).eval()
    model.load_state_dict(reference.state_dict())
    model = model.to("neuron")
    x = torch.randn(batch, seq, hidden)
    with torch.no_grad():
        expected = reference(x)
        out = torch.compile(model, backend="neuron", fullgraph=True)(x.to("neuron")).cpu()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    assert compiler.stats()["fallbacks"] == 0
