"""Per-core random number generators.

Each NeuronCore has a default counter-based generator (seed, offset). Kernels
reserve draws from it, so a sequence depends only on the seed and the order
of random ops, and get_rng_state()/set_rng_state() replay it exactly.
"""

from __future__ import annotations

from typing import Iterable

import torch

from device_impl._core import C
from device_impl.runtime.devices import DeviceLike, device_count, device_index


def default_generator(device: DeviceLike = None) -> torch.Generator:
    return C.default_generator(device_index(device))



def default_generators() -> tuple[torch.Generator, ...]:
    return tuple(C.default_generator(i) for i in range(device_count()))


def manual_seed(seed: int) -> None:
    """Seed the current core's generator."""
    default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for gen in default_generators():
        gen.manual_seed(int(seed))


def seed() -> None:
    """Seed the current core's generator from a non-deterministic source."""
    default_generator().seed()


def seed_all() -> None:
    first = default_generator(0).seed()
    for gen in default_generators()[1:]:
        gen.manual_seed(first)


def initial_seed() -> int:
    return default_generator().initial_seed()


def get_rng_state(device: DeviceLike = "neuron") -> torch.Tensor:
    return default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "neuron") -> None:
    default_generator(device).set_state(new_state.clone())


def get_rng_state_all() -> list[torch.Tensor]:
    return [gen.get_state() for gen in default_generators()]


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def reserve(generator: torch.Generator | None, device: int, draws: int) -> tuple[int, int]:
    """Reserve ``draws`` numbers from a neuron generator (default: the core's); return (seed, offset)."""
    gen = C.default_generator(device) if generator is None else generator
    return C.reserve_random(gen, max(int(draws), 1))
