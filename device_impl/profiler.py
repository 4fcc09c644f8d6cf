"""The neuron device in torch.profiler: a range per engine launch, its simulated time, one Chrome trace.

While any torch profiler runs (``torch.profiler.profile``, ``torch.autograd.profiler.profile``),
every engine launch -- a kernel in eager mode, a fused program in adaptive mode, a compiled
program -- opens a ``record_function`` range named ``neuron::<kernel>`` inside the op that
launched it, and its simulated device time is recorded (engine.core calls the observer
installed here; when no profiler runs a launch pays one flag test).

torch 2.13 has no Python route for a PrivateUse1 backend to add device events to a profile
(that takes C++ profiler stubs or a Kineto activity profiler). So the device side is
joined afterwards:

* ``attach_device_time(prof)`` adds each launch's simulated time to its range event as a
  device kernel, so ``prof.key_averages().table(sort_by="device_time_total")`` shows NEURON
  columns (profile with ``activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]``
  so torch prints them; PrivateUse1 adds no events of its own);
* ``device_time_by_op(prof)`` totals simulated time per launching aten op;
* ``export_chrome_trace(prof, path, trace)`` writes the profiler's trace plus one process per
  NeuronCore: a lane of kernels and, given an ``engine.record_trace()`` Trace, a lane per engine
  with its instructions, with flow arrows from each host range to its device kernel.
``profile(...)`` does all three around ``torch.profiler.profile``.

Time base of the merged trace: the profiler's (wall clock, µs). A launch starts on its core
when its host range starts, or when the core's previous launch ends if that is later (the
core runs one launch at a time); instruction offsets inside a launch are simulated ns. The
simulator spends far longer on the host than the device time it simulates, so device
kernels are short bars at the start of their host ranges; their lengths are the simulated
times.

Launches are matched to profiler events by name and order on the wall clock
(``time.time_ns``, the clock Kineto stamps events with).

The legacy profiler, ``torch.autograd.profiler.profile(use_device="neuron")``, needs none of this:
it calls the PrivateUse1 profiler stubs (csrc/profiler_stubs.cpp) at the start and end of every op,
which snapshot the cores' simulated device clocks, so ``key_averages()`` carries each op's device
time directly (in whole microseconds, torch's resolution for it) -- the same simulated time this
module attaches per launch.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
from torch.autograd.profiler_util import FunctionEvent

from device_impl.engine import core as engine_core
from device_impl.engine.core import Trace
from device_impl.engine.timeline import ENGINES, LaunchReport

RANGE_PREFIX = "neuron::"
KEEP_LAUNCHES = 1_000_000  # launch records kept for matching (oldest dropped first)
_MATCH_SLACK_US = 200.0  # clock skew tolerated between our stamps and Kineto's
# Chrome-trace pid of neuron:<i>'s lanes: above Linux's pid_max (2**22), clear of Kineto's own device
# lanes (pid = device index, labelled "GPU <i>").
LANE_PID_BASE = 10_000_000


@dataclass(frozen=True)
class KernelLaunch:
    """One engine launch seen while a profiler ran."""

    id: int
    kernel: str
    device: int
    host_start_ns: int  # wall clock, as Kineto
    host_end_ns: int
    device_start_ns: float  # simulated device clock of the core
    device_ns: float  # simulated duration, launch overhead included
    hbm_bytes: int
    flops: int
    instructions: int
    pid: int
    tid: int  # native thread id (the "tid" of Chrome traces)

    @property
    def range_name(self) -> str:
        return RANGE_PREFIX + self.kernel


NEFF_PREFIX = "neff:"  # the engine names a compiled program's launch neff:<program>
_launches: deque[KernelLaunch] = deque(maxlen=KEEP_LAUNCHES)
_next_id = [0]
_record_function = torch._C._profiler._RecordFunctionFast


def _observe(kernel: str, device: int) -> Callable[[bool], None]:
    """engine.core's launch observer: open the range now, record the launch when it ends."""
    start = time.time_ns()
    scope = _record_function(RANGE_PREFIX + kernel)
    scope.__enter__()

    def finished(completed: bool) -> None:
        scope.__exit__(None, None, None)
        end = time.time_ns()
        report = engine_core.last_launch() if completed else None
        if report is None or report.kernel != kernel or report.device != device:
            return
        _next_id[0] += 1
        _launches.append(KernelLaunch(_next_id[0], kernel, device, start, end, report.start_ns, report.device_ns,
                                      report.hbm_bytes, report.flops, report.instructions, os.getpid(),
                                      threading.get_native_id()))

    return finished


