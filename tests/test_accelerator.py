"""torch.accelerator and device-generic code on neuron.

Code written against torch.accelerator (instead of torch.cuda) and the usual device plumbing
(``Module.to``, ``Tensor.to``, factory ``device=``, ``torch.set_default_device``) must reach the
neuron device unchanged.
"""

from __future__ import annotations

import pytest
import torch

from device_impl import eager


@pytest.fixture
def device_zero():
    previous = torch.accelerator.current_device_index()
    yield
    torch.accelerator.set_device_index(previous)


def test_current_accelerator_is_neuron():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.current_accelerator(check_available=True).type == "neuron"
    assert torch.accelerator.device_count() == torch.neuron.device_count() == 2


def test_device_index_selects_the_default_core(device_zero):
    torch.accelerator.set_device_index(1)
    assert torch.accelerator.current_device_index() == 1 == torch.neuron.current_device()
    assert torch.empty(1, device="neuron").device == torch.device("neuron:1")
    with torch.accelerator.device_index(0):
        assert torch.empty(1, device="neuron").device == torch.device("neuron:0")
    assert torch.accelerator.current_device_index() == 1


def test_neuron_synchronize_runs_queued_work():
    with torch.neuron.eager_mode("adaptive"):
        y = torch.ones(4, device="neuron") * 3 + 1
        assert eager.pending() > 0
        torch.neuron.synchronize()
        assert eager.pending() == 0
    assert y.tolist() == [4.0] * 4


# torch.accelerator.synchronize goes straight to the C++ guard's synchronizeDevice
# (device_impl/csrc/device.cpp), which validates the index and calls back into Python
# (devices.run_queued) to run adaptive eager's queue: "synchronize means done" holds here too.
def test_accelerator_synchronize_runs_queued_work():
    with torch.neuron.eager_mode("adaptive"):
        y = torch.ones(4, device="neuron") * 3 + 1
        assert eager.pending() > 0
        torch.accelerator.synchronize()
        assert eager.pending() == 0
        z = y * 2
        assert eager.pending() > 0
        torch.accelerator.synchronize("neuron:0")
        assert eager.pending() == 0
    assert z.tolist() == [8.0] * 4


def test_accelerator_synchronize_of_a_missing_core_raises():
    with pytest.raises(RuntimeError, match="Invalid device neuron:5: 2 NeuronCore"):
        torch.accelerator.synchronize(5)
    torch.accelerator.synchronize(1)  # an existing core


def test_synchronize_hook_errors_surface_as_runtime_errors():
    """A Python exception raised at a synchronisation point reaches the caller with its message."""
    from device_impl._core import C
    from device_impl.runtime import devices

    seen = []

    def failing(reason, device):
        seen.append((reason, device))
        raise ValueError(f"queued work failed on neuron:{device}")

    C.set_synchronize_hook(failing)
    try:
        with pytest.raises(RuntimeError, match="queued work failed on neuron:1"):
            torch.accelerator.synchronize(1)
        with pytest.raises(RuntimeError, match="queued work failed on neuron:0"):
            torch.Event(device="neuron").record()
    finally:
        C.set_synchronize_hook(devices.run_queued)
    assert seen == [("synchronize", 1), ("event", 0)]
    torch.accelerator.synchronize()  # the device is usable again


def test_device_capability_lists_the_device_dtypes():
    supported = torch.accelerator.get_device_capability()["supported_dtypes"]
    assert supported == torch.accelerator.get_device_capability("neuron:1")["supported_dtypes"]
    compute = {torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8,
               torch.uint8, torch.bool}
    assert compute | {torch.float64, torch.complex32, torch.complex64, torch.complex128} == supported
    assert torch.neuron.get_device_properties(1).supported_dtypes == supported
    assert torch.float8_e4m3fn not in supported and torch.uint16 not in supported
    for dtype in supported:  # each can be allocated and converted to every other
        x = torch.zeros(3, dtype=dtype, device="neuron")
        assert all(x.to(other).dtype == other for other in supported)
    with pytest.raises(RuntimeError, match="neuron:7"):
        torch.accelerator.get_device_capability(7)


def test_complex32_is_held_and_converted_exactly():
    x = torch.randn(6, dtype=torch.complex64).to(torch.complex32)
    on_device = x.to("neuron")
    assert on_device.dtype == torch.complex32
    assert torch.equal(on_device.cpu().view(torch.float16), x.view(torch.float16))  # bit-exact round trip
    widened = on_device.to(torch.complex64)
    assert torch.equal(widened.cpu(), x.to(torch.complex64))
    assert torch.equal(widened.to(torch.complex32).cpu().view(torch.float16), x.view(torch.float16))


def test_neuron_synchronize_of_a_missing_core_raises():
    with pytest.raises(RuntimeError, match="neuron:5"):
        torch.neuron.synchronize(5)


