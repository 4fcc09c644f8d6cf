"""One thread for the one-run ratio scripts (``ratios.py``, ``compiled_ratio.py``, ``adaptive_ratio.py``):
the simulator's BLAS (numpy's OpenBLAS, read when numpy loads, so this module is imported before torch) and
CPU eager, as ``benches/modes.py`` does for asv and pytest-benchmark.

The simulator computes on one thread; on two shared cores, two busy-waiting OpenBLAS threads made one
compiled decoder-block forward swing between 20 and 370 ms from run to run (issue 21), and a two-thread
CPU kernel swings with the load too. ``NEURONSIM_BENCH_THREADS`` overrides both.

A compiled program's static replay shares its product blocks and attention batches among host threads of its
own (device_impl/compiler/workers.py: they block, never spin), as many as ``torch.get_num_threads()``, so one
here; so does adaptive eager a large replayed fused elementwise launch's regions (device_impl/eager/programs.py).
``NEURON_HOST_THREADS=2`` gives the simulator two while CPU eager and BLAS keep one each (with
``NEURONSIM_BENCH_THREADS=2`` BLAS runs two threads per call, and the simulator's products then add none; its
elementwise shares, which call no BLAS, still take two). ``--host-cores`` (``at_host_cores``) adds, after the pinned
figures, the wall figures with the simulator and CPU eager at the host's core count and BLAS at one thread per call.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

THREADS = int(os.environ.get("NEURONSIM_BENCH_THREADS", "1"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(THREADS))


def pin_torch() -> None:
    """CPU eager on ``THREADS`` threads (call after torch is imported)."""
    import torch

    torch.set_num_threads(THREADS)


def host_cores() -> int:
    """The cores this process may run on: its CPU affinity mask where the OS has one (``taskset``, a container's
    cpuset), else ``os.cpu_count()``, which counts the machine's cores whatever the mask (under ``taskset -c 0`` on
    a 2-core host: 2, the mask 1), so the figures would run a torch thread and a simulator share per machine
    core on the cores the mask leaves."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        return max(1, len(getaffinity(0)))
    return os.cpu_count() or 1


@contextlib.contextmanager
def at_host_cores() -> Iterator[int]:
    """The ratio scripts' ``--host-cores`` figures, measured inside this context: the simulator's host threads
    (device_impl/compiler/workers.py: a compiled program's product blocks, epilogues and attention batches, an
    adaptive launch's regions) and CPU eager's torch threads both at the host's core count (``host_cores``), so
    the CPU comparison stays fair, while numpy's BLAS keeps one thread per call (threadpoolctl), so every product
    keeps the bits of its one-thread BLAS call and ``workers.width`` allows the workers. Yields the core count.
    The pinned one-thread figures stay the scripts' first ones: on a shared machine these swing with the load."""
    import threadpoolctl
    import torch

    from device_impl.compiler import workers

    cores = host_cores()
    torch_threads, simulator_threads = torch.get_num_threads(), workers.THREADS
    with threadpoolctl.threadpool_limits(limits=1, user_api="blas"):
        torch.set_num_threads(cores)
        workers.THREADS = cores
        try:
            yield cores
        finally:
            torch.set_num_threads(torch_threads)
            workers.THREADS = simulator_threads


def pinned_label() -> str:
    """How the scripts' first figures were measured, read from the settings in force: "pinned to one host thread"
    only where CPU eager (``pin_torch``), numpy's BLAS (``THREADS``) and the simulator's host threads
    (``workers.width``, ``NEURON_HOST_THREADS`` where set) all run one; with ``NEURON_HOST_THREADS=2`` or
    ``NEURONSIM_BENCH_THREADS=2`` (module docstring) each count."""
    import torch

    from device_impl.compiler import workers

    cpu, simulator = torch.get_num_threads(), workers.width(blas=False)
    if cpu == simulator == THREADS == 1:
        return "pinned to one host thread"
    return f"pinned: simulator host threads {simulator}, numpy BLAS {THREADS} per call, CPU eager {cpu} torch threads"


def host_cores_label(cores: int) -> str:
    """How the ``--host-cores`` figures were measured, for the scripts' output."""
    return (f"at the host's {cores} cores (--host-cores): simulator host threads {cores}, numpy BLAS one thread per "
            f"call, CPU eager {cores} torch threads")
