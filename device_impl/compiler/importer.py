"""FX graph -> StableHLO (torch-mlir) -> the compiler's IR (``ir.Graph``).

The StableHLO module is read through torch-mlir's Python IR bindings, op by op:
names, operand/result values, ranked result types, and attributes converted to
Python data. Constants become splat scalars or numpy payloads (``dense_resource``
blobs are read from the module's resource section). The module's text is kept:
its hash keys the compile cache and it is what ``stablehlo/`` artifacts hold.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from typing import Any, Iterator

import numpy as np
import torch

from device_impl.compiler.errors import ImportFailure
from device_impl.compiler.ir import ELEMENT_TYPES, Graph, Op, TensorType, numpy_dtype


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """MLIR prints its diagnostics straight to file descriptor 2; keep them for the error message
    instead of letting them interleave with the user's output."""
    lines: list[str] = []
    try:
        saved = os.dup(2)
    except OSError:  # no stderr descriptor (embedded interpreters): nothing to capture
        yield lines
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode(errors="replace").splitlines())


_ILLEGAL = re.compile(r"failed to legalize operation '([\w.]+)'")
_OPERATOR = re.compile(r'name = "([\w.]+)"')


def _context():
    """A torch-mlir context that loads a dialect when the import or a pass first needs it.

    torch-mlir's ``ir.Context()`` loads every dialect its MLIR build registers (LLVM, GPU, the sparse tensor
    and transform dialects ...) and their LLVM translations: about 5 ms of the ~13 ms an import of an op
    suite graph costs, paid by every compile since each import gets a new context. The FX importer and the
    lowering pipelines load the few they use on demand (each pass declares its dependent dialects), so the
    module they print is the same text (checked on 212 op-suite graphs, their import errors included)."""
    from torch_mlir.dialects import torch as torch_d

    context = _bare_context()
    torch_d.register_dialect(context)
    return context


def _bare_context():
    """A torch-mlir context that loads no dialect until one is needed (see ``_context``)."""
    from torch_mlir import ir

    try:
        return ir.Context(load_on_create_dialects=[])
    except TypeError:  # a torch-mlir without the argument: its default context
        return ir.Context()


def _import(gm: torch.fx.GraphModule):
    """torch-mlir's ``stateless_fx_import(gm, output_type="stablehlo")`` in a ``_context()``. That function
    makes a full context itself before it looks at an importer passed to it, so its two steps (the FX import,
    then the lowering pipelines) are called here; a torch-mlir without the lowering helper gets the function."""
    from torch_mlir import fx as torch_mlir_fx

    lowering = getattr(torch_mlir_fx, "_module_lowering", None)
    if lowering is None:
        return torch_mlir_fx.stateless_fx_import(gm, output_type="stablehlo")
    from torch_mlir.compiler_utils import BackendLoweringOptions, OutputType
    from torch_mlir.extras.fx_importer import FxImporter

    fx_importer = FxImporter(context=_context())
    fx_importer.import_stateless_graph(gm.graph, func_name="main")
    return lowering(False, False, OutputType.STABLEHLO, fx_importer.module,
                    fx_import_options=torch_mlir_fx.FxImportOptions(), backend_options=BackendLoweringOptions())


def from_text(text: str):
    """The StableHLO module printed as ``text`` (``cache.lookup_import``'s memo), parsed in a context with the
    StableHLO dialect; None when this torch-mlir cannot parse it (a dialect its Python bindings do not
    register: the caller imports the graph again). Reading the parsed module gives the same ``ir.Graph`` as
    reading the imported one (checked on 189 op-suite graphs, text and graph), for a fifth of the cost."""
    from torch_mlir import ir

    try:
        from torch_mlir._mlir_libs import _stablehlo
    except ImportError:
        return None
    context = _bare_context()
    _stablehlo.register_dialect(context)
    with _captured_stderr():
        try:
            return ir.Module.parse(text, context=context)
        except Exception:  # noqa: BLE001 - MLIRError (an unregistered dialect), or a damaged text
            return None


