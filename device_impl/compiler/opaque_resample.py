"""Upsampling's forward cut whole (compiler/opaque.py's mechanism) where its eager kernel's program is cheaper.

Issue 21: "every op's compiled device time <= its eager kernel's". PyTorch decomposes every upsample (nearest,
nearest-exact, linear, bilinear, bicubic, trilinear; their ``.vec`` forms, which F.interpolate calls) into index
tensors, one gather per tap and a weighted sum: compiled, bicubic of [1, 1, 2, 513] to (5, 500) took 43.9 us
against the eager kernel's 39.4, trilinear 25.3 against 21.3, a small bilinear 4.05 against 3.72. The eager kernel
(``kernels.spatial.resample``) resamples one axis at a time with indirect row gathers and CPU's weights; cut whole,
the call is one step running that program, its bits the eager kernel's. For other shapes the decomposition is
the cheaper program (bicubic of [2, 3, 4, 7] to (5, 500): 228 us against 346; many nearest resizes), so each call
is cut only where ``costed.cut_wins`` finds it cheaper than the decomposition, by modelled time (each form compiled
alone and run once on zeros; ties keep the decomposition).

PyTorch binds its decompositions to the ops' Autograd and CompositeImplicitAutograd keys (py_impl), which run
before any decomposition table. While the backend traces (``numerics.traced_forms``, ``TRACED_KERNELS`` here),
those kernels are wrapped: a ``.vec`` call cut whole becomes its ``.default`` op (ATen's own output size and
scales), whose Autograd kernel is ATen's (so its gradient is the ``<upsample>_backward`` op, cut whole by
opaque_cnn) and whose CompositeImplicitAutograd decomposition declines (NotImplemented), so the op reaches the
graph. ``decompositions`` does the same for AOTAutograd's table. Every other call keeps PyTorch's (and numerics')
decomposition, as before. The backward ops were already cut (opaque_cnn: ``upsample_backward``).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import torch
import torch._decomp.decompositions  # noqa: F401  (binds PyTorch's Python kernels to the upsample ops)
import torch.fx

from device_impl.compiler import costed
from device_impl.compiler.fxargs import bound as _bound
from device_impl.compiler.program import operand_array as _operand_array

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _forms() -> dict[Any, tuple[str, int]]:
    from device_impl.kernels.spatial.resample import _UPSAMPLE_NAMES

    return {getattr(aten, name).default: (kind, nsp) for kind, dims in _UPSAMPLE_NAMES.items()
            for nsp, name in dims.items()}


# .default op -> (kind, spatial dims): every forward the eager table lowers natively (no antialias kernels)
FORMS: dict[Any, tuple[str, int]] = _forms()
# .vec op -> its .default op
VECS: dict[Any, Any] = {op.overloadpacket.vec: op for op in FORMS}


def _bind(op: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for i, arg in enumerate(op._schema.arguments):
        if i < len(args):
            values[arg.name] = args[i]
        elif arg.name in kwargs:
            values[arg.name] = kwargs[arg.name]
        else:
            values[arg.name] = arg.default_value if arg.has_default_value() else None
    return values


def _aligned(kind: str) -> bool:
    return kind in ("linear", "cubic")


def default_call(op: Any, a: dict[str, Any]) -> tuple[Any, Any, list[int], bool, list] | None:
    """(the .default op, input, output size, align_corners, scales) of a bound upsample call (either form), or None
    where the sizes are not static ints."""
    vec = op in VECS
    default = VECS[op] if vec else op
    kind, nsp = FORMS[default]
    x = a.get("input", a.get("self"))
    if not isinstance(x, torch.Tensor):
        return None
    align = bool(a["align_corners"]) if _aligned(kind) else False
    if vec:
        from torch._decomp.decompositions import upsample_compute_output_size

        factors = a["scale_factors"]
        if (a["output_size"] is None) == (factors is None) or x.dim() != nsp + 2:
            return None
        try:
            size = upsample_compute_output_size(x.size(), a["output_size"], factors)
        except Exception:  # noqa: BLE001 - PyTorch's own decomposition raises it
            return None
        scales = list(factors) if factors else [None] * nsp
    else:
        size = a["output_size"]
        scales = [a[arg.name] for arg in default._schema.arguments if arg.name.startswith("scales")]
    if not isinstance(size, (list, tuple)) or not all(type(s) is int for s in size) or len(size) != nsp:
        return None
    if any(s is not None and (isinstance(s, bool) or not isinstance(s, (int, float))) for s in scales):
        return None
    return default, x, [int(s) for s in size], align, [None if s is None else float(s) for s in scales]


def _eligible(x: torch.Tensor, nsp: int, size: list[int]) -> bool:
    return x.dtype in _FLOATS and x.dim() == nsp + 2 and x.numel() > 0 and x.device.type == "neuron" \
        and all(s > 0 for s in size)


def upsample_whole(op: Any, args: tuple, kwargs: dict) -> tuple | None:
    """The .default call (op, input, output size, align_corners, scales) where this upsample call (a .default or
    .vec op's arguments, fake tensors) is cut whole: a floating neuron input of the op's rank, nothing empty, static
    sizes, and its eager kernel's step cheaper than the decomposition (``costed.cut_wins``); else None."""
    call = default_call(op, _bind(op, args, kwargs))
    if call is None:
        return None
    default, x, size, align, scales = call
    kind, nsp = FORMS[default]
    if not _eligible(x, nsp, size):
        return None
    vec = default.overloadpacket.vec
    decided = costed.forced()
    # a costing's forced answer holds for every upsample call its one-op graph makes (a .vec call's decomposition
    # calls its .default op, which must decompose too, not ask for a costing of its own)
    for form in (op, default, vec):
        if form in decided:
            return call if decided[form] else None
    from device_impl.kernels.spatial.resample import _vectorized_cond

    if kind == "linear" and nsp == 2 and _vectorized_cond(x, size, nsp):
        # CPU's vectorized bilinear kernel sums the four products at once (resample._bilinear_combined), whose zero
        # signs no decomposition says (nested lerps give -0.0 where it gives +0.0): cut whatever the costing says
        return call
    extra = [align] if _aligned(kind) else []
    # costed as the call a graph gets: F.interpolate's .vec form where it names the same call (some .default ops
    # have no decomposition of their own, so their decomposed one-op graph would not build)
    factors = None
    if all(s is not None for s in scales):
        by_factors = default_call(vec, _bind(vec, (x, None, *extra, scales), {}))
        factors = scales if by_factors is not None and by_factors[2] == size else None
    if factors is not None:
        costed_op, costed_args = vec, (x, None, *extra, factors)
    elif all(s is None for s in scales):
        costed_op, costed_args = vec, (x, size, *extra, None)
    else:
        costed_op, costed_args = default, (x, size, *extra, *scales)
    return call if costed.cut_wins(costed_op, costed_args) else None


def _vectorized(kind: str, x: torch.Tensor, size: list[int]) -> bool:
    """resample._axes_for's choice of CPU's kernel (vectorized or generic: the weights' rounding, nearest's index
    special cases), asked of the traced input's layout and this process's thread count, so the compile cache keys
    it."""
    from device_impl.kernels.spatial.resample import _vectorized_cond

    if kind == "cubic":
        return False
    nsp = len(size)
    return bool(_vectorized_cond(x, size, nsp) or (nsp == 2 and torch.get_num_threads() == 1 and x.shape[1] == 3))


def _options(call: tuple, meta: torch.Tensor) -> dict[str, Any]:
    """The cut step's options: kind, sizes, scales and CPU's kernel choice."""
    from device_impl.kernels.spatial.resample import _vectorized_cond

    default, _, size, align, scales = call
    kind, nsp = FORMS[default]
    return {"kind": kind, "nsp": nsp, "input_size": [int(s) for s in meta.shape], "output_size": size,
            "align_corners": align, "scales": scales, "vectorized": _vectorized(kind, meta, size),
            # CPU's vectorized bilinear kernel's one sum of four products (resample._bilinear_combined)
            "combined": kind == "linear" and bool(_vectorized_cond(meta, size, nsp))}


def _describe(node: torch.fx.Node) -> Any:
    """An upsample's .default op: operand (input), the result; ``_options``. Only the calls ``upsample_whole`` takes
    (the others were decomposed before they got here)."""
    a = _bound(node)
    x = a["input"] if "input" in a else a["self"]
    meta = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    if not isinstance(meta, torch.Tensor):
        return None
    args = tuple(meta if v is x else v for v in node.args)
    kwargs = {k: (meta if v is x else v) for k, v in node.kwargs.items()}
    call = upsample_whole(node.target, args, kwargs)
    return None if call is None else ([x], {0: 0}, _options(call, meta))


def _axes(o: dict[str, Any], np_dtype: Any) -> dict:
    """resample._axes_for's forward axes, from the step's options (no tensor at hand at link time)."""
    from device_impl.engine.dtypes import FP32
    from device_impl.kernels.spatial.resample import _Axis

    kind, nsp, vec = o["kind"], o["nsp"], o["vectorized"]
    axes = {}
    for i, (isize, osize) in enumerate(zip(o["input_size"][2:], o["output_size"])):
        scale = o["scales"][i] if i < len(o["scales"]) else None
        if _aligned(kind):
            round_to = np_dtype if np_dtype != FP32 and not vec else None
            axes[5 - nsp + i] = _Axis(isize, osize, kind, scale, o["align_corners"], round_to)
        else:
            axes[5 - nsp + i] = _Axis(isize, osize, kind, scale, special=vec)
    return axes


def _program(o: dict[str, Any], np_dtype: Any) -> Callable:
    """The eager kernel's program (``kernels.spatial.resample._resample``: one stage per axis, innermost first,
    intermediates of blending stages in fp32) for a step's options and its input's numpy dtype:
    ``program(nc, scratch, out, x)``."""
    from device_impl.kernels.spatial.resample import _resample
    from device_impl.kernels.spatial.tiles import _to5d

    nsp = o["nsp"]
    axes = _axes(o, np_dtype)

    def program(nc: Any, scratch: Any, out: Any, x: Any) -> None:
        if out.size:
            _resample(nc, scratch, _to5d(out, nsp), _to5d(x, nsp), axes, combined=o.get("combined", False))

    return program


def _run_upsample(step: dict, program: Any) -> Callable:
    """The eager kernel's program (``_program``) from the input into the step's result."""
    o = step["attrs"]
    made: list[Callable] = []

    def run(nc, env) -> None:
        x = _operand_array(env, program, step["operands"][0])
        if not made:
            made.append(_program(o, x.dtype))
        made[0](nc, env.scratch, env.access(step["results"][0]), x)

    return run


# FX target -> (step kind, describer): merged into opaque.CUTTERS
CUTTERS: dict[Any, tuple[str, Callable]] = {op: ("upsample", _describe) for op in FORMS}

# step kind -> runner: merged into steps.RUNNERS
RUNNERS: dict[str, Callable] = {"upsample": _run_upsample}

# step kind -> how the static replay runs it (replay.STEP_KINDS): row numbers from GpSimd iotas and VectorE
# arithmetic on positions, indirect row loads by those, fixed blends: every instruction from the shapes
STEP_KINDS: dict[str, str] = {"upsample": "tile"}


_BELOW = threading.local()  # .op: the op a call cut whole is dispatched below autograd for (``_Whole.forward``)


def _backward_op(default: Any) -> Any:
    return getattr(aten, f"{default._schema.name.split('::')[-1]}_backward").default


class _Whole(torch.autograd.Function):
    """An upsample call cut whole, its gradient the ``<upsample>_backward`` op (ATen's derivative, which opaque_cnn
    cuts whole as the eager kernel's adjoint). The op itself is dispatched below autograd, where its
    decomposition declines (``_traced_kernel``), so it reaches the graph."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, default: Any, size: list, extra: list, scales: list) -> torch.Tensor:
        ctx.call = (default, [int(s) for s in x.shape], size, extra, scales)
        _BELOW.op = default
        try:
            with torch._C._AutoDispatchBelowAutograd():
                return default(x, size, *extra, *scales)
        finally:
            _BELOW.op = None

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:
        default, shape, size, extra, scales = ctx.call
        return _backward_op(default)(grad, size, shape, *extra, *scales), None, None, None, None


def _traced_kernel(op: Any) -> Callable:
    """TRACED_KERNELS' maker for ``op``'s Python kernels (Autograd, CompositeImplicitAutograd): a call cut whole
    runs as ``_Whole`` (a ``.vec`` call as its ``.default`` op), and its decomposition below autograd
    (``OpOverload.decompose``, which proxy tracing asks) answers NotImplemented, so the op is recorded. Other
    calls run PyTorch's kernel."""
    def make(kernel: Callable) -> Callable:
        def traced(*args: Any, **kwargs: Any) -> Any:
            default = VECS.get(op, op)
            if getattr(_BELOW, "op", None) is default:
                return NotImplemented
            call = upsample_whole(op, args, kwargs)
            if call is None:
                return kernel(*args, **kwargs)
            default, x, size, align, scales = call
            return _Whole.apply(x, default, size, [align] if _aligned(FORMS[default][0]) else [], scales)

        return traced

    return make


# op -> its Python kernels' replacement maker while the backend traces (merged into numerics.TRACED_KERNELS)
TRACED_KERNELS: dict[Any, Callable] = {op: _traced_kernel(op) for op in (*FORMS, *VECS) if op.py_kernels}


def _whole_or(op: Any, earlier: Callable | None) -> Callable:
    def decomposition(*args: Any, **kwargs: Any) -> Any:
        if upsample_whole(op, args, kwargs) is not None or earlier is None:
            return NotImplemented
        return earlier(*args, **kwargs)

    return decomposition


def decompositions(earlier: dict) -> dict[Any, Callable]:
    """AOTAutograd decompositions (merged into backend's table after the others, given as ``earlier``): the calls
    cut whole reach the graph (a .vec call through its Python kernel, ``TRACED_KERNELS``), the others keep their
    earlier decomposition."""
    return {op: _whole_or(op, earlier.get(op)) for op in (*FORMS, *VECS)}
