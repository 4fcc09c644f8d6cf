"""The random family's shared pieces: registration, checks, and the tile loops.

Tiling of ``sample`` (every pointwise random kernel): the output is walked in its memory
order as flat [p <= 128, f] tiles of consecutive elements (``common.flat_tiles``);
partitions hold consecutive runs of f elements, the free axis streams along the run.
Per tile: DMA loads the broadcast inputs, GpSimdE draws one random tile per stream at
counter ``offset + stream * numel + start``, the kernel's ``emit`` computes on
ScalarE/VectorE, DMA stores each output. SBUF is released per tile (``mark/release_to``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch

from device_impl.dispatch.table import TABLE, resolve
from device_impl.engine import launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, FP32
from device_impl.kernels.common import (
    FREE_MAX,
    P,
    SCALAR_TYPE_NAMES,
    flat_tiles,
    hbm,
    is_device_tensor,
    memory_order,
    scalar_of,
)
from device_impl.kernels.registry import Binder
from device_impl.runtime.random import reserve

I64 = np.dtype(np.int64)
F64 = np.dtype(np.float64)
BOOL = np.dtype(np.bool_)
FLOATS = (torch.float32, torch.bfloat16, torch.float16)  # the dtypes the family samples on the engines


# --- registration ----------------------------------------------------------------

def native(*ops: str, dtypes: frozenset = COMPUTE_DTYPES):
    """Register ``fn(args)`` (schema names -> values) as the kernel of each overload."""

    def register(fn: Callable[[dict], Any]) -> Callable[[dict], Any]:
        for op in ops:
            TABLE.native(op, dtypes=dtypes)(_bound(fn, Binder.of(resolve(op))))
        return fn

    return register


def _bound(fn: Callable[[dict], Any], binder: Binder) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return fn(binder.bind(args, kwargs))

    kernel.__module__ = fn.__module__  # the op-group module: TABLE.lookup(op).source names it
    return kernel


def serve(target: str, *ops: str) -> None:
    """Record that PyTorch's composite kernels of ``ops`` reach the kernel of ``target``."""
    for op in ops:
        TABLE.serves(op, target)


# --- shared checks ---------------------------------------------------------------

def refuse(kernel: str, dtype: torch.dtype) -> NotImplementedError:
    return NotImplementedError(f'"{kernel}" not implemented for \'{SCALAR_TYPE_NAMES[dtype]}\'')


def fmt(x) -> str:
    """A number as c10::str prints it (ostream defaults: 6 significant digits)."""
    if isinstance(x, bool):
        return str(int(x))
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:g}"


def float_only(t: torch.Tensor, kernel: str) -> None:
    if t.dtype not in FLOATS:
        raise refuse(kernel, t.dtype)


def check_generator(generator: torch.Generator | None) -> None:
    """An explicit generator must be a neuron one (CUDA raises the same way for a CPU generator)."""
    if generator is not None and generator.device.type != "neuron":
        raise RuntimeError(f"Expected a 'neuron' device type for generator but found '{generator.device.type}'")


def reserve_draws(generator: torch.Generator | None, device: int, draws: int) -> tuple[int, int]:
    check_generator(generator)
    return reserve(generator, device, draws)


def check_p(p: float) -> None:
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={fmt(p)}")


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """The broadcast shape of two shapes (PyTorch's error when they do not broadcast)."""
    ndim = max(len(a), len(b))
    a = (1,) * (ndim - len(a)) + tuple(a)
    b = (1,) * (ndim - len(b)) + tuple(b)
    merged = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at non-singleton "
                               f"dimension {i}")
        merged.append(y if x == 1 else x)
    return tuple(merged)


def reduce_flags(name: str, t: torch.Tensor, predicate: Callable[..., None]) -> bool:
    """True when ``predicate(nc, tile, flag_tile)`` holds for every element of ``t`` (AND on the engines)."""
    view = hbm(t)
    ok = True
    with launch(name, t.device.index) as nc:
        for start, stop, p, f in flat_tiles(t.numel()):
            mark = nc.mark()
            tile = nc.sbuf_tile((p, f), view.dtype)
            nc.dma.load_flat(tile, view, start, stop)
            flag = nc.sbuf_tile((p, f), BOOL)
            predicate(nc, tile, flag)
            row = nc.sbuf_tile((p, 1), BOOL)
            nc.vector.tensor_reduce(row, flag, "logical_and")
            col = nc.sbuf_tile((1, 1), BOOL)
            nc.gpsimd.partition_reduce(col, row, "logical_and")
            ok = ok and bool(col.read()[0, 0])
            nc.release_to(mark)
    return ok


# --- the tile loops -------------------------------------------------------------

def _oriented(t: torch.Tensor, shape: tuple[int, ...], order: list[int] | None) -> np.ndarray:
    v = hbm(t)
    if tuple(v.shape) != shape:
        v = np.broadcast_to(v, shape)
    return v.transpose(order) if order is not None else v


def sample(name: str, outs: Sequence[torch.Tensor], generator, streams: Sequence[str],
            emit: Callable[..., None], ins: Sequence[Any] = (), free_max: int = FREE_MAX) -> None:
    """Fill ``outs`` (one shape) tile by tile: ``emit(nc, out_tiles, random_tiles, in_tiles)``.

    ``streams`` names the distribution of each random tile ("uniform", "normal",
    "bits"); one draw per element per stream is reserved. ``ins`` are tensors
    broadcast to the output shape (host scalars are passed through as numbers).
    Tiles follow the memory order of ``outs[0]``.
    """
    out0 = outs[0]
    numel = out0.numel()
    if numel == 0:
        return
    seed, offset = reserve_draws(generator, out0.device.index, numel * len(streams)) if streams else (0, 0)
    shape = tuple(out0.shape)
    order = None
    if out0.dim() > 1:
        order = memory_order(out0)
        if order == list(range(out0.dim())):
            order = None
    out_views = [_oriented(o, shape, order) for o in outs]
    in_views = [_oriented(t, shape, order) if is_device_tensor(t) else None for t in ins]
    scalars = [None if is_device_tensor(t) else scalar_of(t) for t in ins]
    with launch(name, out0.device.index) as nc:
        for start, stop, p, f in flat_tiles(numel, free_max):
            mark = nc.mark()
            loaded: list[Any] = []
            for v, s in zip(in_views, scalars):
                if v is None:
                    loaded.append(s)
                    continue
                tile = nc.sbuf_tile((p, f), v.dtype)
                nc.dma.load_flat(tile, v, start, stop)
                loaded.append(tile)
            rand = []
            for k, dist in enumerate(streams):
                tile = nc.sbuf_tile((p, f), I64 if dist == "bits" else FP32)
                nc.gpsimd.random(tile, seed, offset + k * numel + start, dist)
                rand.append(tile)
            results = [nc.sbuf_tile((p, f), v.dtype) for v in out_views]
            emit(nc, results, rand, loaded)
            for v, r in zip(out_views, results):
                nc.dma.store_flat(v, start, stop, r)
            nc.release_to(mark)


def tmp(nc, like, dtype=FP32):
    return nc.sbuf_tile(like.shape, dtype)


def elementwise_outputs(name: str, outs: Sequence[torch.Tensor], ins: Sequence[torch.Tensor], emit) -> None:
    """The tile loop of ``sample`` without random tiles (nothing is reserved; ``emit`` gets no draws)."""
    sample(name, outs, None, (), emit, ins=ins)


def flat_layout(n: int) -> tuple[int, int]:
    return (1, n) if n <= FREE_MAX else (P, math.ceil(n / P))
