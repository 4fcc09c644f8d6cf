"""FX rewrites that keep PyTorch's numerics where torch-mlir 20261001's StableHLO lowering changes them.

Measured with torch 2.13 (each item was a compiled-vs-CPU mismatch in the op suite):

* ``aten.fmod`` lowers to ``a - sign(a/b) * floor(|a/b|) * b`` in the tensor's dtype, off by up to the
  divisor for large quotients; ``aten.remainder`` lowers to ``stablehlo.remainder``, which *is* C's fmod.
  So fmod becomes ``aten.remainder`` (-> stablehlo.remainder), and Python's remainder becomes that
  plus the divisor where the signs differ (ATen's own formula);
* ``aten.sign`` lowers to ``stablehlo.sign`` (sign of NaN is NaN; PyTorch's is 0): ``(x > 0) - (x < 0)``;
* floor division (``div.Tensor_mode`` ``"floor"``) lowers to divide-then-floor: off by one where the
  rounded quotient lands on an integer, truncating for integers; it becomes ATen's algorithm
  (``c10::div_floor_floating``: fmod, exact quotient, corrections) op by op in the tensor's dtype, or,
  for a float16/bfloat16 tensor by a divisor read at one place (a Python or 0-d scalar), in float32 with the
  divisor's original value, rounded once (ATen's reduced-float ``is_scalar(2)`` branch);
* ``leaky_relu`` lowers to ``max(x, 0) + min(x, 0) * slope`` (the sign of zero differs from ATen's
  ``where(x > 0, x, x * slope)``);
* ``aten.var.correction`` and ``aten.var_mean.correction`` crash torch-mlir on 0-d inputs (a
  segmentation fault, not an error): variance (and the mean beside it) becomes the two-pass formula ``sum((x - mean)^2) / (N - correction)`` in float32;
* ``aten.index.Tensor`` / ``aten.index_put`` / ``aten._index_put_impl`` (``_index_put_impl_``
  functionalised) lower to gather/scatter without wrapping negative indices (StableHLO would clamp
  them): each index tensor becomes ``where(i < 0, i + size, i)``;
* ``aten.index_select`` of a dimension of size 1 is folded by torch-mlir into its input (or a
  broadcast of it), so its indices are never read and an out-of-range one returns a result where CPU
  raises IndexError: it becomes ``aten.index.Tensor`` of that dimension (a gather, whose indices the
  compiled program checks), with the indices not wrapped, since index_select refuses negative ones;
* ``amax``/``amin``/``aminmax`` of uint8 lower to a ``stablehlo.reduce`` whose initial value is int8's
  extremum read as uint8 (``dense<128>`` for max, 127 for min): every slice whose values stay below
  128 (above 127) returned 128 (127). They are computed in int16, which holds every uint8 exactly,
  and converted back;
* ``addmm`` with ``beta=0`` lowered to ``0 * self + a @ b``: CPU's GEMM never reads ``self`` then (a NaN
  there stays out, a -0.0 product stays -0.0): it becomes ``a @ b`` (times ``alpha``);
* ``gelu`` (``approximate="none"``) is formed as CPU forms it on the tensor's path (``cpu_host.onednn_gelu``):
  oneDNN's ``x * (1 + erf(x / sqrt(2)))`` halved, which overflows above FLT_MAX / 2, or ATen's
  ``x * 0.5 * (1 + erf(...))``, in float32 for float16/bfloat16;
* ``asinh`` lowers to a formula that turns -0.0 into +0.0 (``log(x + sqrt(x^2 + 1))``): a zero
  input is its own result, as ATen's ``std::asinh`` gives;
* comparisons with a Python scalar (``eq.Scalar`` ...) convert the scalar to the tensor's dtype
  (``bool_tensor == -2`` became ``== True``), where ATen compares in the promoted dtype: the tensor
  is converted to ``result_type(tensor, scalar)`` first; so are both sides of a comparison of two tensors
  of different dtypes (torch-mlir compared int8 with a 0-d uint8 as unsigned);
* ``elu`` lowers ``expm1`` as ``exp(x) - 1``, which loses tiny negative results (and their sign):
  it becomes ATen's ``where(x > 0, x * scale, alpha * scale * expm1(x * input_scale))``;
* ``native_layer_norm`` lowers with the variance as E[x^2] - E[x]^2 (cancellation: 1e-4 relative
  error for rows with a large mean) and weight folded into the scale (inf - inf with an infinite
  weight): it becomes ATen's two-pass form, ``(x - mean) * rstd * w + b``, in float32 (``_layer_norm_affine``:
  ``+ 0.0`` without gamma and beta, as CPU's loop adds its zero beta), only where ``compiler/opaque.py`` does
  not cut it whole (it cuts every floating layer norm, which then runs the eager kernel as a step);
* ``sinh``/``cosh`` lower to ``exp(x + log(0.5))`` (XLA's expansion): rounding ``x + log(0.5)`` costs
  up to ~20 float32 ULP at |x| ~ 60-90; they become ``h = exp(|x| / 2)`` forms (``_hyperbolic``);
* ``mul``/``div`` of a float16/bfloat16 tensor by a Python float round the scalar to the tensor's dtype;
  ATen uses it at full precision in float32 (``_full_precision_scalar``);
* ``any``/``all`` of a non-bool 0-d tensor lower to the identity (``any(uint8 4)`` returned 4, not 1):
  the input becomes ``x != 0`` and the bool result is converted to the node's dtype (uint8 stays uint8);
* ``trunc`` lowers to ``sign(x) * floor(|x|)``, which turns -0.0 (and -0.5) into +0.0: it becomes
  ``where(x < 0, ceil(x), floor(x))``; float ``div`` with ``rounding_mode="trunc"`` is ``trunc(a / b)``;
* ``index_add`` follows CPU's rounding points (``_index_add``): on its scatter_add path (a >1-D float16/bfloat16
  self, first or last dim, alpha 1, int64 index) it sums in float32 and rounds once; with alpha != 1 on a >1-D
  self where the host's kernels fuse, it is CPU's loop of ``add_(slice, alpha)`` unrolled per index entry
  (up to 64), ``a + alpha * b`` rounded once on vector blocks and the product rounded first on the tail
  (``_index_add_fused``), where PyTorch's decomposition rounded ``alpha * source`` to the dtype first;
* float16/bfloat16 transcendental ops lower to several ops each rounded to the narrow type
  (``log2 = log(x) / log(2)``), while ATen computes them in float32 and rounds once: they are
  computed in float32 and converted back (``opmath``), as ATen's ``opmath_type`` does; so are
  ``mean`` (a float16 sum rounded before the division overflows), ``avg_pool2d``
  (CPU's ``cpu_avg_pool`` sums each window in float32: a float16 window of values near 60000 overflowed)
  and ``native_group_norm`` (several outputs);
* ``_log_softmax`` of float16/bfloat16 lowers op by op in the dtype; CPU computes in float32 and rounds at its
  kernel's points (``_log_softmax``).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import operator
from typing import Iterator

import torch
import torch._decomp
import torch.fx

from device_impl.compiler import activations, moves, opaque, opaque_indexing, opaque_moments, opaque_resample

aten = torch.ops.aten
prims_convert = torch.ops.prims.convert_element_type.default
NARROW = (torch.float16, torch.bfloat16)


def _call(graph: torch.fx.Graph, target, *args, **kwargs) -> torch.fx.Node:
    """A new node whose ``meta['val']`` is ``target`` run on its arguments' fake tensors (torch-mlir
    reads every node's type from it)."""
    node = graph.call_function(target, args, kwargs)

    def fake(a):
        if isinstance(a, (list, tuple)):
            return type(a)(fake(x) for x in a)
        return a.meta["val"] if isinstance(a, torch.fx.Node) else a

    node.meta["val"] = target(*[fake(a) for a in args], **{k: fake(v) for k, v in kwargs.items()})
    return node


def _cast(graph: torch.fx.Graph, value: torch.fx.Node, node_or_dtype) -> torch.fx.Node:
    """``value`` converted to a dtype (or to the dtype ``node`` had), when they differ."""
    dtype = node_or_dtype if isinstance(node_or_dtype, torch.dtype) else node_or_dtype.meta["val"].dtype
    if value.meta["val"].dtype == dtype:
        return value
    return _call(graph, prims_convert, value, dtype)


def _c_fmod(graph: torch.fx.Graph, a, b) -> torch.fx.Node:
    """C's fmod, through the op torch-mlir lowers to stablehlo.remainder (see module docstring)."""
    return _call(graph, aten.remainder.Tensor if isinstance(b, torch.fx.Node) else aten.remainder.Scalar, a, b)


