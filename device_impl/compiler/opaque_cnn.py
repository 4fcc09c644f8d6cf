"""CNN ops cut whole (compiler/opaque.py's mechanism): pooling with indices and batch norm.

torch-mlir refuses these ops or their decompositions (issue 21: "every op's compiled device time <= its eager
kernel's"): max pooling imports as a ``stablehlo.reduce_window`` of two operands (values and indices) the
compiler does not lower, its backward as ops torch-mlir leaves unconverted ('torch.constant.int'), and
``_native_batch_norm_legit_functional`` (every training graph's batch norm) not at all, so a CNN's compiled
graph ran eagerly, op by op, after AOTAutograd had decomposed what it could: slower than eager itself
(batch_norm 1.67x). Each op here has a hand-written eager kernel whose tile program takes HBM arrays; the op is
cut out of the FX graph (``CUTTERS``, merged into ``opaque.CUTTERS``) and spliced back as one step whose runner
(``RUNNERS``, merged into ``steps.RUNNERS``) runs that program inside the compiled launch: what a Neuron
compiler does with an NKI kernel. The step fuses nothing with its neighbours, but its results are the eager
kernel's bit for bit and it costs what the eager launch does, less the launch overhead.

A describer returns (operands, {result item: position}, options) or None to refuse the call (it then stays
in the graph: torch-mlir refuses it and the graph runs eagerly, which raises where the eager op raises).
Options are part of the compile-cache keys; a describer asks what depends on the host (CPU's fused
multiply-add) when the graph is cut, as ``opaque._layer_norm`` does.
"""

from __future__ import annotations

import operator

from typing import Any, Callable

import torch
import torch.fx

from device_impl.compiler.fxargs import bound as _bound
from device_impl.compiler.program import operand_array as _operand_array

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_REDUCED = (torch.bfloat16, torch.float16)

def _meta(node: Any) -> torch.Tensor | None:
    meta = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return meta if isinstance(meta, torch.Tensor) else None


def _ints(value: Any) -> list[int] | None:
    """An int list argument (a bare int stands for all dims), None when it is not static."""
    if isinstance(value, int):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return [int(v) for v in value]
    return None


# -- max pooling with indices -------------------------------------------------------------------------------

def _pool_options(a: dict[str, Any], nsp: int, x: torch.Tensor) -> dict[str, Any] | None:
    """The eager kernel's [D, H, W] kernel/stride/padding/dilation (``pool._pool_args``) of a call, or None."""
    from device_impl.kernels.spatial.pool import _pool_args

    args = [_ints(a[k]) for k in ("kernel_size", "stride", "padding", "dilation")]
    if any(v is None for v in args) or x.dim() not in (nsp + 1, nsp + 2):
        return None
    k3, s3, p3, d3 = _pool_args(args[0], args[1] or args[0], args[2], args[3], nsp)
    return {"nsp": nsp, "kernel": k3, "stride": s3, "padding": p3, "dilation": d3}


