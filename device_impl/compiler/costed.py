"""Cut whole or decompose, chosen by modelled device time at compile time (issue 21: "every op's compiled device
time <= its eager kernel's").

Some ops have an eager kernel whose tile program beats the compiler's decomposition for one shape and loses to it
for another: gather's indirect-DMA program beats torch-mlir's iota + concatenate + gather for a float32 [2, 2, 513]
input, loses to it in bfloat16; reflection padding's backward as the eager kernel's per-dim folds beats moves' sum of
edge blocks for a float32 3-d pad and loses in 2-d. A compiled graph's shapes are static, so both alternatives'
device time is known when the graph is compiled: ``cut_wins`` builds the call alone as a one-op program twice, once
with the op cut whole (``opaque.cut``'s step running the eager kernel's program) and once decomposed (what the
compiler would otherwise make of it), runs each once on zero-filled host arrays at the instruction level (as
``executor.record_schedule`` does; shapes decide these programs' cost, not values) and answers whether the cut's
launch ends first.

A cutter (``opaque.CUTTERS``) or a decomposition's ``whole`` predicate (``opaque_pads.whole_or``) asks it for the
calls it takes, after its own checks. The answer is memoised per process by the call's signature (op, tensors'
shapes, strides and dtypes, the other arguments, the thread count), so a graph costs each distinct call once; a
compile-cache hit (``cache.fx_key``) still reaches the cutter, whose answer then comes from the memo or one more
costing.

While a costing compiles its one-op programs, ``forced`` answers the op's question itself (cut, or not), so the
costing neither recurses nor depends on what it is deciding. A costing that fails (an import refused, a program
whose zero-filled run raises) answers "decompose": the compiler's usual form, as before the op was costed. Answers
are kept in the compile cache too (under the compiler version), so a warm compile in a new process costs nothing.

This module is a leaf (the cutters import it; tests/test_layering.py's no-circle check): the one-op programs are
built and measured by ``compiler/costing.py``, which imports the whole pipeline and registers itself here
(``install``) when ``driver`` loads; before that, or with nothing installed, every answer is "decompose".
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

log = logging.getLogger("torch_neuronx.compiler")

_MEMO: dict[tuple, bool] = {}
_LOCAL = threading.local()


@dataclass
class Coster:
    """What ``costing`` installs: ``measure(op, args, kwargs, cut)`` the one-op program's modelled ns;
    ``load(key)``/``store(key, cut)`` the compile cache's memo of answers."""

    measure: Callable[[Any, tuple, dict, bool], float]
    load: Callable[[tuple], bool | None]
    store: Callable[[tuple, bool], None]


_INSTALLED: list[Coster] = []


def install(coster: Coster) -> None:
    """Register the one-op costing (``compiler/costing.py`` at its import)."""
    _INSTALLED[:] = [coster]


def forced() -> dict:
    """{op: cut or not} decided for the one-op programs a costing on this thread is compiling now."""
    if not hasattr(_LOCAL, "forced"):
        _LOCAL.forced = {}
    return _LOCAL.forced


@contextlib.contextmanager
def forcing(op: Any, cut: bool) -> Iterator[None]:
    """``cut_wins(op, ...)`` answers ``cut`` inside the block (on this thread)."""
    decided = forced()
    before = decided.get(op)
    decided[op] = cut
    try:
        yield
    finally:
        if before is None:
            decided.pop(op, None)
        else:
            decided[op] = before


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("T", tuple(int(s) for s in value.shape), tuple(int(s) for s in value.stride()), str(value.dtype))
    if isinstance(value, (list, tuple)):
        return tuple(_describe(v) for v in value)
    return repr(value)


def signature(op: Any, args: tuple, kwargs: dict) -> tuple:
    """The memo key of a call: the op, each tensor's shape, strides and dtype, every other argument's repr, and
    ``torch.get_num_threads()``: a cut's program can follow CPU's kernel choice, which for some calls depends on
    the thread count (upsample's vectorized or generic kernel for 3-channel 2-d input, ``opaque_resample``), so an
    answer costed under one count may not hold under another."""
    return (str(op), _describe(tuple(args)), _describe(tuple(sorted(kwargs.items()))), torch.get_num_threads())


def cut_wins(op: Any, args: tuple, kwargs: dict | None = None) -> bool:
    """Whether ``op(*args, **kwargs)`` (its tensors fake tensors or FX metas of static shapes) compiled cut whole
    ends its launch before the same call decomposed (ties go to the decomposition: the compiler's usual form)."""
    kwargs = dict(kwargs or {})
    decided = forced().get(op)
    if decided is not None:
        return decided
    if not _INSTALLED:
        return False
    coster = _INSTALLED[0]
    key = signature(op, args, kwargs)
    if key not in _MEMO:
        stored = coster.load(key)
        if stored is not None:
            _MEMO[key] = stored
            return stored
        try:
            cut_ns = coster.measure(op, args, kwargs, True)
            decomposed_ns = coster.measure(op, args, kwargs, False)
        except Exception as error:  # noqa: BLE001 - a costing that fails keeps the usual form
            log.info("costing %s failed (%s: %s): decomposed", op, type(error).__name__, error)
            _MEMO[key] = False
        else:
            log.info("costing %s: cut %.1f ns, decomposed %.1f ns", op, cut_ns, decomposed_ns)
            _MEMO[key] = cut_ns < decomposed_ns
            coster.store(key, _MEMO[key])
    return _MEMO[key]
