"""Decompositions that compute what CPU's ``cpu_kernel_vec`` loops compute, element by element.

CPU runs each inner run of TensorIterator's loop with an op's vector lambda in blocks of ``2 * Vec::size()``
elements and the rest (a run's tail, every element of a run whose operands are not contiguous) with its scalar
lambda (``kernels/elementwise/loop.py``). Where the two lambdas round differently (lerp's zero signs), the
compiled graph computes both and keeps, at each element, the one CPU's loop would have run there. The split is
known when the graph is traced: static shapes and strides (``dynamic=False``), so a graph whose every element
takes one lambda computes that one only. Which element takes which follows the eager kernels' model
(``loop._ti_loop``: TensorIterator's dimension order and coalescing; serial loops only, as there).

Used by ``backend._decomposition_table`` beside ``numerics.DECOMPOSITIONS``."""

from __future__ import annotations

import torch

aten = torch.ops.aten
NARROW = (torch.float16, torch.bfloat16)


class _Layout:
    """Sizes and strides of a tensor that need not exist (the output TensorIterator would allocate)."""

    def __init__(self, shape, stride) -> None:
        self.shape = tuple(shape)
        self._stride = tuple(stride)

    def stride(self, dim: int | None = None):
        return self._stride if dim is None else self._stride[dim]

    def dim(self) -> int:
        return len(self.shape)


