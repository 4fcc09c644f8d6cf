"""``dist.init_process_group(backend="neuron")``: the c10d backend of the neuron device.

One rank per NeuronCore: at creation the process group makes
``neuron:(LOCAL_RANK or rank) % device_count()`` the current device, so
``torch.device("neuron")`` in each rank means its own core. With
``NEURON_RT_VISIBLE_CORES`` giving each process a single core (as torchrun
launches on Trainium do), that is ``neuron:0`` of the process, the physical
core the variable names.

Transport: gloo over zero-copy host views of device memory (see
process_group.py and host_views.py). ``register()`` runs at device
registration, so ``import torch`` is enough.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from device_impl.distributed.process_group import BACKEND_NAME, NeuronProcessGroup

__all__ = ["NeuronProcessGroup", "register", "device_for_rank"]


def device_for_rank(rank: int) -> int:
    """The NeuronCore a rank uses: its local rank (torchrun's LOCAL_RANK) or its rank, modulo the cores."""
    count = torch.neuron.device_count()
    local = os.environ.get("LOCAL_RANK", "").strip()
    return (int(local) if local.isdigit() else rank) % count


def _create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> NeuronProcessGroup:
    torch.neuron.set_device(device_for_rank(rank))
    return NeuronProcessGroup(store, rank, size, timeout)


def register() -> bool:
    """Register the ``neuron`` backend with torch.distributed (idempotent). False without gloo."""
    if not dist.is_available() or not dist.is_gloo_available():
        return False
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return True
    dist.Backend.register_backend(BACKEND_NAME, _create, devices=["neuron", "cpu"])
    return True