def to_stablehlo(gm: torch.fx.GraphModule):
    """Import ``gm`` with torch-mlir; returns the MLIR module."""
    from device_impl.compiler.parity import _real_tensors

    with _captured_stderr() as diagnostics, _real_tensors():  # a graph constant is a real tensor: read its values
        try:
            return _import(gm)
        except Exception as e:  # torch-mlir raises its own error types (and AssertionError) here
            error = e
    lines = [line for line in diagnostics + str(error).strip().splitlines() if line.strip()]
    detail = next((line for line in lines if "failed to legalize" in line),
                  next((line for line in lines if "error" in line.lower()), lines[0] if lines else type(error).__name__))
    op = "torch-mlir import"
    match = _ILLEGAL.search(detail)
    if match:
        op = match.group(1)
        if op == "torch.operator":
            named = _OPERATOR.search(detail)
            op = named.group(1) if named else op
    raise ImportFailure(f"torch-mlir could not lower the graph to StableHLO: {detail.strip()[:400]}", op) from error


def _tensor_type(t) -> TensorType:
    from torch_mlir import ir

    ranked = ir.RankedTensorType(t)
    dynamic = tuple(i for i in range(ranked.rank) if ranked.is_dynamic_dim(i))
    shape = tuple(-1 if i in dynamic else int(d) for i, d in enumerate(ranked.shape))
    element = str(ranked.element_type)
    if element not in ELEMENT_TYPES:
        raise ImportFailure(f"element type {element} has no device dtype")
    return TensorType(shape, ELEMENT_TYPES[element], dynamic)


_DIMS = re.compile(r"(\w+) = \[([\d, ]*)\]")


def _attr(value) -> Any:
    """An MLIR attribute as Python data: ints, lists of ints, strings, or the attribute's text."""
    from torch_mlir import ir

    if isinstance(value, ir.DenseI64ArrayAttr) or isinstance(value, ir.DenseBoolArrayAttr):
        return [int(v) for v in value]
    if isinstance(value, ir.BoolAttr):
        return bool(value.value)
    if isinstance(value, ir.IntegerAttr):
        return int(value.value)
    if isinstance(value, ir.FloatAttr):
        return float(value.value)
    if isinstance(value, ir.StringAttr):
        return value.value
    if isinstance(value, ir.ArrayAttr):
        return [_attr(v) for v in value]
    if isinstance(value, (ir.DenseIntElementsAttr, ir.DenseFPElementsAttr)):  # padding, window attributes
        try:
            return np.array(value).tolist()
        except TypeError:  # element types numpy lacks (bf16): keep the text
            return str(value)
    text = str(value)
    if text.startswith("#stablehlo.conv<"):  # [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1]
        return {"kind": "conv", "layouts": [part.strip(" []").split(", ")
                                            for part in re.split(r"\]x\[|\]->\[", text[len("#stablehlo.conv<"):-1])]}
    if text.startswith("#stablehlo.") and "<" in text:  # dimension numbers: a dict of int lists
        fields: dict[str, Any] = {k: [int(x) for x in v.split(",") if x.strip()] for k, v in _DIMS.findall(text)}
        for k, v in re.findall(r"(\w+) = (\d+)(?![\d\]])", text):
            fields[k] = int(v)
        fields["kind"] = text.split("<", 1)[0][len("#stablehlo."):]
        return fields
    match = re.fullmatch(r"#stablehlo<\w+ (\w+)>", text)
    if match:  # comparison_direction, comparison_type, precision ...
        return match.group(1)
    return text


_RESOURCE = re.compile(r"^\s*([\w.]+): \"0x([0-9A-Fa-f]*)\"", re.M)


def _resources(module) -> dict[str, bytes]:
    text = str(module)
    section = text.split("dialect_resources:", 1)
    if len(section) < 2:
        return {}
    return {name: bytes.fromhex(blob)[4:] for name, blob in _RESOURCE.findall(section[1])}  # 4 B alignment header


def _constant(value, result: TensorType, resources: dict[str, bytes]) -> tuple[Any, np.ndarray | None]:
    """(splat scalar or None, payload or None) of a constant attribute."""
    from torch_mlir import ir

    dtype = numpy_dtype(result.dtype)
    if isinstance(value, ir.DenseElementsAttr):
        if value.is_splat:
            splat = value.get_splat_value()
            scalar = bool(splat.value) if result.dtype == "bool" else splat.value
            return np.asarray(scalar).astype(dtype)[()].item(), None
        try:
            return None, np.array(value).astype(dtype).reshape(result.shape)
        except Exception:  # noqa: BLE001 - bf16/i1 payloads without a buffer protocol: read the text
            numbers = re.findall(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|inf|nan|true|false|0x[0-9A-Fa-f]+)",
                                 str(value).split(":")[0][len("dense<"):])
            return None, _parse_numbers(numbers, dtype).reshape(result.shape)
    text = str(value)
    match = re.match(r"dense_resource<([\w.]+)>", text)
    if match and match.group(1) in resources:
        raw = resources[match.group(1)]
        return None, np.frombuffer(raw, dtype=dtype).reshape(result.shape).copy()
    raise ImportFailure(f"unreadable constant {text[:80]}")


