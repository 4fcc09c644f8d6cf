"""What every kernel family shares: HBM views, scalars, out= handling, tiling, and
the elementwise tile loop.

PyTorch semantics that are not arithmetic (type promotion, broadcasting,
out= resizing and casting rules, memory-overlap errors) are decided here from
tensor metadata, so each kernel only says what it computes.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np
import torch

from device_impl.dispatch.written import resize_output  # noqa: F401  (at::native::resize_output)
from device_impl.engine import Tile, expf, launch
from device_impl.engine.core import _recording  # open record_trace() blocks: no replay while any is
from device_impl.engine.dtypes import COMPUTE_DTYPES, FLOAT_DTYPES, SCALAR_TYPE_NAMES, TORCH_TO_NUMPY, numpy_dtype  # noqa: F401,E501
from device_impl.engine.hbm import view as hbm
from device_impl.kernels import cpu_host, overlap, replay, scalars

__all__ = ["hbm", "COMPUTE_DTYPES", "FLOAT_DTYPES", "numpy_dtype", "launch"]

P = 128  # partitions
FREE_MAX = 2048  # elements per partition per elementwise tile (8 KiB of fp32)


Operand = Any  # a neuron tensor, a host 0-dim tensor, or a Python number


def is_device_tensor(x: Any) -> bool:
    # Kernels only ever see neuron tensors and host (CPU) scalars; is_cpu is a cheap C attribute.
    return isinstance(x, torch.Tensor) and not x.is_cpu


def scalar_of(x: Any):
    """The Python number in a Python scalar or a host 0-dim tensor (read without dispatching).

    A host tensor with dimensions is not a scalar: PyTorch's TensorIterator accepts only 0-dim CPU tensors
    beside device tensors, and raises its RuntimeError for the rest (reached here by out= overloads, whose
    structured meta does not check devices for PrivateUse1)."""
    if isinstance(x, torch.Tensor):
        if x.dim() != 0 and x.is_cpu:
            from device_impl.runtime.devices import current_device
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"neuron:{current_device()} and cpu!")
        return hbm(x)[()].item()
    return x


def _combine(higher: torch.dtype | None, lower: torch.dtype | None) -> torch.dtype | None:
    """c10's combine_categories: a lower-priority operand only matters if it is of a higher category."""
    if higher is None:
        return lower
    if lower is None or higher.is_complex:
        return higher
    if lower.is_complex:
        return higher.to_complex() if higher.is_floating_point else lower
    if higher.is_floating_point:
        return higher
    if higher == torch.bool or lower.is_floating_point:
        return torch.promote_types(higher, lower)
    return higher


def result_type(*operands: Operand) -> torch.dtype:
    """PyTorch's type promotion over tensors, wrapped numbers and Python scalars.

    Two operands go straight to torch.result_type (exact, including wrapped
    numbers). More follow c10's ResultTypeState: dimensioned tensors, then
    zero-dim tensors, then scalars (host 0-dim tensors count as scalars).
    """
    if len(operands) == 2:  # the common call, without building ``present``
        a, b = operands
        if a is not None and b is not None:
            return torch.result_type(a, b)
    present = [o for o in operands if o is not None]
    if len(present) == 2:
        return torch.result_type(*present)
    state: dict[str, torch.dtype | None] = {"dim": None, "zero": None, "wrapped": None}
    for o in present:
        if isinstance(o, torch.Tensor):
            kind = "dim" if o.dim() else ("zero" if o.device.type == "neuron" else "wrapped")
            dtype = o.dtype
        else:
            kind = "wrapped"
            dtype = torch.bool if isinstance(o, bool) else torch.int64 if isinstance(o, int) else \
                torch.complex64 if isinstance(o, complex) else torch.float64
        if kind == "wrapped" and dtype.is_floating_point:
            dtype = torch.get_default_dtype()
        elif kind == "wrapped" and dtype.is_complex:
            dtype = torch.complex64 if torch.get_default_dtype() == torch.float32 else torch.complex128
        state[kind] = dtype if state[kind] is None else torch.promote_types(state[kind], dtype)
    result = _combine(state["dim"], _combine(state["zero"], state["wrapped"]))
    assert result is not None, "result_type needs at least one operand"
    return result


