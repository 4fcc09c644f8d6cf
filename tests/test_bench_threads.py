"""benches/threads.py: the ratio scripts' thread settings, and the labels that say which settings a figure had."""

from __future__ import annotations

import pytest
import torch

from benches import threads
from device_impl.compiler import workers


def test_host_cores_are_the_cores_this_process_may_use(monkeypatch):
    """``--host-cores`` runs CPU eager and the simulator at the cores the affinity mask leaves (``taskset``, a
    cpuset), not at the machine's core count, which would put several threads on each allowed core."""
    pytest.importorskip("threadpoolctl")
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 64)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    before = torch.get_num_threads(), workers.THREADS
    with threads.at_host_cores() as cores:
        assert cores == 1 and torch.get_num_threads() == 1 and workers.THREADS == 1
    assert (torch.get_num_threads(), workers.THREADS) == before
    assert "1 cores" in threads.host_cores_label(cores)
    monkeypatch.delattr(threads.os, "sched_getaffinity", raising=False)  # an OS with no affinity mask
    assert threads.host_cores() == 64


def test_the_pinned_label_names_the_threads_in_force(monkeypatch):
    """"pinned to one host thread" only where CPU eager, BLAS and the simulator each run one; the scripts'
    documented ``NEURON_HOST_THREADS=2`` and ``NEURONSIM_BENCH_THREADS=2`` runs say what they ran."""
    threads_before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        monkeypatch.setattr(threads, "THREADS", 1)
        monkeypatch.setattr(workers, "THREADS", None)
        assert threads.pinned_label() == "pinned to one host thread"
        monkeypatch.setattr(workers, "THREADS", 2)  # NEURON_HOST_THREADS=2
        assert "simulator host threads 2" in threads.pinned_label()
        monkeypatch.setattr(workers, "THREADS", None)
        monkeypatch.setattr(threads, "THREADS", 2)  # NEURONSIM_BENCH_THREADS=2
        torch.set_num_threads(2)
        label = threads.pinned_label()
        assert "one host thread" not in label and "BLAS 2" in label and "2 torch threads" in label
    finally:
        torch.set_num_threads(threads_before)
