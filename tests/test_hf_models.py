"""Hugging Face transformers 5.23 models on neuron: forward, static-cache generation, a padded training step.

Tiny models built from configs with random weights (hidden 64, 2 layers, vocab 128; no hub
downloads). Eager mode must match CPU and run without CPU fallbacks (AdamW's three pointwise
ops and generate's end-of-sequence check excepted, listed below); compiled mode (``torch.compile(backend="neuron")``, and the
compile transformers itself triggers for static-cache generation on a ``neuron`` device) must
match CPU without falling back to eager.

Two things every test here relies on:
* ``Module.to("neuron")`` re-creates parameters (PyTorch shallow-copies only between "dense"
  backends, a list without PrivateUse1), which unties tied weights (GPT-2's and BERT's
  embeddings and LM heads). ``model.tie_weights()`` after the move re-ties them, as for XLA.
* transformers compiles static-cache generation on ``neuron`` by itself (backend "neuron");
  the eager tests opt out with ``disable_compile=True``.
"""

from __future__ import annotations

import copy

import pytest
import torch
import transformers
from transformers import (BertConfig, BertForMaskedLM, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

from device_impl import dispatch, shapes

assert transformers.__version__ == "5.23.0", transformers.__version__

TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
DECODER = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=256, **TOKENS)
BERT = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=256, pad_token_id=0, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
FACTORIES = {
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**DECODER)),
    "gpt2": lambda: GPT2LMHeadModel(GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=256,
                                               resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **TOKENS)),
    "bert": lambda: BertModel(BertConfig(**BERT)),
    "bert_mlm": lambda: BertForMaskedLM(BertConfig(**BERT)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**DECODER)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(sliding_window=None, **DECODER)),
}
CAUSAL = ("llama", "gpt2", "qwen2", "mistral")
# Ops of torch.optim.AdamW's per-parameter update with no native kernel yet: counted CPU fallback.
ADAMW_FALLBACKS = {"aten::addcdiv.out", "aten::addcmul.out", "aten::lerp.Scalar_out"}
# generate()'s end-of-sequence check (torch.isin of the last tokens against eos ids) has no native kernel yet.
GENERATE_FALLBACKS = {"aten::isin.Tensor_Tensor_out"}
NEW_TOKENS = 6


