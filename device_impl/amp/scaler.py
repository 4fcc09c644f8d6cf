"""Native kernels of GradScaler's two device ops, so mixed-precision training never leaves the device.

``torch.amp.GradScaler("neuron")`` calls
``_amp_foreach_non_finite_check_and_unscale_`` (multiply every gradient by
1/scale, raise a flag if any is inf or NaN) and ``_amp_update_scale_`` (grow
or back off the scale). Without these kernels both would take the counted
CPU fallback on every optimizer step. Semantics and error messages follow
ATen's CPU kernels (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp), with
one documented difference: the scale is multiplied by the growth/backoff
factor in fp32 (the engines have no fp64), where CPU multiplies in double and
rounds once; for the default factors (2.0, 0.5) the results are identical.
"""

from __future__ import annotations

import numpy as np
import torch

from device_impl.dispatch.table import TABLE
from device_impl.engine.dtypes import FP32, FLOAT_DTYPES
from device_impl.kernels.common import P, flat_tiles, hbm, is_device_tensor, launch
from device_impl.kernels.overlap import INTERNAL_OVERLAP_MESSAGE, has_internal_overlap

_INT32 = np.dtype(np.int32)
_BOOL = np.dtype(np.bool_)


def _check_state(tensor: torch.Tensor, name: str, dtype: torch.dtype, type_name: str) -> None:
    if not is_device_tensor(tensor):
        raise RuntimeError(f"{name} must be a neuron tensor.")
    if tensor.numel() != 1:
        raise RuntimeError(f"{name} must be a 1-element tensor.")
    if tensor.dtype != dtype:
        raise RuntimeError(f"{name} must be {type_name} tensor.")


def _one(tensor: torch.Tensor) -> np.ndarray:
    """The HBM view of a 1-element tensor as [1, 1]."""
    return hbm(tensor).reshape(1, 1)


@TABLE.native("aten::_amp_foreach_non_finite_check_and_unscale_")
def non_finite_check_and_unscale_(scaled_grads: list[torch.Tensor], found_inf: torch.Tensor,
                                  inv_scale: torch.Tensor) -> None:
    """grads *= inv_scale in place (in fp32, rounded once); found_inf = 1.0 if any grad held inf or NaN."""
    if not scaled_grads:
        return
    _check_state(inv_scale, "inv_scale", torch.float32, "a float")
    _check_state(found_inf, "found_inf", torch.float32, "a float")
    for grad in scaled_grads:
        if not is_device_tensor(grad):
            raise RuntimeError("one of scaled_grads was not a neuron tensor.")
        if grad.layout != torch.strided:
            raise RuntimeError("one of scaled_grads was not a strided tensor.")
        if grad.dtype not in FLOAT_DTYPES:
            raise NotImplementedError(f"\"_amp_foreach_non_finite_check_and_unscale_neuron\" not implemented for "
                                      f"'{str(grad.dtype).removeprefix('torch.')}'")
    # Each gradient is written in place: CPU's TensorIterator rejects one whose elements share memory (an expanded,
    # stride-0 gradient) when its turn comes, the gradients before it already unscaled and checked.
    rejected = next((i for i, grad in enumerate(scaled_grads) if has_internal_overlap(grad)), None)
    if rejected is not None:
        if rejected:
            non_finite_check_and_unscale_(scaled_grads[:rejected], found_inf, inv_scale)
        raise RuntimeError(INTERNAL_OVERLAP_MESSAGE)
    with launch("amp_non_finite_check_and_unscale", found_inf.device.index) as nc:
        views = [hbm(grad) for grad in scaled_grads]
        unscale_program(nc, views, views, _one(found_inf), _one(found_inf), _one(inv_scale))


