"""Benchmark cases shared by every benchmark front end (one-run ratio scripts, asv, pytest-benchmark).

A case builds, for a device and dtype, a zero-argument callable that runs the
workload once; inputs are created outside the timed call. The same
definition is timed on CPU eager and on neuron in the same process, so
ratios come from one run.
"""

from __future__ import annotations

import timeit
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

import device_impl  # noqa: F401  (registers the neuron device when autoload is off)
from device_impl._core import C

F = torch.nn.functional
Workload = Callable[[], Any]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[str, torch.dtype], Workload]
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    description: str = ""
    tags: tuple[str, ...] = field(default=())
    # How compiled mode applies torch.compile: "workload" compiles the zero-argument callable as a
    # whole; "module" passes ``compile=`` to ``build``, which applies it to the model it builds (a
    # training step compiles the model, not loss.backward() or the optimizer; a decode step compiles
    # the model's forward, as Hugging Face's static-cache generation does).
    compile_scope: str = "workload"


def _same(obj: Any) -> Any:
    """The identity ``compile=`` of every mode but compiled."""
    return obj


def with_facts(fn: Workload, **facts: Callable[[], float]) -> Workload:
    """Attach measured facts of a workload (e.g. ``padded_fraction``), read after a call.

    Each fact is a zero-argument function evaluated after the measured call, so it reads the
    state the call left (the static cache's filled slots), not a number typed in here.
    """
    fn.facts = facts  # type: ignore[attr-defined]
    return fn


def _inputs(device: str, dtype: torch.dtype, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g).to(dtype).to(device) for s in shapes]


