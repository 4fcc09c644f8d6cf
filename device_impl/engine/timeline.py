"""The per-engine schedule of one kernel launch, and what it measures.

Each compute engine executes its instructions in program order; an
instruction starts when its engine is free, its inputs are ready and its
outputs' memory may be overwritten. Engines run concurrently, so the launch
takes as long as its critical path.

DMA is different: a core has 16 queues sharing HBM bandwidth, so a transfer
waiting for its data does not hold up an independent one behind it. The
DMA resource is modelled as the aggregate bandwidth with transfers placed
in the earliest gap where they fit (list scheduling), each completing a
fixed latency after its last byte.

The result is the simulated device time of the launch, each engine's busy
time, HBM traffic and TensorE flops; with recording on, every instruction as
a Chrome-trace event (one lane per engine) that Perfetto opens.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Iterable

from device_impl.engine.memory import Tile

ENGINES = ("dma", "tensor", "vector", "scalar", "gpsimd")
_ZEROS = dict.fromkeys(ENGINES, 0.0)


class Timeline:
    __slots__ = ("free", "busy", "events", "record", "end", "hbm_read", "hbm_write", "flops", "instructions",
                 "dma_intervals", "floor", "hbm_floors", "hbm_targets", "onchip")

    def __init__(self, record: bool = False):
        self.record = record
        self.reset()

    def reset(self) -> None:
        self.free = dict(_ZEROS)
        self.busy = dict(_ZEROS)
        self.events: list[tuple[str, str, float, float]] = []
        self.end = 0.0
        self.hbm_read = 0
        self.hbm_write = 0
        self.flops = 0
        self.instructions = 0
        self.dma_intervals: list[list[float]] = []  # busy [start, end) of the DMA bandwidth, sorted
        # No DMA transfer starts before ``floor``: a compiled program (device_impl.compiler) raises it
        # between steps so a step waits for the HBM buffers it reads (written by earlier steps'
        # DMAs, which tiles do not track) and for the readers of the bytes it overwrites, without
        # serialising independent steps. Compute engines read only tiles, whose readiness the timeline
        # tracks, so the floor does not hold them: a step's TensorE work may start as soon as its tiles
        # are loaded, under the previous step's tail.
        self.floor = 0.0
        # (lo, hi, ready): HBM byte ranges [lo, hi) whose contents are final at ``ready`` (a compiled
        # step's operands: 0 for the program's inputs and constants, which nothing in it writes; the end
        # of the producing step for the others). A DMA load from such a range waits for ``ready`` instead
        # of ``floor``: a step's weights stream in while earlier steps compute, as a Neuron compiler
        # hoists them. DMA bandwidth and SBUF reuse still order it.
        # (lo, hi, ready, writes): ``writes`` is the range's list from ``hbm_targets`` (or None), and a load
        # from it waits for the last recorded write overlapping its bytes instead: a step reads a block
        # of its producer's result as soon as that block is stored, not when the whole producer ends.
        self.hbm_floors: tuple[tuple[int, int, float, list | None], ...] = ()
        # (lo, hi, writes): HBM ranges whose DMA writes are recorded as (lo, hi, done) into ``writes``
        # (a compiled program's scratch buffers and outputs).
        self.hbm_targets: tuple[tuple[int, int, list], ...] = ()
        # (lo, hi): byte ranges of SBUF that DMA addresses like HBM (a compiled program's scratch arena kept
        # on chip, compiler/memory.py ``arena_space``): transfers from or to them are SBUF-to-SBUF DMAs, which
        # take the DMA queues' time as any transfer but move no HBM bytes.
        self.onchip: tuple[tuple[int, int], ...] = ()

    def schedule(self, engine: str, name: str, cost_ns: float, reads: Iterable[Tile] = (),
                 writes: Iterable[Tile] = (), latency_ns: float = 0.0) -> float:
        """Place one instruction; returns its completion time (ns from launch start)."""
        if engine == "dma":
            start = self.floor
        else:
            start = self.free[engine]
        for t in reads:
            r = t.root
            if r.ready > start:
                start = r.ready
        for t in writes:
            r = t.root
            if r.last_use > start:
                start = r.last_use
            if r.available > start:
                start = r.available
        if engine == "dma":
            start = self._dma_slot(start, cost_ns)
        end = start + cost_ns
        done = end + latency_ns
        if end > self.free[engine]:
            self.free[engine] = end
        self.busy[engine] += cost_ns
        for t in reads:
            r = t.root
            if end > r.last_use:
                r.last_use = end
        for t in writes:
            r = t.root
            r.ready = done
            r.last_use = done
        if done > self.end:
            self.end = done
        self.instructions += 1
        if self.record:
            self.events.append((engine, name, start, cost_ns))
        return done


    def _dma_slot(self, ready: float, cost: float) -> float:
        """Earliest start >= ready where the DMA bandwidth is idle for ``cost`` ns; books it."""
        intervals = self.dma_intervals
        start = ready
        index = bisect.bisect_left(intervals, [ready, ready])
        if index and intervals[index - 1][1] > start:
            start = intervals[index - 1][1]
        while index < len(intervals) and intervals[index][0] < start + cost:
            start = max(start, intervals[index][1])
            index += 1
        if index and intervals[index - 1][1] == start:
            intervals[index - 1][1] = start + cost  # extend the interval it follows
        else:
            intervals.insert(index, [start, start + cost])
        return start


@dataclass
class LaunchReport:
    """What one kernel launch cost on the simulated core."""

    kernel: str
    device: int
    device_ns: float  # critical path, including the launch overhead
    busy_ns: dict[str, float]
    hbm_bytes_read: int
    hbm_bytes_written: int
    flops: int
    instructions: int
    sbuf_peak_bytes: int
    psum_peak_bytes: int
    start_ns: float = 0.0  # on the device timeline
    events: list[tuple[str, str, float, float]] = field(default_factory=list)

    def utilization(self, engine: str) -> float:
        """Fraction of the launch's device time the engine was busy."""
        return self.busy_ns[engine] / self.device_ns if self.device_ns else 0.0

    @property
    def hbm_bytes(self) -> int:
        return self.hbm_bytes_read + self.hbm_bytes_written


def chrome_trace(reports: Iterable[LaunchReport]) -> dict:
    """Chrome trace-event JSON (``ph: X`` complete events, µs) with one thread lane per engine."""
    events: list[dict] = []
    devices: set[int] = set()
    for report in reports:
        devices.add(report.device)
        pid = report.device
        events.append({"name": report.kernel, "cat": "kernel", "ph": "X", "pid": pid, "tid": 0,
                       "ts": report.start_ns / 1e3, "dur": report.device_ns / 1e3,
                       "args": {"hbm_bytes": report.hbm_bytes, "flops": report.flops,
                                "instructions": report.instructions}})
        for engine, name, start, duration in report.events:
            events.append({"name": name, "cat": engine, "ph": "X", "pid": pid,
                           "tid": 1 + ENGINES.index(engine), "ts": (report.start_ns + start) / 1e3,
                           "dur": duration / 1e3, "args": {"kernel": report.kernel}})
    for pid in sorted(devices):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"neuron:{pid}"}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "kernels"}})
        for i, engine in enumerate(ENGINES):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 1 + i,
                           "args": {"name": f"{engine}E" if engine != "dma" else "DMA"}})
    return {"traceEvents": events, "displayTimeUnit": "ns"}
