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


def test_the_host_parallel_floor_splits_the_whole_work_as_the_replay_does(monkeypatch):
    """``compiled_ratio --host-cores``'s floor times the sgemm and the float64 exp split by ``workers.split`` into
    contiguous shares that cover each extent once; a speedup measured over part of the work would understate the
    floor. (Its figures are wall time, printed by the bench, never asserted here.)"""
    monkeypatch.setenv("TORCH_NEURONX_NEFF_CACHE_DIR", "unused")  # the bench points the cache elsewhere at import
    from benches import compiled_ratio

    splits = []
    real = workers.split

    def recording(extent, work, threads_):
        shares = []
        real(extent, lambda i, j: (shares.append((i, j)), work(i, j)), threads_)
        splits.append((extent, threads_, sorted(shares)))

    monkeypatch.setattr(workers, "split", recording)
    seconds, blocks_speedup, exp_speedup = compiled_ratio.host_parallel_floor(10 ** 9, 1000, 2, repeats=1)
    assert seconds > 0 and blocks_speedup > 0 and exp_speedup > 0
    assert {extent for extent, _, _ in splits} == {16, 1000}  # 8 blocks per thread, and every exp element
    for extent, threads_, shares in splits:
        assert threads_ == 2 and shares[0][0] == 0 and shares[-1][1] == extent
        assert all(a[1] == b[0] for a, b in zip(shares, shares[1:]))
