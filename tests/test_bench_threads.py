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