def promote(*operands: Operand, int_to_float: bool = False) -> torch.dtype:
    dtype = result_type(*operands)
    if int_to_float and not dtype.is_floating_point and not dtype.is_complex:
        return torch.get_default_dtype()
    return dtype


def broadcast_shape(*operands: Operand) -> tuple[int, ...]:
    """Broadcast shape of the tensor operands (scalars do not take part); errors as PyTorch's."""
    if len(operands) == 2:  # the common call: two tensors of one shape
        a, b = operands
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            shape = a.shape
            if b.shape == shape:
                return tuple(shape)
    result: tuple[int, ...] = ()
    first = True
    for o in operands:
        if not isinstance(o, torch.Tensor):
            continue
        shape = tuple(o.shape)
        if first:
            result, first = shape, False
            continue
        if shape == result:
            continue
        ndim = max(len(shape), len(result))
        a = (1,) * (ndim - len(result)) + result
        b = (1,) * (ndim - len(shape)) + shape
        merged = []
        for i, (x, y) in enumerate(zip(a, b)):
            if x == y or y == 1:
                merged.append(x)
            elif x == 1:
                merged.append(y)
            else:
                raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at "
                                   f"non-singleton dimension {i}")
        result = tuple(merged)
    return result


def check_same_dtype(out: torch.Tensor, dtype: torch.dtype) -> None:
    """TensorIterator's check_all_same_dtype for an out= tensor."""
    if out.dtype != dtype:
        raise RuntimeError(f"Found dtype {SCALAR_TYPE_NAMES[out.dtype]} but expected {SCALAR_TYPE_NAMES[dtype]}")


def check_exact_dtype(out: torch.Tensor, dtype: torch.dtype) -> None:
    """An out= tensor that must have the result's dtype exactly (ATen's generated out= wrappers)."""
    if out.dtype != dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {TYPE_META_NAMES.get(dtype, dtype)}, but got "
                           f"{TYPE_META_NAMES.get(out.dtype, out.dtype)} instead")


def cast_error(result: torch.dtype, out: torch.dtype) -> RuntimeError:
    """CPU's error for a result of dtype ``result`` written to an output of dtype ``out`` that ``torch.can_cast`` refuses
    (TensorIterator's check: an out= tensor, an in-place op's self); the caller tests, this says it, so the message
    is CPU's wherever the device or the compiler's metas raise it."""
    return RuntimeError(f"result type {SCALAR_TYPE_NAMES[result]} can't be cast to the desired output type "
                        f"{SCALAR_TYPE_NAMES[out]}")


def check_out(out: torch.Tensor, shape: Sequence[int], dtype: torch.dtype, inputs: Sequence[Operand] = (),
              exact_dtype: bool = False, same_dtype: bool = False, internal_overlap: bool = True) -> torch.Tensor:
    """Apply PyTorch's out= rules (TensorIterator's order): no internal overlap and no partial overlap
    with an input (kernels/overlap.py), castable dtype, then resize (warning if non-empty).

    ``exact_dtype``: out must have the result dtype (ATen's generated out= wrappers and explicit checks:
    "Expected out tensor to have dtype ..."). ``same_dtype``: TensorIterator's check_all_same_dtype
    (ATen's ``build_borrowing_unary_op``: neg, abs, floor, the activations): "Found dtype ... but expected"."""
    # A contiguous out has no stride-0 dimension of size > 1, so it cannot overlap itself. ``internal_overlap``
    # False: the op writes one value everywhere (fill_/zero_: ATen's fill sets check_mem_overlap(false)).
    if internal_overlap and not out.is_contiguous():
        overlap.assert_no_internal_overlap(out)
    out_begin = out.data_ptr()
    out_end = out_begin + out.nbytes  # numel * element_size, one attribute
    for x in inputs:
        if isinstance(x, torch.Tensor):
            # Only a PARTIAL status raises, and that needs both tensors dense, so their data_ptr ranges
            # are their byte extents: disjoint ranges (an empty tensor has an empty one) cannot raise.
            begin = x.data_ptr()
            if begin < out_end and out_begin < begin + x.nbytes:
                overlap.assert_no_partial_overlap(out, x)
    if same_dtype:
        check_same_dtype(out, dtype)
    if exact_dtype:
        check_exact_dtype(out, dtype)
    out_dtype = out.dtype
    if dtype != out_dtype and not torch.can_cast(dtype, out_dtype):
        raise cast_error(dtype, out_dtype)
    if out.shape != tuple(shape):
        if any(x is out for x in inputs):
            # TensorIterator's read-write operand (``logical_and_`` runs ``logical_and_out(self, self, o)``):
            # an out that is also an input is never resized; in-place broadcasting of self is refused.
            raise RuntimeError(f"output with shape {list(out.shape)} doesn't match the broadcast shape "
                               f"{list(shape)}")
        resize_output(out, shape)
    return out


