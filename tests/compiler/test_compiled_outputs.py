"""A program computes only the outputs someone reads (``backend._output_plan``): a view AOTAutograd regenerates
from an input is not copied, a saved-for-backward value that is an input or another output is not written again,
and an in-place op's result is written into its input, so AOTAutograd's copy back moves nothing. Each was a
single-op spec whose compiled device time exceeded the eager kernel's (benches/compiled_vs_eager_specs.py)."""

from __future__ import annotations

import pytest
import torch

import device_impl.engine as engine
from device_impl._core import C


def _launches(fn, *args) -> tuple[object, dict]:
    """fn compiled and run twice; the second call's result and its launches' statistics by name."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    compiled(*[a.clone() if isinstance(a, torch.Tensor) and not a.requires_grad else a for a in args])
    torch.neuron.synchronize()
    engine.reset_stats()
    before = C.device_time_ns(0)
    out = compiled(*args)
    torch.neuron.synchronize()
    stats = engine.stats()
    # every device nanosecond of the call is in a launch (a copy outside one, as copy_'s, would not be)
    assert C.device_time_ns(0) - before == pytest.approx(sum(s["device_ns"] for s in stats.values()), abs=1)
    return out, stats


def test_views_of_an_input_launch_nothing_and_alias_it(fresh):
    x = torch.randn(3, 4, 513).to("neuron")
    for fn in (lambda t: t.view(-1), lambda t: t.transpose(0, -1), lambda t: t.select(1, 2),
               lambda t: t.split(100, -1)):
        out, stats = _launches(fn, x)
        assert stats == {}
        for got, want in zip(out if isinstance(out, tuple) else (out,), fn(x) if isinstance(out, tuple)
                             else (fn(x),)):
            assert got.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
            assert got.stride() == want.stride() and got.storage_offset() == want.storage_offset()
            assert torch.equal(got.cpu(), want.cpu())


def test_a_saved_result_is_written_once_and_gradients_match_cpu(fresh):
    """exp saves its result for the backward: the forward program writes it once (eager's bytes: one read,
    one write), and the result and gradient are the eager kernel's."""
    x = torch.randn(3, 513)
    xn = x.to("neuron").requires_grad_()
    out, stats = _launches(torch.exp, xn)
    (forward,) = [s for name, s in stats.items() if name.startswith("neff:")]
    assert forward["hbm_bytes"] == 2 * x.numel() * 4
    out.sum().backward()
    eager = torch.exp(xn.detach())
    assert torch.equal(out.detach().cpu(), eager.cpu()) and torch.equal(xn.grad.cpu(), eager.cpu())


def test_saved_inputs_are_not_copied(fresh):
    x, w = torch.randn(3, 513), torch.randn(3, 513)
    xn, wn = x.to("neuron").requires_grad_(), w.to("neuron").requires_grad_()
    out, stats = _launches(torch.mul, xn, wn)
    (forward,) = [s for name, s in stats.items() if name.startswith("neff:")]
    assert forward["hbm_bytes"] == 3 * x.numel() * 4  # two reads, one write: no copies of x and w to save
    out.sum().backward()
    assert torch.equal(xn.grad.cpu(), w) and torch.equal(wn.grad.cpu(), x)


def test_in_place_ops_write_their_input_in_one_launch(fresh):
    """The program's launch is all the call costs (no copy back), it moves the eager kernel's bytes, the result
    is the input itself and its values are the eager kernel's."""
    x, y = torch.randn(3, 513), torch.randn(3, 513)
    for fn, reads in ((lambda a, b: a.add_(b), 2), (lambda a, b: a.zero_(), 0), (lambda a, b: a.exp_(), 1)):
        xn = x.to("neuron")
        out, stats = _launches(fn, xn, y.to("neuron"))
        (program,) = stats.values()
        assert program["hbm_bytes"] == (reads + 1) * x.numel() * 4
        assert out is xn and torch.equal(xn.cpu(), fn(x.to("neuron"), y.to("neuron")).cpu())


def test_in_place_results_that_read_other_elements_are_not_written_early(fresh):
    """A result that reads the input's other elements (a flip) or that another output reads first keeps a fresh
    buffer, copied back after the program: the values are CPU's."""
    x = torch.randn(4, 513)

    def flipped(a):
        return a.add_(a.flip(0))

    def read_first(a):
        b = a * 2
        a.zero_()
        return b

    for fn in (flipped, read_first):
        xn = x.to("neuron")
        torch._dynamo.reset()
        out = torch.compile(fn, backend="neuron", dynamic=False)(xn)
        xc = x.clone()
        want = fn(xc)
        assert torch.equal(out.cpu(), want) and torch.equal(xn.cpu(), xc)


def test_saved_views_of_inputs_are_not_copied(fresh):
    """adaptive_avg_pool1d saves ``x.unsqueeze(-2)`` for its 2-d backward: the saved tensor is the traced view
    replayed on the input (no launch, the input's memory), as eager autograd saves it, not a device copy of it
    (the pool's forward moved 208 HBM bytes where eager moves 80). A view that is not contiguous (``x.t()``)
    is still copied: the backward's replay schedule was recorded for a contiguous saved tensor."""
    x = torch.randn(1, 2, 8)
    xn = x.to("neuron").requires_grad_()
    out, stats = _launches(lambda t: torch.nn.functional.adaptive_avg_pool1d(t, 2), xn)
    (forward,) = [s for name, s in stats.items() if name.startswith("neff:")]
    assert forward["hbm_bytes"] == (x.numel() + out.numel()) * 4  # the eager kernel's: one read, one write
    out.backward(torch.ones_like(out))
    leaf = x.clone().requires_grad_()
    torch.nn.functional.adaptive_avg_pool1d(leaf, 2).backward(torch.ones(1, 2, 2))
    assert torch.equal(xn.grad.cpu(), leaf.grad)
