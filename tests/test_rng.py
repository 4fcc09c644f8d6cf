"""Per-core generators: seeding, torch.manual_seed, torch.Generator('neuron'), state save/restore."""

import pytest
import torch


def draw(n=8, device="neuron", generator=None):
    return torch.randn(n, device=device, generator=generator).cpu()


def test_manual_seed_makes_draws_reproducible():
    torch.neuron.manual_seed(123)
    a = draw()
    torch.neuron.manual_seed(123)
    b = draw()
    torch.neuron.manual_seed(124)
    c = draw()
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_successive_draws_differ():
    torch.neuron.manual_seed(0)
    assert not torch.equal(draw(), draw())


def test_torch_manual_seed_reaches_every_core():
    torch.manual_seed(7)
    a0, a1 = draw(device="neuron:0"), draw(device="neuron:1")
    torch.manual_seed(7)
    assert torch.equal(draw(device="neuron:0"), a0)
    assert torch.equal(draw(device="neuron:1"), a1)
    assert torch.neuron.initial_seed() == 7


def test_cores_have_independent_generators():
    torch.neuron.manual_seed_all(5)
    first_on_1 = draw(device="neuron:1")
    torch.neuron.manual_seed_all(5)
    draw(device="neuron:0")
    draw(device="neuron:0")
    assert torch.equal(draw(device="neuron:1"), first_on_1)


def test_rng_state_round_trip_replays_the_sequence():
    torch.neuron.manual_seed(42)
    draw()
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() == 16
    expected = draw()
    torch.neuron.set_rng_state(state)
    assert torch.equal(draw(), expected)
    states = torch.neuron.get_rng_state_all()
    assert len(states) == torch.neuron.device_count()
    torch.neuron.set_rng_state_all(states)


def test_bad_rng_state_is_rejected():
    with pytest.raises(RuntimeError, match="16 elements"):
        torch.neuron.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_explicit_neuron_generator():
    g = torch.Generator("neuron")
    assert g.device == torch.device("neuron", 0)
    g.manual_seed(3)
    a = draw(generator=g)
    g.manual_seed(3)
    assert torch.equal(draw(generator=g), a)
    # The explicit generator does not consume the default one.
    torch.neuron.manual_seed(3)
    before = torch.neuron.get_rng_state()
    draw(generator=g)
    assert torch.equal(torch.neuron.get_rng_state(), before)


def test_generator_offset_advances_with_draws():
    g = torch.Generator("neuron:1").manual_seed(0)
    assert g.get_offset() == 0
    torch.rand(10, device="neuron:1", generator=g)
    assert g.get_offset() >= 10


def test_in_place_random_ops_and_distributions():
    torch.neuron.manual_seed(0)
    x = torch.empty(1000, device="neuron").uniform_(2, 3).cpu()
    assert x.min() >= 2 and x.max() < 3
    b = torch.empty(1000, device="neuron").bernoulli_(0.25).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and 0.15 < b.mean() < 0.35
    n = torch.empty(10000, device="neuron").normal_(5, 2).cpu()
    assert abs(n.mean() - 5) < 0.1 and abs(n.std() - 2) < 0.1


def test_seed_sets_a_fresh_seed():
    torch.neuron.seed()
    s = torch.neuron.initial_seed()
    torch.neuron.seed()
    assert torch.neuron.initial_seed() != s