def _max_pool(nsp: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``max_pool{nsp}d_with_indices``: operand (self), results {0: out, 1: indices}; floating inputs
        (the eager kernel's dtypes the compiler carries; others keep the graph's eager run)."""

        a = _bound(node)
        x = _meta(a["self"])
        if x is None or x.dtype not in _FLOATS or x.numel() == 0:
            return None
        options = _pool_options(a, nsp, x)
        return None if options is None else ([a["self"]], {0: 0, 1: 1}, options)

    return describe


def _max_pool_backward(nsp: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``max_pool{nsp}d_with_indices_backward``: operands (grad_output, indices), result grad_input (the
        eager kernel scatters by the saved indices; self is read for its shape only)."""

        a = _bound(node)
        g, x, idx = _meta(a["grad_output"]), _meta(a["self"]), _meta(a["indices"])
        if g is None or x is None or idx is None or g.dtype not in _FLOATS or x.dtype != g.dtype \
                or idx.dtype != torch.int64 or x.numel() == 0:
            return None
        options = _pool_options(a, nsp, x)
        return None if options is None else ([a["grad_output"], a["indices"]], {0: 0}, options)

    return describe


def _run_max_pool(step: dict, program: Any) -> Callable:
    """The eager kernel's pooling program (``kernels.spatial.pool._pool_forward``) on the step's arrays."""
    from device_impl.kernels.spatial.pool import _batched5, _pool_forward

    o = step["attrs"]
    nsp = o["nsp"]

    def run(nc, env) -> None:
        x = _operand_array(env, program, step["operands"][0])
        out, idx = (env.access(v) for v in step["results"])
        _pool_forward(nc, env.scratch, _batched5(out, nsp), _batched5(idx, nsp), _batched5(x, nsp), o["kernel"],
                      o["stride"], o["padding"], o["dilation"], "max")

    return run


def _run_max_pool_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's pooling backward (``kernels.spatial.pool._pool_backward``): by the saved indices."""
    from device_impl.kernels.spatial.pool import _batched5, _pool_backward

    o = step["attrs"]
    nsp = o["nsp"]

    def run(nc, env) -> None:
        g, idx = (_operand_array(env, program, v) for v in step["operands"])
        gi = env.access(step["results"][0])
        if gi.size:
            _pool_backward(nc, env.scratch, _batched5(gi, nsp), _batched5(g, nsp), _batched5(idx, nsp),
                           o["kernel"], o["stride"], o["padding"], o["dilation"], "max")

    return run


# -- batch norm ---------------------------------------------------------------------------------------------

_BN_PARAMS = ("weight", "bias", "running_mean", "running_var")


def _batch_norm(training: bool | None, stats: bool) -> Callable:
    """A describer of one batch-norm forward overload: ``training`` None reads the op's own flag;
    ``stats``: whether the overload takes running statistics. Results {0: out, 1: save_mean, 2: save_invstd
    [, 3: running_mean_out, 4: running_var_out]} (the functional op's updated running statistics)."""

    def describe(node: torch.fx.Node) -> Any:
        from device_impl.kernels import cpu_host
        from device_impl.kernels.reduction.batch_norm import _bn_layout

        a = _bound(node)
        train = bool(a["training"]) if training is None else training
        functional = node.target is aten._native_batch_norm_legit_functional.default
        if functional and not train:  # its eval form copies the running statistics: not the eager kernel's
            return None
        x = _meta(a["input"])
        if x is None or x.dtype not in _FLOATS or x.dim() < 2 or x.numel() == 0:
            return None
        names = [n for n in _BN_PARAMS if stats or n in ("weight", "bias")]
        given = {n: a[n] for n in names if a[n] is not None}
        metas = {n: _meta(v) for n, v in given.items()}
        c = x.shape[1]
        if any(m is None or m.numel() != c or m.dim() != 1 or m.dtype not in _FLOATS for m in metas.values()):
            return None
        dtypes = {m.dtype for m in metas.values()}
        if x.dtype in _REDUCED and torch.float32 in dtypes and len(dtypes) > 1:  # CPU's mixed-dtype refusal
            return None
        if x.dtype == torch.float32 and dtypes - {torch.float32}:
            return None
        if not train and not ("running_mean" in given and "running_var" in given):
            return None
        if not isinstance(a["momentum"], (int, float)) or not isinstance(a["eps"], (int, float)):
            return None
        mixed = x.dtype in _REDUCED and dtypes == {torch.float32}
        retyped: dict[int, torch.dtype] = {}
        if train:
            # PyTorch's meta function (the trace) saves float32 statistics of a bfloat16/float16 input, CPU and
            # the eager kernel the input's dtype: the step gives CPU's dtype where the graph only returns them
            # (``cut``'s retyped results; the graph ran eagerly before, 10.69 us against the kernel's 6.69 for the
            # sweep's [2, 4] bfloat16 call), and a graph that computes with them stays out
            cpu_saved = torch.float32 if mixed else x.dtype
            saved = node.meta["val"][1]
            if saved.dtype != cpu_saved:
                if not _only_returned(node, (1, 2)):
                    return None
                retyped = {1: cpu_saved, 2: cpu_saved}
            results = {0: 0, 1: 1, 2: 2, 3: 3, 4: 4} if functional else {0: 0, 1: 1, 2: 2}
        else:
            # in evaluation CPU returns empty saved statistics, the meta function (CUDA's rule) the running mean
            # and invstd of shape [C]: only calls whose statistics nobody reads are cut (``cut`` leaves the rest)
            results = {0: 0}
        return [a["input"], *given.values()], results, {
            "params": list(given), "training": train, "momentum": float(a["momentum"]), "eps": float(a["eps"]),
            "layout": _bn_layout(x), "mixed": mixed,
            "functional": functional, "fused": bool(cpu_host.fused_multiply_add())}, retyped

    return describe


def _only_returned(node: torch.fx.Node, items: tuple[int, ...]) -> bool:
    """Whether ``node``'s results ``items`` are read, if at all, only as the graph's outputs (through getitem)."""
    return all(u.target is operator.getitem and (u.args[1] not in items or all(r.op == "output" for r in u.users))
               for u in node.users)


_BN_ARRAYS = {"weight": "w", "bias": "b", "running_mean": "rm", "running_var": "rv"}


def _run_batch_norm(step: dict, program: Any) -> Callable:
    """The eager kernel's batch-norm program (``kernels.reduction.batch_norm.forward_program``): the functional
    op's running statistics read from its operands and written to its own results."""
    from device_impl.kernels.reduction.batch_norm import forward_program

    o = step["attrs"]

    def run(nc, env) -> None:
        x, *params = (_operand_array(env, program, v) for v in step["operands"])
        arrays = {_BN_ARRAYS[n]: p for n, p in zip(o["params"], params)}
        out, *saved = (env.access(v) for v in step["results"])
        if o["training"]:  # (mean, invstd[, running_mean_out, running_var_out])
            arrays.update(zip(("mean", "invstd", "rm_out", "rv_out"), saved))
        forward_program(nc, x, out, arrays, o["training"], o["momentum"], o["eps"], o["layout"], o["mixed"],
                        o["fused"])

    return run


def batch_norm_backward_whole(grad: Any, x: Any, weight: Any, running_mean: Any, running_var: Any,
                              save_mean: Any, save_invstd: Any, train: bool, output_mask: Any) -> bool:
    """Whether ``native_batch_norm_backward`` of these operands (fake tensors or FX metas) is cut whole: float32
    operands (the eager kernel computes in float32; a reduced-precision call keeps PyTorch's decomposition),
    every [C] operand the mode reads present, in training only: the op reads the forward's saved statistics,
    which in evaluation the meta function makes [C] (CUDA's rule) and CPU, so the eager forward a graph that reads
    them falls back to, empty; the decomposition reads only the running ones there, so nothing saves them.
    ``DECOMPOSITIONS`` leaves exactly these calls undecomposed."""
    if not train:
        return False
    stats = (save_mean, save_invstd)
    tensors = [grad, x, *stats] + ([weight] if weight is not None else [])
    if not all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in tensors):
        return False
    if x.dim() < 2 or x.numel() == 0 or tuple(grad.shape) != tuple(x.shape) or not any(output_mask):
        return False
    c = x.shape[1]
    return all(t.dim() == 1 and t.numel() == c for t in tensors[2:])


