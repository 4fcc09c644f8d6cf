"""The model under test: a user's factory (``module:function``) or a Hugging Face architecture from a small config.

The contract of a factory (what ``port-check my_pkg.serving:build`` calls):

    def build(max_length: int):          # the argument is optional; it is the longest padded length needed
        model = ...                      # an nn.Module on the CPU, weights as you serve them
        def make_inputs(batch: int, seq_len: int) -> dict[str, torch.Tensor]:
            ...                          # the forward's keyword arguments for a request of this shape (CPU)
        return model, make_inputs        # or a PortModel

``make_inputs`` builds *real* (unpadded) inputs; port-check pads them to each
policy's bucket: a batch with ``input_ids`` goes through ``pad_batch``
(attention mask 0 on the padding, labels -100, positions continued), and
otherwise every tensor whose dimension 1 is ``seq_len`` is right-padded with
zeros. The output's first tensor (``logits`` for a Hugging Face model) is
compared on the real positions ``[:, :seq_len]`` with CPU eager on the unpadded
inputs, so padding must not change the real tokens' outputs (a causal model, or
one that honours the attention mask). A factory whose model needs another
padding passes ``pad=`` in a PortModel.

``hf:NAME`` builds a transformers model with random weights from a small config
(no download): ``NAME`` is a short name (``llama``, ``gpt2``, ``bert``,
``qwen2``, ``mistral``), a model class (``LlamaForCausalLM``) or a config class
(``Qwen2Config``).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch
from torch import nn

MakeInputs = Callable[[int, int], Mapping[str, torch.Tensor]]
Pad = Callable[[Mapping[str, torch.Tensor], int, int], dict[str, torch.Tensor]]


@dataclass
class PortModel:
    model: nn.Module
    make_inputs: MakeInputs
    name: str = "model"
    pad: Pad | None = None  # (inputs, seq_len, padded length) -> padded inputs; default: see module docstring
    description: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


class ModelSpecError(ValueError):
    """A model spec port-check cannot load; the message says what it expected."""


# short name -> (config class, model class)
HF_MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "bert": ("BertConfig", "BertModel"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
}
# The small config: each size under every spelling the config families use (the first one a config has wins).
SMALL_CONFIG = (
    (("vocab_size",), 128),
    (("hidden_size", "n_embd", "d_model"), 64),
    (("intermediate_size", "n_inner", "ffn_dim"), 128),
    (("num_hidden_layers", "n_layer"), 2),
    (("num_attention_heads", "n_head"), 4),
    (("num_key_value_heads",), 2),
    (("pad_token_id",), 0),
    (("use_cache",), False),
)
POSITIONS = ("max_position_embeddings", "n_positions")


def _call_factory(factory: Callable[..., Any], max_length: int) -> Any:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        params = {}
    takes = "max_length" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
    return factory(max_length=max_length) if takes else factory()


def _import(module: str) -> Any:
    if module.endswith(".py"):
        path = Path(module)
        if not path.exists():
            raise ModelSpecError(f"no such file {module!r}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        loaded = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        sys.modules.setdefault(path.stem, loaded)
        spec.loader.exec_module(loaded)  # type: ignore[union-attr]
        return loaded
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ModelSpecError(f"cannot import {module!r} ({e}); pass module:function with the module on "
                             f"PYTHONPATH, or path/to/file.py:function") from None


def from_factory(spec: str, max_length: int) -> PortModel:
    module, _, name = spec.rpartition(":")
    factory = getattr(_import(module), name, None)
    if not callable(factory):
        raise ModelSpecError(f"{module!r} has no function {name!r}")
    built = _call_factory(factory, max_length)
    if isinstance(built, PortModel):
        port = built
    elif isinstance(built, tuple) and len(built) == 2 and isinstance(built[0], nn.Module) and callable(built[1]):
        port = PortModel(model=built[0], make_inputs=built[1])
    else:
        raise ModelSpecError(f"{spec} returned {type(built).__name__}; it must return (nn.Module, make_inputs) "
                             f"where make_inputs(batch, seq_len) -> dict of keyword tensors, or a PortModel")
    if port.name == "model":
        port.name = spec
    port.description = port.description or type(port.model).__name__
    return port


def _hf_classes(name: str) -> tuple[type, type | None]:
    import transformers

    key = name.lower()
    if key in HF_MODELS:
        config_name, model_name = HF_MODELS[key]
        return getattr(transformers, config_name), getattr(transformers, model_name)
    found = getattr(transformers, name, None)
    if isinstance(found, type) and issubclass(found, transformers.PretrainedConfig):
        return found, None
    if isinstance(found, type) and issubclass(found, transformers.PreTrainedModel):
        return found.config_class, found
    raise ModelSpecError(f"hf:{name} is not a model known to transformers {transformers.__version__}; use one of "
                         f"{', '.join(HF_MODELS)}, a model class (LlamaForCausalLM) or a config class (Qwen2Config)")


def small_config(config_cls: type, max_length: int) -> Any:
    """A config of the family with tiny sizes (random weights build in milliseconds) and enough positions."""
    default = config_cls()
    mapping = getattr(config_cls, "attribute_map", {}) or {}
    kwargs: dict[str, Any] = {}
    for names, value in SMALL_CONFIG + ((POSITIONS, max(max_length, 64)),):
        for name in names:
            native = mapping.get(name, name)
            if hasattr(default, native):
                kwargs[native] = value
                break
    if "num_key_value_heads" in kwargs and getattr(default, "num_key_value_heads", None) is None:
        kwargs.pop("num_key_value_heads")
    return config_cls(attn_implementation="eager", **kwargs)


def from_hf(name: str, max_length: int, seed: int = 0) -> PortModel:
    import transformers

    config_cls, model_cls = _hf_classes(name)
    config = small_config(config_cls, max_length)
    torch.manual_seed(seed)
    if model_cls is None:
        try:
            model = transformers.AutoModelForCausalLM.from_config(config)
        except ValueError:
            model = transformers.AutoModel.from_config(config)
    else:
        model = model_cls(config)
    model.eval()
    vocab = int(getattr(config, "vocab_size", 128))

    def make_inputs(batch: int, seq_len: int) -> dict[str, torch.Tensor]:
        # token 0 is the pad token: real tokens are 1..vocab-1, drawn from the shape so inputs are reproducible
        generator = torch.Generator().manual_seed(seed * 1_000_003 + batch * 65_537 + seq_len)
        ids = torch.randint(1, vocab, (batch, seq_len), generator=generator)
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    sizes = {k: getattr(config, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                               "vocab_size", "max_position_embeddings") if hasattr(config, k)}
    port = PortModel(model=model, make_inputs=make_inputs, name=f"hf:{name}",
                     description=f"{type(model).__name__} (transformers {transformers.__version__}, small config, "
                                 f"random weights)", details=sizes)
    return port


def load(spec: str, max_length: int) -> PortModel:
    """``hf:NAME`` or ``module:function`` (``path/to/file.py:function``) -> the model and its input builder."""
    spec = spec.strip()
    if spec.startswith("hf:"):
        return from_hf(spec[3:], max_length)
    if ":" not in spec:
        raise ModelSpecError(f"model {spec!r}: use hf:NAME (hf:llama, hf:gpt2, hf:bert, hf:qwen2, a transformers "
                             f"model or config class) or module:function returning (model, make_inputs)")
    return from_factory(spec, max_length)


def output_tensor(output: Any) -> torch.Tensor:
    """The tensor port-check compares: the output itself, ``logits``, or the first tensor it holds."""
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    values = output.values() if isinstance(output, Mapping) else output if isinstance(output, (tuple, list)) else ()
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
    raise TypeError(f"the model returned {type(output).__name__} with no tensor to compare; return a tensor, "
                    f"a ModelOutput with logits, or a tuple whose first tensor is the output")


def pad_inputs(port: PortModel, inputs: Mapping[str, torch.Tensor], seq_len: int, length: int,
               shapes: Any) -> dict[str, torch.Tensor]:
    """Right-pad a request's inputs from ``seq_len`` to ``length`` (see the module docstring)."""
    if port.pad is not None:
        return port.pad(inputs, seq_len, length)
    if length == seq_len:
        return dict(inputs)
    if "input_ids" in inputs:
        return shapes.pad_batch(inputs, f"max:{length}")
    padded = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] == seq_len:
            padded[key], _ = shapes.pad_to(value, length, dim=1, value=0)
        else:
            padded[key] = value
    return padded
