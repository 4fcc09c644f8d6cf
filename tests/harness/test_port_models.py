"""Port-check models (harness.port.models): hf: names build small random models of each family with enough positions,
their inputs are reproducible, right padding leaves the real tokens' outputs unchanged (the contract port-check's
correctness check relies on), and factories are loaded by module:function or file path with clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.port import models

HERE = Path(__file__).parent


@pytest.mark.parametrize("name, cls", [
    ("llama", "LlamaForCausalLM"), ("gpt2", "GPT2LMHeadModel"), ("bert", "BertModel"), ("qwen2", "Qwen2ForCausalLM"),
    ("LlamaForCausalLM", "LlamaForCausalLM"), ("MistralConfig", "MistralForCausalLM")])
def test_hf_models_from_small_configs_keep_real_tokens_under_padding(name, cls):
    port = models.load(f"hf:{name}", max_length=300)
    assert type(port.model).__name__ == cls and port.parameters < 500_000
    config = port.model.config
    assert getattr(config, "max_position_embeddings", getattr(config, "n_positions", 0)) >= 300
    inputs = port.make_inputs(2, 37)
    assert torch.equal(inputs["input_ids"], port.make_inputs(2, 37)["input_ids"])  # reproducible
    assert inputs["input_ids"].min() >= 1  # 0 is the pad token
    padded = models.pad_inputs(port, inputs, 37, 300, torch.neuron.shapes)
    with torch.no_grad():
        real = models.output_tensor(port.model(**inputs))
        served = models.output_tensor(port.model(**padded))
    assert served.shape[1] == 300
    torch.testing.assert_close(served[:, :37], real, rtol=1e-4, atol=1e-5)


def test_unknown_hf_names_and_bad_specs():
    with pytest.raises(models.ModelSpecError, match="hf:nothing is not a model known to transformers"):
        models.load("hf:nothing", 64)
    with pytest.raises(models.ModelSpecError, match="use hf:NAME"):
        models.load("justaname", 64)
    with pytest.raises(models.ModelSpecError, match="has no function 'missing'"):
        models.load(f"{HERE / 'port_tiny.py'}:missing", 64)
    with pytest.raises(models.ModelSpecError, match="no such file"):
        models.load("nowhere/none.py:build", 64)


def test_factories_get_max_length_and_must_return_the_contract(tmp_path):
    port = models.load(f"{HERE / 'port_tiny.py'}:tiny", 200)
    assert port.model.block.cos.shape[0] == 200  # the factory received max_length
    (tmp_path / "bad_factory.py").write_text("import torch\ndef build():\n    return torch.nn.Linear(2, 2)\n")
    with pytest.raises(models.ModelSpecError, match=r"must return \(nn.Module, make_inputs\)"):
        models.load(f"{tmp_path / 'bad_factory.py'}:build", 64)


def test_output_tensor_finds_the_tensor():
    logits = torch.ones(1, 2)
    assert models.output_tensor(logits) is logits
    assert models.output_tensor({"loss": None, "hidden": logits}) is logits
    assert models.output_tensor((None, logits)) is logits
    with pytest.raises(TypeError, match="no tensor to compare"):
        models.output_tensor("text")