def _batch_norm_backward(node: torch.fx.Node) -> Any:
    """``native_batch_norm_backward``: operands (grad_out, input, mean, invstd or running mean, var[, weight]),
    results: the gradients ``output_mask`` asks for, in order (dx, dw, db). Cut whole so the step runs the eager
    kernel's program (two passes over the channel's elements; PyTorch's decomposition, fused by the compiler,
    cost 1.12x the eager kernel on 8x16x8x8 and differed in dx's last bit)."""

    a = _bound(node)
    train, mask = bool(a["train"]), [bool(m) for m in a["output_mask"]]
    names = ("save_mean", "save_invstd") if train else ("running_mean", "running_var")
    metas = {n: _meta(a[n]) for n in ("grad_out", "input", "weight", *names)}
    if not batch_norm_backward_whole(metas["grad_out"], metas["input"], metas["weight"],
                                     metas.get("running_mean"), metas.get("running_var"), metas.get("save_mean"),
                                     metas.get("save_invstd"), train, mask):
        return None
    if not isinstance(a["eps"], (int, float)) or (a["weight"] is not None and metas["weight"] is None):
        return None
    operands = [a["grad_out"], a["input"], a[names[0]], a[names[1]]] + \
        ([a["weight"]] if a["weight"] is not None else [])
    asked = [i for i in range(3) if mask[i]]
    return operands, {item: position for position, item in enumerate(asked)}, {
        "train": train, "eps": float(a["eps"]), "weight": a["weight"] is not None, "mask": mask}


def _run_batch_norm_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's batch-norm backward program (``kernels.reduction.batch_norm.backward_program``)."""
    from device_impl.kernels.reduction.batch_norm import backward_program

    o = step["attrs"]

    def run(nc, env) -> None:
        dy, x, mean, stat, *weight = (_operand_array(env, program, v) for v in step["operands"])
        results = iter(env.access(v) for v in step["results"])
        dx, dw, db = (next(results) if asked else None for asked in o["mask"])
        backward_program(nc, dy, x, dx, {"mean": mean, "stat": stat, "w": weight[0] if weight else None,
                                         "dw": dw, "db": db}, o["train"], o["eps"])

    return run


def _native_batch_norm_backward_decomposition(grad_out, input, weight, running_mean, running_var, save_mean,
                                              save_invstd, train, eps, output_mask):
    """PyTorch's decomposition, except for the calls cut whole (``batch_norm_backward_whole``): NotImplemented
    keeps the op in the traced graph, where ``cut`` takes it."""
    if batch_norm_backward_whole(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
                                 train, output_mask):
        return NotImplemented
    return torch._decomp.decomposition_table[aten.native_batch_norm_backward.default](
        grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask)


# -- group norm ---------------------------------------------------------------------------------------------

def _group_norm(node: torch.fx.Node) -> Any:
    """``native_group_norm``: operands (input[, weight][, bias]), results {0: out, 1: mean, 2: rstd}. Refused for
    what the eager kernel refuses (sizes that do not match, an input not dense, mixed parameter dtypes) and where
    the traced statistics' dtype is not CPU's (the fallback then raises or computes as the eager op)."""

    a = _bound(node)
    x = _meta(a["input"])
    given = {n: a[n] for n in ("weight", "bias") if a[n] is not None}
    metas = [_meta(v) for v in given.values()]
    if x is None or x.dtype not in _FLOATS or x.dim() < 2 or x.numel() == 0 or not x.is_contiguous() \
            or any(m is None or m.dtype not in _FLOATS or m.dim() != 1 or m.numel() != x.shape[1] for m in metas):
        return None
    sizes = [a[k] for k in ("N", "C", "HxW", "group")]
    if not all(isinstance(v, int) for v in sizes) or not isinstance(a["eps"], (int, float)):
        return None
    n, c, hw, groups = sizes
    if groups <= 0 or c % groups or (n, c) != tuple(x.shape[:2]) or n * c * hw != x.numel():
        return None
    dtypes = {m.dtype for m in metas}
    if x.dtype in _REDUCED and torch.float32 in dtypes and len(dtypes) > 1:
        return None
    if x.dtype == torch.float32 and dtypes - {torch.float32}:
        return None
    stats = torch.float32 if x.dtype in _REDUCED and dtypes == {torch.float32} else x.dtype
    if node.meta["val"][1].dtype != stats:
        return None
    return [a["input"], *given.values()], {0: 0, 1: 1, 2: 2}, {
        "weight": "weight" in given, "bias": "bias" in given, "groups": groups, "eps": float(a["eps"])}


def _run_group_norm(step: dict, program: Any) -> Callable:
    """The eager kernel's group-norm program (``kernels.reduction.group_norm.forward_program``)."""
    from device_impl.engine.dtypes import FP32
    from device_impl.kernels.reduction.group_norm import forward_program

    o = step["attrs"]

    def run(nc, env) -> None:
        x, *params = (_operand_array(env, program, v) for v in step["operands"])
        w = params.pop(0) if o["weight"] else None
        b = params.pop(0) if o["bias"] else None
        out, mean, rstd = (env.access(v) for v in step["results"])
        if mean.size == 0:
            return
        fp32 = None if mean.dtype == FP32 else (env.scratch_array(mean.shape, FP32),
                                                 env.scratch_array(mean.shape, FP32))
        forward_program(nc, x, out, mean, rstd, w, b, o["groups"], o["eps"], fp32)

    return run


# -- average pooling (reduced floats), its backward, adaptive pooling -----------------------------------------

def _avg_options(a: dict, nsp: int, x: torch.Tensor) -> dict | None:
    """An average pooling call's window options (``_pool_options``, no dilation) with its count_include_pad and
    divisor_override, or None where the eager kernel does not take them (a divisor that is not an int)."""
    divisor = a["divisor_override"]
    if divisor is not None and not isinstance(divisor, int):
        return None
    options = _pool_options({**a, "dilation": 1}, nsp, x)
    if options is not None:
        options.update(include=bool(a["count_include_pad"]), divisor=divisor)
    return options