def reshaped_view(v: np.ndarray, shape) -> np.ndarray | None:
    """``v`` with ``shape`` as a view (no copy), or None when the strides do not allow it."""
    try:
        return np.reshape(v, shape, copy=False)
    except ValueError:
        return None


def new_output(shape: Sequence[int], dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=dtype, device=like.device)


def device_of(*operands: Operand) -> int:
    for o in operands:
        if is_device_tensor(o):
            return o.device.index
    raise RuntimeError("no neuron tensor among the operands")


def flat_tiles(numel: int, free_max: int = FREE_MAX):
    """Cover [0, numel) with [p <= 128, f] tiles of consecutive elements: (start, stop, p, f)."""
    if numel == 0:
        return
    f = min(free_max, math.ceil(numel / P))
    chunk = P * f
    for start in range(0, numel, chunk):
        n = min(chunk, numel - start)
        rows, rest = divmod(n, f)
        if rows:
            yield start, start + rows * f, rows, f
        if rest:
            yield start + rows * f, start + n, 1, rest


def row_tiles(rows: int):
    """Cover [0, rows) in blocks of at most 128 partitions: (start, stop)."""
    for start in range(0, rows, P):
        yield start, min(rows, start + P)


def memory_order(t: torch.Tensor) -> list[int]:
    """Dimensions from outermost to innermost in memory, so permuting by it makes ``t`` C-ordered."""
    strides = t.stride()
    return sorted(range(t.dim()), key=lambda d: (-strides[d], -d if t.shape[d] != 1 else 0))


def check_scalar_fits(value, dtype: torch.dtype) -> None:
    """c10's overflow check for Scalar -> dtype (``kernels.scalars.check_fits``, where the rules live)."""
    scalars.check_fits(value, dtype)


def cast_scalar(value, dtype: torch.dtype):
    """A host scalar as PyTorch's TensorIterator sees it: converted to the op's common dtype
    (bf16(0.1) is 0.10009765625; int8(300) wraps to 44) before the opmath computation."""
    if dtype not in TORCH_TO_NUMPY_COMPUTE:
        return value
    converted = np.asarray(value).astype(numpy_dtype(dtype))
    return converted.item() if dtype not in (torch.bfloat16, torch.float16) else float(converted.astype(np.float32))


class Pointwise(NamedTuple):
    """An elementwise launch resolved against memory: what ``elementwise`` and the adaptive-eager
    fuser (device_impl.eager) both run, so a fused chain computes exactly what each op would."""

    out_view: np.ndarray  # out's HBM view, permuted to its memory order
    views: list  # per operand: its HBM view broadcast to out and permuted alike, or None for a scalar
    scalars: list  # per operand: the (promoted) Python number, or None for a tensor
    convert: list  # per operand: convert its tile to ``target`` before emit
    target: np.dtype | None


def prepare_elementwise(out: torch.Tensor, operands: Sequence[Operand], common_dtype: torch.dtype | None = None,
                        promoted: Sequence[int] | None = None, round_scalars: bool = True) -> Pointwise:
    """Resolve out and operands of a non-empty elementwise launch into HBM views (see ``elementwise``)."""
    return Pointwise(*_prepare(out, operands, common_dtype, promoted, round_scalars))


