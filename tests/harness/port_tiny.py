"""Tiny models for the port-check tests, loaded through the ``path/to/file.py:function`` factory contract."""

from __future__ import annotations

import torch
from torch import nn

from harness.models import DecoderBlock

VOCAB = 32


class TinyCausalLM(nn.Module):
    """Embedding -> one Llama-style decoder block (causal) -> logits: right padding leaves real tokens unchanged."""

    def __init__(self, max_length: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.block = DecoderBlock(hidden=32, heads=2, kv_heads=1, seq=max_length, intermediate=64)
        self.head = nn.Linear(32, VOCAB, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.head(self.block(self.embed(input_ids)))


class PoolingModel(TinyCausalLM):
    """Adds the mean over the whole sequence to every position: padding changes the real tokens' outputs."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.embed(input_ids)
        return self.head(h + h.mean(dim=1, keepdim=True))


def _inputs(batch: int, seq_len: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch * 7919 + seq_len)
    ids = torch.randint(1, VOCAB, (batch, seq_len), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def tiny(max_length: int):
    torch.manual_seed(0)
    return TinyCausalLM(max_length).eval(), _inputs


def pooling(max_length: int):
    torch.manual_seed(0)
    return PoolingModel(max_length).eval(), _inputs