def install() -> None:
    """Make every engine launch visible to torch profilers (idempotent; done at import)."""
    engine_core.set_launch_observer(_observe)


install()


# --- joining launches with a profile -------------------------------------------------------------


def _profile_of(prof: Any) -> Any:
    """The torch.autograd.profiler.profile inside torch.profiler.profile (or prof itself)."""
    return getattr(prof, "profiler", None) or prof


def _events(prof: Any):
    """The FunctionEvents of torch.profiler.profile (``events()``) or autograd's profile (``function_events``)."""
    return prof.events() if hasattr(prof, "events") else prof.function_events


def _trace_start_ns(prof: Any) -> int:
    """Wall-clock ns of the profile's time zero (FunctionEvent times are µs after it)."""
    return _profile_of(prof).kineto_results.trace_start_ns()


def _candidates(prof: Any) -> list[KernelLaunch]:
    start = _trace_start_ns(prof) - int(_MATCH_SLACK_US * 1000)
    return [launch for launch in list(_launches) if launch.host_start_ns >= start]


def launches(prof: Any) -> list[KernelLaunch]:
    """The launches that happened while ``prof`` recorded (it must have stopped), in order."""
    return [launch for launch, _ in matched_events(prof)]


def _match(items: Iterable[KernelLaunch], events: Iterable[Any], start_of: Callable[[Any], float],
           launch_start: Callable[[KernelLaunch], float], launch_end: Callable[[KernelLaunch], float]
           ) -> list[tuple[KernelLaunch, Any]]:
    """Pair launches with their range events: same name, in order, the event inside the launch's window."""
    by_name: dict[str, list[Any]] = {}
    for event in events:
        by_name.setdefault(event[0], []).append(event[1])
    for found in by_name.values():
        found.sort(key=start_of)
    cursor = dict.fromkeys(by_name, 0)
    pairs = []
    for launch in sorted(items, key=lambda x: x.host_start_ns):
        found = by_name.get(launch.range_name)
        if not found:
            continue
        i = cursor[launch.range_name]
        lo, hi = launch_start(launch) - _MATCH_SLACK_US, launch_end(launch) + _MATCH_SLACK_US
        while i < len(found) and start_of(found[i]) < lo:
            i += 1
        if i < len(found) and start_of(found[i]) <= hi:
            pairs.append((launch, found[i]))
            i += 1
        cursor[launch.range_name] = i
    return pairs


def matched_events(prof: Any) -> list[tuple[KernelLaunch, FunctionEvent]]:
    """Each launch of the profile with its ``neuron::<kernel>`` FunctionEvent."""
    trace_start = _trace_start_ns(prof)
    events = [(e.name, e) for e in _events(prof) if e.name.startswith(RANGE_PREFIX)]
    return _match(_candidates(prof), events, lambda e: e.time_range.start,
                  lambda x: (x.host_start_ns - trace_start) / 1000, lambda x: (x.host_end_ns - trace_start) / 1000)


def attach_device_time(prof: Any) -> list[tuple[KernelLaunch, FunctionEvent]]:
    """Add each launch's simulated time to its range event as a device kernel (idempotent).

    The range event is marked as carrying its own device time (FunctionEvent.is_legacy), so
    torch's tables count it once: self device time on the ``neuron::`` row, total device time on
    the ops that contain it.
    """
    pairs = matched_events(prof)
    for launch, event in pairs:
        if getattr(event, "_neuron_attached", False):
            continue
        event.append_kernel(launch.range_name, launch.device, launch.device_ns / 1000)
        event.is_legacy = True
        event._neuron_attached = True
    device = torch._C._get_privateuse1_backend_name()
    events = _events(prof)
    if pairs and getattr(events, "_use_device", None) is None:
        events._use_device = device  # let torch's tables print the device columns
        for event in events:
            event.use_device = device
    return pairs