def unscale_program(nc, grads: list[np.ndarray], outs: list[np.ndarray], found_inf: np.ndarray,
                    found_out: np.ndarray, inv_scale: np.ndarray) -> None:
    """The unscale kernel's tile program on HBM arrays: ``outs[i] = grads[i] * inv_scale``, ``found_out`` =
    max(``found_inf``, 1.0 if a gradient held inf or NaN) ([1, 1] arrays). The eager kernel passes each tensor as
    its own result (in place); the compiler's ``amp_unscale`` step (compiler/opaque.py) the functional op's."""
    inv = nc.sbuf_tile((1, 1), FP32, "inv_scale")
    nc.dma.load(inv, inv_scale)
    inv_all = nc.sbuf_tile((P, 1), FP32, "inv_scale_bcast")
    nc.gpsimd.partition_broadcast(inv_all, inv)
    all_finite = nc.sbuf_tile((P, 1), _BOOL, "all_finite")
    nc.vector.memset(all_finite, True)
    for view, out in zip(grads, outs, strict=True):
        for start, stop, p, f in flat_tiles(view.size):
            mark = nc.mark()
            tile = nc.sbuf_tile((p, f), view.dtype)
            nc.dma.load_flat(tile, view, start, stop)
            finite = nc.sbuf_tile((p, f), _BOOL)
            nc.vector.tensor_unary(finite, tile, "isfinite", dtype=FP32)
            row_finite = nc.sbuf_tile((p, 1), _BOOL)
            nc.vector.tensor_reduce(row_finite, finite, "logical_and")
            nc.vector.tensor_tensor(all_finite[:p], all_finite[:p], row_finite, "logical_and")
            scaled = nc.sbuf_tile((p, f), view.dtype)
            nc.vector.tensor_tensor(scaled, tile, inv_all[:p], "multiply", dtype=FP32)
            nc.dma.store_flat(out, start, stop, scaled)
            nc.release_to(mark)
    finite_flag = nc.sbuf_tile((1, 1), _BOOL)
    nc.gpsimd.partition_reduce(finite_flag, all_finite, "logical_and")
    # found_inf keeps a 1.0 an earlier call wrote (the caller zeroes it before the first call).
    found = nc.sbuf_tile((1, 1), FP32, "found_inf")
    nc.dma.load(found, found_inf)
    flag = nc.sbuf_tile((1, 1), FP32)
    nc.vector.tensor_scalar(flag, finite_flag, "equal", False, dtype=FP32)
    nc.vector.tensor_tensor(found, found, flag, "maximum")
    nc.dma.store(found_out, found)


@TABLE.native("aten::_amp_update_scale_")
def update_scale_(current_scale: torch.Tensor, growth_tracker: torch.Tensor, found_inf: torch.Tensor,
                  growth_factor: float, backoff_factor: float, growth_interval: int) -> torch.Tensor:
    """Back off the scale after an overflow; grow it after ``growth_interval`` clean steps in a row."""
    _check_state(growth_tracker, "growth_tracker", torch.int32, "an int")
    _check_state(current_scale, "current_scale", torch.float32, "a float")
    _check_state(found_inf, "found_inf", torch.float32, "a float")
    with launch("amp_update_scale", current_scale.device.index) as nc:
        update_scale_program(nc, _one(current_scale), _one(growth_tracker), _one(found_inf), _one(current_scale),
                             _one(growth_tracker), growth_factor, backoff_factor, growth_interval)
    return current_scale


def update_scale_program(nc, current_scale: np.ndarray, growth_tracker: np.ndarray, found_inf: np.ndarray,
                         scale_out: np.ndarray, tracker_out: np.ndarray, growth_factor: float, backoff_factor: float,
                         growth_interval: int) -> None:
    """The update-scale kernel's tile program on [1, 1] HBM arrays; the eager kernel passes the scale and the
    tracker as their own results (in place), the compiler's ``amp_update_scale`` step the functional op's."""
    scale = nc.sbuf_tile((1, 1), FP32, "scale")
    tracker = nc.sbuf_tile((1, 1), _INT32, "growth_tracker")
    found = nc.sbuf_tile((1, 1), FP32, "found_inf")
    nc.dma.load(scale, current_scale)
    nc.dma.load(tracker, growth_tracker)
    nc.dma.load(found, found_inf)
    overflow = nc.sbuf_tile((1, 1), _BOOL)
    nc.vector.tensor_scalar(overflow, found, "not_equal", 0.0)
    successful = nc.sbuf_tile((1, 1), _INT32)
    nc.vector.tensor_scalar(successful, tracker, "add", 1)
    at_interval = nc.sbuf_tile((1, 1), _BOOL)
    nc.vector.tensor_scalar(at_interval, successful, "equal", growth_interval, dtype=np.dtype(np.int64))
    grown = nc.sbuf_tile((1, 1), FP32)
    nc.vector.tensor_scalar(grown, scale, "multiply", growth_factor)
    grown_finite = nc.sbuf_tile((1, 1), _BOOL)
    nc.vector.tensor_unary(grown_finite, grown, "isfinite")
    grow = nc.sbuf_tile((1, 1), _BOOL)
    nc.vector.tensor_tensor(grow, at_interval, grown_finite, "logical_and")
    backed_off = nc.sbuf_tile((1, 1), FP32)
    nc.vector.tensor_scalar(backed_off, scale, "multiply", backoff_factor)
    kept_or_grown = nc.sbuf_tile((1, 1), FP32)
    nc.vector.select(kept_or_grown, grow, grown, scale)
    new_scale = nc.sbuf_tile((1, 1), FP32)
    nc.vector.select(new_scale, overflow, backed_off, kept_or_grown)
    reset = nc.sbuf_tile((1, 1), _BOOL)
    nc.vector.tensor_tensor(reset, overflow, at_interval, "logical_or")
    zero = nc.sbuf_tile((1, 1), _INT32)
    nc.vector.memset(zero, 0)
    new_tracker = nc.sbuf_tile((1, 1), _INT32)
    nc.vector.select(new_tracker, reset, zero, successful)
    nc.dma.store(scale_out, new_scale)
    nc.dma.store(tracker_out, new_tracker)
