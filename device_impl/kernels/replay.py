"""Static replay of eager elementwise launches: the host cost of a small op, without changing what it costs
on the device.

An elementwise launch (``common.elementwise``) is a tile loop whose instructions and tile shapes follow from
its *signature*: the kernel name, the emit's code and the values its closure selects instructions with,
the element count and tile width, and per operand its dtype, conversion, scalar-ness (and scalar value)
and HBM view (shape, strides: DMA descriptor counts follow from them), out's view and dtype. The values
in the tensors do not enter (an emit reads a tile's values only to raise, as integer division by zero).
So the launch's timeline figures (device time, busy time per engine, HBM bytes, flops, instruction count,
SBUF/PSUM peaks) are a function of the signature too.

The first launch of a signature runs at the instruction level and its figures are kept (``record``).
A later launch of that signature runs the same tile loop on ``engine.replay``'s core: the same
instructions on the same tile shapes (so the same arithmetic, bit for bit, and the same poison for an
unwritten tile), without scheduling them; the recorded figures then go to the device clock,
``engine.stats()``, ``last_launch()``, the profiler and the trace exactly as the instruction-level run's
did. The replay tallies its instructions and their busy time per engine and compares them with the
recording (``ReplayCore.matches``): a signature whose instructions turn out to depend on the data is never
replayed again, and that launch reruns at the instruction level.

Not replayed (the instruction level runs, as before):
  * while a trace is recorded (``engine.record_trace``: it needs every instruction's event);
  * with ``NEURON_STATIC_REPLAY=0`` (``runtime.config.static_replay``; ``set_enabled`` for tests);
  * an emit that is not a plain function, or whose closure holds anything but numbers, strings, dtypes,
    None, tuples of those and such functions (tiles, arrays, tensors: no safe key);
  * while adaptive eager captures (``common.CAPTURE``: the launch is queued, never run here).
The cache holds ``MAX_SIGNATURES`` signatures, the oldest forgotten first.
"""

from __future__ import annotations

import types
from typing import Any, Callable, Sequence

import numpy as np
import torch

from device_impl.engine.core import NeuronCore
from device_impl.engine.isa import flat_copy, flat_in, flat_out
from device_impl.bounded import BoundedDict
from device_impl.engine.memory import Tile
from device_impl.engine.replay import Figures, measured, one_tile, one_tile_direct, replayed
from device_impl.runtime.config import static_replay

MAX_SIGNATURES = 4096
SMALL_TILE = 4096  # elements: tiles up to this size are fresh arrays in a replay, larger ones pooled

_enabled = [static_replay()]
_figures: BoundedDict = BoundedDict(MAX_SIGNATURES)  # signature -> (figures, the launch's flat tiles)
_refused: BoundedDict = BoundedDict(MAX_SIGNATURES)  # signatures whose instructions depended on the data
# replayed: launches run from a recording; recorded: instruction-level launches whose figures were kept;
# instruction_level: launches with no signature (an emit without a safe key, a trace recorded, replay off);
# refused: signatures dropped because a replay's instructions were not the recorded ones
_counts = {"replayed": 0, "recorded": 0, "instruction_level": 0, "refused": 0}
# Bumped whenever a recording leaves ``_figures`` (reset, the oldest forgotten, a refusal): what holds a
# recording outside the cache (kernels/elementwise/recurring.py's plans) is valid while this is unchanged.
_generation = [0]

_FunctionType = types.FunctionType
_ATOMS = frozenset({int, float, bool, str, complex, type(None), torch.dtype})


def enabled() -> bool:
    return _enabled[0]


def set_enabled(flag: bool) -> bool:
    """Turn eager replay on or off (tests compare the two); returns the previous setting."""
    previous = _enabled[0]
    _enabled[0] = bool(flag)
    return previous


def stats() -> dict[str, int]:
    """Launch counts since the last reset: ``replayed``, ``recorded``, ``instruction_level``, ``refused``."""
    return dict(_counts)


def reset() -> None:
    """Forget every recorded signature and zero the counts."""
    _generation[0] += 1
    _figures.clear()
    _refused.clear()
    for k in _counts:
        _counts[k] = 0


# Code objects, named in a key by their identity: hashing a code object hashes its bytecode, names and
# constants (~1 us on every launch), its id costs nothing. Each is kept alive here, so its id names it and
# no other object while any key holds the id: an equal code object that is another instance only misses the
# cache (a recording of its own), it never hits another's. Never cleared (adaptive eager's caches hold these
# ids too); emit code objects are a fixed set of the source, so past MAX_TOKENS (code made at run time, in a
# loop) a launch simply has no key.
_KEPT: dict[int, Any] = {}
MAX_TOKENS = 1 << 16


def token(obj: Any) -> int:
    """``obj``'s identity as a key part (see ``_KEPT``); raise _NoKey past MAX_TOKENS objects."""
    i = id(obj)
    if i not in _KEPT:
        if len(_KEPT) >= MAX_TOKENS:
            raise _NoKey
        _KEPT[i] = obj
    return i


def _value_key(v: Any, depth: int) -> Any:
    """A hashable, type-exact key of a closure value, or raise _NoKey (1 == 1.0 == True in a dict: the type
    keeps them apart)."""
    t = type(v)
    if t in _ATOMS:
        return (t, v)
    if t in _DTYPE_TYPES:
        return v
    if t is _FunctionType:
        return emit_key(v, depth + 1)
    if isinstance(v, np.dtype):
        _DTYPE_TYPES.add(t)
        return v
    if isinstance(v, np.generic):
        return (t, v.item())
    if t is tuple:
        return tuple([_value_key(x, depth) for x in v])
    raise _NoKey


_DTYPE_TYPES: set[type] = set()  # numpy's dtype classes met so far (np.dtype instances are keys as they are)