def device_time_by_op(prof: Any) -> dict[str, dict[str, float]]:
    """``{op: {"launches": n, "device_us": t}}``: simulated time per op that launched kernels.

    The op is the innermost enclosing ``aten::`` event of each launch range (the kernel name
    when the launch happened outside any op, such as a flush at a synchronize).
    """
    totals: dict[str, dict[str, float]] = {}
    for launch, event in matched_events(prof):
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        name = parent.name if parent is not None else launch.range_name
        entry = totals.setdefault(name, {"launches": 0, "device_us": 0.0})
        entry["launches"] += 1
        entry["device_us"] += launch.device_ns / 1000
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]["device_us"]))


def device_time_table(prof: Any, row_limit: int = 20) -> str:
    """A text table of ``device_time_by_op``, largest first."""
    rows = list(device_time_by_op(prof).items())[:row_limit]
    width = max([len("op")] + [len(name) for name, _ in rows])
    lines = [f"{'op':<{width}}  {'launches':>8}  {'device time (us)':>16}"]
    lines += [f"{name:<{width}}  {int(v['launches']):>8}  {v['device_us']:>16.3f}" for name, v in rows]
    return "\n".join(lines)


# --- one Chrome trace -----------------------------------------------------------------------------


def _device_lanes(items: list[KernelLaunch], host_ts: dict[int, float], reports: dict[tuple, LaunchReport]
                  ) -> tuple[list[dict], list[dict]]:
    """Kernel and instruction events per core, and flow arrows from host ranges to them."""
    events: list[dict] = []
    flows: list[dict] = []
    free_at: dict[int, float] = {}
    for launch in sorted(items, key=lambda x: host_ts[x.id]):
        start = max(host_ts[launch.id], free_at.get(launch.device, float("-inf")))
        duration = launch.device_ns / 1000
        free_at[launch.device] = start + duration
        args = {"launch": launch.id, "device_ns": launch.device_ns, "hbm_bytes": launch.hbm_bytes,
                "flops": launch.flops, "instructions": launch.instructions}
        if launch.kernel.startswith(NEFF_PREFIX):  # a compiled graph: its roofline figures (issue 21)
            from device_impl.compiler import counters

            args.update(counters.utilization(launch.kernel[len(NEFF_PREFIX):], launch.flops, launch.hbm_bytes,
                                             launch.device_ns))
        pid = LANE_PID_BASE + launch.device
        events.append({"name": launch.kernel, "cat": "neuron_kernel", "ph": "X", "pid": pid, "tid": 0,
                       "ts": start, "dur": duration, "args": args})
        flows.append({"name": "neuron_launch", "cat": "neuron_launch", "ph": "s", "id": launch.id,
                      "pid": launch.pid, "tid": launch.tid, "ts": host_ts[launch.id]})
        flows.append({"name": "neuron_launch", "cat": "neuron_launch", "ph": "f", "bp": "e", "id": launch.id,
                      "pid": pid, "tid": 0, "ts": start})
        report = reports.get((launch.device, launch.device_start_ns))
        if report is not None:
            for engine, name, offset_ns, cost_ns in report.events:
                events.append({"name": name, "cat": engine, "ph": "X", "pid": pid,
                               "tid": 1 + ENGINES.index(engine), "ts": start + offset_ns / 1000,
                               "dur": cost_ns / 1000, "args": {"kernel": launch.kernel, "launch": launch.id}})
    for device in sorted(free_at):
        pid = LANE_PID_BASE + device
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"neuron:{device}"}})
        events.append({"name": "process_labels", "ph": "M", "pid": pid, "args": {"labels": "simulated NeuronCore"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": pid}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": "kernels"}})
        for i, engine in enumerate(ENGINES):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": 1 + i,
                           "args": {"name": "DMA" if engine == "dma" else f"{engine}E"}})
    return events, flows


