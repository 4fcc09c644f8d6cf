"""A replayed fused elementwise launch large enough to pay for a hand-over shares its regions among the host
threads ``compiler.workers`` allows (``eager.programs._replay_shared``): the arithmetic runs on two threads, the
bits are eager's, and the launch reports its recording's figures, the share's instructions tallied into the
launch's own in region order (``engine.replay.merge``). A launch whose regions could read what another region
stores runs on one thread (``_regions_independent``)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from device_impl import eager
from device_impl.compiler import workers
from device_impl.eager import programs
from device_impl.engine import core, isa

NUMEL = 600_000  # three flat tiles of the widest width; 4 steps: over SHARE_ELEMENT_STEPS


def _host(shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().view(torch.int32)


def _figures(report) -> tuple:
    return (report.kernel, report.device_ns, report.busy_ns, report.hbm_bytes_read, report.hbm_bytes_written,
            report.flops, report.instructions, report.sbuf_peak_bytes)


@pytest.fixture
def two_threads(monkeypatch):
    """NEURON_HOST_THREADS=2, as ``compiler.workers`` reads it."""
    monkeypatch.setattr(workers, "THREADS", 2)


def test_elementwise_shares_are_not_held_to_one_thread_by_blas(monkeypatch, two_threads):
    """A fused elementwise chain calls no BLAS: numpy's BLAS threads (which keep products serial, since their
    threaded kernels round otherwise) do not decide its width."""
    monkeypatch.setattr(workers, "blas_threads", lambda: 2)
    assert workers.width() == 1 and workers.width(blas=False) == 2


@pytest.fixture
def tanh_threads(monkeypatch) -> set:
    """The threads ScalarE's tanh computes on."""
    seen: set = set()
    tanh = isa._FP32_INTO["tanh"]

    def counted(x, out):
        seen.add(threading.get_ident())
        tanh(x, out)

    monkeypatch.setitem(isa._FP32_INTO, "tanh", counted)
    return seen


def _program(x, y):
    return torch.sigmoid(torch.tanh(x * 1.5 - 0.25) + y)


def test_a_large_replayed_chain_computes_on_two_threads_with_eagers_bits(adaptive, two_threads, tanh_threads):
    x, y = _host((NUMEL,)).to("neuron"), _host((NUMEL,), seed=1).to("neuron")
    with torch.neuron.eager_mode("eager"):
        expected = _bits(_program(x, y))
    reports = []
    for run in range(3):  # recorded at the instruction level, then replayed twice
        tanh_threads.clear()
        out = _program(x, y)
        torch.neuron.synchronize()
        reports.append(_figures(core.last_launch()))
        assert torch.equal(_bits(out), expected), f"run {run}"
        assert len(tanh_threads) == (1 if run == 0 else 2), f"run {run}"
    assert eager.stats()["fused_groups"] == 3 and eager.stats()["programs_replayed"] == 2
    assert reports[0][0].startswith("fused[") and reports[1] == reports[0] and reports[2] == reports[0]


def test_one_host_thread_keeps_the_replay_on_the_calling_thread(adaptive, monkeypatch, tanh_threads):
    monkeypatch.setattr(workers, "THREADS", 1)
    x, y = _host((NUMEL,)).to("neuron"), _host((NUMEL,), seed=1).to("neuron")
    for _ in range(2):
        out = _program(x, y)
        torch.neuron.synchronize()
        del out
    assert tanh_threads == {threading.get_ident()} and eager.stats()["programs_replayed"] == 1


def test_a_share_that_diverges_reruns_the_launch_at_the_instruction_level(adaptive, two_threads, monkeypatch):
    """A share whose step issues other than one instruction (``chain.Diverged``, raised on a worker thread)
    abandons the replay as on one thread: nothing reported, the launch run again at the instruction level."""
    x, y = _host((NUMEL,)).to("neuron"), _host((NUMEL,), seed=1).to("neuron")
    with torch.neuron.eager_mode("eager"):
        expected = _bits(_program(x, y))
    kept = _program(x, y)  # recorded (its output stored, as the diverging run's)
    torch.neuron.synchronize()
    recorded = _figures(core.last_launch())
    activation = isa.ScalarE.activation

    def twice_off_the_caller(self, *args, **kwargs):  # an extra instruction, on the worker's share only
        activation(self, *args, **kwargs)
        if threading.current_thread() is not threading.main_thread():
            activation(self, *args, **kwargs)

    monkeypatch.setattr(isa.ScalarE, "activation", twice_off_the_caller)
    out = _program(x, y)
    torch.neuron.synchronize()
    assert torch.equal(_bits(out), expected) and torch.equal(_bits(kept), expected)
    assert eager.stats()["programs_replayed"] == 0 and _figures(core.last_launch()) == recorded


def test_an_in_place_chain_is_shared_region_by_region(adaptive, two_threads, tanh_threads):
    """In-place steps read and write one view: element i is read and stored by the same region, so the regions
    are independent and the replay shares them; the bits are eager's."""
    def program(z):
        return z.mul_(1.5).sub_(0.25).tanh_().add_(1.0)

    base = _host((NUMEL,))
    with torch.neuron.eager_mode("eager"):
        expected = _bits(program(base.to("neuron")))
    for run in range(3):
        tanh_threads.clear()
        out = program(base.to("neuron"))
        torch.neuron.synchronize()
        assert torch.equal(_bits(out), expected), f"run {run}"
        assert len(tanh_threads) == (1 if run == 0 else 2), f"run {run}"
    assert eager.stats()["programs_replayed"] == 2


def test_regions_that_could_read_another_regions_store_are_not_independent():
    """``_regions_independent``: a stored output that is not C-contiguous, or a loaded operand sharing its memory in
    another layout (element i of one is not element i of the other), keeps the launch on one thread."""
    memory = np.zeros(4096, np.float32)
    chain = SimpleNamespace(loads=((True,),))

    def independent(out, view):
        return programs._regions_independent(chain, [SimpleNamespace(out_view=out, views=[view])], [True])

    other = np.ones(4096, np.float32)
    assert independent(memory, other)
    assert independent(memory, memory[:])  # in place: the very same view
    assert not independent(memory, memory[::-1])
    assert not independent(memory.reshape(64, 64).T, other)


def test_a_shared_launch_keeps_no_tensor_alive_once_it_returns(adaptive, two_threads, tanh_threads):
    """The worker thread drops its share when done: its loop's locals held the last share's closure, and with it
    an adaptive launch's operands (2.5 MiB of neuron memory allocated until the next share; tests/test_memory's
    leak check failed after this file)."""
    import gc

    gc.collect()
    before = torch.neuron.memory_allocated()
    x, y = _host((NUMEL,)).to("neuron"), _host((NUMEL,), seed=1).to("neuron")
    for _ in range(3):  # recorded, then replayed on two threads
        out = _program(x, y)
        torch.neuron.synchronize()
        del out
    assert len(tanh_threads) == 2
    del x, y
    gc.collect()
    assert torch.neuron.memory_allocated() == before, "a worker thread still holds a shared launch's tensors"
