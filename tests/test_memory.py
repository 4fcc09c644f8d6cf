"""The caching allocator: capacity, pools, size classes, reuse, stats and OOM."""

import gc

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from device_impl._core import C

MiB = 2**20
GiB = 2**30


def empty_bytes(n: int, device: str = "neuron:0") -> torch.Tensor:
    return torch.empty(n, dtype=torch.uint8, device=device)


def stats(device=0):
    return torch.neuron.memory_stats(device)


def assert_consistent(device=0):
    assert torch.neuron.check_allocator_invariants(device) == []
    s = stats(device)
    assert s["reserved_bytes.all.current"] >= s["allocated_bytes.all.current"] >= s["active_bytes.all.current"]
    assert s["active_bytes.all.current"] >= s["requested_bytes.all.current"]


def test_size_classes():
    assert C.round_size(1) == 256
    assert C.round_size(256) == 256
    assert C.round_size(257) == 512
    assert C.round_size(1000) == 1024
    assert C.round_size(1100) == 1280  # quarter-power-of-two classes: at most 25% waste
    assert C.round_size(3 * MiB + 1) == 3.5 * MiB
    assert C.round_size(16 * MiB) == 16 * MiB
    assert C.round_size(17 * MiB) == 18 * MiB  # above 16 MiB: multiples of 2 MiB
    for n in (300, 5000, 70000, 3 * MiB, 9 * MiB):
        assert n <= C.round_size(n) <= 1.25 * n + 256


def test_allocated_counts_rounded_blocks_and_requested_counts_bytes():
    base = torch.neuron.memory_allocated()
    base_requested = stats()["requested_bytes.all.current"]
    t = empty_bytes(1000)
    assert torch.neuron.memory_allocated() - base == 1024
    assert stats()["requested_bytes.all.current"] - base_requested == 1000
    del t
    assert torch.neuron.memory_allocated() == base


def test_small_and_large_pools():
    before = stats()
    small = empty_bytes(4096)
    large = empty_bytes(3 * MiB)
    after = stats()
    assert after["allocated_bytes.small_pool.current"] - before["allocated_bytes.small_pool.current"] == 4096
    assert after["allocated_bytes.large_pool.current"] - before["allocated_bytes.large_pool.current"] == 3 * MiB
    del small, large


def test_freed_blocks_are_reused_without_new_segments():
    torch.neuron.empty_cache()
    t = empty_bytes(5 * MiB)
    reserved = torch.neuron.memory_reserved()
    segments = stats()["segment.all.current"]
    ptr = t.data_ptr()
    del t
    u = empty_bytes(5 * MiB)
    assert u.data_ptr() == ptr
    assert torch.neuron.memory_reserved() == reserved
    assert stats()["segment.all.current"] == segments
    del u


def test_blocks_are_split_from_one_segment_and_coalesced_on_free():
    gc.collect()
    torch.neuron.empty_cache()
    assert stats()["allocated_bytes.large_pool.current"] == 0, "a test leaked a large tensor"
    base_segments = stats()["segment.large_pool.current"]
    first = empty_bytes(5 * MiB)  # a 20 MiB segment is created and split
    second = empty_bytes(5 * MiB)  # served from the remainder of the same segment
    assert stats()["segment.large_pool.current"] == base_segments + 1
    assert stats()["reserved_bytes.large_pool.current"] == 20 * MiB
    assert second.data_ptr() == first.data_ptr() + 5 * MiB
    assert stats()["inactive_split_bytes.large_pool.current"] == 10 * MiB
    del first
    assert stats()["inactive_split_bytes.large_pool.current"] == 15 * MiB
    del second  # coalesces with both neighbours: one free block spans the segment again
    assert stats()["inactive_split_bytes.large_pool.current"] == 0
    assert_consistent()
    torch.neuron.empty_cache()
    assert stats()["segment.large_pool.current"] == base_segments


def test_empty_cache_releases_unused_segments_only():
    keep = empty_bytes(2 * MiB)
    drop = empty_bytes(30 * MiB)
    del drop
    reserved_before = torch.neuron.memory_reserved()
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved() <= reserved_before - 30 * MiB
    assert torch.neuron.memory_reserved() >= torch.neuron.memory_allocated() >= 2 * MiB
    del keep


