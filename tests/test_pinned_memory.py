"""Pinned host memory for neuron: the PrivateUse1 host allocator (csrc/host_allocator.*).

pin_memory()/is_pinned()/DataLoader(pin_memory=True) go through the hooks' isPinnedPtr and
getPinnedMemoryAllocator; non_blocking copies from pinned memory are recorded on the current stream
and cost the pinned (direct DMA) time, pageable ones also pay the bounce-buffer staging. Each test
fails if the host allocator, its registration in the hooks or the pinned copy model is removed.
"""

from __future__ import annotations

import gc
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from device_impl._core import C
from device_impl.engine.constants import PLATFORM


def host_stats() -> dict:
    return torch.neuron.host_memory_stats()


def test_pin_memory_copies_into_pinned_memory():
    t = torch.arange(1000, dtype=torch.float32)
    assert not t.is_pinned()
    p = t.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu"
    assert p.data_ptr() != t.data_ptr() and torch.equal(p, t)
    assert p[10:].is_pinned()  # a view into a pinned block is pinned
    assert p.pin_memory() is p  # already pinned: returned as is
    assert torch.empty(7, pin_memory=True).is_pinned()
    assert not torch.empty(7).is_pinned()


def test_pin_memory_for_the_neuron_device_and_storages():
    t = torch.randn(64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates the device argument
        assert t.pin_memory("neuron").is_pinned()
        assert t.pin_memory(torch.device("neuron")).is_pinned("neuron")
    storage = t.untyped_storage().pin_memory()
    assert storage.is_pinned() and not t.untyped_storage().is_pinned()
    assert bytes(storage) == bytes(t.untyped_storage())


def test_host_allocator_stats_cache_and_reuse():
    gc.collect()
    torch.neuron.empty_host_cache()
    torch.neuron.reset_accumulated_host_memory_stats()
    before = host_stats()
    p = torch.empty(3000, dtype=torch.uint8).pin_memory()  # rounded to a power of two: 4096
    s = host_stats()
    assert s["active_bytes.current"] - before["active_bytes.current"] == 4096
    assert s["active_requests.current"] - before["active_requests.current"] == 1
    assert s["num_host_alloc"] == 1
    del p
    s = host_stats()
    assert s["active_bytes.current"] == before["active_bytes.current"]
    assert s["allocated_bytes.current"] - before["allocated_bytes.current"] == 4096  # cached, not freed
    q = torch.empty(4000, dtype=torch.uint8).pin_memory()  # same size class: the cached block is reused
    assert host_stats()["num_host_alloc"] == 1
    del q
    torch.ones(1, device="neuron")  # torch.accelerator's host-cache API acts once the device is in use
    torch.accelerator.empty_host_cache()  # PyTorch's generic API reaches the registered host allocator
    s = host_stats()
    assert s["num_host_free"] == 1
    assert s["allocated_bytes.current"] == before["allocated_bytes.current"]
    torch.neuron.reset_peak_host_memory_stats()
    assert host_stats()["active_bytes.peak"] == host_stats()["active_bytes.current"]


class _Pairs(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> dict:
        return {"x": torch.full((3,), float(i)), "y": torch.tensor(i)}


def test_dataloader_pin_memory_yields_pinned_batches():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch 2.13: pin_memory_device is deprecated
        loader = DataLoader(_Pairs(), batch_size=4, pin_memory=True, pin_memory_device="neuron")
        batches = list(loader)
    assert len(batches) == 2
    for batch in batches:
        assert batch["x"].is_pinned() and batch["y"].is_pinned()
        moved = batch["x"].to("neuron", non_blocking=True)
        assert torch.equal(moved.cpu(), batch["x"])
    plain = next(iter(DataLoader(_Pairs(), batch_size=4)))
    assert not plain["x"].is_pinned()


def _copy_ns(fn) -> int:
    start = torch.neuron.device_time_ns()
    fn()
    return torch.neuron.device_time_ns() - start


def test_pinned_and_pageable_copies_take_their_modeled_times():
    latency, host_rate, _, staging_rate = PLATFORM.copy_model()
    pageable = torch.randn(1 << 16)
    pinned = pageable.pin_memory()
    nbytes = pageable.numel() * pageable.element_size()
    assert _copy_ns(lambda: pinned.to("neuron", non_blocking=True)) == int(latency + nbytes / host_rate)
    assert _copy_ns(lambda: pageable.to("neuron")) == int(latency + nbytes / host_rate + nbytes / staging_rate)
    device = pageable.to("neuron")
    out = torch.empty_like(pageable).pin_memory()
    assert _copy_ns(lambda: out.copy_(device, non_blocking=True)) == int(latency + nbytes / host_rate)
    assert torch.equal(out, pageable)
    assert _copy_ns(lambda: device.cpu()) > int(latency + nbytes / host_rate)
    assert C.copy_time_ns(nbytes, True, pinned=False) > C.copy_time_ns(nbytes, True, pinned=True)


def test_non_blocking_copy_from_pinned_memory_is_ordered_on_the_current_stream():
    latency, host_rate, _, _ = PLATFORM.copy_model()
    pinned = torch.randn(1 << 14).pin_memory()
    nbytes = pinned.numel() * pinned.element_size()
    side = torch.neuron.Stream()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    recorded = host_stats()["num_record_event"]
    with torch.neuron.stream(side):
        start.record()
        moved = pinned.to("neuron", non_blocking=True)
        end.record()
    end.synchronize()
    assert host_stats()["num_record_event"] == recorded + 1  # the block's use was recorded on `side`
    assert start.elapsed_time(end) * 1e6 == pytest.approx(int(latency + nbytes / host_rate), abs=1)
    assert torch.equal(moved.cpu(), pinned)
    pinned.to("neuron")  # blocking: nothing to record
    torch.randn(8).to("neuron", non_blocking=True)  # pageable: a staged, synchronous copy
    assert host_stats()["num_record_event"] == recorded + 1
