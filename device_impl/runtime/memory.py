"""The torch.neuron memory API over the C++ caching allocator.

Keys and meanings match torch.cuda.memory_stats so tooling written for CUDA
reads them unchanged; ``capacity_bytes`` is added because simulated HBM has
a configurable size (NEURON_HBM_BYTES).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from device_impl._core import C
from device_impl.runtime.devices import DeviceLike, device_count, device_index


def _flatten(prefix: str, value: Any, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else key, item, out)
    else:
        out.append((prefix, value))


def memory_stats(device: DeviceLike = None) -> "OrderedDict[str, Any]":
    """Flattened allocator statistics, e.g. ``allocated_bytes.all.current``."""
    flat: list[tuple[str, Any]] = []
    _flatten("", C.memory_stats(device_index(device)), flat)
    return OrderedDict(sorted(flat))


def memory_stats_as_nested_dict(device: DeviceLike = None) -> dict[str, Any]:
    return C.memory_stats(device_index(device))


def memory_allocated(device: DeviceLike = None) -> int:
    """Bytes held by live tensors (rounded to the allocator's block sizes)."""
    return C.memory_stats(device_index(device))["allocated_bytes"]["all"]["current"]


def max_memory_allocated(device: DeviceLike = None) -> int:
    return C.memory_stats(device_index(device))["allocated_bytes"]["all"]["peak"]


def memory_reserved(device: DeviceLike = None) -> int:
    """Bytes of simulated HBM the caching allocator holds (live tensors plus cache)."""
    return C.memory_stats(device_index(device))["reserved_bytes"]["all"]["current"]


def max_memory_reserved(device: DeviceLike = None) -> int:
    return C.memory_stats(device_index(device))["reserved_bytes"]["all"]["peak"]


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    C.reset_peak_stats(device_index(device))


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    C.reset_accumulated_stats(device_index(device))


def empty_cache() -> None:
    """Return every cached, unused segment of every core to the host."""
    for index in range(device_count()):
        C.empty_cache(index)


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of simulated HBM, where free = capacity - reserved."""
    stats = C.memory_stats(device_index(device))
    total = stats["capacity_bytes"]
    return total - stats["reserved_bytes"]["all"]["current"], total


def memory_snapshot(device: DeviceLike = None) -> list[dict[str, Any]]:
    """Segments and their blocks, in the shape of torch.cuda.memory_snapshot()."""
    return C.memory_snapshot(device_index(device))


def check_allocator_invariants(device: DeviceLike = None) -> list[str]:
    """Every broken allocator invariant, described; an empty list means consistent."""
    return C.check_invariants(device_index(device))


def _format_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    """A printable table of the allocator state, like torch.cuda.memory_summary()."""
    index = device_index(device)
    stats = C.memory_stats(index)
    rows = [("Allocated memory", "allocated_bytes", True), ("Active memory", "active_bytes", True),
            ("Requested memory", "requested_bytes", True), ("Reserved memory", "reserved_bytes", True),
            ("Non-releasable memory", "inactive_split_bytes", True), ("Allocations", "allocation", False),
            ("Active allocs", "active", False), ("Reserved segments", "segment", False),
            ("Non-releasable allocs", "inactive_split", False)]
    pools = ("all",) if abbreviated else ("all", "large_pool", "small_pool")
    fmt = "{:<34}|{:>14}|{:>14}|{:>14}|{:>14}"
    lines = ["=" * 94,
             f" neuron:{index} memory summary (simulated HBM capacity {_format_size(stats['capacity_bytes'])})",
             "-" * 94, fmt.format(" Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed"), "-" * 94]
    for title, key, is_bytes in rows:
        for pool in pools:
            s = stats[key][pool]
            show = _format_size if is_bytes else str
            label = f" {title}" if pool == "all" else f"       from {pool.replace('_', ' ')}"
            lines.append(fmt.format(label, *(show(s[k]) for k in ("current", "peak", "allocated", "freed"))))
        lines.append("-" * 94)
    lines.append(f" Allocation retries: {stats['num_alloc_retries']}    OOMs: {stats['num_ooms']}    "
                 f"Segment allocs/frees: {stats['num_device_alloc']}/{stats['num_device_free']}")
    lines.append("=" * 94)
    return "\n".join(lines)


# --- pinned host memory (csrc/host_allocator.*) ----------------------------------------------------


def host_memory_stats() -> "OrderedDict[str, Any]":
    """Pinned host memory of the neuron host allocator, flattened as torch.cuda.host_memory_stats():
    ``allocated_bytes.current`` (pinned memory held, cached included), ``active_bytes.current`` (held by
    live tensors), ``num_host_alloc``/``num_host_free``, ``host_alloc_time.total`` (µs), and
    ``num_record_event`` (non_blocking copies that recorded a stream use of a pinned block)."""
    flat: list[tuple[str, Any]] = []
    _flatten("", C.host_memory_stats(), flat)
    return OrderedDict(sorted(flat))


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    return C.host_memory_stats()


def empty_host_cache() -> None:
    """Return cached, unused pinned blocks to the system (also ``torch.accelerator.empty_host_cache()``)."""
    C.host_empty_cache()


def reset_peak_host_memory_stats() -> None:
    C.host_reset_peak_stats()


def reset_accumulated_host_memory_stats() -> None:
    C.host_reset_accumulated_stats()