def _avg_pool(nsp: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``avg_pool{nsp}d`` of a bfloat16/float16 tensor: operand (self), result out. Widened to float32
        (numerics.OPMATH: CPU sums each window in float32) it took three steps, a convert, the window sum and the
        divide with its convert (avg_pool1d(x, 2, 1) of [2, 2, 6] bfloat16: 1.68 us against the eager kernel's
        1.40), where the eager kernel (``pool._pool_forward`` in "avg" mode) sums the narrow tiles in float32 and
        rounds once. float32 calls keep their reduce_window."""

        a = _bound(node)
        x, out = _meta(a["self"]), _meta(node)
        if x is None or out is None or x.dtype not in _REDUCED or out.dtype != x.dtype or x.numel() == 0:
            return None
        options = _avg_options(a, nsp, x)
        if options is None or all(k == 1 for k in options["kernel"]):
            # a window of one element is element for element: compiler/fold.py makes it one fused op, cheaper
            # than the eager kernel's window program (avg_pool2d(x, 1, 1) of [2, 1, 4, 7]: 1.21 us against 1.27)
            return None
        return [a["self"]], {0: 0}, options

    return describe


def _run_avg_pool(step: dict, program: Any) -> Callable:
    """The eager kernel's average pooling (``_pool_forward`` in "avg" mode; the output's shape says ceil_mode)."""
    from device_impl.kernels.spatial.pool import _batched5, _pool_forward

    o = step["attrs"]
    nsp = o["nsp"]

    def run(nc, env) -> None:
        x = _operand_array(env, program, step["operands"][0])
        out = env.access(step["results"][0])
        _pool_forward(nc, env.scratch, _batched5(out, nsp), None, _batched5(x, nsp), o["kernel"], o["stride"],
                      o["padding"], o["dilation"], "avg", o["include"], o.get("divisor"))

    return run


def _avg_pool_backward(nsp: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``avg_pool{nsp}d_backward``: operand (grad_output), result grad_input (self read for its shape)."""

        a = _bound(node)
        g, x = _meta(a["grad_output"]), _meta(a["self"])
        if g is None or x is None or g.dtype not in _FLOATS or x.dtype != g.dtype or x.numel() == 0 \
                or (nsp == 3 and x.dtype != torch.float32):  # CPU's avg_pool3d backward: float32 only here
            return None
        options = _avg_options(a, nsp, x)
        if options is None:
            return None
        return [a["grad_output"]], {0: 0}, options

    return describe


def _run_avg_pool_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's average-pooling backward (``_pool_backward`` in "avg" mode)."""
    from device_impl.kernels.spatial.pool import _batched5, _pool_backward

    o = step["attrs"]
    nsp = o["nsp"]

    def run(nc, env) -> None:
        g = _operand_array(env, program, step["operands"][0])
        gi = env.access(step["results"][0])
        if gi.size:
            _pool_backward(nc, env.scratch, _batched5(gi, nsp), _batched5(g, nsp), None, o["kernel"], o["stride"],
                           o["padding"], o["dilation"], "avg", o["include"], o.get("divisor"))

    return run


def _channels_last(meta: torch.Tensor, nsp: int) -> bool:
    """The eager adaptive-average kernel's layout flag for a tensor of these metadata."""
    from device_impl.kernels.spatial.adaptive_pool import _memory_format

    return nsp == 2 and meta.dim() == 4 and _memory_format(meta) == torch.channels_last


