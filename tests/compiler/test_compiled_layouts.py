"""Compiled graphs keep the layouts eager gives where code after the graph, or the fill order of a random op,
can see them (the op suite's compiled mode: resize_, bernoulli_p and random_from on transposed,
channels_last and overlapping inputs). Each test failed before its fix (device_impl/compiler/backend.py
``_traced_strides``, ``strided_random_fill``)."""

from __future__ import annotations

import warnings

import pytest
import torch


def _compiled(fn, *args):
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an eager fallback is allowed; its answer is checked
        return torch.compile(fn, backend="neuron", dynamic=False)(*args)


LAYOUTS = {
    "transposed": lambda t: t.reshape(4, 6).t(),
    "channels_last": lambda t: t.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last),
    "overlapping": lambda t: t.as_strided((3, 4), (1, 1)),  # clone: empty_like's (1, 3) strides
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_clone_keeps_its_layout_for_the_resize_after_the_graph(fresh, layout):
    """``x.clone().resize_(n)`` breaks the graph at resize_, which reads the clone's storage in memory order:
    the compiled clone must have the clone's strides (it came back contiguous: the elements in logical order)."""
    x = LAYOUTS[layout](torch.randn(24))

    def fn(a):
        return a.clone().resize_((10,))
    want = fn(x)
    for _ in range(2):  # and a warm compile (the Dynamo-level index must not link a contiguous program)
        got = _compiled(fn, x.to("neuron"))
        assert torch.equal(got.cpu(), want)
    clone = _compiled(lambda a: a.clone() * 2, x.to("neuron"))
    assert clone.stride() == (x.clone() * 2).stride()


def test_outputs_without_a_layout_of_their_own_stay_as_compiled(fresh):
    """A contiguous result, and one saved only for the backward, are returned as the program wrote them."""
    x = torch.randn(4, 6)
    got = _compiled(lambda a: (a * 2).sum(0), x.to("neuron"))
    assert got.is_contiguous() and torch.equal(got.cpu(), (x * 2).sum(0))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("fill", ["bernoulli_(0.3)", "random_(-3, 9)", "uniform_()", "normal_()"])
def test_an_in_place_random_fill_of_a_strided_tensor_draws_as_eager(fresh, layout, fill):
    """The same generator state gives the compiled fill the eager fill's value at each position: AOTAutograd's
    functional ``bernoulli(t, p)`` filled a fresh contiguous tensor in logical order, the in-place op fills
    t's own memory in memory order."""
    x = LAYOUTS[layout](torch.randn(24)).to("neuron")
    fn = eval(f"lambda a: a.clone().{fill}")  # noqa: S307 - the test's own expression
    torch.manual_seed(7)
    want = fn(x).cpu()
    torch.manual_seed(7)
    got = _compiled(fn, x)
    assert got.stride() == want.stride()
    assert torch.equal(got.cpu(), want)


def test_an_in_place_write_through_a_view_of_an_expanded_input_runs_as_eager(fresh):
    """Each element view of an expanded x written in place (``_amp_update_scale_`` per element): CPU writes the
    one shared element; AOTAutograd's copy-back of the whole x refused an overlapping destination."""
    def fn(scale, tracker, found):
        return [torch._amp_update_scale_(s, tracker, found, 2.0, 0.5, 2) for s in scale.reshape(-1).split(1)]
    want_inputs = [torch.tensor([2.0]).expand(4), torch.tensor([1], dtype=torch.int32), torch.tensor([0.0])]
    got_inputs = [t.to("neuron") for t in want_inputs[1:]]
    got_inputs.insert(0, torch.tensor([2.0]).to("neuron").expand(4))
    want = fn(*want_inputs)
    got = _compiled(fn, *got_inputs)
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got, want))
    assert all(torch.equal(g.cpu(), w) for g, w in zip(got_inputs, want_inputs))


STORED_IN_LAYOUT = {  # (fn, inputs): the sweep's bfloat16 cases first
    "diagonal_clone": (lambda x: torch.diagonal(x, -1).clone(),
                       lambda g: [torch.randn(3, 2, 513, generator=g).bfloat16()]),
    "where_transposed": (lambda a, b, c: torch.where(a > 0, b, c),
                         lambda g: [torch.randn(1, 2, 513, 5, generator=g).transpose(-1, -2),
                                    torch.randn(2, 5, 1, generator=g).bfloat16(),
                                    torch.randn(2, 5, 1, generator=g).bfloat16()]),
    "channels_last_add": (lambda x: x.clone() + 1, lambda g: [
        torch.randn(2, 3, 5, 7, generator=g).contiguous(memory_format=torch.channels_last)]),
    "permuted_clone": (lambda x: x.permute(2, 0, 1).clone(), lambda g: [torch.randn(4, 6, 129, generator=g)]),
}


@pytest.mark.parametrize("name", sorted(STORED_IN_LAYOUT))
def test_an_output_in_a_traced_layout_is_stored_in_it_by_its_own_step(fresh, name):
    """An output whose traced layout is dense but not contiguous is given to the program in that layout, and the
    step that writes it (the end's copy of a returned view, one flat fused group) stores straight into its strided
    HBM view (``executor.Executable.writes_strided``, ``driver.restrided``): no device copy after the program, whose
    launch is the call's only device time (the sweep's bfloat16 ``diagonal(x0, -1).clone()``: 3.156 us with the
    copy, 1.141 without, eager 2.015). CPU's layout and values."""
    from device_impl import engine

    fn, make = STORED_IN_LAYOUT[name]
    inputs = make(torch.Generator().manual_seed(0))
    device = [t.to("neuron") for t in inputs]
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    compiled(*device)
    torch.neuron.synchronize()
    engine.reset_stats()
    before = torch.neuron.device_time_ns()
    got = compiled(*device)
    torch.neuron.synchronize()
    elapsed = torch.neuron.device_time_ns() - before
    (launch,) = [v["device_ns"] for k, v in engine.stats().items() if k.startswith("neff:")]
    assert elapsed == pytest.approx(launch, abs=1), (elapsed, launch)  # nothing after the program
    want = fn(*inputs)
    assert got.stride() == want.stride() and torch.equal(got.cpu(), want)
