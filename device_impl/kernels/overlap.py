"""PyTorch's aliasing rules for written-to tensors (ATen's MemoryOverlap), decided from metadata.

A kernel that writes ``out`` while reading inputs must refuse exactly what CPU refuses, no more:
writing into a disjoint slice of an input's storage (``torch.cat(parts, out=buf[4:])``) is legal,
and a check that only compares storages refuses it. ATen's rules, which these mirror:

* internal overlap: ``out`` has a stride-0 dimension of size > 1 (several elements, one address);
  a layout too hard to judge is let through;
* overlap between two tensors: FULL when both cover the same bytes with the same strides (or are
  the same tensor), PARTIAL when their byte ranges intersect otherwise, NO when they are disjoint or
  either is empty, TOO_HARD (let through) when either is not dense;
* ``assert_no_partial_overlap`` (elementwise ops, TensorIterator) allows FULL: an op may write over
  the very input it reads element by element; ``assert_no_overlap`` (gather, cat, index_select,
  masked_select, take, kthvalue) refuses FULL too.
"""

from __future__ import annotations

import enum

import torch

INTERNAL_OVERLAP_MESSAGE = ("unsupported operation: more than one element of the written-to tensor refers to a "
                            "single memory location. Please clone() the tensor before performing the operation.")
OVERLAP_MESSAGE = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
                   "single memory location. Please clone() the tensor before performing the operation.")


class Status(enum.Enum):
    FULL = "full"
    PARTIAL = "partial"
    NO = "no"
    TOO_HARD = "too hard"


def non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """Every element at its own address and no gaps, in some order of the dimensions."""
    dims = sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def has_internal_overlap(t: torch.Tensor) -> bool:
    """ATen's ``has_internal_overlap(t) == YES``: a stride-0 dimension of size > 1 (an empty tensor is
    dense, so never)."""
    return t.numel() > 0 and any(stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride()))


def status(a: torch.Tensor, b: torch.Tensor) -> Status:
    """ATen's ``get_overlap_status(a, b)``."""
    if a is b:
        return Status.FULL
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return Status.NO
    if not non_overlapping_and_dense(a) or not non_overlapping_and_dense(b):
        return Status.TOO_HARD
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return Status.NO
    a_begin, b_begin = a.data_ptr(), b.data_ptr()
    a_end = a_begin + a.numel() * a.element_size()
    b_end = b_begin + b.numel() * b.element_size()
    if a_begin == b_begin and a_end == b_end:
        return Status.FULL if a.stride() == b.stride() else Status.PARTIAL
    if a_begin < b_end and b_begin < a_end:
        return Status.PARTIAL
    return Status.NO


def assert_no_internal_overlap(t: torch.Tensor) -> None:
    if has_internal_overlap(t):
        raise RuntimeError(INTERNAL_OVERLAP_MESSAGE)


def assert_no_partial_overlap(a: torch.Tensor, b: torch.Tensor) -> None:
    if status(a, b) is Status.PARTIAL:
        raise RuntimeError(OVERLAP_MESSAGE)


def assert_no_overlap(a: torch.Tensor, b: torch.Tensor) -> None:
    if status(a, b) in (Status.FULL, Status.PARTIAL):
        raise RuntimeError(OVERLAP_MESSAGE)


def assert_out_apart(out: torch.Tensor, *inputs: torch.Tensor) -> None:
    """The checks of ops whose out= may share no memory with an input (cat, index_select,
    masked_select, take): no internal overlap, then no overlap with each input, in CPU's order."""
    assert_no_internal_overlap(out)
    for t in inputs:
        assert_no_overlap(out, t)


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """``a`` and ``b`` read the same elements the same way (an out= that is its input: compute in place)."""
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype)
