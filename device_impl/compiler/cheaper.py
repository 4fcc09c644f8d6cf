"""Cut whole or decomposed: which compiles to the cheaper program, by modelled device time (static shapes).

An op cut whole (compiler/opaque.py's mechanism) runs its eager kernel's tile program as one step; its
decomposition runs as the compiler's own steps (gathers, fused groups), which for some shapes cost less than the
kernel and for others more (upsampling: a bicubic resize of [1, 1, 2, 513] to (5, 500) took 43.9 us decomposed
against the kernel's 39.4; of [2, 3, 4, 7] to the same size, 228 us against 346). Static shapes make both
programs known at compile time, so ``whole_is_cheaper`` builds both, one op each, runs each once at the
instruction level on zero-filled host arrays (as ``executor.record_schedule`` does: nothing touches the device
or its clock) and compares the modelled times. The answer is kept per key (the op, its metadata and options),
so a graph compiled again, or another graph with the same call, decides at no cost.

The programs are built in a thread of their own: the caller is usually inside AOTAutograd's trace (a
decomposition deciding whether to keep its op), whose fake and proxy modes are the calling thread's.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Hashable

import torch

log = logging.getLogger(__name__)

_DECIDED: dict[Hashable, bool] = {}
_LOCK = threading.Lock()
_STATE = threading.local()


def deciding() -> bool | None:
    """False inside ``whole_is_cheaper``'s build of the decomposed form (a caller's predicate answers it instead of
    asking again: the op is decomposed), None elsewhere."""
    return getattr(_STATE, "forced", None)


# how a form is measured: ``fn, metas -> modelled ns`` (``program_cost.traced_ns`` with the backend's
# decompositions, plugged in by compiler/backend.py, which sits above the pipeline this module cannot import)
MEASURE: list[Callable[[Callable[..., Any], list[torch.Tensor]], float]] = []


def tile_program_ns(program: Callable[[Any, Any], None]) -> float:
    """The modelled time (ns, launch overhead excluded) of ``program(nc, scratch)``, a cut step's tile program on its
    zero-filled host arrays, run at the instruction level on a private core: the step's cost inside a compiled
    program (a graph of that one step measures the same). ``scratch.new(shape, dtype)`` gives zeroed host arrays."""
    import numpy as np

    from device_impl.engine.core import NeuronCore

    class _HostScratch:
        def new(self, shape: Any, dtype: Any) -> np.ndarray:
            return np.zeros(tuple(int(s) for s in shape), dtype=np.dtype(dtype))

    core = NeuronCore()
    core.reset(False)
    with np.errstate(all="ignore"):
        program(core, _HostScratch())
    return float(core.timeline.end)


def whole_is_cheaper(key: Hashable, whole_ns: Callable[[], float], fn: Callable[..., Any],
                     metas: list[torch.Tensor]) -> bool:
    """Whether an op cut whole, whose step's modelled time ``whole_ns()`` gives (``tile_program_ns`` of its tile
    program), is no slower than its decomposition: ``fn`` (the op's call on tensors shaped as ``metas``) traced with
    ``deciding()`` False, so the caller's decomposition decomposes it, built and measured by ``MEASURE``. A
    decomposition that does not build loses (its graph would run eagerly); a whole form that fails to run loses
    too (the decomposition: what the compiler did before the op could be cut). Kept per ``key``."""
    with _LOCK:
        if key in _DECIDED:
            return _DECIDED[key]
    if not MEASURE:  # no backend loaded: nothing to build with
        return False
    answer: list[bool] = [False]

    def decide() -> None:
        try:
            whole: float | None = whole_ns()
        except Exception:  # noqa: BLE001 - a whole form that does not run: keep the decomposition
            whole = None
        decomposed = None
        if whole is not None:
            _STATE.forced = False
            try:
                decomposed = MEASURE[0](fn, metas)
            except Exception:  # noqa: BLE001 - a decomposition that does not build (its graph would run eagerly)
                decomposed = None
            finally:
                _STATE.forced = None
        answer[0] = whole is not None and (decomposed is None or whole <= decomposed)
        log.debug("%s: whole %s ns, decomposed %s ns", key, whole, decomposed)

    worker = threading.Thread(target=decide, name="neuron-cheaper")
    worker.start()
    worker.join()
    with _LOCK:
        _DECIDED[key] = answer[0]
    return answer[0]
