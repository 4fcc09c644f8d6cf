"""Streams and events: record, wait, query, synchronize, elapsed_time, and ordering."""

import pytest
import torch

from device_impl import eager


def test_default_and_current_streams():
    default = torch.neuron.default_stream()
    assert default.stream_id == 0 and default.device == torch.device("neuron", 0)
    assert torch.neuron.current_stream() == default
    assert torch.neuron.default_stream(1).device_index == 1


def test_stream_context_manager_and_set_stream():
    s = torch.neuron.Stream()
    assert isinstance(s, torch.neuron.Stream) and s.stream_id != 0
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s
    assert torch.neuron.current_stream().stream_id == 0
    with s:
        assert torch.accelerator.current_stream() == s
    assert torch.accelerator.current_stream().stream_id == 0


def test_stream_on_another_core():
    s = torch.neuron.Stream("neuron:1")
    assert s.device_index == 1
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream(1) == s
        assert torch.neuron.current_stream(0).stream_id == 0
        assert torch.neuron.current_device() == 1  # as torch.cuda.stream: the stream's core is current
    assert torch.neuron.current_device() == 0  # and the previous core is current again after the block


def test_cross_stream_producer_consumer_ordering():
    producer, consumer = torch.neuron.Stream(), torch.neuron.Stream()
    done = torch.neuron.Event()
    with torch.neuron.stream(producer):
        x = torch.arange(1000.0, device="neuron") * 2
        done.record()
    with torch.neuron.stream(consumer):
        consumer.wait_event(done)
        y = x + 1
    consumer.synchronize()
    assert torch.equal(y.cpu(), torch.arange(1000.0) * 2 + 1)
    assert done.query() and producer.query() and consumer.query()
    consumer.wait_stream(producer)


def test_event_timing_measures_device_time():
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    assert isinstance(start, torch.neuron.Event)
    start.record()
    a = torch.randn(256, 256, device="neuron")
    for _ in range(3):
        a = a @ a
    end.record()
    end.synchronize()
    elapsed = start.elapsed_time(end)
    assert elapsed > 0
    # Nothing ran between two back-to-back records.
    again = torch.neuron.Event(enable_timing=True)
    again.record()
    end.record()
    assert again.elapsed_time(end) == 0


def test_elapsed_time_requires_timing_and_recording():
    plain_a, plain_b = torch.neuron.Event(), torch.neuron.Event()
    plain_a.record()
    plain_b.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
        plain_a.elapsed_time(plain_b)
    unrecorded = torch.neuron.Event(enable_timing=True)
    recorded = torch.neuron.Event(enable_timing=True)
    recorded.record()
    with pytest.raises((RuntimeError, ValueError), match="recorded"):
        recorded.elapsed_time(unrecorded)


def test_stream_record_event_and_device_synchronize():
    s = torch.neuron.Stream()
    e = s.record_event()
    assert e.query()
    e.synchronize()
    torch.neuron.synchronize()
    assert torch.neuron.device_time_ns() >= 0


@pytest.mark.parametrize("sync", ["event_record", "event_synchronize", "event_query", "event_wait",
                                  "stream_synchronize", "stream_query", "stream_wait_stream"])
def test_plain_torch_streams_and_events_run_queued_work(sync):
    """torch.Stream / torch.Event (not the torch.neuron subclasses) synchronise through the C++ guard,
    which runs adaptive eager's queue: a timestamp or a "done" answer covers the work before it."""
    stream = torch.Stream(device="neuron")
    event = torch.Event(device="neuron")
    assert type(stream) is torch.Stream and type(event) is torch.Event
    actions = {
        "event_record": lambda: event.record(stream),
        "event_synchronize": lambda: (event.record(stream), event.synchronize()),
        "event_query": lambda: event.query(),
        "event_wait": lambda: event.wait(stream),
        "stream_synchronize": lambda: stream.synchronize(),
        "stream_query": lambda: stream.query(),
        "stream_wait_stream": lambda: stream.wait_stream(torch.Stream(device="neuron")),
    }
    with torch.neuron.eager_mode("adaptive"):
        if sync in ("event_query", "event_wait"):
            event.record(stream)  # an event never recorded has nothing to wait for: torch answers at once
        y = torch.arange(8.0, device="neuron") * 2 + 1
        assert eager.pending() > 0
        actions[sync]()
        assert eager.pending() == 0
    assert torch.equal(y.cpu(), torch.arange(8.0) * 2 + 1)


def test_plain_event_timing_includes_queued_work():
    start, end = torch.Event(device="neuron", enable_timing=True), torch.Event(device="neuron", enable_timing=True)
    with torch.neuron.eager_mode("adaptive"):
        start.record()
        a = torch.randn(256, 256, device="neuron")
        b = (a @ a).relu() * 2
        end.record()  # runs the queued matmul chain first, so the clock has moved
        assert eager.pending() == 0
    assert start.elapsed_time(end) > 0
    assert b.shape == (256, 256)


def test_copies_take_modeled_device_time_not_host_wall_time():
    """A copy advances the device clock by its modeled transfer (DMA latency + bytes over PCIe for host
    copies, a read and a write at the core's DMA bandwidth within HBM), so the same copy always costs the
    same simulated time, however busy this machine is."""
    from device_impl._core import C
    from device_impl.engine.constants import PLATFORM

    latency, host_rate, device_rate, staging_rate = PLATFORM.copy_model()
    x = torch.randn(1 << 18)  # pageable: staged through a bounce buffer (tests/test_pinned_memory.py)
    nbytes = x.numel() * x.element_size()
    pageable = int(latency + nbytes / host_rate + nbytes / staging_rate)
    times = []
    for _ in range(3):
        before = torch.neuron.device_time_ns()
        y = x.to("neuron")
        times.append(torch.neuron.device_time_ns() - before)
    assert times == [pageable] * 3
    before = torch.neuron.device_time_ns()
    y.cpu()
    assert torch.neuron.device_time_ns() - before == pageable
    assert C.copy_time_ns(nbytes, False) == int(latency + 2 * nbytes / device_rate)
