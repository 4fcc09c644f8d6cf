"""Adaptive eager: queue neuron ops, fuse queued chains into tile programs, flush when data must exist.

``torch.neuron.set_eager_mode("adaptive")`` (or NEURON_EAGER_MODE=adaptive, or
``with torch.neuron.eager_mode("adaptive"):``) changes no user code: elementwise
ops, device copies, sum/mean/amax/amin over the last dimension, softmax,
log_softmax, layer_norm and mm/addmm/bmm/baddbmm return their outputs at once (allocated from the kernel's
meta, checks already run) but compute nothing until something needs the data: a
copy to the host, ``.item()``, printing, ``torch.neuron.synchronize()``, a stream
switch, an event or stream wait, an op that cannot be queued or the CPU fallback
touching queued memory, or the queue's op/byte limit. Then the queue runs in
order: consecutive elementwise steps fused into one launch, a reduction (or a
softmax/layer_norm) fed from the launch producing its input, elementwise ops on
a matmul's result fused into its PSUM evacuation, consecutive products of one
operand in one launch that loads it once; bit-identical to eager.

Where fusion gains nothing the queue should cost nothing: a same-dtype device
copy that no fusion takes runs as eager's C++ copy (``capture.EAGER_RUNNERS``),
a one-step flush skips grouping, a flush whose steps repeat an earlier
flush's (a model's next forward) reuses its grouping and programs
(``programs.plan_flush``), a recurring fused elementwise launch reports the
figures its first run recorded (``programs._replay_elementwise``; a recurring matmul,
fused reduction or row-kernel launch, with its recorded scheduling choices too:
``programs._run_recorded``), and a call
whose launch ran alone in every flush it headed runs at the call when nothing
is queued (``queue._ALONE``).

Modules: capture.py (a kernel call -> queued steps), queue.py (queue, barriers,
flush), fusion.py (grouping and hazards), chain.py (elementwise steps run per
tile region), programs.py (fused programs and whole-flush plans, their caches,
running them), hooks.py (the C++ copy kernels), mode.py (the switch), stats.py
(counters).
"""

from __future__ import annotations

from typing import Any

from device_impl.eager.mode import MODES, eager_mode, get_eager_mode, set_eager_mode  # noqa: F401
from device_impl.eager import programs
from device_impl.eager.queue import QUEUE, forget_alone
from device_impl.eager.stats import STATS


def clear_cache() -> None:
    """Forget fused programs, flush plans, recorded fused launches and which launches ran alone."""
    programs.clear_cache()
    forget_alone()


def flush(reason: str = "explicit") -> None:
    """Run everything queued now."""
    QUEUE.flush(reason)


def pending() -> int:
    """Number of queued steps."""
    return len(QUEUE.steps)


def set_limits(max_ops: int | None = None, max_bytes: int | None = None) -> None:
    """Queue limits: flush when this many steps, or output bytes, are waiting."""
    if max_ops is not None:
        if max_ops < 1:
            raise ValueError("max_ops must be at least 1")
        QUEUE.max_ops = max_ops
    if max_bytes is not None:
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        QUEUE.max_bytes = max_bytes


def stats() -> dict[str, Any]:
    """Since the last reset: ops_queued, ops_run_eagerly, ops_run_alone, steps, groups, fused_groups, fused_ops,
    reductions_fused, epilogue_ops, lhs_shared, splits, programs_cached, cache_hits, programs_replayed,
    stores_elided, errors, flushes (by reason), flushes_total (see stats.py)."""
    return STATS.snapshot()


def reset_stats() -> None:
    STATS.reset()