def test_memory_stats_route_to_the_neuron_allocator():
    torch.accelerator.empty_cache()
    torch.accelerator.reset_peak_memory_stats()
    before = torch.accelerator.memory_allocated()
    assert before == torch.neuron.memory_allocated()
    block = torch.empty(2**20, device="neuron")  # 4 MiB
    assert torch.accelerator.memory_allocated() - before == 4 * 2**20
    assert torch.accelerator.max_memory_allocated() >= before + 4 * 2**20
    assert torch.accelerator.memory_reserved() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.max_memory_reserved() >= torch.accelerator.memory_reserved()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.neuron.memory_stats()["allocated_bytes.all.current"]
    free, total = torch.accelerator.get_memory_info()
    assert total == torch.neuron.get_device_properties(0).total_memory and free <= total
    del block
    assert torch.accelerator.memory_allocated() == before
    torch.accelerator.reset_accumulated_memory_stats()


def test_streams_through_torch_accelerator():
    stream = torch.Stream(device="neuron")
    default = torch.accelerator.current_stream()
    assert default.device == torch.device("neuron:0")
    torch.accelerator.set_stream(stream)
    try:
        assert torch.accelerator.current_stream() == stream
        event = torch.Event(device="neuron", enable_timing=True)
        event.record(stream)
        event.synchronize()
    finally:
        torch.accelerator.set_stream(default)


def test_module_and_tensor_to_device():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    moved = model.to(torch.device("neuron"))
    assert moved is model
    assert all(p.device == torch.device("neuron:0") for p in model.parameters())
    assert all(b.device == torch.device("neuron:0") for b in model.buffers())
    model.to("neuron:1")
    assert {p.device for p in model.parameters()} == {torch.device("neuron:1")}
    x = torch.randn(5, 3)
    assert x.to("neuron:1").device == torch.device("neuron:1")
    assert x.to(torch.device("neuron"), dtype=torch.bfloat16).dtype == torch.bfloat16
    assert x.neuron().device == torch.device("neuron:0")  # generated method, as tensor.cuda()
    assert model(x.to("neuron:1")).device == torch.device("neuron:1")
    assert model.to("cpu")(x).device == torch.device("cpu")


@pytest.mark.parametrize("factory", [
    lambda d: torch.zeros(2, 3, device=d), lambda d: torch.ones(2, device=d), lambda d: torch.randn(4, device=d),
    lambda d: torch.arange(5, device=d), lambda d: torch.full((2,), 7.0, device=d), lambda d: torch.eye(3, device=d),
    lambda d: torch.empty(2, device=d), lambda d: torch.tensor([1, 2], device=d),
    lambda d: torch.linspace(0, 1, 5, device=d), lambda d: torch.randint(0, 9, (3,), device=d),
])
def test_factory_functions(factory):
    assert factory("neuron").device == torch.device("neuron:0")
    assert factory(torch.device("neuron", 1)).device == torch.device("neuron:1")


def test_default_device_builds_and_runs_a_model():
    torch.set_default_device("neuron")
    try:
        assert torch.get_default_device() == torch.device("neuron:0")
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
        x = torch.randn(4, 6)
        assert x.device.type == "neuron" and next(model.parameters()).device.type == "neuron"
        loss = model(x).square().mean()
        loss.backward()
        assert model[0].weight.grad.device.type == "neuron"
        weights = {k: v.cpu() for k, v in model.state_dict().items()}
        host_x = x.cpu()
    finally:
        torch.set_default_device(None)  # "cpu" would leave a DeviceContext that puts later factories with a neuron out= on cpu
    reference = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    reference.load_state_dict(weights)
    torch.testing.assert_close(loss.cpu(), reference(host_x).square().mean(), rtol=1e-5, atol=1e-6)


def test_device_context_manager():
    with torch.device("neuron:1"):
        assert torch.ones(2).device == torch.device("neuron:1")
        assert torch.nn.Linear(2, 2).weight.device == torch.device("neuron:1")
    assert torch.ones(2).device == torch.device("cpu")


class _Tied(torch.nn.Module):
    """An embedding and an output layer sharing one weight (as GPT-2 and BERT LM heads do)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight


# Module.to keeps a parameter object only when torch._has_compatible_shallow_copy_type(cpu, device)
# holds, and c10's TensorImpl counts only CPU/CUDA/MPS/HIP/XPU/HPU/MTIA as "dense" backends, not
# PrivateUse1: moving to neuron makes new Parameters and unties shared ones. Not fixable from the
# backend (the check runs on the CPU tensor's TensorImpl); strict xfail so it is noticed if torch
# changes. Remedies, tested below: re-tie after the move, or swap parameters on conversion.
@pytest.mark.xfail(strict=True, reason="PyTorch: PrivateUse1 is not a dense backend for shallow copies")
def test_module_to_keeps_tied_weights_tied():
    model = _Tied().to("neuron")
    assert model.head.weight is model.embed.weight


def test_tied_weights_remedies():
    assert not torch._has_compatible_shallow_copy_type(torch.ones(1), torch.ones(1, device="neuron"))
    model = _Tied().to("neuron")
    model.head.weight = model.embed.weight  # what transformers' model.tie_weights() does
    assert model.head.weight is model.embed.weight and model.head.weight.device.type == "neuron"
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        swapped = _Tied().to("neuron")
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    assert swapped.head.weight is swapped.embed.weight and swapped.embed.weight.device.type == "neuron"
    with torch.device("neuron"):
        built = _Tied()
    assert built.head.weight is built.embed.weight