def _seeded(make: Callable[[], nn.Module], device: str, dtype: torch.dtype) -> nn.Module:
    """A model with the same weights on every device: built on CPU from seed 0, then moved."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = make()
    return model.to(device=device, dtype=dtype)


def _small_add(device: str, dtype: torch.dtype) -> Workload:
    a, b = _inputs(device, dtype, (1024,), (1024,))
    return lambda: torch.add(a, b)


def _add_1m(device: str, dtype: torch.dtype) -> Workload:
    a, b = _inputs(device, dtype, (1 << 20,), (1 << 20,))
    return lambda: torch.add(a, b)


def _matmul(n: int) -> Callable[[str, torch.dtype], Workload]:
    def build(device: str, dtype: torch.dtype) -> Workload:
        a, b = _inputs(device, dtype, (n, n), (n, n))
        return lambda: torch.mm(a, b)

    return build


def _softmax_of(rows: int, cols: int) -> Callable[[str, torch.dtype], Workload]:
    def build(device: str, dtype: torch.dtype) -> Workload:
        (x,) = _inputs(device, dtype, (rows, cols))
        return lambda: torch.softmax(x, dim=-1)

    return build


def _layer_norm_of(rows: int, cols: int) -> Callable[[str, torch.dtype], Workload]:
    def build(device: str, dtype: torch.dtype) -> Workload:
        x, w, b = _inputs(device, dtype, (rows, cols), (cols,), (cols,))
        return lambda: F.layer_norm(x, (cols,), w, b)

    return build


# The elementwise chain's steps: ten rounds, tanh(y - SHIFT) on even ones, sigmoid(y * SCALE + BIAS) on odd ones
# (25 ops). benches/adaptive_ratio.py evaluates the same steps in plain numpy for its host floor.
CHAIN_ROUNDS, CHAIN_SHIFT, CHAIN_SCALE, CHAIN_BIAS = 10, 0.05, 1.01, 0.1


def _elementwise_chain_of(numel: int) -> Callable[[str, torch.dtype], Workload]:
    def build(device: str, dtype: torch.dtype) -> Workload:
        (x,) = _inputs(device, dtype, (numel,))

        def chain() -> torch.Tensor:
            y = x
            for i in range(CHAIN_ROUNDS):
                y = torch.sigmoid(y * CHAIN_SCALE + CHAIN_BIAS) if i % 2 else torch.tanh(y - CHAIN_SHIFT)
            return y

        return chain

    return build


_softmax = _softmax_of(4096, 1024)
_layer_norm = _layer_norm_of(4096, 1024)
_elementwise_chain = _elementwise_chain_of(1 << 20)


def _attention(batch: int, heads: int, seq: int, head_dim: int) -> Callable[[str, torch.dtype], Workload]:
    """Causal scaled-dot-product attention, the op at the heart of a decoder."""
    def build(device: str, dtype: torch.dtype) -> Workload:
        q, k, v = _inputs(device, dtype, *[(batch, heads, seq, head_dim)] * 3)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return build


# --- models -------------------------------------------------------------------------------------
# Model cases have compile_scope="module": ``compile`` is applied to the model, never to the loop
# around it. Weights are seeded (_seeded), so CPU and neuron run the same model.

MLP_WIDTH, MLP_HIDDEN, MLP_TOKENS = 256, 1024, 64


def _mlp_model() -> nn.Module:
    return nn.Sequential(nn.Linear(MLP_WIDTH, MLP_HIDDEN), nn.GELU(), nn.Linear(MLP_HIDDEN, MLP_WIDTH))


def _inference(model: nn.Module, *args: Any, **kwargs: Any) -> Workload:
    def run() -> Any:
        with torch.no_grad():
            return model(*args, **kwargs)

    return run


def _mlp(device: str, dtype: torch.dtype, compile: Callable = _same) -> Workload:
    model = compile(_seeded(_mlp_model, device, dtype).eval())
    (x,) = _inputs(device, dtype, (MLP_TOKENS, MLP_WIDTH))
    return _inference(model, x)


def _decoder_block_of(batch: int, seq: int) -> Callable[..., Workload]:
    """harness.models.DecoderBlock (hidden 256, 4 heads, 2 KV heads, SwiGLU 512) on ``seq`` tokens."""
    def build(device: str, dtype: torch.dtype, compile: Callable = _same) -> Workload:
        from harness.models import DecoderBlock

        model = compile(_seeded(lambda: DecoderBlock(seq=max(seq, 128)), device, dtype).eval())
        (x,) = _inputs(device, dtype, (batch, seq, 256))
        return _inference(model, x)

    return build


def _llama(device: str, dtype: torch.dtype) -> nn.Module:
    from transformers import LlamaForCausalLM

    from harness.models import tiny_llama_config

    return _seeded(lambda: LlamaForCausalLM(tiny_llama_config()), device, dtype).eval()


LLAMA_LENGTHS, LLAMA_BUCKET = (11, 23), 32


def _llama_forward(device: str, dtype: torch.dtype, compile: Callable = _same) -> Workload:
    """A batch of two prompts (11 and 23 tokens) right-padded to a 32-token bucket, with the mask."""
    model = compile(_llama(device, dtype))
    g = torch.Generator().manual_seed(0)
    ids = torch.zeros(len(LLAMA_LENGTHS), LLAMA_BUCKET, dtype=torch.long)
    mask = torch.zeros(len(LLAMA_LENGTHS), LLAMA_BUCKET, dtype=torch.long)
    for row, length in enumerate(LLAMA_LENGTHS):
        ids[row, :length] = torch.randint(1, 128, (length,), generator=g)
        mask[row, :length] = 1
    ids, mask = ids.to(device), mask.to(device)
    run = _inference(model, input_ids=ids, attention_mask=mask)
    return with_facts(run, padded_fraction=lambda: 1.0 - float(mask.sum().item()) / mask.numel())


DECODE_PROMPT, DECODE_CACHE = 16, 64


def _llama_decode(device: str, dtype: torch.dtype, compile: Callable = _same) -> Workload:
    """One greedy decode step with a transformers StaticCache of 64 slots after a 16-token prompt.

    Each call decodes the next position, as generate() does; when the cache is full it is rewound
    to just after the prompt (transformers 5.x StaticLayer keeps its write position in
    ``cumulative_length``). With a static cache the shapes never change, so compiled mode compiles
    once. The padded fraction is the share of cache slots the step attends over that hold no token.
    """
    from transformers import StaticCache

    model = _llama(device, dtype)
    forward = compile(model)
    cache = StaticCache(config=model.config, max_cache_len=DECODE_CACHE)
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(1, 128, (1, DECODE_PROMPT), generator=g).to(device)
    with torch.no_grad():
        model(input_ids=prompt, past_key_values=cache, use_cache=True,
              cache_position=torch.arange(DECODE_PROMPT, device=device))
    if not all(hasattr(layer, "cumulative_length") for layer in cache.layers):
        raise RuntimeError("this transformers StaticCache has no cumulative_length; the decode case needs 5.x")
    token = prompt[:, -1:]
    position = [DECODE_PROMPT]

    def step() -> torch.Tensor:
        if position[0] == DECODE_CACHE:
            position[0] = DECODE_PROMPT
            for layer in cache.layers:
                layer.cumulative_length.fill_(DECODE_PROMPT)
        with torch.no_grad():
            out = forward(input_ids=token, past_key_values=cache, use_cache=True,
                          cache_position=torch.tensor([position[0]], device=device))
        position[0] += 1
        return out.logits

    def padded_fraction() -> float:
        keys = cache.layers[0].keys  # [batch, kv_heads, slots, head_dim]; unwritten slots are zero
        filled = int((keys.float().abs().sum(dim=(0, 1, 3)) != 0).sum().item())
        return 1.0 - filled / keys.shape[2]

    return with_facts(step, padded_fraction=padded_fraction)


def _train_step(device: str, dtype: torch.dtype, compile: Callable = _same) -> Workload:
    """One SGD step of the MLP: forward, MSE loss, backward, optimizer step (the model is compiled)."""
    model = _seeded(_mlp_model, device, dtype).train()
    forward = compile(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = _inputs(device, dtype, (MLP_TOKENS, MLP_WIDTH), (MLP_TOKENS, MLP_WIDTH))

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=False)
        loss = F.mse_loss(forward(x), y)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


BOTH = (torch.float32, torch.bfloat16)

CASES: dict[str, Case] = {case.name: case for case in (
    Case("add_1k", _small_add, (torch.float32,), "a small elementwise op: 1024-element fp32 add", ("ops",)),
    Case("add_1m", _add_1m, (torch.float32, torch.bfloat16), "1M-element add", ("ops",)),
    Case("matmul_512", _matmul(512), (torch.float32, torch.bfloat16), "512^3 matmul", ("ops",)),
    Case("matmul_1024", _matmul(1024), (torch.float32, torch.bfloat16), "1024^3 matmul", ("ops",)),
    Case("softmax_4096x1024", _softmax, (torch.float32, torch.bfloat16), "softmax over 4096x1024", ("ops",)),
    Case("layer_norm_4096x1024", _layer_norm, (torch.float32, torch.bfloat16), "layer_norm over 4096x1024",
         ("ops",)),
    Case("elementwise_chain_1m", _elementwise_chain, (torch.float32,), "25 elementwise ops over 1M elements",
         ("ops",)),
    # sized for asv and pytest-benchmark on two shared cores (tags "asv" and "quick")
    Case("matmul_128", _matmul(128), BOTH, "128^3 matmul: one TensorE tile", ("ops", "asv", "quick")),
    Case("matmul_256", _matmul(256), BOTH, "256^3 matmul", ("ops", "asv")),
    Case("elementwise_chain_64k", _elementwise_chain_of(1 << 16), BOTH, "25 elementwise ops over 64K elements",
         ("ops", "asv", "quick")),
    Case("softmax_256x512", _softmax_of(256, 512), BOTH, "softmax over 256x512", ("ops", "asv", "quick")),
    Case("layer_norm_256x512", _layer_norm_of(256, 512), BOTH, "layer_norm over 256x512", ("ops", "asv", "quick")),
    Case("attention_4x128x64", _attention(1, 4, 128, 64), BOTH,
         "causal scaled_dot_product_attention, 4 heads, 128 tokens, head dim 64", ("ops", "asv", "quick")),
    Case("mlp", _mlp, BOTH, f"GELU MLP {MLP_WIDTH}->{MLP_HIDDEN}->{MLP_WIDTH} on {MLP_TOKENS} tokens",
         ("models", "asv", "quick"), "module"),
    Case("decoder_block", _decoder_block_of(1, 64), BOTH,
         "Llama-style decoder block (harness.models.DecoderBlock), 1x64 tokens", ("models", "asv", "quick"),
         "module"),
    Case("llama_forward", _llama_forward, BOTH,
         "tiny LlamaForCausalLM forward, 2 prompts padded to a 32-token bucket", ("models", "asv"), "module"),
    Case("llama_decode_static", _llama_decode, BOTH,
         "tiny LlamaForCausalLM decode step with a 64-slot StaticCache", ("models", "asv"), "module"),
    Case("train_step", _train_step, BOTH, "one SGD training step of the MLP", ("models", "asv", "quick"),
         "module"),
)}


# --- the adaptive-eager issue's sizes (benches/adaptive_ratio.py) ------------------------------------

def _gelu_mlp_of(width: int, hidden: int, tokens: int) -> Callable[..., Workload]:
    """A training-free forward step: Linear width->hidden, GELU, Linear hidden->width on ``tokens`` rows."""
    def build(device: str, dtype: torch.dtype, compile: Callable = _same) -> Workload:
        model = compile(_seeded(lambda: nn.Sequential(nn.Linear(width, hidden), nn.GELU(),
                                                      nn.Linear(hidden, width)), device, dtype).eval())
        (x,) = _inputs(device, dtype, (tokens, width))
        return _inference(model, x)

    return build


CASES.update({case.name: case for case in (
    Case("mlp_512x2048_b256", _gelu_mlp_of(512, 2048, 256), BOTH, "GELU MLP 512->2048->512 on 256 tokens",
         ("models",), "module"),
    Case("decoder_block_b2_s128", _decoder_block_of(2, 128), BOTH,
         "Llama-style decoder block (harness.models.DecoderBlock: hidden 256, 4 heads), 2x128 tokens",
         ("models",), "module"),
)})

def synchronize(device: str) -> None:
    if device.startswith("neuron"):
        torch.neuron.synchronize()


def wall_seconds(fn: Workload, device: str, repeats: int = 5, min_time: float = 0.2) -> float:
    """Best-of-``repeats`` seconds per call, with enough calls per repeat to last ``min_time``."""
    fn()
    synchronize(device)
    timer = timeit.Timer(lambda: (fn(), synchronize(device)))
    number, _ = timer.autorange() if min_time >= 0.2 else (1, None)
    return min(timer.repeat(repeat=repeats, number=number)) / number


def device_seconds(fn: Workload, device: str = "neuron") -> float:
    """Simulated device time of one call: how far the core's device clock advances."""
    index = torch.device(device).index or 0
    before = C.device_time_ns(index)
    fn()
    return (C.device_time_ns(index) - before) / 1e9