def _parse_numbers(tokens: list[str], dtype: np.dtype) -> np.ndarray:
    values: list[Any] = []
    for t in tokens:
        if t in ("true", "false"):
            values.append(t == "true")
        elif t.startswith("0x"):
            raw = int(t, 16).to_bytes(dtype.itemsize, "big")[::-1]
            values.append(np.frombuffer(raw, dtype=dtype)[0])
        else:
            values.append(float(t))
    return np.asarray(values).astype(dtype)


def _asm_state(function):
    """One printing state of ``function`` for naming its values (None: a binding without ``AsmState``)."""
    from torch_mlir import ir

    make = getattr(ir, "AsmState", None)
    return make(function.operation) if make is not None else None


def _name(value, state) -> str:
    """``value``'s name, from ``state`` (``_asm_state``) where the bindings have one."""
    return value.get_name(state) if state is not None else value.get_name()


def _body(block, state=None) -> list[dict[str, Any]]:
    """A reduction/comparator region as data: ops with operands "a<i>" (block argument i) or
    "v<j>" (result of body op j), names and attributes. ``state``: the function's printing state
    (``_asm_state``), which names the region's values too."""
    refs = {_name(arg, state): f"a{i}" for i, arg in enumerate(block.arguments)}
    ops: list[dict[str, Any]] = []
    for j, inner in enumerate(block.operations):
        o = inner.operation
        operands = [refs.get(_name(v, state), "?") for v in o.operands]
        for r in o.results:
            refs[_name(r, state)] = f"v{j}"
        attrs = {o.attributes[i].name: _attr(o.attributes[i].attr) for i in range(len(o.attributes))}
        ops.append({"name": o.name.split(".", 1)[-1], "operands": operands, "attrs": attrs})
    return ops


def read_module(module) -> Graph:
    """Copy the module's ``main`` function into an ``ir.Graph``."""
    funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
    if len(funcs) != 1:
        raise ImportFailure(f"expected one function in the StableHLO module, found {len(funcs)}")
    block = funcs[0].regions[0].blocks[0]
    ids: dict[str, int] = {}
    types: dict[int, TensorType] = {}
    # A value's name from one printing state of the function: ``Value.get_name()`` without one numbers the
    # whole function again at every call (quadratic: 4 ms of a small graph's import, more than the rest of
    # reading it)
    state = _asm_state(funcs[0])

    def value_id(value) -> int:
        name = _name(value, state)
        if name not in ids:
            ids[name] = len(ids)
            types[ids[name]] = _tensor_type(value.type)
        return ids[name]

    inputs = [value_id(a) for a in block.arguments]
    graph = Graph(inputs=inputs, outputs=[], ops=[], types=types)
    resources: dict[str, bytes] | None = None
    for operation in block.operations:
        o = operation.operation
        name = o.name
        if name == "func.return":
            graph.outputs = [value_id(v) for v in o.operands]
            continue
        operands = tuple(value_id(v) for v in o.operands)
        results = tuple(value_id(r) for r in o.results)
        is_constant = name in ("stablehlo.constant", "arith.constant")
        attrs = {} if is_constant else {o.attributes[i].name: _attr(o.attributes[i].attr)
                                         for i in range(len(o.attributes))}
        if o.regions and len(o.regions[0].blocks):
            attrs["body"] = _body(o.regions[0].blocks[0], state)
        short = name.split(".", 1)[1] if name.startswith(("stablehlo.", "chlo.")) else name
        op = Op(short if not name.startswith("arith.constant") else "constant", operands, results,
                tuple(types[r] for r in results), attrs)
        if op.name == "constant":
            if resources is None:
                resources = _resources(module)
            splat, payload = _constant(o.attributes["value"], op.type, resources)
            op.attrs = {}
            if payload is None:
                graph.splats[op.result] = splat
            else:
                graph.constants[op.result] = payload
        graph.ops.append(op)
    return graph