def _adaptive_avg(nsp: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``_adaptive_avg_pool{nsp}d``: operand (self), result out."""

        a = _bound(node)
        x = _meta(a["self"])
        if x is None or x.dtype not in _FLOATS or x.numel() == 0 or _meta(node) is None or _meta(node).numel() == 0:
            return None
        return [a["self"]], {0: 0}, {"nsp": nsp, "channels_last": _channels_last(x, nsp)}

    return describe


def _adaptive_avg_backward(nsp: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``_adaptive_avg_pool{nsp}d_backward``: operand (grad_output), result grad_input."""

        a = _bound(node)
        g, x = _meta(a["grad_output"]), _meta(a["self"])
        if g is None or x is None or g.dtype not in _FLOATS or x.dtype != g.dtype or x.numel() == 0 \
                or g.dim() != x.dim() or tuple(g.shape[:-nsp]) != tuple(x.shape[:-nsp]):
            return None
        return [a["grad_output"]], {0: 0}, {"nsp": nsp, "channels_last": _channels_last(g, nsp)}

    return describe


def _run_adaptive_avg(step: dict, program: Any) -> Callable:
    """The eager kernel's adaptive average pooling (``_adaptive_avg_forward``: CPU's roundings on GpSimd)."""
    from device_impl.kernels.spatial.adaptive_pool import _adaptive_avg_forward
    from device_impl.kernels.spatial.tiles import _batched5

    o = step["attrs"]
    nsp = o["nsp"]

    def run(nc, env) -> None:
        x = _operand_array(env, program, step["operands"][0])
        out = env.access(step["results"][0])
        _adaptive_avg_forward(nc, _batched5(out, nsp), _batched5(x, nsp), nsp, o["channels_last"])

    return run


def _run_adaptive_avg_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's adaptive average pooling backward (``_adaptive_avg_backward``)."""
    from device_impl.kernels.spatial.adaptive_pool import _adaptive_avg_backward
    from device_impl.kernels.spatial.tiles import _batched5

    o = step["attrs"]
    nsp = o["nsp"]

    def run(nc, env) -> None:
        g = _operand_array(env, program, step["operands"][0])
        gi = env.access(step["results"][0])
        if gi.size:
            _adaptive_avg_backward(nc, _batched5(gi, nsp), _batched5(g, nsp), nsp, o["channels_last"])

    return run


def _adaptive_max(nsp: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``adaptive_max_pool{nsp}d``: operand (self), results {0: out, 1: indices}."""

        a = _bound(node)
        x = _meta(a["self"])
        if x is None or x.dtype not in _FLOATS or x.numel() == 0 or node.meta["val"][0].numel() == 0:
            return None
        return [a["self"]], {0: 0, 1: 1}, {"nsp": nsp}

    return describe


def _adaptive_max_backward(nsp: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``adaptive_max_pool{nsp}d_backward``: operands (grad_output, indices), result grad_input."""

        a = _bound(node)
        g, x, idx = _meta(a["grad_output"]), _meta(a["self"]), _meta(a["indices"])
        if g is None or x is None or idx is None or g.dtype not in _FLOATS or x.dtype != g.dtype \
                or idx.dtype != torch.int64 or tuple(idx.shape) != tuple(g.shape) or x.numel() == 0:
            return None
        return [a["grad_output"], a["indices"]], {0: 0}, {"nsp": nsp}

    return describe


def _run_adaptive_max(step: dict, program: Any) -> Callable:
    """The eager kernel's adaptive max pooling (``_adaptive_forward``: separable VectorE window stages)."""
    from device_impl.kernels.spatial.adaptive_pool import _adaptive_forward
    from device_impl.kernels.spatial.tiles import _batched5

    nsp = step["attrs"]["nsp"]

    def run(nc, env) -> None:
        x = _operand_array(env, program, step["operands"][0])
        out, idx = (env.access(v) for v in step["results"])
        _adaptive_forward(nc, _batched5(out, nsp), _batched5(idx, nsp), _batched5(x, nsp), "max")

    return run


def _run_adaptive_max_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's adaptive max pooling backward (``_adaptive_max_backward``: by the saved indices)."""
    from device_impl.kernels.spatial.adaptive_pool import _adaptive_max_backward
    from device_impl.kernels.spatial.tiles import _batched5

    nsp = step["attrs"]["nsp"]

    def run(nc, env) -> None:
        g, idx = (_operand_array(env, program, v) for v in step["operands"])
        gi = env.access(step["results"][0])
        if gi.size:
            _adaptive_max_backward(nc, _batched5(gi, nsp), _batched5(g, nsp), _batched5(idx, nsp))

    return run


# -- replication padding backward ---------------------------------------------------------------------------

def _replication_pad_backward(n: int) -> Callable:
    def describe(node: torch.fx.Node) -> Any:
        """``replication_pad{n}d_backward``: operand (grad_output), result grad_input (self read for its shape);
        the gradients of CPU's edge positions summed in its order (``kernels.shape.pad``'s folds)."""

        a = _bound(node)
        g, x, padding = _meta(a["grad_output"]), _meta(a["self"]), _ints(a["padding"])
        if g is None or x is None or padding is None or len(padding) != 2 * n or g.dtype not in _FLOATS \
                or x.dtype != g.dtype or g.dim() != x.dim() or x.dim() not in (n + 1, n + 2) or x.numel() == 0:
            return None
        expected = [x.shape[d] + padding[2 * (x.dim() - 1 - d)] + padding[2 * (x.dim() - 1 - d) + 1]
                    if d >= x.dim() - n else x.shape[d] for d in range(x.dim())]
        if list(g.shape) != expected:
            return None
        return [a["grad_output"]], {0: 0}, {"n": n, "padding": padding}

    return describe


def _run_replication_pad_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's replication-padding backward (``kernels.shape.pad._Pad.backward_program``), as opaque_pads
    runs reflection padding's."""
    from device_impl.compiler.opaque_pads import run_pad_backward

    return run_pad_backward(step, program, "replication")


# -- grid sampling ------------------------------------------------------------------------------------------

def _grid_ok(x: torch.Tensor | None, grid: torch.Tensor | None, interpolation: Any) -> bool:
    """Whether the eager kernel's checks (``grid_sample._grid_check``) pass: a refused call stays uncut."""
    from device_impl.kernels.spatial.grid_sample import _grid_check

    if x is None or grid is None or x.dtype not in _FLOATS or not isinstance(interpolation, int):
        return False
    try:
        _grid_check(x, grid, interpolation)
    except (RuntimeError, NotImplementedError):
        return False
    return x.numel() > 0 and grid.numel() > 0


def _grid_sample(node: torch.fx.Node) -> Any:
    """``grid_sampler_2d``: operands (input, grid), result out."""

    a = _bound(node)
    if not _grid_ok(_meta(a["input"]), _meta(a["grid"]), a["interpolation_mode"]) \
            or not isinstance(a["padding_mode"], int):
        return None
    return [a["input"], a["grid"]], {0: 0}, {"interpolation": a["interpolation_mode"],
                                             "padding": a["padding_mode"], "align_corners": bool(a["align_corners"])}


def _grid_sample_backward(node: torch.fx.Node) -> Any:
    """``grid_sampler_2d_backward``: operands (grad_output, input, grid), results {0: grad_input (where
    ``output_mask`` asks for it), 1: grad_grid}."""

    a = _bound(node)
    g, x, grid = _meta(a["grad_output"]), _meta(a["input"]), _meta(a["grid"])
    if not _grid_ok(x, grid, a["interpolation_mode"]) or not isinstance(a["padding_mode"], int) or g is None \
            or g.dtype != x.dtype or tuple(g.shape) != (x.shape[0], x.shape[1], grid.shape[1], grid.shape[2]):
        return None
    mask = [bool(m) for m in a["output_mask"]]
    results = {0: 0, 1: 1} if mask[0] else {1: 0}
    return [a["grad_output"], a["input"], a["grid"]], results, {
        "interpolation": a["interpolation_mode"], "padding": a["padding_mode"],
        "align_corners": bool(a["align_corners"]), "input_grad": mask[0]}


def _run_grid_sample(step: dict, program: Any) -> Callable:
    """The eager kernel's grid sampling program (``kernels.spatial.grid_sample.forward_program``)."""
    from device_impl.kernels.spatial.grid_sample import forward_program

    o = step["attrs"]

    def run(nc, env) -> None:
        x, grid = (_operand_array(env, program, v) for v in step["operands"])
        out = env.access(step["results"][0])
        if out.size:
            forward_program(nc, env.scratch, x, grid, out, o["interpolation"], o["padding"], o["align_corners"])

    return run


def _run_grid_sample_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's grid sampling backward (``kernels.spatial.grid_sample.backward_program``)."""
    from device_impl.kernels.spatial.grid_sample import backward_program

    o = step["attrs"]

    def run(nc, env) -> None:
        go, x, grid = (_operand_array(env, program, v) for v in step["operands"])
        results = [env.access(v) for v in step["results"]]
        gi, gg = results if o["input_grad"] else (None, results[0])
        if gg.size or (gi is not None and gi.size):
            backward_program(nc, env.scratch, x, grid, go, gi, gg, o["interpolation"], o["padding"],
                             o["align_corners"])

    return run


# -- distances ----------------------------------------------------------------------------------------------

def _cdist(node: torch.fx.Node) -> Any:
    """``_cdist_forward``: operands (x1, x2), result out; the eager kernel's path (CPU's matrix-product form for
    p = 2 where ``compute_mode`` or the sizes ask for it, else the direct one, float32 only) fixed when cut."""
    from device_impl.kernels.spatial.distance import _cdist_check

    a = _bound(node)
    x1, x2, out, p = _meta(a["x1"]), _meta(a["x2"]), _meta(node), a["p"]
    if x1 is None or x2 is None or out is None or out.numel() == 0 or not isinstance(p, (int, float)) \
            or x1.dtype not in _FLOATS or x2.dtype != x1.dtype:
        return None
    try:
        mode = _cdist_check(x1, x2, p, a["compute_mode"])
    except RuntimeError:
        return None
    r1, r2 = x1.shape[-2], x2.shape[-2]
    use_mm = p == 2 and (mode == 1 or (mode == 0 and (r1 > 25 or r2 > 25)))
    if not use_mm and x1.dtype != torch.float32:
        return None
    return [a["x1"], a["x2"]], {0: 0}, {"p": float(p), "use_mm": bool(use_mm)}


def _euclidean_dist(node: torch.fx.Node) -> Any:
    """``_euclidean_dist``: operands (x1, x2), result out; the ``cdist`` step on CPU's matrix-product path (p = 2,
    ``use_mm``), which is the eager kernel's program for this op (``distance._euclidean_into`` per broadcast batch).
    PyTorch's decomposition (concatenations of the augmented rows, a product, a clamp and a root) took 9 steps and
    5.58 us against the eager kernel's 4.18 for [8, 4] by [513, 4] float32; ``opaque.WHOLE`` keeps the op out of
    AOTAutograd's decompositions. Refused (the graph then runs eagerly: the kernel's error or empty result) for
    what the eager kernel does not compute: mixed or non-float dtypes, rank under 2, mismatched last dims, an empty
    result."""
    a = _bound(node)
    x1, x2, out = _meta(a["x1"]), _meta(a["x2"]), _meta(node)
    if x1 is None or x2 is None or out is None or out.numel() == 0 or x1.dtype not in _FLOATS \
            or x2.dtype != x1.dtype or out.dtype != x1.dtype or min(x1.dim(), x2.dim()) < 2 \
            or x1.shape[-1] != x2.shape[-1]:
        return None
    return [a["x1"], a["x2"]], {0: 0}, {"p": 2.0, "use_mm": True}


def _pdist(node: torch.fx.Node) -> Any:
    """``_pdist_forward``: operand (self), result out; float32, 2-D, contiguous (the eager kernel's checks)."""

    a = _bound(node)
    x, out, p = _meta(a["self"]), _meta(node), a["p"]
    if x is None or out is None or out.numel() == 0 or x.dtype != torch.float32 or x.dim() != 2 \
            or not x.is_contiguous() or not isinstance(p, (int, float)) or p < 0:
        return None
    return [a["self"]], {0: 0}, {"p": float(p)}


def _run_cdist(step: dict, program: Any) -> Callable:
    """The eager kernel's distance program (``kernels.spatial.distance.cdist_program``)."""
    from device_impl.kernels.spatial.distance import cdist_program

    o = step["attrs"]

    def run(nc, env) -> None:
        x1, x2 = (_operand_array(env, program, v) for v in step["operands"])
        cdist_program(nc, env.scratch, x1, x2, env.access(step["results"][0]), o["p"], o["use_mm"])

    return run


def _run_pdist(step: dict, program: Any) -> Callable:
    """The eager kernel's pairwise-distance program (``kernels.spatial.distance.pdist_program``)."""
    from device_impl.kernels.spatial.distance import pdist_program

    o = step["attrs"]

    def run(nc, env) -> None:
        pdist_program(nc, _operand_array(env, program, step["operands"][0]), env.access(step["results"][0]),
                      o["p"])

    return run


# -- convolution_overrideable -------------------------------------------------------------------------------

def _convolution_overrideable(node: torch.fx.Node) -> Any:
    """``convolution_overrideable`` (the device's convolution, which torch-mlir refuses): operands (input,
    weight[, bias]), result out, run as the eager kernel's ``conv._conv_run`` with the parameters it normalises
    (``conv._conv_output``, which also refuses what the eager op refuses). Said as ``aten.convolution`` instead
    it compiles, but the compiled grouped convolution cost 1.02x the eager kernel (2.31 against 2.26 us)."""
    from device_impl.kernels.spatial.conv import _conv_output, skips_padding, sums_from_zero

    a = _bound(node)
    x, w, out = _meta(a["input"]), _meta(a["weight"]), _meta(node)
    b = _meta(a["bias"]) if a["bias"] is not None else None
    if x is None or w is None or out is None or (a["bias"] is not None and b is None) or x.dtype not in _FLOATS \
            or w.dtype != x.dtype or (b is not None and b.dtype != x.dtype) or out.numel() == 0:
        return None
    args = [a[k] for k in ("stride", "padding", "dilation", "output_padding")]
    if any(_ints(v) is None for v in args) or not isinstance(a["groups"], int):
        return None
    try:
        params, shape = _conv_output(x, w, b, *[_ints(v) for v in args[:3]], bool(a["transposed"]),
                                     _ints(args[3]), a["groups"])
    except (RuntimeError, ValueError):
        return None
    if list(shape) != list(out.shape):
        return None
    nsp, stride, padding, dilation, output_padding, groups = params
    operands = [a["input"], a["weight"]] + ([a["bias"]] if a["bias"] is not None else [])
    return operands, {0: 0}, {"nsp": nsp, "stride": list(stride), "padding": list(padding),
                              "dilation": list(dilation), "output_padding": list(output_padding), "groups": groups,
                              "transposed": bool(a["transposed"]),
                              # decided now, as the eager kernel decides at each call; in the cut's key, so the
                              # NEFF's keys cover it (compiler.conv_padding)
                              "skip_padding": skips_padding(x, w, params, bool(a["transposed"])),
                              "from_zero": sums_from_zero(x, w, b, params, bool(a["transposed"]))}


def _convolution_costed(node: torch.fx.Node) -> Any:
    """``aten.convolution`` (which torch-mlir imports: a StableHLO convolution, its bias added after it) cut as the
    eager kernel's ``conv._conv_run`` like ``convolution_overrideable``, only where that is modelled faster than the
    imported form (``costed.cut_wins``). Outputs no product reaches (a transposed convolution's stride past its
    kernel) are CPU's 0 + bias in the eager program too (``kernels.spatial.conv._unreached``: a -0.0 bias gives
    +0.0 there), so such a call is costed like any: the sweep's bfloat16 ``conv_transpose3d`` (stride 2, padding 1,
    a 1x1x1 kernel; half its outputs unreached) is cut, 1.515 us imported against 1.380 (the eager kernel's)."""
    from device_impl.compiler import costed

    described = _convolution_overrideable(node)
    if described is None:
        return None
    a = _bound(node)
    args = (_meta(a["input"]), _meta(a["weight"]), _meta(a["bias"]) if a["bias"] is not None else None,
            *[list(_ints(a[k])) for k in ("stride", "padding", "dilation")], bool(a["transposed"]),
            list(_ints(a["output_padding"])), a["groups"])
    return described if costed.cut_wins(aten.convolution.default, args) else None


def _run_convolution(step: dict, program: Any) -> Callable:
    """The eager convolution kernel's program (``kernels.spatial.conv._conv_run``)."""
    from device_impl.kernels.spatial.conv import _conv_run

    o = step["attrs"]

    def run(nc, env) -> None:
        x, w, *bias = (_operand_array(env, program, v) for v in step["operands"])
        out = env.access(step["results"][0])
        if out.size:
            _conv_run(nc, env.scratch, out, x, w, bias[0] if bias else None, o["nsp"], o["stride"], o["padding"],
                      o["dilation"], o["transposed"], o["output_padding"], o["groups"],
                      skip_padding=o.get("skip_padding", False), from_zero=o.get("from_zero", False))

    return run


# -- upsampling backward ------------------------------------------------------------------------------------

def _upsample_backward(kind: str, nsp: int) -> Callable:
    aligned = kind in ("linear", "cubic")

    def describe(node: torch.fx.Node) -> Any:
        """``<upsample>_backward``: operand (grad_output), result grad_input; static sizes and scales."""

        a = _bound(node)
        g = _meta(a["grad_output"])
        out_size, in_size = _ints(a["output_size"]), _ints(a["input_size"])
        if g is None or g.dtype not in _FLOATS or out_size is None or in_size is None or g.numel() == 0 \
                or any(v <= 0 for v in in_size):
            return None
        names = ["scales"] if nsp == 1 else [f"scales_{d}" for d in "dhw"[3 - nsp:]]
        scales = [a[n] for n in names]
        if any(v is not None and not isinstance(v, (int, float)) for v in scales):
            return None
        return [a["grad_output"]], {0: 0}, {
            "kind": kind, "nsp": nsp, "output_size": out_size, "input_size": in_size,
            "align_corners": bool(a["align_corners"]) if aligned else False,
            "scales": [None if v is None else float(v) for v in scales]}

    return describe


def _run_upsample_backward(step: dict, program: Any) -> Callable:
    """The eager kernel's upsampling backward (``kernels.spatial.resample._resample_backward``: each axis's
    adjoint stage scattering into a zeroed fp32 table); its axes (taps and weights) built once, at link time."""
    from device_impl.kernels.spatial.resample import _Axis, _resample_backward
    from device_impl.kernels.spatial.tiles import _to5d

    o = step["attrs"]
    nsp, kind = o["nsp"], o["kind"]
    # resample._axes_for's backward axes (no tensor at hand here: they depend on sizes and options only; the
    # weights are fp32 and nearest takes CPU's nearest_idx special cases, as in every backward kernel)
    axes = {}
    for i, (isize, osize) in enumerate(zip(list(o["input_size"])[2:], o["output_size"])):
        scale = o["scales"][i] if i < len(o["scales"]) else None
        axes[5 - nsp + i] = _Axis(isize, osize, kind, scale, o["align_corners"], None) \
            if kind in ("linear", "cubic") else _Axis(isize, osize, kind, scale, special=True)

    def run(nc, env) -> None:
        g = _operand_array(env, program, step["operands"][0])
        gi = env.access(step["results"][0])
        if gi.size:
            _resample_backward(nc, env.scratch, _to5d(gi, nsp), _to5d(g, nsp), axes)

    return run


def _upsample_cutters() -> dict[Any, tuple[str, Callable]]:
    from device_impl.kernels.spatial.resample import _UPSAMPLE_NAMES

    return {getattr(aten, f"{name}_backward").default: ("upsample_backward", _upsample_backward(kind, nsp))
            for kind, dims in _UPSAMPLE_NAMES.items() for nsp, name in dims.items()}


# FX target -> (step kind, describer): merged into opaque.CUTTERS
CUTTERS: dict[Any, tuple[str, Callable]] = {
    aten.max_pool2d_with_indices.default: ("max_pool", _max_pool(2)),
    aten.max_pool3d_with_indices.default: ("max_pool", _max_pool(3)),
    aten.max_pool2d_with_indices_backward.default: ("max_pool_backward", _max_pool_backward(2)),
    aten.max_pool3d_with_indices_backward.default: ("max_pool_backward", _max_pool_backward(3)),
    aten._native_batch_norm_legit_functional.default: ("batch_norm", _batch_norm(None, True)),
    aten._native_batch_norm_legit.no_stats: ("batch_norm", _batch_norm(None, False)),
    aten._native_batch_norm_legit_no_training.default: ("batch_norm", _batch_norm(False, True)),
    aten.native_batch_norm_backward.default: ("batch_norm_backward", _batch_norm_backward),
    aten.native_group_norm.default: ("group_norm", _group_norm),
    aten.avg_pool2d.default: ("avg_pool", _avg_pool(2)),  # bfloat16/float16 only (avg_pool1d decomposes into it)
    aten.avg_pool2d_backward.default: ("avg_pool_backward", _avg_pool_backward(2)),
    aten.avg_pool3d_backward.default: ("avg_pool_backward", _avg_pool_backward(3)),
    # 2-d too (adaptive_avg_pool1d's unsqueezed input): said as a reduce_window and a divide it took two steps
    # and 1.59 us against the eager kernel's 1.19 us
    aten._adaptive_avg_pool2d.default: ("adaptive_avg_pool", _adaptive_avg(2)),
    aten._adaptive_avg_pool3d.default: ("adaptive_avg_pool", _adaptive_avg(3)),
    aten._adaptive_avg_pool2d_backward.default: ("adaptive_avg_pool_backward", _adaptive_avg_backward(2)),
    aten._adaptive_avg_pool3d_backward.default: ("adaptive_avg_pool_backward", _adaptive_avg_backward(3)),
    aten.adaptive_max_pool2d.default: ("adaptive_max_pool", _adaptive_max(2)),
    aten.adaptive_max_pool3d.default: ("adaptive_max_pool", _adaptive_max(3)),
    aten.adaptive_max_pool2d_backward.default: ("adaptive_max_pool_backward", _adaptive_max_backward(2)),
    aten.adaptive_max_pool3d_backward.default: ("adaptive_max_pool_backward", _adaptive_max_backward(3)),
    aten.grid_sampler_2d.default: ("grid_sample", _grid_sample),
    aten.grid_sampler_2d_backward.default: ("grid_sample_backward", _grid_sample_backward),
    aten._cdist_forward.default: ("cdist", _cdist),
    aten._euclidean_dist.default: ("cdist", _euclidean_dist),
    aten._pdist_forward.default: ("pdist", _pdist),
    aten.convolution_overrideable.default: ("convolution_overrideable", _convolution_overrideable),
    aten.convolution.default: ("convolution_overrideable", _convolution_costed),
    **_upsample_cutters(),
    **{getattr(aten, f"replication_pad{n}d_backward").default: ("replication_pad_backward",
                                                                _replication_pad_backward(n)) for n in (1, 2, 3)},
}

# step kind -> runner: merged into steps.RUNNERS
RUNNERS: dict[str, Callable] = {
    "max_pool": _run_max_pool,
    "max_pool_backward": _run_max_pool_backward,
    "batch_norm": _run_batch_norm,
    "batch_norm_backward": _run_batch_norm_backward,
    "group_norm": _run_group_norm,
    "avg_pool": _run_avg_pool,
    "avg_pool_backward": _run_avg_pool_backward,
    "adaptive_avg_pool": _run_adaptive_avg,
    "adaptive_avg_pool_backward": _run_adaptive_avg_backward,
    "adaptive_max_pool": _run_adaptive_max,
    "adaptive_max_pool_backward": _run_adaptive_max_backward,
    "grid_sample": _run_grid_sample,
    "grid_sample_backward": _run_grid_sample_backward,
    "cdist": _run_cdist,
    "pdist": _run_pdist,
    "convolution_overrideable": _run_convolution,
    "upsample_backward": _run_upsample_backward,
    "replication_pad_backward": _run_replication_pad_backward,
}

# step kind -> how the static replay runs it (replay.STEP_KINDS): the eager tile programs' instructions follow
# from the shapes and the step's options (pool windows by position; batch norm's engines fixed per layout)
STEP_KINDS: dict[str, str] = {kind: "tile" for kind in RUNNERS}
# grid sampling reads its input's rows by indirect DMA at positions the grid's values give: not audited as
# shape-only, so a program holding it is never replayed (replay.STEP_KINDS "data")
STEP_KINDS.update(grid_sample="data", grid_sample_backward="data")

# AOTAutograd decompositions (merged into backend's table after the core ones): ops whose cut calls must reach
# the traced graph whole
DECOMPOSITIONS: dict[Any, Callable] = {
    aten.native_batch_norm_backward.default: _native_batch_norm_backward_decomposition,
}
