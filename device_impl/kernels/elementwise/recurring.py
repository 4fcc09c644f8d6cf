"""Recurring calls of an elementwise out= kernel (add, sub, mul, true div; exp, tanh, sigmoid, neg), served from a
plan of their launch.

Why: most of a small op's host cost is the Python around its engines, not their arithmetic. Before a 1k add's
one tile runs, the out= kernel binds the arguments, runs the meta function (broadcast shape, result dtype),
applies out='s rules, makes the emit, resolves the operands into HBM views (broadcast, conversions) and
builds the launch's signature (kernels/replay.py) to find its recording: about half of the kernel's
bytecode. All of it follows from the call's metadata alone (each tensor's dtype, shape, strides and device,
and alpha), so a plan keeps those answers for one metadata key. That holds for an op whose compute checks no
value (no zero-divisor test: a rounding division is never planned, its key refuses any keyword but out and alpha 1)
and makes its emit from the metadata alone; each such op's emit comes from one module-level factory its compute
and its ``launch`` share, so the plan keys the launch the compute would. It is learnt after a call of that key took
the full path and completed, so every check that depends on the metadata alone passed; a later call with the
key is served from it. Per call, still:

  * the key itself (dtypes, shapes, strides, devices; alpha is the int 1);
  * ``check_out``'s partial-overlap rule from this call's data pointers (the same function, the same error);
  * the HBM views of the tensors, broadcast as the plan says;
  * the launch: ``kernels.replay.run`` on the plan's recording (the same instructions on the same tiles, the
    tally checked, the recorded figures reported), so bits, device time and statistics are the full path's; for a
    one-tile launch of one compute instruction on operands in their own dtypes, ``kernels.replay.run_direct``,
    whose instruction reads the operands' HBM views and writes out's (no tile copied in or stored out: the same
    ufunc on the same values into the same dtype; an out that is an operand is one ufunc's in-place call).

The table's wrapper (dispatch/table.py) asks ``serve`` before its own device and dtype checks: a plan is made
only from a call that wrapper passed to the kernel, all of whose tensors were on one device with dtypes it
passes (``dtypes``), so every check it skips would pass for a call of the same key.

A plan is made only where the full path's answer is the plan's: all three tensors neuron tensors of one device;
out already has the broadcast shape (no resize, no warning), is contiguous (no internal-overlap check) and
C-ordered (the views need no permutation); alpha is the int 1; the result needs no narrow-float staging
(``common._rounded_through``); at least one element; its launch recorded (kernels/replay.py); its key seen on an
earlier call too (a first sighting only marks it, so metadata that never recurs costs a key, no plan). A call it does
not serve takes the full path: adaptive eager running (``HOOKS.submit``/``CAPTURE``), a trace recorded, replay
off, or a recording forgotten or refused since the plan was made (``replay._generation``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from device_impl.bounded import BoundedDict
from device_impl.dispatch.table import HOOKS
from device_impl.engine.core import _recording
from device_impl.engine.hbm import view as hbm
from device_impl.kernels import overlap, replay
from device_impl.kernels.common import CAPTURE, FREE_MAX, _NARROW_FLOATS, _prepare, memory_order, numpy_compute, \
    result_type

MAX_PLANS = 1024  # per op, the oldest forgotten first
_UNSEEN = object()

_Tensor = torch.Tensor
_generation = replay._generation
_enabled = replay._enabled
_SMALL_TILE = replay.SMALL_TILE
ALL: list["Plans"] = []  # every op's plans, in the order made (tests clear and count them)


class _Plan:
    """One metadata key's answers (module docstring). ``direct``: the launch is one tile whose one compute
    instruction reads the operands in their own dtypes (no conversion, no staging), so it runs on the operands'
    and out's HBM views (``kernels.replay.run_direct``); ``tile``: that tile's shape."""

    __slots__ = ("generation", "emit", "figures", "tiles", "signature", "broadcast", "convert", "target", "shape",
                 "direct", "tile", "dtype", "device")


class Plans:
    """The plans of one op's out= kernel (``name``: the launch's kernel name, as its compute names it).
    ``launch(*operands)`` returns the emit and the common dtype the op's compute passes to ``elementwise`` for
    those operands (alpha 1, no other argument), so the plan keys the same launch; ``round_scalars`` as the
    compute passes it. ``arity``: the operand tensors before out (2: ``(self, other, out=)``, 1: ``(self, out=)``).
    ``functional``: the plans of a functional kernel with no out= overload (``relu(self)``): the key is the
    operand's, and a served call allocates its result as the kernel does (``torch.empty`` of the meta's shape and
    dtype on the operand's device)."""

    def __init__(self, name: str, launch: Callable[..., tuple[Callable, torch.dtype | None]], arity: int = 2,
                 round_scalars: bool = True, functional: bool = False) -> None:
        self.name = name
        self.launch = launch
        self.arity = arity
        self.round_scalars = round_scalars
        self.plans: BoundedDict = BoundedDict(MAX_PLANS)  # key -> _Plan, or None: a key seen once, not yet planned
        self.served = 0  # calls served from a plan (tests read it)
        self.dtypes: frozenset | None = None  # the dtypes the table passes to the kernel (set by register_family)
        self.functional = functional
        self._key = self._key0 if functional else self._key2 if arity == 2 else self._key1
        ALL.append(self)

    @staticmethod
    def _key2(args: tuple, kwargs: dict) -> tuple | None:
        """The metadata key of a call ``(self, other, out=)`` or ``(self, other, alpha=1, out=)`` (the
        dispatcher leaves a default alpha out), or None for any other form."""
        if len(args) != 2:
            return None
        n = len(kwargs)
        if n != 1:
            alpha = kwargs.get("alpha")
            if n != 2 or type(alpha) is not int or alpha != 1:
                return None
        x, y = args
        out = kwargs.get("out")
        if not (isinstance(x, _Tensor) and isinstance(y, _Tensor) and isinstance(out, _Tensor)):
            return None
        return (x.dtype, y.dtype, out.dtype, x.shape, y.shape, out.shape, x.stride(), y.stride(), out.stride(),
                x.get_device(), y.get_device(), out.get_device())

    @staticmethod
    def _key1(args: tuple, kwargs: dict) -> tuple | None:
        """The metadata key of a call ``(self, out=)``, or None for any other form."""
        if len(args) != 1 or len(kwargs) != 1:
            return None
        x = args[0]
        out = kwargs.get("out")
        if not (isinstance(x, _Tensor) and isinstance(out, _Tensor)):
            return None
        return (x.dtype, out.dtype, x.shape, out.shape, x.stride(), out.stride(), x.get_device(), out.get_device())

    @staticmethod
    def _key0(args: tuple, kwargs: dict) -> tuple | None:
        """The metadata key of a functional call ``(self)``, or None for any other form."""
        if len(args) != 1 or kwargs:
            return None
        x = args[0]
        if not isinstance(x, _Tensor):
            return None
        return (x.dtype, x.shape, x.stride(), x.get_device())

    def serve(self, args: tuple, kwargs: dict) -> torch.Tensor | None:
        """Run the call from its plan and return out, or None: the caller takes the full path."""
        if HOOKS.submit is not None or CAPTURE[0] is not None or _recording or not _enabled[0]:
            return None
        key = self._key(args, kwargs)
        if key is None:
            return None
        plan = self.plans.get(key)
        if plan is None or plan.generation != _generation[0]:
            return None
        if self.functional:  # a fresh result, as the functional kernel allocates it: it overlaps nothing
            out = torch.empty(plan.shape, dtype=plan.dtype, device=plan.device)
        else:
            out = kwargs["out"]
            begin = out.data_ptr()  # check_out's partial-overlap rule (kernels/common.py), this call's pointers
            end = begin + out.nbytes
            for t in args:
                b = t.data_ptr()
                if b < end and begin < b + t.nbytes:
                    overlap.assert_no_partial_overlap(out, t)
        views = list(map(hbm, args))
        for i in plan.broadcast:
            views[i] = np.broadcast_to(views[i], plan.shape)
        if plan.direct:
            if not replay.run_direct(plan.signature, plan.figures, self.name, key[-1], views, hbm(out), plan.emit,
                                     plan.tile):
                return None  # refused (run_direct forgot the recording): the full path runs it instruction by instruction
        else:
            steps = tuple(zip(views, (None,) * len(views), plan.convert))
            if not replay.run(plan.signature, plan.figures, self.name, key[-1], steps, hbm(out), plan.emit,
                              plan.tiles, plan.target):
                return None  # refused, as above
        self.served += 1
        return out

    def learn(self, args: tuple, kwargs: dict, result: torch.Tensor | None = None) -> None:
        """After a call took the full path and completed: make its key's plan where one applies (module docstring).
        ``result``: a functional kernel's result (an out= kernel's is its out)."""
        if HOOKS.submit is not None or CAPTURE[0] is not None or _recording or not _enabled[0]:
            return
        key = self._key(args, kwargs)
        if key is None:
            return
        plans = self.plans
        known = plans.get(key, _UNSEEN)  # (one read: another thread may evict the key between two)
        if known is _UNSEEN:  # a first sighting only marks the key: a call whose metadata never recurs
            plans[key] = None  # (dynamic shapes) pays for its key, not for a plan
            return
        if known is not None and known.generation == _generation[0]:
            return
        out = result if self.functional else kwargs["out"]
        device = key[-1]
        if device < 0 or any(t.get_device() != device for t in args) or out.numel() == 0 \
                or not out.is_contiguous():
            return
        dtypes = self.dtypes
        if dtypes is not None and any(t.dtype not in dtypes for t in (*args, out)):
            return
        if out.dim() > 1 and memory_order(out) != list(range(out.dim())):
            return
        emit, common = self.launch(*args)
        if common in _NARROW_FLOATS and out.dtype.is_floating_point and out.dtype != common:
            return
        out_view, views, scalars, convert, target = _prepare(out, args, common, None, self.round_scalars)
        signature = replay.signature(self.name, emit, out.numel(), FREE_MAX, out_view, views, scalars, convert,
                                     target)
        recorded = replay._figures.get(signature) if signature is not None else None
        if recorded is None:
            return
        plan = _Plan()
        plan.generation = _generation[0]
        plan.emit = emit
        plan.figures, plan.tiles = recorded
        plan.signature = signature
        plan.shape = tuple(out.shape)
        plan.broadcast = tuple(i for i, t in enumerate(args) if tuple(t.shape) != plan.shape)
        plan.convert = tuple(convert)
        plan.target = target
        tiles = plan.tiles
        # one tile, one compute instruction, operands read in their own dtypes: engine.replay.one_tile_direct
        plan.direct = (len(tiles) == 1 and out.numel() <= _SMALL_TILE and not any(convert)
                       and plan.figures.compute_instructions == 1)
        plan.tile = tiles[0][2:]
        plan.dtype = out.dtype
        plan.device = out.device
        plans[key] = plan