def _fmod(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    return _c_fmod(graph, node.args[0], node.args[1])


def _remainder(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    a, b = node.args[0], node.args[1]
    if not isinstance(a, torch.fx.Node) or node.meta["val"].dtype == torch.bool:
        return None
    dtype = node.meta["val"].dtype
    if not isinstance(b, torch.fx.Node) and not dtype.is_floating_point and isinstance(b, int):
        b = _wrapped(b, dtype)  # CPU converts the scalar to the tensor's integer dtype first (uint8: -4 is 252)
    r = _c_fmod(graph, a, b)
    nonzero = _call(graph, aten.ne.Scalar, r, 0)
    r_negative = _call(graph, aten.lt.Scalar, r, 0)
    if isinstance(b, torch.fx.Node):
        # b's sign read after its conversion to the result's dtype (which holds its sign: the promoted dtype), the
        # value the formula divides by, so an int16 divisor of a float tensor is the one formula expansions folds
        differ = _call(graph, aten.ne.Tensor, r_negative, _call(graph, aten.lt.Scalar, _cast(graph, b, dtype), 0))
    else:
        differ = _call(graph, aten.ne.Scalar, r_negative, bool(b < 0))
    fix = _call(graph, aten.logical_and.default, nonzero, differ)
    shifted = _call(graph, aten.add.Tensor if isinstance(b, torch.fx.Node) else aten.add.Scalar, r, b)
    return _cast(graph, _call(graph, aten.where.self, fix, shifted, r), node)


def _wrapped(value: int, dtype: torch.dtype) -> int:
    """An integer scalar converted to an integer dtype as C converts it (modulo 2^bits)."""
    bits = torch.iinfo(dtype).bits
    value %= 1 << bits
    return value - (1 << bits) if torch.iinfo(dtype).min < 0 and value >= 1 << (bits - 1) else value


def _sign(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x = node.args[0]
    dtype = node.meta["val"].dtype
    if dtype == torch.bool:
        return None
    positive = _call(graph, prims_convert, _call(graph, aten.gt.Scalar, x, 0), dtype)
    negative = _call(graph, prims_convert, _call(graph, aten.lt.Scalar, x, 0), dtype)
    return _call(graph, aten.sub.Tensor, positive, negative)


def _trunc_div(graph: torch.fx.Graph, a: torch.fx.Node, b: torch.fx.Node) -> torch.fx.Node:
    """Integer division rounding toward zero (stablehlo.divide on integers)."""
    return _call(graph, aten.div.Tensor_mode, a, b, rounding_mode="trunc")


def _div_mode(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    a, b = node.args[0], node.args[1]
    mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
    scalar_b = not isinstance(b, torch.fx.Node)
    if mode is None:
        return _call(graph, aten.div.Scalar if scalar_b else aten.div.Tensor, a, b)
    if mode == "trunc" and isinstance(a, torch.fx.Node) and node.meta["val"].dtype.is_floating_point:
        quotient = _call(graph, aten.div.Scalar if scalar_b else aten.div.Tensor, a, b)
        return _cast(graph, _signed_trunc(graph, quotient), node)
    if mode != "floor" or not isinstance(a, torch.fx.Node) or (scalar_b and b == 0):
        return None  # integer trunc lowers exactly; a zero scalar divisor keeps ATen's own path
    dtype = node.meta["val"].dtype
    # ATen's reduced-float branch for a divisor the iterator reads at one place (iter.is_scalar(2): a Python
    # scalar, a wrapped or 0-d one): opmath (float32) with the divisor's original value, one rounding at the end;
    # two float16/bfloat16 tensors go through Vectorized<scalar_t>, every step rounded to the dtype
    compute = torch.float32 if dtype in NARROW and _iterator_scalar(b) else dtype
    a = _cast(graph, a, compute)
    if not scalar_b:
        b = _cast(graph, b, compute)
    mod = _c_fmod(graph, a, b)
    mod_nonzero = _call(graph, aten.ne.Scalar, mod, 0)
    mod_negative = _call(graph, aten.lt.Scalar, mod, 0)
    if scalar_b:
        sign_differs = _call(graph, aten.ne.Scalar, mod_negative, bool(b < 0))
    else:
        sign_differs = _call(graph, aten.ne.Tensor, _call(graph, aten.lt.Scalar, b, 0), mod_negative)
    fix = _call(graph, aten.logical_and.default, mod_nonzero, sign_differs)
    if not dtype.is_floating_point:
        if scalar_b:
            return None
        quotient = _trunc_div(graph, a, b)
        return _call(graph, aten.where.self, fix, _call(graph, aten.sub.Scalar, quotient, 1), quotient)
    divide = aten.div.Scalar if scalar_b else aten.div.Tensor
    div = _call(graph, divide, _call(graph, aten.sub.Tensor, a, mod), b)
    div = _call(graph, aten.where.self, fix, _call(graph, aten.sub.Scalar, div, 1), div)
    floor = _call(graph, aten.floor.default, div)
    up = _call(graph, aten.gt.Scalar, _call(graph, aten.sub.Tensor, div, floor), 0.5)
    floor = _call(graph, aten.where.self, up, _call(graph, aten.add.Scalar, floor, 1), floor)
    quotient = _call(graph, divide, a, b)
    signed_zero = _call(graph, aten.mul.Scalar, quotient, 0)
    result = _call(graph, aten.where.self, _call(graph, aten.ne.Scalar, div, 0), floor, signed_zero)
    if not scalar_b:
        result = _call(graph, aten.where.self, _call(graph, aten.eq.Scalar, b, 0), quotient, result)
    return _cast(graph, result, node)


def _iterator_scalar(b) -> bool:
    """TensorIterator's ``is_scalar`` for a divisor: a Python scalar, or a tensor every output element reads at
    one place (each dimension of size 1 or stride 0), as the eager kernel's ``binary._iterator_scalar``."""
    if not isinstance(b, torch.fx.Node):
        return True
    val = b.meta["val"]
    return all(size == 1 or stride == 0 for size, stride in zip(val.shape, val.stride()))


def _leaky_relu(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x = node.args[0]
    slope = node.args[1] if len(node.args) > 1 else node.kwargs.get("negative_slope", 0.01)
    dtype = node.meta["val"].dtype
    if not dtype.is_floating_point:
        return None
    wide = _cast(graph, x, torch.float32) if dtype in NARROW else x
    scaled = _call(graph, aten.mul.Scalar, wide, slope)
    out = _call(graph, aten.where.self, _call(graph, aten.gt.Scalar, wide, 0), wide, scaled)
    return _cast(graph, out, node)


def _variance(graph: torch.fx.Graph, node: torch.fx.Node) -> tuple[torch.fx.Node, torch.fx.Node] | None:
    """(variance, mean) of a ``var``/``var_mean`` node in its compute dtype (float32 for narrow floats), the
    two-pass formula; None where the node is not a real floating reduction."""
    x = node.args[0]
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    correction = node.kwargs.get("correction", 1)
    keepdim = node.kwargs.get("keepdim", False)
    shape = list(x.meta["val"].shape)
    value = node.meta["val"]
    dtype = (value[0] if isinstance(value, (tuple, list)) else value).dtype
    if not dtype.is_floating_point or x.meta["val"].dtype.is_complex:
        return None
    if correction is None:
        correction = 1
    dims = list(range(len(shape))) if dims is None or (isinstance(dims, (list, tuple)) and not dims) else \
        [d % max(len(shape), 1) for d in ([dims] if isinstance(dims, int) else dims)]
    count = 1
    for d in dims:
        count *= shape[d] if shape else 1
    wide = _cast(graph, x, torch.float32) if dtype in NARROW else x
    if not shape:  # 0-d: the mean is the element, its deviation from it 0
        mean = _call(graph, aten.clone.default, wide)
        deviation = _call(graph, aten.sub.Tensor, wide, wide)
        total = _call(graph, aten.mul.Tensor, deviation, deviation)
    else:
        kept = _call(graph, aten.mean.dim, wide, dims, True)
        mean = kept if keepdim else _call(graph, aten.mean.dim, wide, dims, False)
        deviation = _call(graph, aten.sub.Tensor, wide, kept)
        total = _call(graph, aten.sum.dim_IntList, _call(graph, aten.mul.Tensor, deviation, deviation), dims, keepdim)
    return _call(graph, aten.div.Scalar, total, max(count - correction, 0)), mean


def _var(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    if opaque.cuttable(node):  # carried whole as a step running the eager kernel (compiler/opaque_moments.py)
        return None
    parts = _variance(graph, node)
    return None if parts is None else _cast(graph, parts[0], node)


def _var_mean(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """``var_mean`` as ``_var``'s two passes plus the mean: torch-mlir's own lowering of it crashes the process
    on a 0-d input, as ``var``'s does (``std_mean(x, dim=(0,))`` of a scalar; std_mean decomposes into it).
    Its results are read through getitem nodes: each is replaced by its part, converted to the node's dtype;
    the returned node (the variance) takes the place of the tuple, which has no users left."""
    if any(user.target is not operator.getitem for user in node.users) or opaque.cuttable(node):
        return None  # (a cuttable call is carried whole: compiler/opaque_moments.py)
    parts = _variance(graph, node)
    if parts is None:
        return None
    results = [_cast(graph, part, meta.dtype) for part, meta in zip(parts, node.meta["val"])]
    for user in list(node.users):
        user.replace_all_uses_with(results[user.args[1]])
        graph.erase_node(user)
    return results[0]


def _wrap_indices(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    base = node.args[0]
    indices = node.args[1]
    shape = base.meta["val"].shape
    wrapped, changed = [], False
    for dim, index in enumerate(indices):
        if isinstance(index, torch.fx.Node) and index.meta["val"].dtype not in (torch.bool, torch.uint8):
            negative = _call(graph, aten.lt.Scalar, index, 0)
            index = _call(graph, aten.where.self, negative, _call(graph, aten.add.Scalar, index, int(shape[dim])), index)
            changed = True
        wrapped.append(index)
    if not changed:
        return None
    return _call(graph, node.target, base, wrapped, *node.args[2:], **node.kwargs)


def _index_select(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """index_select of a size-1 dimension as a gather whose indices are checked (see module docstring). A 0-d
    index selects one row and keeps the dimension: it is viewed as one element first."""
    x, dim, index = node.args[0], node.args[1], node.args[2]
    shape = x.meta["val"].shape
    if not shape or shape[dim % len(shape)] != 1:
        return None
    if index.meta["val"].dim() == 0:
        index = _call(graph, aten.view.default, index, [1])
    return _call(graph, aten.index.Tensor, x, [None] * (dim % len(shape)) + [index])


def _asinh(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """asinh keeping the sign of a zero input (see module docstring); float16/bfloat16 in float32 (opmath)."""
    x = node.args[0]
    if not x.meta["val"].dtype.is_floating_point:
        return None
    value = opmath(graph, node) if needs_opmath(node) else _call(graph, node.target, x)
    return _call(graph, aten.where.self, _call(graph, aten.eq.Scalar, x, 0), x, value)


def _uint8_extrema(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """amax/amin/aminmax of uint8 computed in int16 (see module docstring)."""
    if node.args[0].meta["val"].dtype != torch.uint8:
        return None
    wide = _call(graph, node.target, _cast(graph, node.args[0], torch.int16), *node.args[1:], **node.kwargs)
    if not isinstance(node.meta["val"], (tuple, list)):
        return _cast(graph, wide, node)
    for user in list(node.users):  # aminmax: each getitem user reads its int16 output, converted back
        if user.target is not operator.getitem:
            return None
    for user in list(node.users):
        with graph.inserting_before(user):
            replacement = _cast(graph, _call(graph, operator.getitem, wide, user.args[1]), user)
        user.replace_all_uses_with(replacement)
        graph.erase_node(user)
    return wide


def _addmm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """addmm with beta=0 as CPU's GEMM computes it, never reading self (see module docstring)."""
    beta = node.kwargs.get("beta", node.args[3] if len(node.args) > 3 else 1)
    alpha = node.kwargs.get("alpha", node.args[4] if len(node.args) > 4 else 1)
    if beta != 0 or not isinstance(alpha, (int, float)):
        return None
    product = _call(graph, aten.mm.default, node.args[1], node.args[2])
    if alpha != 1:
        product = _call(graph, aten.mul.Scalar, product, alpha)
    return _cast(graph, product, node)


def _gelu(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """gelu (approximate="none") in CPU's form for this tensor (see module docstring)."""
    from device_impl.kernels import cpu_host

    x = node.args[0]
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    value = x.meta["val"]
    if approximate != "none" or not value.dtype.is_floating_point or value.dtype == torch.float64:
        return opmath(graph, node) if needs_opmath(node) else None
    if activations.gelu_whole(value, approximate):  # cut whole: ScalarE's one gelu, as the eager kernel
        if not needs_opmath(node):
            return None
        narrowed = opmath(graph, node)  # a narrow call as the float32 one, converted: cut as that (activations)
        narrowed.args[0].meta[activations.WIDENED] = True
        return narrowed
    wide = _cast(graph, x, torch.float32)
    one_plus_erf = _call(graph, aten.add.Scalar,
                         _call(graph, aten.erf.default, _call(graph, aten.mul.Scalar, wide, 0.7071067811865476)), 1)
    form = cpu_host.onednn_gelu_form(value, approximate)
    if form == "product":
        result = _call(graph, aten.mul.Scalar, _call(graph, aten.mul.Tensor, one_plus_erf, wide), 0.5)
    elif form == "halves":  # h + h * erf: +0.0 where the erf is -1 (the eager kernel's _gelu_onednn_halves)
        half = _call(graph, aten.mul.Scalar, wide, 0.5)
        erf = _call(graph, aten.erf.default, _call(graph, aten.mul.Scalar, wide, 0.7071067811865476))
        result = _call(graph, aten.add.Tensor, half, _call(graph, aten.mul.Tensor, erf, half))
    else:
        result = _call(graph, aten.mul.Tensor, _call(graph, aten.mul.Scalar, wide, 0.5), one_plus_erf)
    return _cast(graph, result, node)


_COMPARE_SCALAR = (aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar, aten.gt.Scalar, aten.ge.Scalar)


def _compare_scalar(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x, other = node.args[0], node.args[1]
    if not isinstance(x, torch.fx.Node) or isinstance(other, torch.fx.Node):
        return None
    promoted = torch.result_type(x.meta["val"], other)
    if promoted == x.meta["val"].dtype:
        return None
    return _call(graph, node.target, _cast(graph, x, promoted), other)


_COMPARE_TENSOR = (aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor, aten.gt.Tensor, aten.ge.Tensor)


def _compare_tensor(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """A comparison of two tensors of different dtypes, in ATen's promoted dtype (``torch.result_type``, where a
    0-d tensor does not widen a dimensioned one of its category): torch-mlir compares mixed signed/unsigned
    integers as unsigned (``int8 <= uint8 0-d`` read -1 as 255), where ATen converts the uint8 scalar to int8."""
    a, b = node.args[0], node.args[1]
    if not isinstance(a, torch.fx.Node) or not isinstance(b, torch.fx.Node):
        return None
    left, right = a.meta["val"], b.meta["val"]
    if left.dtype == right.dtype:
        return None
    promoted = torch.result_type(left, right)
    return _call(graph, node.target, _cast(graph, a, promoted), _cast(graph, b, promoted))


def _elu(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x = node.args[0]
    alpha, scale, input_scale = (list(node.args[1:]) + [1.0, 1.0, 1.0][len(node.args) - 1:])[:3]
    alpha = node.kwargs.get("alpha", alpha)
    scale = node.kwargs.get("scale", scale)
    input_scale = node.kwargs.get("input_scale", input_scale)
    dtype = node.meta["val"].dtype
    if not dtype.is_floating_point:
        return None
    wide = _cast(graph, x, torch.float32) if dtype in NARROW else x
    negative = _call(graph, aten.expm1.default, _call(graph, aten.mul.Scalar, wide, input_scale))
    negative = _call(graph, aten.mul.Scalar, negative, float(alpha) * float(scale))
    positive = _call(graph, aten.mul.Scalar, wide, scale)
    out = _call(graph, aten.where.self, _call(graph, aten.gt.Scalar, wide, 0), positive, negative)
    return _cast(graph, out, node)


def _layer_norm(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    if opaque.cuttable(node):  # carried whole as a step running the eager kernel (compiler/opaque.py)
        return None
    x, normalized, weight, bias, eps = node.args[:5]
    dtype = x.meta["val"].dtype
    if not dtype.is_floating_point:
        return None
    dims = list(range(x.meta["val"].dim() - len(normalized), x.meta["val"].dim()))
    wide = _cast(graph, x, torch.float32)
    first = _call(graph, aten.mean.dim, wide, dims, True)
    residual = _call(graph, aten.mean.dim, _call(graph, aten.sub.Tensor, wide, first), dims, True)
    mean = _call(graph, aten.add.Tensor, first, residual)
    deviation = _call(graph, aten.sub.Tensor, wide, mean)
    var = _call(graph, aten.mean.dim, _call(graph, aten.mul.Tensor, deviation, deviation), dims, True)
    rstd = _call(graph, aten.rsqrt.default, _call(graph, aten.add.Scalar, var, eps))
    out = _layer_norm_affine(graph, deviation, rstd, weight, bias)
    results = {0: out, 1: mean, 2: rstd}
    for user in list(node.users):
        if user.target is not operator.getitem:
            return None
    for user in list(node.users):
        with graph.inserting_before(user):
            replacement = _cast(graph, results[user.args[1]], user)
        user.replace_all_uses_with(replacement)
        graph.erase_node(user)
    return _call(graph, aten.clone.default, out)  # stands for the tuple, which has no users left


def _layer_norm_affine(graph: torch.fx.Graph, deviation: torch.fx.Node, rstd: torch.fx.Node,
                       weight, bias) -> torch.fx.Node:
    """``(x - mean) * rstd * w + b``. Without gamma and beta CPU's kernel still computes ``y * 1 + 0`` (its
    scalar loop with gamma 1 and beta 0), so y = -0.0 (x = -0.0 in a row whose mean is +0.0) is +0.0 there: the
    result gets ``+ 0.0``, one operation per element only where there is no affine step.

    Not modelled: CPU's affine step is one fused multiply-add where the host's kernels fuse, so a product
    ``y * gamma`` that underflows keeps its sign (``-3e-46 + 0.0`` is -0.0 fused, +0.0 rounded twice), and a
    rounded product that cancels beta exactly leaves the sign of the exact residue (``-1.03 * 1.4e-45 +
    1.4e-45`` is -0.0 fused, +0.0 here): zero signs in rows with denormal gammas and betas (op suite
    layer_norm float32 denormal offset). The exact zero sign costs five operations per element (the product
    rescaled by 2^100 and a select), which more than doubled the single-op program's device time (27.2 us
    against 11.9 us; the eager kernel's 12.1 us, tests/compiler/test_compile_fusion.py); even the per-column
    part of it (a zero beta added as -0.0 in the columns of a tiny gamma) cost 0.65 us, past the eager
    kernel's time. The engines have no fused multiply-add outside a GpSimd program. So every layer norm this
    would take is cut whole instead (compiler/opaque.py ``_layer_norm``) and runs the eager kernel's tile
    program, whose affine step is that GpSimd program: this form is left for what the cut refuses."""
    y = _call(graph, aten.mul.Tensor, deviation, rstd)
    if weight is None and bias is None:
        return _call(graph, aten.add.Scalar, y, 0.0)
    out = y
    if weight is not None:
        out = _call(graph, aten.mul.Tensor, out, _cast(graph, weight, torch.float32))
    if bias is not None:
        out = _call(graph, aten.add.Tensor, out, _cast(graph, bias, torch.float32))
    return out


def _signed_trunc(graph: torch.fx.Graph, x: torch.fx.Node) -> torch.fx.Node:
    negative = _call(graph, aten.lt.Scalar, x, 0)
    return _call(graph, aten.where.self, negative, _call(graph, aten.ceil.default, x), _call(graph, aten.floor.default, x))


def _trunc(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    if not node.meta["val"].dtype.is_floating_point:
        return None
    return _signed_trunc(graph, node.args[0])


def _hyperbolic(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """sinh/cosh from h = exp(|x| / 2): halving is exact, so e^|x| = h * h carries two roundings (CPU's
    float32 kernels overflow where exp(|x|) does, and so does h * h). sinh of |x| < 1 keeps torch-mlir's
    expm1 form (no cancellation there)."""
    dtype = node.meta["val"].dtype
    if dtype not in (torch.float32, *NARROW):
        return None
    x = node.args[0]
    wide = _cast(graph, x, torch.float32)
    if node.target in (aten.sinh.default, aten.cosh.default):
        # float32 sinh/cosh are cut whole (compiler/opaque.py _activation): ScalarE's sinh/cosh, the eager
        # kernel's (the op suite's overflow_equal: correctly rounded where CPU's vector loop overflows early; the
        # h form below cost cosh 2.22 us against the eager kernel's 1.48); other inputs (float16/bfloat16: CPU's
        # opmath; integers) reach it as float32
        if x.meta["val"].dtype == torch.float32:
            return None
        return _cast(graph, _call(graph, node.target, wide), node)
    size = _call(graph, aten.abs.default, wide)
    h = _call(graph, aten.exp.default, _call(graph, aten.mul.Scalar, size, 0.5))
    square = _call(graph, aten.mul.Tensor, h, h)  # inf where CPU's float32 exp(|x|) overflows (|x| > 88.7)
    grown = _call(graph, aten.mul.Scalar, square, 0.5)
    shrunk = _call(graph, aten.reciprocal.default, _call(graph, aten.mul.Scalar, square, 2.0))
    if node.target == aten.cosh.default:
        out = _call(graph, aten.add.Tensor, grown, shrunk)
    else:
        magnitude = _call(graph, aten.sub.Tensor, grown, shrunk)
        large = _call(graph, aten.copysign.Tensor, magnitude, wide)
        small = _call(graph, aten.sinh.default, wide)
        out = _call(graph, aten.where.self, _call(graph, aten.lt.Scalar, size, 1.0), small, large)
    return _cast(graph, out, node)


def _full_precision_scalar(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """mul/div of a float16/bfloat16 tensor by a Python float: CPU multiplies by the scalar at full precision
    (ATen's original_scalar_value) in float32 and rounds once; torch-mlir rounds the scalar to the tensor's
    dtype first (x * 2.302585 became x * 2.3027, 1 ULP apart in 8% of a log10 gradient)."""
    if node.meta["val"].dtype not in NARROW or len(node.args) != 2:
        return None
    a, b = node.args
    tensor_first = isinstance(a, torch.fx.Node) and isinstance(b, float)
    if not (tensor_first or (isinstance(b, torch.fx.Node) and isinstance(a, float))):
        return None
    if (a if tensor_first else b).meta["val"].dtype not in NARROW:
        return None
    return opmath(graph, node)


def _pow_scalar(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """pow(tensor, scalar) as CPU's kernel: a bool base with a bool exponent stays bool (``x ** True`` is x,
    ``x ** False`` is all True; torch-mlir imported the exponent as an integer and returned int64); a
    float16/bfloat16 base takes the exponent rounded to its dtype (the kernel's ``exp_scalar.to<scalar_t>()``:
    ``x ** 1.4e-45`` is ``x ** 0`` = 1 in float16, not NaN for a negative x), then computes in float32 (opmath)."""
    x, exponent = node.args[0], node.args[1]
    dtype = node.meta["val"].dtype
    if dtype == torch.bool and isinstance(exponent, bool):
        if exponent:
            return _call(graph, aten.clone.default, x)
        return _call(graph, aten.ne.Tensor, x, _call(graph, aten.logical_not.default, x))  # x != !x: True
    if dtype in NARROW and isinstance(exponent, float):
        node.args = (x, _rounded(exponent, dtype))
        return opmath(graph, node)
    return None


# Unsigned integer max/min reductions: torch-mlir 20261001 gives them the signed type's identity as their initial
# value (uint8 max starts at 128, min at 127), so a uint8 max of values below 128 returned 128. They reduce in
# int16 (int64 for wider unsigned types), where that start is right, and convert back (exact).
_UNSIGNED_EXTREMA = (aten.max.default, aten.min.default, aten.amax.default, aten.amin.default)


def _unsigned_extremum(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x = node.args[0]
    dtype = x.meta["val"].dtype
    if dtype not in (torch.uint8, torch.uint16, torch.uint32):
        return None
    wide = _cast(graph, x, torch.int16 if dtype == torch.uint8 else torch.int64)
    return _cast(graph, _call(graph, node.target, wide, *node.args[1:], **node.kwargs), node)


_ANY_ALL = tuple(getattr(getattr(aten, name), overload) for name in ("any", "all")
                 for overload in ("default", "dim", "dims") if hasattr(getattr(aten, name), overload))


def _any_all(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    x = node.args[0]
    if x.meta["val"].dtype == torch.bool:
        return None
    truth = _call(graph, aten.ne.Scalar, x, 0)
    return _cast(graph, _call(graph, node.target, truth, *node.args[1:], **node.kwargs), node)


REWRITES = {
    **{op: _any_all for op in _ANY_ALL},
    **{op: _full_precision_scalar for op in (aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar)},
    aten.sinh.default: _hyperbolic,
    aten.cosh.default: _hyperbolic,
    aten.trunc.default: _trunc,
    aten.native_layer_norm.default: _layer_norm,
    **{op: _compare_scalar for op in _COMPARE_SCALAR},
    **{op: _compare_tensor for op in _COMPARE_TENSOR},
    aten.elu.default: _elu,
    aten.index.Tensor: _wrap_indices,
    aten.index_put.default: _wrap_indices,
    aten._index_put_impl.default: _wrap_indices,
    aten.index_select.default: _index_select,
    aten.asinh.default: _asinh,
    aten.addmm.default: _addmm,
    aten.gelu.default: _gelu,
    aten.amax.default: _uint8_extrema,
    aten.amin.default: _uint8_extrema,
    aten.aminmax.default: _uint8_extrema,
    aten.var.correction: _var,
    aten.var_mean.correction: _var_mean,
    aten.fmod.Tensor: _fmod,
    aten.fmod.Scalar: _fmod,
    aten.remainder.Tensor: _remainder,
    aten.remainder.Scalar: _remainder,
    aten.sign.default: _sign,
    aten.div.Tensor_mode: _div_mode,
    aten.div.Scalar_mode: _div_mode,
    aten.leaky_relu.default: _leaky_relu,
    aten.pow.Tensor_Scalar: _pow_scalar,
    **{op: _unsigned_extremum for op in _UNSIGNED_EXTREMA},
}

# Elementwise ops ATen computes in float32 for float16/bfloat16 (opmath) whose lowering is more than
# one StableHLO op, or whose scalar parameters must not be rounded to the narrow type first.
OPMATH = frozenset(getattr(aten, name) for name in (
    "exp2", "expm1", "log2", "log10", "log1p", "sinh", "cosh", "tan", "asin", "acos", "atan", "asinh", "acosh",
    "atanh", "erf", "erfc", "erfinv", "sigmoid", "tanh", "sin", "cos", "exp", "log", "sqrt", "rsqrt", "reciprocal",
    "gelu", "silu", "elu", "softplus", "mish", "logit", "hardsigmoid", "hardswish", "atan2", "pow", "lerp",
    "hypot", "xlogy", "special_erfcx", "mean", "native_group_norm", "avg_pool2d")
    if hasattr(aten, name))


def needs_opmath(node: torch.fx.Node) -> bool:
    meta = node.meta.get("val")
    first = meta[0] if isinstance(meta, (tuple, list)) and meta else meta
    return (getattr(node.target, "overloadpacket", None) in OPMATH and isinstance(first, torch.Tensor)
            and first.dtype in NARROW)


def opmath(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node | None:
    """``node`` computed in float32 from widened narrow-float inputs, rounded back once."""
    def widen(a):
        if isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor) \
                and a.meta["val"].dtype in NARROW:
            return _cast(graph, a, torch.float32)
        return a

    args = [widen(a) for a in node.args]
    kwargs = {k: widen(v) for k, v in node.kwargs.items()}
    wide = _call(graph, node.target, *args, **kwargs)
    if not isinstance(node.meta["val"], (tuple, list)):
        return _cast(graph, wide, node)
    # several outputs (normalisations): each getitem user reads its float32 output, converted back
    for user in list(node.users):
        if user.target is not operator.getitem:
            return None
    for user in list(node.users):
        with graph.inserting_before(user):
            item = _call(graph, operator.getitem, wide, user.args[1])
            replacement = _cast(graph, item, user)
        user.replace_all_uses_with(replacement)
        graph.erase_node(user)
    return wide


def _log_softmax(x: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    """log_softmax of float16/bfloat16 as CPU's kernels round it (the eager kernel's rule,
    kernels/reduction/softmax.py): ``(x - max) - log(sum(exp(x - max)))`` in float32, rounded once, where the
    dim is not the last (``_vec_log_softmax``); along the last dim ``_vec_log_softmax_lastdim`` holds the sum
    and its log in the dtype, so both are rounded to it first. torch-mlir's lowering computed in the dtype
    op by op: the log of the sum rounded to float16 before the subtraction put 30% of a float16 log_softmax
    over a middle dim 1 ULP off, and its gradient, which reads the saved output, 3 ULP off where
    ``g - exp(y) * sum(g)`` cancels (op suite log_softmax float16 positive expanded; the backward's own
    formula, float32 with one rounding, is CPU's)."""
    if x.dtype not in NARROW or half_to_float or x.numel() == 0:
        return NotImplemented
    d = dim % max(x.dim(), 1)
    last = x.dim() == 0 or d == x.dim() - 1
    wide = x.contiguous().float()
    shifted = wide - wide.amax(d, keepdim=True)
    total = torch.exp(shifted).sum(d, keepdim=True)
    if last:
        total = total.to(x.dtype).float()
    log_total = torch.log(total)
    if last:
        log_total = log_total.to(x.dtype).float()
    return (shifted - log_total).to(x.dtype)


def _elu_backward(grad: torch.Tensor, alpha, scale, input_scale, is_result: bool, self_or_result: torch.Tensor):
    """elu_backward as CPU's loop computes it: its vector lambda takes the negative branch unless ``x > 0``, so a
    NaN input gives a NaN gradient; its scalar lambda tests ``x <= 0`` (PyTorch's decomposition's test), so a NaN
    input passes the gradient on, ``grad * scale``. Each element takes the lambda CPU's loop runs there
    (``loops.vector_mask``: a run's tail and a strided operand's every element are scalar; the block is the host's,
    ``cpu_host.elu_backward_block``), judged on the traced
    strides of the gradient and the input (a cotangent AOTAutograd made contiguous reaches CPU as the user made it:
    where the two differ, only a NaN input's gradient can)."""
    from device_impl.compiler import loops

    negcoef, poscoef, negiptcoef = alpha * scale, scale, input_scale
    if is_result:
        negative = grad * negiptcoef * (self_or_result + negcoef)
    else:
        negative = grad * negiptcoef * negcoef * torch.exp(self_or_result * negiptcoef)
    positive = grad * poscoef
    if not grad.dtype.is_floating_point or any(size == 0 for size in grad.shape):
        return torch.where(self_or_result > 0, positive, negative)
    from device_impl.kernels import cpu_host

    vector = loops.vector_mask((grad, self_or_result), grad.dtype, grad.device,
                               cpu_host.elu_backward_block(grad.dtype))
    if vector is True:
        return torch.where(self_or_result > 0, positive, negative)
    scalar = torch.where(self_or_result <= 0, negative, positive)
    if vector is False:
        return scalar
    return torch.where(vector, torch.where(self_or_result > 0, positive, negative), scalar)


def _hardtanh_backward(grad_output: torch.Tensor, self: torch.Tensor, min_val, max_val):
    """hardtanh_backward as CPU's loop computes it: its vector lambda keeps the gradient where ``min < x < max``, so
    a NaN input's gradient is 0; its scalar lambda drops it where ``x <= min || x >= max`` (PyTorch's decomposition's
    test), so a NaN input passes the gradient on. Each element takes the lambda CPU's loop runs there
    (``loops.vector_mask``, the block asked of the running torch: ``cpu_host.lambda_block``), as the eager kernel's
    ``loop._vector_split``; the bounds compared in float32 for the reduced floats (CPU's opmath)."""
    from device_impl.compiler import loops
    from device_impl.kernels import cpu_host

    x = self.float() if self.dtype in NARROW else self
    scalar = torch.where((x <= min_val) | (x >= max_val), 0.0, grad_output)
    if not grad_output.dtype.is_floating_point or any(size == 0 for size in grad_output.shape):
        return scalar
    vector = loops.vector_mask((grad_output, self), grad_output.dtype, grad_output.device,
                               cpu_host.lambda_block("hardtanh_backward", grad_output.dtype))
    if vector is False:
        return scalar
    kept = torch.where((x > min_val) & (x < max_val), grad_output, 0.0)
    return kept if vector is True else torch.where(vector, kept, scalar)


def _softmax_backward_data(grad_output: torch.Tensor, output: torch.Tensor, dim: int, input_dtype: torch.dtype):
    """softmax's gradient as CPU's kernels form it, ``y * (g - sum(g * y))`` (PyTorch's decomposition forms
    ``g * y - y * sum(g * y)``: where y is 0, an underflowed or -inf input, that gives -0.0 for a negative g
    where CPU's product gives the sign of ``g - sum``). Narrow floats compute in float32, as CPU does.

    Only for the calls compiler/opaque.py does not cut whole (``opaque.softmax_backward_whole``): those stay
    in the graph (NotImplemented: AOTAutograd traces the op itself) and run the eager kernel's tile program,
    whose sum of g * y along a dim that is not the last is CPU's chain of fused multiply-adds."""
    if opaque.softmax_backward_whole(grad_output, output, dim, input_dtype, log=False):
        return NotImplemented
    wide = output.dtype in (torch.bfloat16, torch.float16)
    g, y = (grad_output.float(), output.float()) if wide else (grad_output, output)
    result = y * (g - (g * y).sum(dim, keepdim=True))
    return result.to(grad_output.dtype).to(input_dtype).contiguous()  # the dtype PyTorch's meta gives


def _log_softmax_backward_data(grad_output: torch.Tensor, output: torch.Tensor, dim: int,
                               input_dtype: torch.dtype):
    """PyTorch's decomposition, except for the calls compiler/opaque.py cuts whole (NotImplemented keeps the op
    in the traced graph): CPU forms ``g - exp(y) * sum(g)`` with one rounding, which StableHLO cannot say."""
    if opaque.softmax_backward_whole(grad_output, output, dim, input_dtype, log=True):
        return NotImplemented
    return torch._decomp.decomposition_table[aten._log_softmax_backward_data.default](grad_output, output, dim,
                                                                                      input_dtype)


def _native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    """PyTorch's decomposition, except for the calls compiler/opaque.py cuts whole
    (``opaque.layer_norm_backward_whole``; NotImplemented keeps the op in the traced graph): those run the eager
    kernel's tile program, whose float sums round once to a reduced-float gradient as CPU's kernel does."""
    if opaque.layer_norm_backward_whole(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
        return NotImplemented
    return torch._decomp.decomposition_table[aten.native_layer_norm_backward.default](
        grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)


def _attention_operands(query, key, value, attn_bias, is_causal: bool, scale):
    """Query, key and value (GQA heads repeated) and the float32 scores of fused attention, masked. 4-D:
    csrc/attention.cpp answers OVERRIDEABLE only for 4-D inputs (PyTorch's meta of the op reads 4 strides)."""
    q, k, v = query, key, value
    if k.size(1) != q.size(1):  # grouped-query attention: each key/value head serves a group of query heads
        k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
        v = v.repeat_interleave(q.size(1) // v.size(1), dim=1)
    factor = 1.0 / math.sqrt(q.size(-1)) if scale is None else float(scale)
    scores = torch.matmul(q.float(), k.float().transpose(-2, -1)) * factor
    if is_causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_bias is not None:
        scores = (scores.masked_fill(~attn_bias, float("-inf")) if attn_bias.dtype == torch.bool
                  else scores + attn_bias.float())
    return q, k, v, scores, factor


def _probabilities(scores: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """softmax from the row logsumexp; a row whose keys are all masked is 0 (PyTorch's _safe_softmax)."""
    empty = torch.isneginf(lse).unsqueeze(-1)
    return torch.where(empty, 0.0, torch.exp(scores - torch.where(empty, 0.0, lse.unsqueeze(-1))))


def _fused_attention_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                              cum_seq_k, max_q, max_k, dropout_p: float, is_causal: bool, philox_seed,
                              philox_offset, *, scale: float | None = None):
    """``_scaled_dot_product_fused_attention_overrideable_backward`` as the ops the compiler lowers: the
    math of the eager tile kernel (kernels/attention.py): P recomputed from logsumexp in float32 (a fully
    masked row gives 0, PyTorch's _safe_softmax), dV = P^T dO, dS = P (dO V^T - rowsum(dO O)),
    dQ = scale dS K, dK = scale dS^T Q, summed over a GQA group; the bias gradient is dS at its shape.
    Used only where a float bias needs its gradient (dS summed to the bias's shape, which the eager kernel
    does with torch after its launch); otherwise NotImplemented keeps the op whole and compiler/opaque.py
    carries it to one flash backward step. Dropout needs the device's counter-based stream, which the
    compiler does not model: the op stays whole, torch-mlir refuses it and its graph runs eagerly,
    counted as a fallback."""
    del cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset
    from device_impl.compiler.opaque import needs_bias_gradient

    if dropout_p > 0 or attn_bias is None or not needs_bias_gradient(attn_bias, grad_input_mask):
        return NotImplemented  # dropout: eager fallback; otherwise one flash backward step (compiler/opaque.py)
    q, k, v, scores, factor = _attention_operands(query, key, value, attn_bias, is_causal, scale)
    p = _probabilities(scores, logsumexp)
    d_out, o = grad_out.float(), out.float()
    d_v = torch.matmul(p.to(q.dtype).float().transpose(-2, -1), d_out)
    d_s = p * (torch.matmul(d_out, v.float().transpose(-2, -1)) - (d_out * o).sum(-1, keepdim=True))
    d_q = torch.matmul(d_s, k.float()) * factor
    d_k = torch.matmul(d_s.transpose(-2, -1), q.float()) * factor
    heads = key.size(-3)
    if heads != q.size(1):
        d_k = d_k.unflatten(1, (heads, -1)).sum(2)
        d_v = d_v.unflatten(1, (heads, -1)).sum(2)
    d_bias = None
    if attn_bias is not None and attn_bias.dtype != torch.bool and grad_input_mask[3]:
        d_bias = d_s.sum_to_size(attn_bias.shape).to(attn_bias.dtype)
    return d_q.to(query.dtype), d_k.to(key.dtype), d_v.to(value.dtype), d_bias


def _index_add(self: torch.Tensor, dim: int, index: torch.Tensor, source: torch.Tensor, *, alpha=1) -> torch.Tensor:
    """CPU's index_add checks that source matches self outside ``dim``; the meta function and the core
    decomposition (into index_put) do not, so a compiled graph would add a mis-shaped source where eager
    raises. The check runs at trace time (static shapes), then PyTorch's own decomposition."""
    nd = max(self.dim(), 1)
    d = dim + nd if dim < 0 else dim
    outside = [s for i, s in enumerate(self.shape) if i != d]
    source_outside = [s for i, s in enumerate(source.shape) if i != d]
    if self.dim() > 0 and source.dim() > 0 and outside != source_outside:
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(self.shape)} source.shape = {list(source.shape)}")
    from device_impl.compiler import parity

    refused = parity.cpu_refusal(lambda: torch.index_add(  # the dtype rules, asked of CPU on empty tensors
        torch.zeros(1, dtype=self.dtype), 0, torch.empty(0, dtype=index.dtype), torch.empty(0, dtype=source.dtype)))
    if refused is not None:  # a float index was accepted and truncated
        raise refused
    if opaque.index_add_whole(self, index, source, alpha):
        return NotImplemented  # cut whole: the eager kernel's program (compiler/opaque.py _index_add)
    decompose = torch._decomp.decomposition_table[aten.index_add.default]
    d = dim + nd if dim < 0 else dim
    via_scatter = self.dim() > 1 and d in (0, self.dim() - 1) and alpha == 1 and index.dtype == torch.int64
    if via_scatter and self.dtype in NARROW:
        # CPU's index_add_ is scatter_add_ here: float32 sums (in order), rounded once to the dtype
        return decompose(self.float(), dim, index, source.float()).to(self.dtype)
    from device_impl.kernels import cpu_host

    if (alpha != 1 and self.dtype.is_floating_point and self.dim() > 1 and cpu_host.fused_multiply_add()
            and index.numel() <= _INDEX_ADD_UNROLL):
        return _index_add_fused(self, d, index, source, alpha)
    return decompose(self, dim, index, source, alpha=alpha)


# index_add's with alpha != 1 unrolled one index entry at a time (CPU's loop of add_) up to this many entries;
# longer ones keep PyTorch's decomposition (the product rounded to the dtype before the add)
_INDEX_ADD_UNROLL = 64


def _index_add_fused(self: torch.Tensor, d: int, index: torch.Tensor, source: torch.Tensor, alpha) -> torch.Tensor:
    """CPU's index_add loop for alpha != 1 (``self.select(d, index[i]).add_(source.select(d, i), alpha)``, in
    index order, each add rounded to the dtype), with the rounding points of its vectorized add: ``a + alpha * b``
    rounded once (vec::fmadd, in float32 for float16/bfloat16) on whole vector blocks of each contiguous run, the
    product rounded to the dtype first on the run's tail (the scalar lambda), as the eager kernel
    (kernels/indexing/rows.py ``_combine``). The single rounding is exact where alpha is a power of two: the
    product is then exact unless it overflows, where ``(a / alpha + b) * alpha`` is the same sum scaled (a
    float32 near-overflow ``a + 2 * b`` stayed finite on CPU and became inf - inf = NaN)."""
    from device_impl.kernels import cpu_host

    narrow = self.dtype in NARROW
    wide = torch.float32 if narrow else self.dtype
    alpha = float(alpha)
    power_of_two = alpha != 0 and math.frexp(abs(alpha))[0] == 0.5
    shape = list(self.shape)
    shape[d] = 1
    tail = None
    if narrow:
        # the run the eager kernel's rows cover: the dims after d that merge in both self's and source's strides
        block = cpu_host.vector_block(self.dtype)
        k, width, stride_self, stride_source = 0, 1, None, None
        for i in range(self.dim() - 1, d, -1):
            n = self.shape[i]
            if n != 1:
                if (stride_self is not None and self.stride(i) != stride_self * width) or (
                        stride_source is not None and source.stride(i) != stride_source * width):
                    break
                stride_self = self.stride(i) if stride_self is None else stride_self
                stride_source = source.stride(i) if stride_source is None else stride_source
            width *= n
            k += 1
        run = shape[len(shape) - k:]
        position = torch.arange(width, device=self.device).reshape(run) if k else torch.zeros((), device=self.device)
        tail = position >= width - width % block
    out = self
    for i in range(index.numel()):
        at = index[i:i + 1].to(torch.int64)
        a = out.index_select(d, at).to(wide)
        b = source.narrow(d, i, 1).to(wide)
        product = b * alpha
        summed = a + product
        if power_of_two:
            summed = torch.where(torch.isfinite(product), summed, (a / alpha + b) * alpha)
        row = summed.to(self.dtype)
        if tail is not None:
            row = torch.where(tail, (a + product.to(self.dtype).to(wide)).to(self.dtype), row)
        out = out.index_copy(d, at, row)
    return out


# A row whose largest magnitude exceeds _BIG is scaled by _SCALE (a power of two: exact) before its moments are
# taken, so that neither its sum nor its squared deviations overflow float32 (|x - mean| <= 2^129 becomes 2^59,
# its square 2^118): CPU computes them in double and overflows only where the result itself does.
_BIG, _SCALE = 2.0 ** 60, 2.0 ** -70


def _moments_of(root: bool, with_mean: bool):
    """std/var_mean/std_mean (``correction`` overloads) as CPU's kernels give them. CPU accumulates in double
    (Welford; its float32 results are the double ones rounded), so a bfloat16 row near the top of the range
    has a finite mean and std where float32 sums overflow (PyTorch's decomposition and torch-mlir's lowering
    compute in the input's type): rows with a magnitude above 2^60 are scaled by 2^-70 first, the results
    scaled back (std and mean fit; a variance that overflows float32 is inf, as CPU's converted double).
    The mean of var_mean/std_mean is Welford's running mean: NaN from the first element after an infinity,
    so a row's mean is NaN unless it has no non-finite element or one infinity that is its last (the rule of
    the eager kernel, kernels/reduction/moments.py ``_welford_finite_mean``). Float32 is the compute type of
    narrow floats; a variance of one element with correction 1 divides by 0 (NaN), as CPU's does."""
    def decomposition(x: torch.Tensor, dim=None, *, correction=None, keepdim: bool = False):
        if not x.dtype.is_floating_point or x.dtype == torch.float64:
            return NotImplemented
        if opaque_moments.moments_whole(x, dim, correction, with_mean) is not None:
            return NotImplemented  # cut whole: the eager kernel's program (compiler/opaque_moments.py)
        nd = x.dim()
        dims = list(range(nd)) if dim is None or (isinstance(dim, (list, tuple)) and not dim) else \
            sorted({d % max(nd, 1) for d in ([dim] if isinstance(dim, int) else dim)})
        n = 1
        for d in dims:
            n *= x.shape[d] if nd else 1
        if n == 0:
            return NotImplemented
        correction = 1 if correction is None else correction
        wide = x.float() if x.dtype in NARROW else x
        if nd == 0:
            scale = torch.ones_like(wide)
            scaled = wide
            mean_s = wide
            m2 = (wide - wide) * (wide - wide)
            last, bad = wide, (~torch.isfinite(wide)).to(torch.int64)
        else:
            big = wide.abs().amax(dims, keepdim=True) > _BIG
            scale = torch.where(big, _SCALE, 1.0)
            scaled = wide * scale
            mean_s = scaled.sum(dims, keepdim=True) / n
            deviation = scaled - mean_s
            m2 = (deviation * deviation).sum(dims, keepdim=keepdim)
            last = wide
            for d in dims:
                last = last.narrow(d, x.shape[d] - 1, 1)
            bad = (~torch.isfinite(wide)).sum(dims, keepdim=True)
            if not keepdim:
                scale, mean_s, last, bad = (t.squeeze(dims) for t in (scale, mean_s, last, bad))
        var_s = m2 / max(n - correction, 0)
        result = torch.sqrt(var_s) / scale if root else var_s / scale / scale
        result = result.to(x.dtype)
        if not with_mean:
            return result
        finite = (bad == 0) | ((bad == 1) & torch.isinf(last))
        mean = torch.where(finite, mean_s / scale, float("nan")).to(x.dtype)
        return result, mean
    return decomposition


def _accumulated_of(overload):
    """A backward CPU computes by adding each gradient element into a zero-filled gradient (reflection padding's
    backward: ``grad_input[j] += grad_output[i]``), so a position that receives only -0.0 holds
    +0.0 + -0.0 = +0.0. PyTorch's decompositions gather the sums instead (a position with one source keeps
    that source's -0.0): their result plus +0.0 is CPU's (x + 0.0 is x for every other x, NaN included)."""
    def decomposition(*args, **kwargs):
        result = torch._decomp.decomposition_table[overload](*args, **kwargs)
        return result + 0.0 if result.is_floating_point() else result
    return decomposition


def _unfold_backward(grad: torch.Tensor, input_size, dimension: int, size: int, step: int) -> torch.Tensor:
    """unfold_backward as CPU's kernel writes it: windows that do not overlap (step >= size) are *copied* into the
    zero-filled gradient, so a -0.0 stays -0.0; overlapping ones are added (+0.0 + -0.0 is +0.0). PyTorch's
    decomposition always adds (an accumulating index_put); this is the same code with CPU's choice."""
    if len(input_size) == 0:
        return NotImplemented
    dim = dimension % len(input_size)
    index = torch.arange(input_size[dim], device=grad.device, dtype=torch.int32).unfold(0, size, step).flatten()
    values = grad.movedim(-1, dim + 1).flatten(dim, dim + 1)
    return aten._unsafe_index_put(grad.new_zeros(input_size), [None] * dim + [index], values, accumulate=step < size)


def _rounded(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` (nearest even) on the host (``loops.rounded``)."""
    from device_impl.compiler import loops

    return loops.rounded(value, dtype)


def _mse_loss_backward(grad_output: torch.Tensor, input: torch.Tensor, target: torch.Tensor, reduction: int):
    """mse_loss_backward as CPU's kernel computes it: ``norm * (input - target) * grad_output`` in the input's
    dtype, op by op, with ``norm`` (2 / numel for the mean, else 2) rounded to that dtype first. PyTorch's
    decomposition computes in float32 for float16/bfloat16 and rounds once, so a difference that overflows
    float16 (CPU's gradient: inf) came back finite after the scaling by 2 / numel."""
    if not input.is_floating_point() or input.dtype == torch.float64:
        return NotImplemented
    norm = 2.0 / input.numel() if reduction == 1 else 2.0
    norm = _rounded(norm, input.dtype)  # the kernel's scalar_t norm_val
    return (input - target) * norm * grad_output


def _native_dropout(input: torch.Tensor, p: float, train):
    """CPU's native_dropout returns an empty input as it is with an empty mask of the *input's* dtype (its
    kernel's early return); the meta function says bool, so a compiled graph returned a bool mask. Other inputs
    keep the op (NotImplemented: no decomposition, as without this entry)."""
    if input.numel() != 0:
        return NotImplemented
    return input.clone(), torch.empty_like(input)


def _nll_loss_backward_of(overload):
    """nll_loss_backward / nll_loss2d_backward as CPU's kernels write them: a zero-filled gradient (+0.0) with
    ``-weight * grad`` written at each target's class. PyTorch's decomposition multiplies a one-hot of -1.0 by the
    gradient everywhere, so every other class (and an ignored target's) becomes ``0 * grad``: -0.0 where the
    gradient is negative. Its result is kept at the written positions only; its checks run as they do."""
    def decomposition(grad_output: torch.Tensor, self: torch.Tensor, target: torch.Tensor, weight, reduction: int,
                      ignore_index: int, total_weight: torch.Tensor) -> torch.Tensor:
        result = torch._decomp.decomposition_table[overload](grad_output, self, target, weight, reduction,
                                                             ignore_index, total_weight)
        channel_dim = 0 if self.dim() < 2 else 1
        if self.dim() == 1 and target.dim() > 0:  # as the decomposition: the C++ kernel reads target[0] only
            target = target[0]
        target = target.unsqueeze(channel_dim)
        kept = target != ignore_index
        written = torch.zeros(self.shape, dtype=torch.bool, device=self.device).scatter(
            channel_dim, torch.where(kept, target, 0), True) & kept
        return torch.where(written, result, torch.zeros((), dtype=result.dtype, device=result.device))
    return decomposition


def _embedding_dense_backward(grad_output: torch.Tensor, indices: torch.Tensor, num_weights: int,
                              padding_idx: int, scale_grad_by_freq: bool) -> torch.Tensor:
    """CPU refuses indices that are not int32/int64 (RuntimeError); PyTorch's decomposition truncated float
    indices and returned a result. The dtype rule is asked of CPU on empty tensors, then that decomposition."""
    from device_impl.compiler import parity

    refused = parity.cpu_refusal(lambda: aten.embedding_dense_backward(
        torch.empty((0, grad_output.shape[-1] if grad_output.dim() else 1), dtype=grad_output.dtype),
        torch.empty(0, dtype=indices.dtype), num_weights, padding_idx, scale_grad_by_freq))
    if refused is not None:
        raise refused
    if opaque_indexing.dense_backward_whole(grad_output, indices, num_weights, scale_grad_by_freq, padding_idx):
        return NotImplemented  # cut whole: the eager kernel's program (compiler/opaque_indexing.py)
    return torch._decomp.decomposition_table[aten.embedding_dense_backward.default](
        grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)


def _vectorized_upsample(x: torch.Tensor, out_spatial: list) -> bool:
    """Whether CPU interpolates ``x`` with its vectorized kernel (``kernels/spatial/resample.py``
    ``_vectorized_cond``, which mirrors CPU's ``_use_vectorized_kernel_cond_{2d,3d}``)."""
    from device_impl.kernels.spatial.resample import _vectorized_cond

    return _vectorized_cond(x, list(out_spatial), len(out_spatial))


class _Weighted(torch.autograd.Function):
    """``v * forward_weight`` whose gradient is ``grad * backward_weight``: CPU's generic upsampling kernel
    weighs a float16/bfloat16 input with weights rounded to its dtype, its backward kernel with the float32
    ones (AOTAutograd traces this backward into the joint graph as it traces any other)."""

    @staticmethod
    def forward(ctx, v: torch.Tensor, forward_weight: torch.Tensor, backward_weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(backward_weight)
        return v * forward_weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:
        (backward_weight,) = ctx.saved_tensors
        return grad * backward_weight, None, None


def _upsample_linear(input: torch.Tensor, output_size: list, align_corners: bool, scales: list) -> torch.Tensor:
    """PyTorch's ``_upsample_linear`` (linear/bilinear/trilinear interpolation) with CPU's arithmetic: each
    pair of neighbours is combined as ``v0 * (1 - w) + v1 * w`` (innermost dimension first, as CPU's
    ``Interpolate`` nests them), where PyTorch's decomposition forms ``v0 + (v1 - v0) * w``: that gave NaN
    for ``inf - inf`` and for ``(v1 - v0)`` overflowing near the largest floats (121 NaN where CPU had none,
    bilinear float32 near_overflow) and other zero signs. Source indices and weights are computed in
    float32 for float16/bfloat16 inputs and the result rounded once, as CPU's ``opmath_t`` does (the
    decomposition computed them in the narrow dtype, which cannot even count past 256 in bfloat16); the
    weights are rounded where CPU stores them in the input dtype."""
    from torch._decomp.decompositions import _compute_scale, _compute_source_index

    out_dtype = input.dtype if input.is_floating_point() else torch.get_default_dtype()
    dtype = torch.float32 if out_dtype in NARROW else out_dtype
    inp_sizes = input.shape[2:]
    n_dims = len(inp_sizes)
    xs_f, xs, xp1s = [], [], []
    for k, (inp_size, out_size, scale) in enumerate(zip(inp_sizes, output_size, scales)):
        factor = _compute_scale(inp_size, out_size, align_corners, scale)
        i = torch.arange(out_size, device=input.device).to(dtype=dtype)
        x_f = _compute_source_index(factor, i, align_corners).clamp(min=0.0)
        x_f = x_f.reshape(x_f.shape[0], *[1] * (n_dims - 1 - k))
        x = x_f.to(torch.int64)
        xs_f.append(x_f)
        xs.append(x)
        # an axis kept at its size: CPU weighs the same element (1, 0), so an infinity there gives NaN, not its
        # neighbour's (the eager kernel, kernels/spatial/resample.py, does the same)
        xp1s.append(x if out_size == inp_size else (x + 1).clamp(max=inp_size - 1))
    # converted before it is gathered (the same values): the gradient AOTAutograd derives then sums every
    # corner's contribution in float32 and rounds to float16/bfloat16 once, as CPU's backward accumulates in an
    # opmath buffer; converting each gathered corner rounded each corner's gradient, and its scatter summed them
    # in the narrow dtype (trilinear float16 gradient: 957 ULP near zero)
    wide = input.to(dtype)
    vs = []
    for corner in itertools.product(*[[0, 1]] * n_dims):
        idx = [None, None] + [xs[k] if corner[k] == 0 else xp1s[k] for k in range(n_dims)]
        vs.append(aten._unsafe_index(wide, idx))
    # CPU's generic kernel stores the weights in the input dtype (l1 rounded, then 1 - l1 rounded); its
    # vectorized one (resample._vectorized_cond: channels-last with C > 3, or few output positions) in float32
    # CPU's backward computes its weights in float32 (opmath) whatever the forward's kernel rounded them to
    rounded = out_dtype if out_dtype in NARROW and not _vectorized_upsample(input, output_size) else dtype
    for k in reversed(range(n_dims)):
        l1 = (xs_f[k] - xs[k]).clamp(0.0, 1.0)
        w1 = l1.to(rounded).to(dtype)
        w0 = (1 - w1).to(rounded).to(dtype)
        if rounded is dtype:
            vs = [v0 * w0 + v1 * w1 for v0, v1 in zip(vs[::2], vs[1::2])]
        else:
            b0 = 1 - l1
            vs = [_Weighted.apply(v0, w0, b0) + _Weighted.apply(v1, w1, l1) for v0, v1 in zip(vs[::2], vs[1::2])]
    result = vs[0].contiguous(memory_format=torch._prims_common.suggest_memory_format(input))
    if not input.is_floating_point():
        result = result.round()
    return result.to(out_dtype) if input.is_floating_point() else result


# Functions of torch._decomp that PyTorch's decompositions call by name at trace time, where a Python
# decomposition is bound to the op's Autograd key (py_impl) and so runs before any decomposition table
# AOTAutograd is given: swapped for CPU's form while the neuron backend traces (``traced_forms``).
TRACED_FORMS = {"_upsample_linear": _upsample_linear}


def _dropout_of(original):
    """ATen's ``dropout``: where nothing is dropped (p == 0, not training, no elements) it returns its input itself
    (``_dropout_impl``), as CPU and the eager device do (no launch); PyTorch's Python form, bound to the op's
    Autograd key, returned ``input.clone()``, a copy of every element (compiled dropout(p=0) took 1.08 us where
    eager takes none). The input itself lets AOTAutograd return the call's tensor, as eager's alias."""
    def dropout(input, p, train):
        if not train or p == 0 or input.numel() == 0:
            return input
        return original(input, p, train)
    return dropout


# Python kernels PyTorch binds to an op's dispatch keys, swapped while the neuron backend traces (the op, the keys,
# the replacement made from PyTorch's own kernel)
TRACED_KERNELS = {aten.dropout.default: _dropout_of}
# upsample calls cut whole keep their op (compiler/opaque_resample.py)
TRACED_KERNELS.update(opaque_resample.TRACED_KERNELS)


@contextlib.contextmanager
def traced_forms() -> Iterator[None]:
    """TRACED_FORMS (and TRACED_KERNELS) in place of PyTorch's own, for the duration of one AOTAutograd trace."""
    import torch._decomp.decompositions as decompositions

    saved = {name: getattr(decompositions, name) for name in TRACED_FORMS if hasattr(decompositions, name)}
    kernels = {op: dict(op.py_kernels) for op in TRACED_KERNELS}
    try:
        for name in saved:
            setattr(decompositions, name, TRACED_FORMS[name])
        for op, make in TRACED_KERNELS.items():
            for key, kernel in kernels[op].items():
                if key != torch._C.DispatchKey.Meta:
                    op.py_kernels[key] = make(kernel)
            op._dispatch_cache.clear()
        yield
    finally:
        for name, original in saved.items():
            setattr(decompositions, name, original)
        for op, original_kernels in kernels.items():
            op.py_kernels.clear()
            op.py_kernels.update(original_kernels)
            op._dispatch_cache.clear()


# Decompositions that replace PyTorch's own for AOTAutograd (backend._decompositions), for the same reason
# as REWRITES: PyTorch's formula differs from what CPU computes; and the fused attention backward where
# a bias needs its gradient (elsewhere both attention ops stay whole: compiler/opaque.py).
DECOMPOSITIONS = {aten.elu_backward.default: _elu_backward,
                  aten.hardtanh_backward.default: _hardtanh_backward,
                  aten._log_softmax.default: _log_softmax,
                  aten._softmax_backward_data.default: _softmax_backward_data,
                  aten._log_softmax_backward_data.default: _log_softmax_backward_data,
                  aten.native_layer_norm_backward.default: _native_layer_norm_backward,
                  aten.index_add.default: _index_add,
                  aten.native_dropout.default: _native_dropout,
                  aten.mse_loss_backward.default: _mse_loss_backward,
                  **{op: moves.or_else(fn, _accumulated_of(op)) for op, fn in moves.REFLECTION_PAD_BACKWARD.items()},
                  aten.unfold_backward.default: _unfold_backward,
                  aten.std.correction: _moments_of(root=True, with_mean=False),
                  aten.var_mean.correction: _moments_of(root=False, with_mean=True),
                  aten.std_mean.correction: _moments_of(root=True, with_mean=True),
                  aten.nll_loss_backward.default: _nll_loss_backward_of(aten.nll_loss_backward.default),
                  aten.nll_loss2d_backward.default: _nll_loss_backward_of(aten.nll_loss2d_backward.default),
                  aten.embedding_dense_backward.default: _embedding_dense_backward,
                  aten._scaled_dot_product_fused_attention_overrideable_backward.default: _fused_attention_backward,
                  **moves.DECOMPOSITIONS}