def merged_chrome_trace(prof: Any, trace: Trace | None = None) -> dict:
    """The profiler's Chrome trace with the NeuronCores' lanes added (see the module docstring)."""
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as handle:
        path = handle.name
    try:
        prof.export_chrome_trace(path)
        with open(path) as handle:
            data = json.load(handle)
    finally:
        os.unlink(path)
    events = data["traceEvents"] if isinstance(data, dict) else data
    base_ns = data.get("baseTimeNanoseconds", 0) if isinstance(data, dict) else 0
    items = _candidates(prof)
    host_ranges = [(e["name"], e) for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(
        RANGE_PREFIX)]
    pairs = _match(items, host_ranges, lambda e: float(e["ts"]), lambda x: (x.host_start_ns - base_ns) / 1000,
                   lambda x: (x.host_end_ns - base_ns) / 1000)
    host_ts: dict[int, float] = {}
    for launch, event in pairs:
        event.setdefault("args", {}).update({"device_ns": launch.device_ns, "device": launch.device,
                                             "launch": launch.id})
        host_ts[launch.id] = float(event["ts"])
    matched = [launch for launch, _ in pairs]
    reports = {(r.device, r.start_ns): r for r in (trace.reports if trace is not None else [])}
    lanes, flows = _device_lanes(matched, host_ts, reports)
    events.extend(lanes)
    events.extend(flows)
    if isinstance(data, dict):
        data["traceEvents"] = events
        data.setdefault("neuron", {})["time_base"] = "profiler wall clock (us); device lanes start at their host range"
        return data
    return {"traceEvents": events}


def export_chrome_trace(prof: Any, path: str, trace: Trace | None = None) -> None:
    """Write ``merged_chrome_trace(prof, trace)`` to ``path`` (Perfetto and chrome://tracing open it)."""
    with open(path, "w") as handle:
        json.dump(merged_chrome_trace(prof, trace), handle)


class profile:
    """``torch.profiler.profile`` plus the engine timeline: ``with device_impl.profiler.profile() as p:``.

    Keyword arguments go to torch.profiler.profile (default activities: CPU and PrivateUse1).
    On exit the device time is attached; ``p.export_chrome_trace(path)`` writes the merged
    trace with engine instruction lanes (``instructions=False`` skips recording them).
    """

    def __init__(self, instructions: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("activities", [torch.profiler.ProfilerActivity.CPU,
                                         torch.profiler.ProfilerActivity.PrivateUse1])
        self.torch_profiler = torch.profiler.profile(**kwargs)
        self._instructions = instructions
        self._recording = None
        self.trace: Trace | None = None

    def __enter__(self) -> "profile":
        if self._instructions:
            self._recording = engine_core.record_trace()
            self.trace = self._recording.__enter__()
        self.torch_profiler.__enter__()
        return self

    def __exit__(self, *exc: object) -> bool:
        try:
            self.torch_profiler.__exit__(*exc)
        finally:
            if self._recording is not None:
                self._recording.__exit__(*exc)
        attach_device_time(self.torch_profiler)
        return False

    def events(self):
        return self.torch_profiler.events()

    def key_averages(self, *args: Any, **kwargs: Any):
        return self.torch_profiler.key_averages(*args, **kwargs)

    def launches(self) -> list[KernelLaunch]:
        return launches(self.torch_profiler)

    def device_time_by_op(self) -> dict[str, dict[str, float]]:
        return device_time_by_op(self.torch_profiler)

    def device_time_table(self, row_limit: int = 20) -> str:
        return device_time_table(self.torch_profiler, row_limit)

    def export_chrome_trace(self, path: str) -> None:
        export_chrome_trace(self.torch_profiler, path, self.trace)


__all__ = ["KernelLaunch", "attach_device_time", "device_time_by_op", "device_time_table", "export_chrome_trace",
           "launches", "matched_events", "merged_chrome_trace", "profile", "install"]
