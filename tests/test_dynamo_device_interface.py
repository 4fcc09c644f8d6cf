"""Dynamo's DeviceInterface for neuron (device_impl/runtime/dynamo_interface.py).

Fails if the interface is not registered ("No interface for device neuron"), or if Dynamo cannot
trace torch.neuron streams and events into one graph (fullgraph=True raises on a graph break).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._dynamo.device_interface import get_interface_for_device, get_registered_device_interfaces


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_interface_is_registered_for_neuron_and_each_core():
    interface = get_interface_for_device("neuron")
    assert interface.__name__ == "NeuronInterface"
    for i in range(torch.neuron.device_count()):
        assert get_interface_for_device(f"neuron:{i}") is interface
    assert get_interface_for_device(torch.device("neuron")) is interface
    assert ("neuron", interface) in list(get_registered_device_interfaces())


def test_interface_answers_like_torch_neuron():
    interface = get_interface_for_device("neuron")
    assert interface.is_available() and interface.device_count() == torch.neuron.device_count()
    assert interface.current_device() == torch.neuron.current_device()
    assert issubclass(interface.Stream, torch.Stream) and issubclass(interface.Event, torch.Event)
    assert isinstance(interface.Stream(), torch.neuron.Stream)
    props = interface.get_device_properties(0)
    assert props.total_memory == torch.neuron.get_device_properties(0).total_memory
    assert interface.Worker.get_device_properties("neuron:0") == props
    assert interface.get_raw_stream(0) == torch.neuron.current_stream(0).stream_id
    assert interface.is_bf16_supported() and interface.is_dtype_supported(torch.bfloat16)
    assert isinstance(interface.memory_allocated(0), int)
    interface.synchronize()
    if torch.neuron.device_count() > 1:
        previous = interface.exchange_device(1)
        assert torch.neuron.current_device() == 1
        assert interface.maybe_exchange_device(previous) == 1
        assert torch.neuron.current_device() == previous
    with interface.device(0):
        assert torch.neuron.current_device() == 0


def _record_on_side_stream(x: torch.Tensor, side: torch.Stream) -> torch.Tensor:
    done = torch.neuron.Event()
    with torch.neuron.stream(side):
        y = x * 2
        done.record(side)
    torch.neuron.current_stream().wait_event(done)
    return y + 1


def test_compile_fullgraph_traces_an_event_recorded_on_a_side_stream():
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    side = torch.neuron.Stream()
    x = torch.randn(16).to("neuron")
    out = torch.compile(_record_on_side_stream, fullgraph=True, backend=capture)(x, side)
    assert torch.allclose(out.cpu(), x.cpu() * 2 + 1)
    assert len(graphs) == 1
    targets = {str(node.target) for node in graphs[0].graph.nodes}
    assert "streams.record_event" in targets and "streams.wait_event" in targets, targets


def test_compile_with_the_neuron_backend_runs_stream_code():
    side = torch.neuron.Stream()
    x = torch.randn(16).to("neuron")
    with warnings.catch_warnings():
        # the neuron compiler does not lower stream ops yet: that graph runs eagerly on neuron (warned)
        warnings.simplefilter("ignore", RuntimeWarning)
        out = torch.compile(_record_on_side_stream, fullgraph=True, backend="neuron")(x, side)
    assert torch.allclose(out.cpu(), x.cpu() * 2 + 1)


def test_compile_traces_stream_construction_record_event_and_synchronize():
    def fn(x: torch.Tensor):
        s = torch.neuron.Stream()
        e = s.record_event()
        s.wait_event(e)
        y = x + 1
        torch.neuron.synchronize()
        return y

    x = torch.randn(4).to("neuron")
    out = torch.compile(fn, fullgraph=True, backend="eager")(x)
    assert torch.equal(out.cpu(), x.cpu() + 1)
