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
elementwise shares, which call no BLAS, still take two).
"""

from __future__ import annotations

import os

THREADS = int(os.environ.get("NEURONSIM_BENCH_THREADS", "1"))
os.environ.setdefault("OPENBLAS_NUM_THREADS", str(THREADS))


def pin_torch() -> None:
    """CPU eager on ``THREADS`` threads (call after torch is imported)."""
    import torch

    torch.set_num_threads(THREADS)