def _prepare(out: torch.Tensor, operands: Sequence[Operand], common_dtype: torch.dtype | None,
             promoted: Sequence[int] | None, round_scalars: bool) -> tuple:
    """``prepare_elementwise``'s fields as a plain tuple (``elementwise`` unpacks it at once: no NamedTuple)."""
    shape = out.shape
    out_view = hbm(out)
    views: list[Any] = []
    scalars: list[Any] = []
    for o in operands:  # one pass: is_device_tensor inlined (a neuron tensor is a tensor not on the host)
        if isinstance(o, torch.Tensor) and not o.is_cpu:
            v = hbm(o)
            views.append(v if o.shape == shape else np.broadcast_to(v, shape))
            scalars.append(None)
        else:
            views.append(None)
            scalars.append(scalar_of(o))
    convert = [False] * len(operands)
    target = None
    if common_dtype is not None and common_dtype in COMPUTE_DTYPES:
        target = TORCH_TO_NUMPY[common_dtype]
        for i in (range(len(operands)) if promoted is None else promoted):
            if not round_scalars and i == 1 and (scalars[i] is not None or operands[i].dim() == 0):
                continue  # ATen checks only the second operand
            if scalars[i] is not None:
                scalars[i] = cast_scalar(scalars[i], common_dtype)
            elif views[i].dtype != target:
                convert[i] = True
    if out.dim() > 1:
        order = memory_order(out)
        if order != list(range(out.dim())):
            out_view = out_view.transpose(order)
            views = [v.transpose(order) if v is not None else None for v in views]
    return out_view, views, scalars, convert, target


_NARROW_FLOATS = (torch.bfloat16, torch.float16)


def _rounded_through(emit: Callable[..., None], dtype: np.dtype) -> Callable[..., None]:
    """``emit`` whose result is rounded to ``dtype`` before it is converted to the out tile's dtype.

    TensorIterator computes an op in its common dtype and casts the result to out's dtype, so
    bf16 + bf16 into a float32 out is bf16-rounded; an engine writing its fp32 intermediate
    straight to the float32 tile would skip that rounding."""

    def rounded(nc, out: Tile, *operands: Any) -> None:
        staged = nc.sbuf_tile(out.shape, dtype)
        emit(nc, staged, *operands)
        nc.vector.tensor_copy(out, staged)

    return rounded


# Adaptive eager (device_impl.eager) sets this while it captures a kernel's elementwise launches
# to queue them instead of running them; it receives elementwise's arguments and returns out.
CAPTURE: list[Callable[..., torch.Tensor] | None] = [None]


def copy_emit(nc, out, tile) -> None:
    """A same-dtype (or converting) copy's emit: one VectorE copy. Adaptive eager's chains know it by
    identity (``eager.chain.is_identity``): a same-dtype copy inside a fused chain needs no instruction."""
    nc.vector.tensor_copy(out, tile)


def elementwise(name: str, out: torch.Tensor, operands: Sequence[Operand],
                emit: Callable[..., None], free_max: int = FREE_MAX,
                common_dtype: torch.dtype | None = None, promoted: Sequence[int] | None = None,
                round_scalars: bool = True) -> torch.Tensor:
    """Run ``emit(nc, out_tile, *operand_tiles_or_scalars)`` over flat tiles of ``out``.

    Tensor operands are broadcast to out's shape and DMA'd tile by tile (in
    out's memory order, so transposed or channels_last outputs stay
    contiguous runs); host scalars are passed to ``emit`` as Python numbers.

    ``common_dtype``: the op's promoted dtype. The operands taking part in
    promotion (``promoted`` indices, default all) are converted to it before
    ``emit`` sees them, as TensorIterator does: a float32 0-d tensor added to
    a bfloat16 tensor is first rounded to bfloat16, a scalar 0.1 becomes
    bf16(0.1). (The engines then compute in fp32.) Some CPU kernels (mul, div,
    floor division, leaky_relu) read a scalar or 0-d *second* operand at full
    precision instead (``original_scalar_value`` in ATen): ``round_scalars=False``.

    A launch whose signature ran before is replayed (``kernels/replay.py``): the same tile loop and
    instructions, their recorded figures reported instead of scheduling them again.
    """
    if common_dtype in _NARROW_FLOATS and out.dtype.is_floating_point and out.dtype != common_dtype:
        emit = _rounded_through(emit, numpy_dtype(common_dtype))
    capture = CAPTURE[0]
    if capture is not None:
        return capture(name, out, operands, emit, free_max, common_dtype, promoted, round_scalars)
    numel = out.numel()
    if numel == 0:
        return out
    out_view, views, scalars, convert, target = _prepare(out, operands, common_dtype, promoted, round_scalars)
    # Per operand, once per launch: (view, scalar, convert); the tile loop below is the launch's hot path.
    plan = tuple(zip(views, scalars, convert))
    device = out.get_device()
    # A signature seen before runs from its recording (kernels/replay.py): the same tile loop, unscheduled.
    key = replay.signature(name, emit, numel, free_max, out_view, views, scalars, convert, target) \
        if replay._enabled[0] and not _recording else None
    if key is not None:
        recorded = replay._figures.get(key)
        if recorded is not None and replay.run(key, recorded[0], name, device, plan, out_view, emit, recorded[1],
                                               target):
            return out
    else:
        replay.count_instruction_level()
    out_dtype = out_view.dtype
    transfers = 0
    with launch(name, device) as nc:
        sbuf_tile, load_flat, store_flat, tensor_copy = nc.sbuf_tile, nc.dma.load_flat, nc.dma.store_flat, \
            nc.vector.tensor_copy
        for start, stop, p, f in flat_tiles(numel, free_max):
            mark = nc.mark()
            shape = (p, f)
            tiles: list[Any] = []
            for v, s, c in plan:
                if v is None:
                    tiles.append(s)
                else:
                    tile = sbuf_tile(shape, v.dtype)
                    load_flat(tile, v, start, stop)
                    transfers += 1
                    if c:
                        converted = sbuf_tile(shape, target)
                        tensor_copy(converted, tile)
                        tile = converted
                    tiles.append(tile)
            result = sbuf_tile(shape, out_dtype)
            emit(nc, result, *tiles)
            store_flat(out_view, start, stop, result)
            transfers += 1
            nc.release_to(mark)
    if key is not None:
        replay.record(key, nc, transfers, tuple(flat_tiles(numel, free_max)))
    return out


