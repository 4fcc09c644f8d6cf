"""The compiled program: what a NEFF holds and the runtime executes.

A program is plain data (JSON-able dicts and lists, plus numpy constant
payloads), so it can be written to disk, hashed, loaded by another process
and inspected. Values are integers (StableHLO value ids). Every value a step
reads is a *base* value in an HBM buffer seen through a chain of layout ops
(``views``: reshape, transpose, broadcast_in_dim, slice, reverse), which the
reading DMA applies as an access pattern; a base is a graph input, a
constant, a buffer some step wrote, or a splat (an immediate).

Buffers (the memory plan of HBM):
  input     the graph input at ``index``
  output    the graph output at ``index`` (the producing step writes it in place)
  constant  payload ``constants[vid]``, loaded to HBM once per device
  scratch   bytes [offset, offset + nbytes) of the per-execution scratch arena
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from device_impl.compiler.ir import numpy_dtype


@dataclass
class Program:
    name: str
    inputs: list[int]
    outputs: list[int]
    types: dict[int, tuple[tuple[int, ...], str]]  # vid -> (shape, dtype name)
    views: dict[int, dict[str, Any]]  # vid -> {"op", "src", attrs...}
    splats: dict[int, Any]  # vid -> Python scalar
    buffers: dict[int, dict[str, Any]]  # base vid -> {"kind", "index" | "offset"}
    steps: list[dict[str, Any]]
    memory: dict[str, Any] = field(default_factory=dict)  # scratch_bytes, sbuf peaks, arena layout
    constants: dict[int, np.ndarray] = field(default_factory=dict)
    # what the launch measures, recorded at compile time (compiler.replay); None: never replayed
    schedule: dict[str, Any] | None = None

    def base(self, vid: int) -> int:
        while vid in self.views:
            vid = self.views[vid]["src"]
        return vid

    def chain(self, vid: int) -> list[dict[str, Any]]:
        """Layout ops from the base value to ``vid``, in application order."""
        ops = []
        while vid in self.views:
            ops.append(self.views[vid])
            vid = self.views[vid]["src"]
        ops.reverse()
        return ops

    def shape(self, vid: int) -> tuple[int, ...]:
        return self.types[vid][0]

    def dtype(self, vid: int) -> np.dtype:
        return numpy_dtype(self.types[vid][1])

    # -- serialisation (the NEFF header holds this dict) ----------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "inputs": self.inputs, "outputs": self.outputs,
            "types": [[v, list(s), d] for v, (s, d) in sorted(self.types.items())],
            "views": [[v, view] for v, view in sorted(self.views.items())],
            "splats": [[v, _json_scalar(x)] for v, x in sorted(self.splats.items())],
            "buffers": [[v, b] for v, b in sorted(self.buffers.items())],
            "steps": self.steps, "memory": self.memory, "schedule": self.schedule,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], constants: dict[int, np.ndarray]) -> "Program":
        return cls(
            name=data["name"], inputs=list(data["inputs"]), outputs=list(data["outputs"]),
            types={int(v): (tuple(s), d) for v, s, d in data["types"]},
            views={int(v): view for v, view in data["views"]},
            splats={int(v): _from_json_scalar(x) for v, x in data["splats"]},
            buffers={int(v): b for v, b in data["buffers"]},
            steps=data["steps"], memory=data["memory"], constants=constants, schedule=data.get("schedule"),
        )


def _json_scalar(x: Any) -> Any:
    if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
        return {"float": repr(x)}  # JSON has no nan/inf literals
    return x


def _from_json_scalar(x: Any) -> Any:
    if isinstance(x, dict):
        return float(x["float"])
    return x


# -- layout ops on numpy views (the DMA access patterns) --------------------------------------------

def apply_view(x: np.ndarray, view: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    """``x`` seen through one layout op whose result has ``shape``; never copies except a reshape
    numpy cannot express as strides (then the copy is what a DMA gathering the pattern would read)."""
    op = view["op"]
    if op == "reshape":
        return x.reshape(shape)
    if op == "transpose":
        return x.transpose(view["permutation"])
    if op == "broadcast_in_dim":
        return broadcast_in_dim(x, view["broadcast_dimensions"], shape)
    if op == "slice":
        return x[tuple(slice(a, b, s) for a, b, s in zip(view["start_indices"], view["limit_indices"],
                                                         view["strides"]))]
    if op == "reverse":
        dims = set(view["dimensions"])
        return x[tuple(slice(None, None, -1) if d in dims else slice(None) for d in range(x.ndim))]
    raise AssertionError(f"not a layout op: {op}")


def broadcast_in_dim(x: np.ndarray, dims: list[int], shape: tuple[int, ...]) -> np.ndarray:
    """stablehlo.broadcast_in_dim as a stride-0 view: operand dim i becomes result dim dims[i]."""
    x = np.asarray(x)
    if x.ndim:
        order = sorted(range(x.ndim), key=lambda i: dims[i])
        x = x.transpose(order)
        dims = sorted(dims)
    expanded = [1] * len(shape)
    for i, d in enumerate(dims):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


def operand_array(env: Any, program: Program, vid: int) -> np.ndarray:
    """The HBM view of ``vid`` in an execution's environment (``executor``'s ``env.access``); a splat (an
    immediate, never in HBM) as a broadcast array of its shape. Here, beside the program it reads, so that the step
    runners of ``steps`` and of ``opaque_cnn`` share it without importing each other."""
    base = program.base(vid)
    if base in program.splats:
        return np.broadcast_to(np.asarray(program.splats[base], dtype=program.dtype(vid)), program.shape(vid))
    return env.access(vid)
