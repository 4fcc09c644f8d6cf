"""Bucketing and padding: how a workload with varying sequence lengths meets a static-shape device.

The neuron compiler compiles one program per static input signature, so every
new sequence length is a recompile (DESIGN.md §3, "Shape contract"). The usual
answer is to pad each request up to one of a few *bucket* lengths and mask the
padding: fewer distinct shapes (fewer compiles, more cache hits) in exchange for
wasted, padded tokens. Hugging Face TRL pads to a multiple of 128 on Neuron for
this reason. The policies here are the common choices:

=====================  ==============================  =========================
policy (``parse``)      bucket of a length ``n``          typical use
=====================  ==============================  =========================
``none``               ``n``                            the baseline: no padding
``multiple:N``         ``n`` rounded up to a multiple   TRL on Neuron (N=128)
``pow2[:MIN]``         next power of two (>= MIN)       serving stacks
``buckets:a,b,c``      smallest listed bucket >= ``n``  hand-tuned deployments
``max:L``              ``L``                            one program, most padding
=====================  ==============================  =========================

Padding is right-sided by default: with a causal model, real tokens never
attend to positions after them, so the logits of the real tokens are the
unpadded logits (tests check this on a Llama model). Everything here is plain
torch, so it runs on any device, the neuron device included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch


class BucketOverflowError(ValueError):
    """A length is longer than the largest bucket the policy allows."""


@dataclass(frozen=True)
class BucketPolicy:
    """Maps a length to the padded length it is served at. Subclasses implement ``_bucket``."""

    def bucket(self, n: int) -> int:
        if n < 0:
            raise ValueError(f"a length cannot be negative (got {n})")
        return self._bucket(n)

    def _bucket(self, n: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @property
    def name(self) -> str:  # pragma: no cover - abstract
        raise NotImplementedError

    def buckets_for(self, lengths: Sequence[int]) -> list[int]:
        return [self.bucket(n) for n in lengths]

    def padded_fraction(self, lengths: Sequence[int]) -> float:
        """Share of served tokens that are padding, for requests of these lengths."""
        real = sum(lengths)
        served = sum(self.buckets_for(lengths))
        return 0.0 if served == 0 else 1.0 - real / served


@dataclass(frozen=True)
class NoPadding(BucketPolicy):
    def _bucket(self, n: int) -> int:
        return n

    @property
    def name(self) -> str:
        return "none"


@dataclass(frozen=True)
class MultipleOf(BucketPolicy):
    multiple: int = 128

    def __post_init__(self) -> None:
        if self.multiple < 1:
            raise ValueError(f"multiple-of-N padding needs N >= 1 (got {self.multiple})")

    def _bucket(self, n: int) -> int:
        return max(self.multiple, -(-n // self.multiple) * self.multiple)

    @property
    def name(self) -> str:
        return f"multiple:{self.multiple}"


@dataclass(frozen=True)
class PowerOfTwo(BucketPolicy):
    minimum: int = 1

    def __post_init__(self) -> None:
        if self.minimum < 1:
            raise ValueError(f"power-of-two padding needs a minimum >= 1 (got {self.minimum})")

    def _bucket(self, n: int) -> int:
        return max(self.minimum, 1 << (n - 1).bit_length() if n > 1 else 1)

    @property
    def name(self) -> str:
        return "pow2" if self.minimum == 1 else f"pow2:{self.minimum}"


@dataclass(frozen=True)
class BucketList(BucketPolicy):
    buckets: tuple[int, ...] = (128, 256, 512, 1024, 2048)

    def __post_init__(self) -> None:
        if not self.buckets or any(b < 1 for b in self.buckets):
            raise ValueError(f"a bucket list needs positive lengths (got {list(self.buckets)})")
        object.__setattr__(self, "buckets", tuple(sorted(set(self.buckets))))

    def _bucket(self, n: int) -> int:
        for b in self.buckets:
            if n <= b:
                return b
        raise BucketOverflowError(
            f"length {n} exceeds the largest bucket {self.buckets[-1]} of {self.name}; add a larger bucket, "
            f"truncate the input, or use a policy without an upper bound (multiple:N, pow2)")

    @property
    def name(self) -> str:
        return "buckets:" + ",".join(str(b) for b in self.buckets)


@dataclass(frozen=True)
class MaxLength(BucketPolicy):
    length: int = 2048

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError(f"max-length padding needs a length >= 1 (got {self.length})")

    def _bucket(self, n: int) -> int:
        if n > self.length:
            raise BucketOverflowError(
                f"length {n} exceeds max:{self.length}; raise the maximum or truncate the input")
        return self.length

    @property
    def name(self) -> str:
        return f"max:{self.length}"


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.replace(" ", "").split(",") if t]


# policy spelling -> constructor from the text after the colon ("" when absent)
_PARSERS = {
    "none": lambda arg: NoPadding(),
    "multiple": lambda arg: MultipleOf(int(arg) if arg else 128),
    "pow2": lambda arg: PowerOfTwo(int(arg) if arg else 1),
    "buckets": lambda arg: BucketList(tuple(_ints(arg))),
    "max": lambda arg: MaxLength(int(arg) if arg else 2048),
}


def parse(spec: str | BucketPolicy) -> BucketPolicy:
    """``"none"``, ``"multiple:128"``, ``"pow2"``, ``"buckets:128,512"``, ``"max:2048"`` -> a policy."""
    if isinstance(spec, BucketPolicy):
        return spec
    kind, _, arg = spec.strip().partition(":")
    parser = _PARSERS.get(kind.strip().lower())
    if parser is None:
        raise ValueError(f"unknown bucketing policy {spec!r}; use one of: none, multiple:N, pow2[:MIN], "
                         f"buckets:a,b,c, max:L")
    try:
        return parser(arg.strip())
    except ValueError as e:
        if isinstance(e, BucketOverflowError):
            raise
        raise ValueError(f"bad bucketing policy {spec!r}: {e}") from None


DEFAULT_POLICIES = ("none", "multiple:128", "pow2", "buckets:128,256,512,1024,2048")


def pad_to(tensor: torch.Tensor, size: int, dim: int = -1, value: float | int | bool = 0,
           side: str = "right") -> tuple[torch.Tensor, torch.Tensor]:
    """Pad ``tensor`` along ``dim`` to ``size`` with ``value``; returns (padded, mask).

    ``mask`` is a bool tensor of shape ``tensor.shape[:dim + 1]`` with ``size`` along
    ``dim``: True on real positions, False on padding (the attention-mask convention).
    """
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left' (got {side!r})")
    dim = dim % tensor.dim() if tensor.dim() else 0
    length = tensor.shape[dim]
    if size < length:
        raise ValueError(f"cannot pad dimension {dim} of length {length} down to {size}; truncate first")
    extra = size - length
    mask_shape = list(tensor.shape[:dim + 1])
    mask = torch.ones(mask_shape, dtype=torch.bool, device=tensor.device)
    if extra == 0:
        return tensor, mask
    pad_shape = list(tensor.shape)
    pad_shape[dim] = extra
    filler = torch.full(pad_shape, value, dtype=tensor.dtype, device=tensor.device)
    mask_shape[dim] = extra
    no = torch.zeros(mask_shape, dtype=torch.bool, device=tensor.device)
    pieces = (tensor, filler) if side == "right" else (filler, tensor)
    masks = (mask, no) if side == "right" else (no, mask)
    return torch.cat(pieces, dim=dim), torch.cat(masks, dim=dim)


def pad_batch(batch: Mapping[str, torch.Tensor], policy: str | BucketPolicy = "multiple:128",
              pad_token_id: int = 0, side: str = "right", label_pad_id: int = -100) -> dict[str, torch.Tensor]:
    """Pad a tokenizer-free Hugging Face batch along the sequence dimension to the policy's bucket.

    ``batch`` holds ``input_ids`` ([batch, seq]) and optionally ``attention_mask``
    (1 on real tokens), ``labels`` (padded with ``label_pad_id``, which HF losses
    ignore), ``token_type_ids`` and ``position_ids``. The returned
    ``attention_mask`` is 0 on the added positions, with the dtype of the given
    mask (int64 when none was given, as tokenizers return).
    """
    if "input_ids" not in batch:
        raise KeyError("pad_batch needs 'input_ids' ([batch, seq])")
    ids = batch["input_ids"]
    if ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq]; got shape {list(ids.shape)}")
    target = parse(policy).bucket(ids.shape[1])
    padded, real = pad_to(ids, target, dim=1, value=pad_token_id, side=side)
    given = batch.get("attention_mask")
    if given is not None:
        mask, _ = pad_to(given, target, dim=1, value=0, side=side)
    else:
        mask = real.to(torch.int64)
    out = {k: v for k, v in batch.items()}
    out["input_ids"] = padded
    out["attention_mask"] = mask
    fills = {"labels": label_pad_id, "token_type_ids": 0}
    for key, fill in fills.items():
        if key in batch:
            out[key], _ = pad_to(batch[key], target, dim=1, value=fill, side=side)
    if "position_ids" in batch:
        positions = batch["position_ids"]
        if side == "right":
            tail = positions[:, -1:] + torch.arange(1, target - positions.shape[1] + 1, device=positions.device)
            out["position_ids"] = torch.cat((positions, tail.to(positions.dtype)), dim=1)
        else:
            out["position_ids"], _ = pad_to(positions, target, dim=1, value=0, side=side)
    return out


def unpad(logits: torch.Tensor, length: int, side: str = "right", dim: int = 1) -> torch.Tensor:
    """The real positions of a padded output (the inverse of ``pad_to`` along ``dim``)."""
    size = logits.shape[dim]
    if not 0 <= length <= size:
        raise ValueError(f"length {length} is outside the padded dimension of size {size}")
    return logits.narrow(dim, 0 if side == "right" else size - length, length)
