"""Models the compiler tests and the compiled benchmark share: a Llama-style decoder block
(RMSNorm, rotary embedding, grouped-query attention, SwiGLU MLP) and a tiny HF Llama config."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecoderBlock(nn.Module):
    """Pre-norm Llama block; the rotary tables are buffers, the causal mask is built in forward.

    ``rotary_dim``: rotary on the first ``rotary_dim`` of each head's dims and the rest passed through (GPT-NeoX's
    partial rotary; 0: no rotary), or on all of them (None, Llama's): shapes where the rotation units do not fill a
    head, which the compiler's rotary handling must leave correct."""

    def __init__(self, hidden: int = 256, heads: int = 4, kv_heads: int = 2, seq: int = 128,
                 intermediate: int = 512, theta: float = 10000.0, rotary_dim: int | None = None):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.rotary_dim = rotary_dim
        self.attn_norm = RMSNorm(hidden)
        self.mlp_norm = RMSNorm(hidden)
        self.q = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.gate = nn.Linear(hidden, intermediate, bias=False)
        self.up = nn.Linear(hidden, intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)
        inv = 1.0 / theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def _rotary(self, t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """``t`` rotated by the tables' angles (``cos``/``sin``: [seq, rotary_dim or head_dim])."""
        r = self.rotary_dim
        if r is None:
            return t * cos + rotate_half(t) * sin
        if r == 0:
            return t
        return torch.cat((t[..., :r] * cos + rotate_half(t[..., :r]) * sin, t[..., r:]), -1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = self.q(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        r = self.rotary_dim
        cos, sin = (self.cos[:s], self.sin[:s]) if r is None else (self.cos[:s, :r], self.sin[:s, :r])
        q, k = self._rotary(q, cos, sin), self._rotary(k, cos, sin)
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = (q @ k.transpose(-1, -2)) * self.head_dim ** -0.5
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.o(attn.transpose(1, 2).reshape(b, s, -1))
        h = self.mlp_norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


def tiny_llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                       rms_norm_eps=1e-6, tie_word_embeddings=False, attn_implementation="eager")