class _NoKey(Exception):
    pass


def emit_key(fn: Callable, depth: int = 0) -> tuple:
    """What selects an emit's instructions: its code, defaults and closure values (raise _NoKey if unsafe)."""
    if type(fn) is not _FunctionType or depth > 4:
        raise _NoKey
    cells = fn.__closure__
    defaults = fn.__defaults__
    code = fn.__code__
    i = id(code)
    key = [i if i in _KEPT else token(code)]
    if defaults:
        key.append(tuple([_value_key(d, depth) for d in defaults]))
    if cells:
        try:
            for c in cells:
                v = c.cell_contents
                t = type(v)
                # _value_key's two commonest answers inlined: every launch keys its emit's cells
                key.append((t, v) if t in _ATOMS else v if t in _DTYPE_TYPES else _value_key(v, depth))
        except ValueError:  # an empty cell
            raise _NoKey from None
    return tuple(key)


def signature(name: str, emit: Callable, numel: int, free_max: int, out_view: np.ndarray, views: list,
              scalars: list, convert: list, target: np.dtype | None) -> tuple | None:
    """The launch's signature (module docstring), or None when it has no safe key."""
    try:
        key = [name, emit_key(emit), numel, free_max, out_view.dtype, out_view.shape, out_view.strides, target]
        for v, s, c in zip(views, scalars, convert):
            key.append(_value_key(s, 0) if v is None else (v.dtype, v.shape, v.strides, c))
    except _NoKey:
        return None
    return tuple(key)


def record(key: tuple, core: NeuronCore, transfers: int, tiles: tuple) -> None:
    """Keep the figures of ``core``'s just-completed instruction-level launch of ``key``; ``transfers``: the
    DMA loads and stores the tile loop issued itself; ``tiles``: its flat tiles (start, stop, p, f)."""
    if key in _refused:
        return
    if _figures.put(key, (measured(core, transfers), tiles)):
        _generation[0] += 1  # the oldest recording was forgotten
    _counts["recorded"] += 1


class _NotTheSameLaunch(Exception):
    pass


def run(key: tuple, figures: Figures, name: str, device: int, plan: tuple, out_view: np.ndarray,
        emit: Callable, tiles, target: np.dtype | None) -> bool:
    """Run a launch of a recorded signature from its recording (module docstring). False when its
    instructions were not the recorded ones: the caller then runs it at the instruction level (its tensor
    operands are unchanged: out shares no memory with them, or this raises)."""
    out_dtype = out_view.dtype
    try:
        if len(tiles) == 1 and out_view.size <= SMALL_TILE:  # a small op: one tile, inlined
            if not one_tile(name, device, figures, plan, out_view, emit, tiles[0][2:], target):
                raise _NotTheSameLaunch
            _counts["replayed"] += 1
            return True
        with replayed(name, device, figures) as nc:
            sbuf_tile, tensor_copy, mark, release_to = nc.sbuf_tile, nc.vector.tensor_copy, nc.mark, nc.release_to
            made = nc.made
            for start, stop, p, f in tiles:
                top = mark()
                shape = (p, f)
                # a small tile is a fresh array of its elements; a large one reuses an array (page faults)
                small = p * f <= SMALL_TILE
                operands: list[Any] = []
                for v, s, c in plan:
                    if v is None:
                        operands.append(s)
                        continue
                    if small:
                        tile = Tile(flat_copy(v, start, stop).reshape(shape), "sbuf", 0)
                        made.append(tile)
                    else:
                        tile = sbuf_tile(shape, v.dtype)
                        flat_in(tile.data, v, start, stop)
                    tile.initialized = True
                    if c:
                        converted = sbuf_tile(shape, target)
                        tensor_copy(converted, tile)
                        tile = converted
                    operands.append(tile)
                if small:
                    result = Tile(np.empty(shape, out_dtype), "sbuf", 0)
                    made.append(result)
                else:
                    result = sbuf_tile(shape, out_dtype)
                emit(nc, result, *operands)
                flat_out(out_view, start, stop, result.read())
                release_to(top)
            if not nc.matches(figures):
                raise _NotTheSameLaunch
    except _NotTheSameLaunch:
        _refuse(key, name, [v for v, _, _ in plan], out_view)
        return False
    _counts["replayed"] += 1
    return True


def _refuse(key: tuple, name: str, views: Sequence[np.ndarray | None], out_view: np.ndarray) -> None:
    """A replay of ``key`` issued other instructions than its recording: forget the recording, refuse the
    signature from now on, and raise where out (already written) shares memory with an operand, since the
    instruction-level rerun would read what the replay wrote."""
    _generation[0] += 1
    _figures.pop(key, None)
    _refused[key] = None
    _counts["refused"] += 1
    if any(v is not None and np.may_share_memory(out_view, v) for v in views):
        raise RuntimeError(
            f"neuron: the eager launch of {name} issued other instructions than the recorded launch of its "
            f"signature (they depend on the data), and it wrote a tensor it reads, so it cannot be rerun; "
            f"set NEURON_STATIC_REPLAY=0 to run every launch instruction by instruction, and report this "
            f"kernel") from None


def run_direct(key: tuple, figures: Figures, name: str, device: int, views: tuple, out_view: np.ndarray,
               emit: Callable, shape: tuple) -> bool:
    """``run`` of a one-tile launch whose one instruction reads its operands' HBM views and writes out's
    (``engine.replay.one_tile_direct``; a recurring plan decides where that holds). False as ``run``."""
    if not one_tile_direct(name, device, figures, views, out_view, emit, shape):
        _refuse(key, name, views, out_view)
        return False
    _counts["replayed"] += 1
    return True


def count_instruction_level() -> None:
    _counts["instruction_level"] += 1
