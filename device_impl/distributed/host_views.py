"""Zero-copy host views of neuron tensors, the bridge between device memory and gloo.

Device memory is host memory owned by the C++ allocator, so a CPU tensor over
the same bytes lets gloo read and write a neuron tensor in place: no copy in,
no copy out. Three cases need care:

* bfloat16: numpy has no native bfloat16, and ``torch.from_numpy`` rejects
  ml_dtypes' one; the bytes are viewed as int16 and the CPU tensor re-viewed
  as bfloat16 (same bits).
* non-contiguous tensors (gloo requires contiguous buffers): collected into a
  contiguous device buffer first, and written back on the device afterwards.
* adaptive eager: queued work must have run before gloo reads or writes the
  bytes, so ``stage`` synchronizes the device after preparing its buffers
  (which may themselves be queued copies) and before making the views.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from device_impl.engine.hbm import view as hbm_view


def is_neuron(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "neuron"


def host_alias(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor sharing ``tensor``'s device memory (same shape and strides)."""
    if not is_neuron(tensor):
        return tensor
    array = hbm_view(tensor)
    if tensor.dtype == torch.bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


class Staged:
    """Host views of a collective's neuron tensors, with write-back of non-contiguous outputs.

    ``Staged(tensors)``: ``.host`` lists CPU tensors gloo can use; after the collective,
    ``finish()`` copies results of non-contiguous tensors back (on the device).
    CPU tensors pass through unchanged.
    """

    def __init__(self, tensors: Sequence[torch.Tensor], written: bool = True) -> None:
        self.tensors = list(tensors)
        self.written = written
        self.buffers = [t if t.is_contiguous() or not is_neuron(t) else t.contiguous() for t in self.tensors]
        self.host: list[torch.Tensor] = []

    def views(self) -> list[torch.Tensor]:
        """Make the host views; the device must be synchronized first (see ``stage``)."""
        self.host = [host_alias(b) for b in self.buffers]
        return self.host

    def finish(self) -> None:
        if not self.written:
            return
        for tensor, buffer in zip(self.tensors, self.buffers):
            if buffer is not tensor:
                tensor.copy_(buffer)


def synchronize() -> None:
    """Run the work adaptive eager has queued (every device) before the host touches device bytes."""
    from device_impl.dispatch.table import HOOKS

    if HOOKS.barrier is not None:
        HOOKS.barrier("collective")


def stage(*groups: Staged) -> None:
    """Synchronize once, then make the host views of every group."""
    synchronize()
    for group in groups:
        group.views()