def build(name: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return FACTORIES[name]()


def on_neuron(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` on neuron with its tied weights tied again (see the module docstring)."""
    moved = copy.deepcopy(model).to("neuron")
    moved.tie_weights()
    tied = model.get_output_embeddings()
    if tied is not None and tied.weight is model.get_input_embeddings().weight:
        assert moved.get_output_embeddings().weight is moved.get_input_embeddings().weight
    return moved


def _inputs(batch: int = 2, length: int = 16, seed: int = 5) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 128, (batch, length), generator=g)
    mask = torch.ones_like(ids)
    ids[0, -4:] = 0  # the first row is right-padded
    mask[0, -4:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _output(out) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _fallbacks() -> dict[str, int]:
    return {op: counts["fallback"] for op, counts in dispatch.stats().items() if counts["fallback"]}


def _compile_backend_available() -> bool:
    from torch._dynamo.backends.registry import lookup_backend

    try:
        lookup_backend("neuron")
    except Exception:  # noqa: BLE001 - InvalidBackend, or a registration that fails to load
        return False
    return True


needs_compiler = pytest.mark.skipif(not _compile_backend_available(), reason="neuron compile backend not available")


# --- eager --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ("llama", "gpt2", "bert", "qwen2", "mistral"))
def test_eager_forward_matches_cpu(name, fresh_stats):
    cpu = build(name).eval()
    device = on_neuron(cpu)
    batch = _inputs()
    with torch.no_grad():
        expected = _output(cpu(**batch))
        actual = _output(device(**{k: v.to("neuron") for k, v in batch.items()}))
    assert actual.device.type == "neuron"
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-4)
    assert _fallbacks() == {}


@pytest.mark.parametrize("name", CAUSAL)
def test_eager_greedy_generation_with_static_cache_matches_cpu(name, fresh_stats):
    from device_impl import compiler

    cpu = build(name).eval()
    device = on_neuron(cpu)
    prompt = _inputs(batch=1, length=8)
    kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, cache_implementation="static",
                  disable_compile=True, return_dict_in_generate=True)
    expected = cpu.generate(**prompt, **kwargs).sequences
    compiler.reset_stats()
    out = device.generate(**{k: v.to("neuron") for k, v in prompt.items()}, **kwargs)
    assert isinstance(out.past_key_values, transformers.StaticCache)
    assert out.sequences.shape == (1, 8 + NEW_TOKENS)
    assert out.sequences.cpu().tolist() == expected.tolist()
    assert compiler.stats()["graphs"] == 0  # eager: nothing was compiled
    assert set(_fallbacks()) <= GENERATE_FALLBACKS, _fallbacks()


@pytest.mark.parametrize("name", ("llama", "gpt2", "qwen2", "bert_mlm"))
def test_eager_training_step_padded_to_128_matches_cpu(name, fresh_stats):
    cpu = build(name).train()
    device = on_neuron(cpu)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 128, (2, 50), generator=g)
    ids[0, 37:] = 0
    mask = torch.ones_like(ids)
    mask[0, 37:] = 0
    labels = ids.clone()
    labels[0, 37:] = -100
    batch = shapes.pad_batch({"input_ids": ids, "attention_mask": mask, "labels": labels}, "multiple:128")
    assert batch["input_ids"].shape == (2, 128) and int(batch["attention_mask"].sum()) == 37 + 50
    losses = {}
    for model, where in ((cpu, "cpu"), (device, "neuron")):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        inputs = {k: v.to(where) for k, v in batch.items()}
        losses[where] = []
        for _ in range(2):
            loss = model(**inputs).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses[where].append(loss.item())
    torch.testing.assert_close(torch.tensor(losses["neuron"]), torch.tensor(losses["cpu"]), rtol=1e-4, atol=1e-5)
    assert losses["cpu"][1] < losses["cpu"][0]  # the step trained
    for (pname, a), b in zip(cpu.named_parameters(), device.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-4, atol=1e-5, msg=pname)
    assert set(_fallbacks()) <= ADAMW_FALLBACKS, _fallbacks()


@pytest.mark.parametrize("name", ("llama", "gpt2"))
def test_eager_bf16_autocast_forward(name, fresh_stats):
    """Under torch.autocast("neuron", bfloat16) the logits are as close to fp32 as CPU autocast's are."""
    cpu = build(name).eval()
    device = on_neuron(cpu)
    batch = _inputs()
    with torch.no_grad():
        exact = cpu(**batch).logits
        with torch.autocast("cpu", dtype=torch.bfloat16):
            cpu_low = cpu(**batch).logits.float()
        with torch.autocast("neuron", dtype=torch.bfloat16):
            device_low = device(**{k: v.to("neuron") for k, v in batch.items()}).logits
    assert device_low.dtype == torch.bfloat16  # the LM head ran in the low type
    cpu_error = (cpu_low - exact).abs().max().item()
    device_error = (device_low.float().cpu() - exact).abs().max().item()
    assert 0 < device_error <= 2 * cpu_error + 1e-3, (device_error, cpu_error)
    assert _fallbacks() == {}


# --- compiled -----------------------------------------------------------------------------------------


@needs_compiler
@pytest.mark.parametrize("name", ("llama", "gpt2", "bert", "qwen2"))
def test_compiled_forward_matches_cpu(name):
    from device_impl import compiler

    torch._dynamo.reset()
    compiler.reset_stats()
    cpu = build(name).eval()
    device = on_neuron(cpu)
    batch = _inputs()
    compiled = torch.compile(device, backend="neuron", fullgraph=True)
    with torch.no_grad():
        expected = _output(cpu(**batch))
        actual = _output(compiled(**{k: v.to("neuron") for k, v in batch.items()}))
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-4)
    stats = compiler.stats()
    assert stats["fallbacks"] == 0, stats["fallbacks_by_op"]  # it ran compiled, not eagerly
    assert stats["executions"] >= 1


@needs_compiler
@pytest.mark.parametrize("name", ("llama", "gpt2", "qwen2"))
def test_compiled_greedy_generation_with_static_cache_matches_cpu(name):
    """transformers compiles the decode step with backend="neuron" on its own; count what it compiles."""
    from device_impl import compiler

    torch._dynamo.reset()
    compiler.reset_stats()
    cpu = build(name).eval()
    device = on_neuron(cpu)
    prompt = _inputs(batch=1, length=8)
    kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False, cache_implementation="static")
    expected = cpu.generate(**prompt, **kwargs)
    actual = device.generate(**{k: v.to("neuron") for k, v in prompt.items()}, **kwargs)
    assert actual.cpu().tolist() == expected.tolist()
    stats = compiler.stats()
    assert stats["graphs"] >= 1 and stats["fallbacks"] == 0, stats
    assert stats["compiles"] + stats["cache_hits"] >= 1
    assert stats["executions"] >= NEW_TOKENS - 1  # every decode step after the eager prefill


# --- the numbers for the issue note: ``python tests/test_hf_models.py`` -----------------------------------


def _measure(name: str, compiled: bool) -> dict:
    from device_impl import compiler

    torch._dynamo.reset()
    compiler.reset_stats()
    dispatch.reset_stats()
    cpu = build(name).eval()
    device = on_neuron(cpu)
    model = torch.compile(device, backend="neuron", fullgraph=True) if compiled else device
    batch = _inputs()
    row: dict = {}
    try:
        with torch.no_grad():
            expected = _output(cpu(**batch))
            actual = _output(model(**{k: v.to("neuron") for k, v in batch.items()}))
        row["max_abs_diff"] = (actual.cpu() - expected).abs().max().item()
    except Exception as exc:  # noqa: BLE001 - reported, not hidden
        row["max_abs_diff"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    if compiled:
        stats = compiler.stats()
        row["forward_compile"] = {k: stats[k] for k in ("graphs", "compiles", "cache_hits", "fallbacks", "executions")}
        if stats["fallbacks"]:
            row["forward_compile"]["fallbacks_by_op"] = stats["fallbacks_by_op"]
    if name in CAUSAL:
        torch._dynamo.reset()
        compiler.reset_stats()
        prompt = _inputs(batch=1, length=8)
        kwargs = dict(max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                      cache_implementation="static", disable_compile=not compiled)
        reference = cpu.generate(**prompt, **kwargs)[0, 8:].tolist()
        try:
            tokens = device.generate(**{k: v.to("neuron") for k, v in prompt.items()}, **kwargs)[0, 8:].tolist()
            row["tokens_matched"] = f"{sum(a == b for a, b in zip(tokens, reference))}/{NEW_TOKENS}"
        except Exception as exc:  # noqa: BLE001
            row["tokens_matched"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        stats = compiler.stats()
        row["generate_compiles"] = {k: stats[k] for k in ("graphs", "compiles", "cache_hits", "recompiles",
                                                          "fallbacks", "executions")}
        if stats["fallbacks"]:
            row["generate_compiles"]["fallbacks_by_op"] = stats["fallbacks_by_op"]
    row["cpu_fallback_ops"] = _fallbacks()
    return row


if __name__ == "__main__":
    import json

    for mode in ("eager", "compiled"):
        for model_name in ("llama", "gpt2", "bert", "qwen2", "mistral"):
            print(mode, model_name, json.dumps(_measure(model_name, mode == "compiled")), flush=True)