TORCH_TO_NUMPY_COMPUTE = COMPUTE_DTYPES


def numpy_compute(dtype: torch.dtype) -> np.dtype:
    """The numpy dtype an engine computes a torch dtype in (fp32 for every float type)."""
    return _NUMPY_COMPUTE[dtype]


_NUMPY_COMPUTE = {d: np.dtype(np.float32) if d in FLOAT_DTYPES else numpy_dtype(d) for d in TORCH_TO_NUMPY}


def scratch(nc, like: Tile, dtype) -> Tile:
    return nc.sbuf_tile(like.shape, dtype)


# c10 TypeMeta names, as CPU's dtype-mismatch messages print them ("expected dtype float ... got double").
TYPE_META_NAMES = {**scalars.CPP_NAMES, torch.complex64: "c10::complex<float>",
                   torch.complex128: "c10::complex<double>"}


def fma32(a, b, c) -> np.ndarray:
    """a * b + c in fp32 as CPU's multiply-add rounds it on this host: RN32(a * b + c), one rounding, where
    its kernels fuse (vec::fmadd and compiler-contracted scalar loops on AVX2/AVX-512: ``expf.fma32_fused``),
    and RN32(RN32(a * b) + c) under the DEFAULT kernels (cpu_host.fused_multiply_add). No fixed-function
    engine computes a fused multiply-add: for GpSimd programs only."""
    if not cpu_host.fused_multiply_add():
        f32 = np.float32
        with np.errstate(all="ignore"):
            return (np.asarray(a, dtype=f32) * np.asarray(b, dtype=f32)) + np.asarray(c, dtype=f32)
    return expf.fma32_fused(a, b, c)


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _two_prod(a, b):
    p = a * b
    split = 134217729.0  # 2^27 + 1 (Veltkamp)
    t = split * a
    ah = t - (t - a)
    al = a - ah
    t = split * b
    bh = t - (t - b)
    bl = b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def fma64(a, b, c) -> np.ndarray:
    """a * b + c in double as CPU rounds it on this host: once (error-free transforms) where its kernels fuse,
    twice under the DEFAULT kernels (see fma32). For GpSimd programs only."""
    a, b, c = (np.asarray(v, dtype=np.float64) for v in (a, b, c))
    with np.errstate(all="ignore"):
        if not cpu_host.fused_multiply_add():
            return a * b + c
        p, e = _two_prod(a, b)
        s, t = _two_sum(p, c)
        return s + (t + e)