def vector_mask(operands: tuple, dtype: torch.dtype, device, block: int | None = None) -> torch.Tensor | bool:
    """Where CPU's loop over ``operands`` (broadcast together) runs its vector lambda: True (every element),
    False (none) or a bool tensor of the broadcast shape. The output's layout is TensorIterator's
    (``compute_elementwise_output_strides``); an element is in the vector part when its index within its
    contiguous inner run is below the last whole vector block of that run. ``block``: the elements one step of the
    kernel's vector loop covers, ``cpu_host.vector_block(dtype)`` unless the kernel's differs."""
    from torch._prims_common import compute_elementwise_output_strides

    from device_impl.kernels import cpu_host
    from device_impl.kernels.elementwise.loop import _ti_loop

    shape = torch.broadcast_shapes(*(t.shape for t in operands))
    expanded = [t.expand(shape) for t in operands]
    out = _Layout(shape, compute_elementwise_output_strides(*expanded) if shape else ())
    shp, sts = _ti_loop(out, operands)
    inner = [st[0] for st in sts]
    contiguous = inner[0] == 1 and (all(s == 1 for s in inner[1:])
                                    or any(inner[k] == 0 and all(s == 1 for j, s in enumerate(inner[1:], 1) if j != k)
                                           for k in range(1, len(inner))))
    n0 = shp[0]
    block = cpu_host.vector_block(dtype) if block is None else block
    split = block * (n0 // block) if contiguous and n0 > 1 else 0
    if split == 0:
        return False
    if split == n0:
        return True
    if n0 == out_numel(shape) and tuple(out.stride()) == _contiguous_strides(shape):
        # one run over the whole row-major output (TensorIterator coalesced every dim): an element's place in
        # it is its flat index, one iota of the output's elements (int32 holds any index of a run below 2^31)
        index = torch.arange(n0, dtype=torch.int32 if n0 < 2 ** 31 else torch.int64, device=device)
        return index.view(shape) < split
    # the output is dense with its inner run at stride 1, and every outer stride a multiple of the run's
    # length: an element's place in its run is its offset in the output modulo the run's length. A dim whose
    # stride is a multiple of the run's length adds nothing to that place: the mask is computed over the other
    # dims only and read broadcast along it (a run that is the last dim: one iota of the run and its compare,
    # where the offsets over the whole output in int64 and their remainder had been ten passes over every
    # element: compiled bfloat16 add with alpha took 3x the eager kernel's device time)
    within = [(d, size, stride) for d, (size, stride) in enumerate(zip(shape, out.stride()))
              if size > 1 and stride % n0]
    reach = sum((size - 1) * stride for _, size, stride in within)
    kind = torch.int32 if reach < 2 ** 31 else torch.int64
    offset = torch.zeros((), dtype=kind, device=device)
    for d, size, stride in within:
        view = [1] * len(shape)
        view[d] = size
        offset = offset + (torch.arange(size, dtype=kind, device=device) * stride).view(view)
    if reach >= n0:
        offset = torch.remainder(offset, n0)
    return (offset < split).expand(shape)


def out_numel(shape) -> int:
    """The number of elements of ``shape``."""
    n = 1
    for size in shape:
        n *= size
    return n


def _contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides of ``shape`` (in elements)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _multiply_add(a, b, c):
    """``a * b + c`` as CPU's loops round it on this host (``common.fma32``): once where its kernels fuse
    (``cpu_host.fused_multiply_add``), else twice. No engine fuses, so the fused form is the unfused one with the
    sign of a zero result corrected: with ``c`` a zero and ``a``, ``b`` nonzero, the exact product is nonzero and
    CPU's result is its sign (``1e-39 * -9e-41 + 0.0`` is -0.0 fused, +0.0 once the product has underflowed to
    -0.0). The magnitude differs from the fused one by the product's rounding (tolerated as any ULP); a
    cancellation ``p + c`` whose exact value is below half the smallest denormal keeps +0.0 (not modelled)."""
    from device_impl.kernels import cpu_host

    product = a * b
    result = product + c
    if not cpu_host.fused_multiply_add():
        return result
    underflowed = (c == 0) & (a != 0) & (b != 0)
    return torch.where(underflowed, product, result)


def _lerp(start: torch.Tensor, end: torch.Tensor, weight) -> torch.Tensor:
    """lerp as CPU's kernel: the vector lambda (``lerp_vec``) ``fma(|w| < 0.5 ? w : w - 1, end - start,
    |w| < 0.5 ? start : end)``, PyTorch's decomposition's formula; the scalar lambda (ATen's ``Lerp.h``)
    ``|w| < 0.5 ? start + w * (end - start) : end - (end - start) * (1 - w)``. They differ in zero signs (end
    -0.0, w 1, end - start +0.0: the vector lambda gives +0.0, the scalar one -0.0): CPU's scalar lambda runs
    on every element of a strided (sliced, transposed) operand and on the tail of a contiguous run, where the
    decomposition gave the vector lambda's sign. The multiply-adds fuse where the host's do (``_multiply_add``,
    as the eager kernel's ``_fma``). Both in float32 for float16/bfloat16 (opmath), rounded once.

    The two lambdas are one multiply-add whose coefficient differs: ``(end - start) * (1 - w)`` negated is
    ``(w - 1) * (end - start)`` bit for bit (a float subtraction and a product are sign-symmetric), except where
    ``w - 1`` is zero, +0.0 against the scalar lambda's -(1 - w) = -0.0. So the graph computes one multiply-add,
    its coefficient ``w - 1`` or ``-(1 - w)`` chosen per element where CPU's loop splits, and a Python weight
    other than 1 needs no split at all (one pass over the tiles, as the eager kernel: compiled lerp had computed
    both lambdas and an index mask, 1.8x the eager kernel's device time). A Python weight is read as CPU reads
    it, in the opmath dtype (``w - 1`` of float32's w, not of the double)."""
    tensor_weight = isinstance(weight, torch.Tensor)
    dtype = torch.result_type(start, end)
    if not dtype.is_floating_point or start.dtype != end.dtype or (tensor_weight and weight.dtype.is_complex):
        return NotImplemented
    operands = (start, end, weight) if tensor_weight else (start, end)
    if any(size == 0 for size in torch.broadcast_shapes(*(t.shape for t in operands))):
        return NotImplemented
    compute = torch.float32 if dtype in NARROW else dtype
    s, e = start.to(compute), end.to(compute)
    diff = e - s
    if not tensor_weight:
        w = rounded(float(weight), compute) if compute != torch.float64 else float(weight)
        if abs(w) < 0.5:
            return _multiply_add(w, diff, s).to(dtype)
        vector = True if w != 1 else vector_mask(operands, dtype, start.device)
        if vector is True:  # w - 1 of float32 values in double, rounded to float32 once: CPU's float32 subtraction
            return _multiply_add(w - 1, diff, e).to(dtype)
        if vector is False:
            return _multiply_add(-diff, 1 - w, e).to(dtype)
        return _multiply_add(torch.where(vector, 0.0, -0.0).to(compute), diff, e).to(dtype)  # w = 1, split
    w = weight.to(compute)
    small = w.abs() < 0.5
    vector = vector_mask(operands, dtype, start.device)
    if vector is True:
        far = w - 1
    elif vector is False:
        far = -(1 - w)
    else:
        far = torch.where(vector, w - 1, -(1 - w))
    return _multiply_add(torch.where(small, w, far), diff, torch.where(small, s, e)).to(dtype)


def _add_alpha_of(negate: bool):
    """add/sub with alpha != 1 in a float dtype as ATen's add kernel (sub passes -alpha): the vector lambda is
    ``vec::fmadd(other, alpha, self)``, the scalar one ``self + alpha * other`` with alpha in the dtype.
    float32 keeps PyTorch's form (``self + other * alpha``, the product rounded: CPU fuses both lambdas where the
    host's kernels fuse; they differ in a last bit, and in a zero's sign where the product underflows, which
    three more ops on every optimizer update would be the price of). float16/bfloat16 fuse in float32 on CPU's full vector
    blocks only; the scalar lambda (a run's tail, a strided run, every element under the DEFAULT kernels) rounds
    ``alpha * other`` to the dtype first, so it overflows where the fused form does not (float16 ``x + 2 * 32767``
    is inf unless x brings it back below 65520). The eager kernel's split (``binary._add_alpha_float``)."""
    def decomposition(self: torch.Tensor, other: torch.Tensor, *, alpha=1) -> torch.Tensor:
        from device_impl.kernels import cpu_host

        if alpha == 1 or not isinstance(self, torch.Tensor) or not isinstance(other, torch.Tensor):
            return NotImplemented
        dtype = torch.result_type(self, other)
        if dtype not in NARROW or any(size == 0 for size in torch.broadcast_shapes(self.shape, other.shape)):
            return NotImplemented
        a = _rounded_scalar(-alpha if negate else alpha, dtype)
        # each operand broadcast before its conversion, so the conversion is read in the add's own pass (the
        # fused group drops a widening convert), not a step of its own over a broadcast operand
        shape = torch.broadcast_shapes(self.shape, other.shape)
        x, y = (t.expand(shape).to(dtype).to(torch.float32) for t in (self, other))
        vector = vector_mask((self, other), dtype, self.device) if cpu_host.fused_multiply_add() else False
        # the float32 product of two float16/bfloat16 values is exact, so the fused form is x + p rounded once;
        # the scalar lambda adds p rounded to the dtype: one add of the product, rounded where the scalar
        # lambda runs (four passes, where both sums and a select of them were five)
        p = y * a
        if vector is not True:
            rounded_p = p.to(dtype).to(torch.float32)
            p = rounded_p if vector is False else torch.where(vector, p, rounded_p)
        return (x + p).to(dtype)
    return decomposition


def _rounded_scalar(value, dtype: torch.dtype) -> float:
    """A Python scalar as CPU's kernel reads it in ``dtype`` (round to nearest even), computed on the host."""
    return rounded(float(value), dtype)


def rounded(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` (nearest even), computed on the host: a torch.tensor made while
    AOTAutograd traces would be a graph constant. (Here, not in numerics, which imports this module.)"""
    import ml_dtypes
    import numpy as np

    kind = {torch.float16: np.float16, torch.bfloat16: ml_dtypes.bfloat16, torch.float32: np.float32}[dtype]
    return float(kind(value))


def _scatter_add(self: torch.Tensor, dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """scatter_add of float16/bfloat16 as CPU accumulates it: in float32, rounded once at the end (the eager
    kernel's ``_Fp32Stage``). The lowering scattered in the dtype: the engine's scatter adds each block of 128 rows
    into the destination and rounds it to float16 there, so a partial sum overflowed to inf where the whole one
    comes back below 65504 (op suite scatter_add float16/bfloat16 near_overflow, bfloat16 signed_zero)."""
    if self.dtype not in NARROW or src.dtype != self.dtype:
        return NotImplemented
    return aten.scatter_add.default(self.float(), dim, index, src.float()).to(self.dtype)


DECOMPOSITIONS = {aten.scatter_add.default: _scatter_add,
                  aten.lerp.Tensor: _lerp, aten.lerp.Scalar: _lerp,
                  aten.add.Tensor: _add_alpha_of(negate=False), aten.sub.Tensor: _add_alpha_of(negate=True)}