def test_ten_thousand_mixed_tensors_return_to_baseline():
    gc.collect()
    base = torch.neuron.memory_allocated()
    sizes = [17, 256, 1000, 4096, 70_000, 1_100_000, 3 * MiB]
    tensors = [empty_bytes(sizes[i % len(sizes)] * (1 + i % 3)) for i in range(10_000)]
    assert torch.neuron.memory_allocated() > base
    for i in range(0, len(tensors), 2):  # free in an interleaved order to exercise coalescing
        tensors[i] = None
    assert_consistent()
    tensors.clear()
    assert torch.neuron.memory_allocated() == base
    assert_consistent()


def test_peak_and_reset():
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    t = empty_bytes(8 * MiB)
    del t
    assert torch.neuron.max_memory_allocated() >= base + 8 * MiB
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()
    assert torch.neuron.max_memory_reserved() == torch.neuron.memory_reserved()


def test_per_device_stats_are_separate():
    before0, before1 = torch.neuron.memory_allocated(0), torch.neuron.memory_allocated(1)
    t = empty_bytes(MiB, "neuron:1")
    assert torch.neuron.memory_allocated(0) == before0
    assert torch.neuron.memory_allocated(1) == before1 + MiB
    del t


def test_out_of_memory_is_reported_and_recoverable():
    device = "neuron:1"
    torch.neuron.empty_cache()
    first = empty_bytes(10 * GiB, device)  # host pages are only committed when touched
    ooms = stats(1)["num_ooms"]
    with pytest.raises(torch.OutOfMemoryError) as info:
        empty_bytes(10 * GiB, device)
    message = str(info.value)
    assert "Tried to allocate 10.00 GiB" in message
    assert "capacity 16.00 GiB" in message
    assert "allocated" in message and "reserved" in message
    assert "NEURON_HBM_BYTES" in message and "empty_cache" in message
    assert stats(1)["num_ooms"] == ooms + 1
    assert_consistent(1)
    del first
    again = empty_bytes(12 * GiB, device)  # the failed request left nothing behind
    assert_consistent(1)
    del again
    torch.neuron.empty_cache()
    assert torch.neuron.memory_reserved(1) < GiB


def test_oom_retries_after_freeing_the_cache():
    device = "neuron:1"
    cached = empty_bytes(9 * GiB, device)
    del cached  # 9 GiB reserved but free
    retries = stats(1)["num_alloc_retries"]
    t = empty_bytes(12 * GiB, device)  # fits only once the cached segment is released
    assert stats(1)["num_alloc_retries"] == retries + 1
    del t
    torch.neuron.empty_cache()


def test_memory_apis_agree_with_torch_accelerator():
    t = empty_bytes(MiB)
    assert torch.accelerator.memory_allocated(0) == torch.neuron.memory_allocated(0)
    assert torch.accelerator.memory_reserved(0) == torch.neuron.memory_reserved(0)
    assert torch.accelerator.memory_stats(0)["allocated_bytes.all.current"] == torch.neuron.memory_allocated(0)
    free, total = torch.neuron.mem_get_info(0)
    assert total == 16 * GiB and free == total - torch.neuron.memory_reserved(0)
    del t


def test_memory_summary_and_snapshot():
    t = empty_bytes(3 * MiB)
    text = torch.neuron.memory_summary()
    assert "Allocated memory" in text and "Reserved memory" in text and "neuron:0" in text
    snapshot = torch.neuron.memory_snapshot()
    assert any(b["state"] == "active_allocated" and b["size"] == 3 * MiB for s in snapshot for b in s["blocks"])
    assert sum(s["total_size"] for s in snapshot) == torch.neuron.memory_reserved()
    del t


sizes = st.one_of(st.integers(0, 4096), st.integers(4097, 2 * MiB), st.integers(2 * MiB, 40 * MiB))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.booleans(), sizes, st.integers(0, 63)), min_size=1, max_size=60))
def test_invariants_hold_after_every_allocation(program):
    """Random interleavings of allocations and frees keep every stat and block list consistent."""
    live: list[torch.Tensor] = []
    base = torch.neuron.memory_allocated(0)
    for allocate, size, pick in program:
        if allocate or not live:
            live.append(empty_bytes(size))
        else:
            live.pop(pick % len(live))
        assert_consistent()
    live.clear()
    assert torch.neuron.memory_allocated(0) == base
    assert_consistent()
