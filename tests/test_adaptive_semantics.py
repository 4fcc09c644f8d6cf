"""Adaptive eager keeps eager's semantics: aliasing and in-place ordering, errors, and bits.

Every result is compared with what plain eager computes on the device, bit for bit
(``_same_bits``: NaN payloads and the sign of zero included).
"""

from __future__ import annotations

import gc
import warnings

import pytest
import torch

from device_impl import eager
from device_impl.engine import isa


def _host(shape=(1000,), seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    if t.dtype.is_floating_point:
        return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _both(program, *inputs: torch.Tensor):
    """Run ``program`` on fresh device copies of ``inputs`` in eager and in adaptive mode; return both
    results (and the inputs after the call, which in-place programs change) on the host."""
    results = {}
    for mode in ("eager", "adaptive"):
        args = [t.to("neuron") for t in inputs]
        with torch.neuron.eager_mode(mode):
            out = program(*args)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            results[mode] = [o.cpu() for o in outs] + [a.cpu() for a in args]
    return results["eager"], results["adaptive"]


def _assert_identical(program, *inputs: torch.Tensor) -> None:
    expected, got = _both(program, *inputs)
    assert len(expected) == len(got)
    for i, (e, g) in enumerate(zip(expected, got)):
        assert _same_bits(g, e), f"result {i} differs from eager: {g} vs {e}"


# --- aliasing and in-place ordering ---------------------------------------------------------------

def test_a_view_of_a_queued_result(adaptive):
    x = _host((40, 25)).to("neuron")
    y = x * 2 + 1
    row, col, flat = y[3], y[:, 7], y.view(-1)[100:120]
    assert eager.pending() == 2  # views are metadata: nothing ran
    z = col * 10  # an op on a view of queued memory waits too
    assert eager.pending() == 3
    expected = x.cpu() * 2 + 1
    assert torch.equal(row.cpu(), expected[3]) and torch.equal(col.cpu(), expected[:, 7])
    assert torch.equal(flat.cpu(), expected.view(-1)[100:120]) and torch.equal(z.cpu(), expected[:, 7] * 10)


def test_view_taken_then_base_dropped_keeps_the_result(adaptive):
    x = _host((10, 10)).to("neuron")
    y = torch.relu(x - 0.5)
    v = y.t()
    del y  # the view still reaches the storage: the store must not be elided
    assert torch.equal(v.cpu(), torch.relu(x.cpu() - 0.5).t())


def test_in_place_on_a_queued_input_after_its_reader(adaptive):
    _assert_identical(lambda x: (x * 3, x.add_(1), x * 3)[::2], _host())


def test_in_place_on_part_of_a_queued_input(adaptive):
    def program(x):
        y = x + 1
        x[10:50].mul_(-2)  # overlaps what y read, not exactly: must not run inside y's tiles
        return y, x - 1
    _assert_identical(program, _host())


def test_in_place_chain_on_a_queued_result(adaptive):
    def program(x):
        y = torch.exp(x)
        y.mul_(3).sub_(x).clamp_(-1, 5)
        return y
    _assert_identical(program, _host())


def test_out_into_a_queued_tensor(adaptive):
    def program(x, w):
        y = x + w
        torch.mul(x, y, out=y)  # out= that is also an input
        z = torch.empty_like(x)
        torch.sub(y, 1, out=z)
        torch.add(z, x, out=x)  # out= into a queued input
        return y, z
    _assert_identical(program, _host(), _host(seed=1))


def test_out_that_resizes_a_queued_tensor(adaptive):
    def program(x, big):
        y = x + 1
        head = y[:5]  # shares y's storage, whose bytes move when y grows
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "An output with one or more elements was resized"
            torch.mul(big, 2, out=y)
        return y, head
    _assert_identical(program, _host((10,)), _host((30,), seed=1))


def test_resize_after_queuing(adaptive):
    x = _host((100,)).to("neuron")
    y = x * 3
    y.resize_(400)  # grows the storage: its bytes move while the multiplication waits
    assert eager.pending() == 1
    assert torch.equal(y[:100].cpu(), x.cpu() * 3)
    y.resize_(10)
    assert torch.equal(y.cpu(), x.cpu()[:10] * 3)


def test_set_after_queuing(adaptive):
    x, other = _host((50,)).to("neuron"), _host((20,), seed=1).to("neuron")
    y = x - 1
    keep = y.view(-1)  # the original storage
    y.set_(other)  # y now aliases `other`; the queued op still writes its own output
    assert torch.equal(y.cpu(), other.cpu())
    assert torch.equal(keep.cpu(), x.cpu() - 1)


def test_transposed_and_broadcast_operands(adaptive):
    def program(a, b, c):
        return (a.t() * b) + c, (a.t() + 1).contiguous() * 2
    _assert_identical(program, _host((8, 6)), _host((6, 8), seed=1), _host((8,), seed=2))


def test_copies_between_devices_and_dtypes_are_ordered(adaptive):
    x = _host((64,)).to("neuron")
    y = x * 2
    z = y.to(torch.bfloat16)  # a device cast: queued
    w = y.clone()  # a same-dtype device copy: queued
    assert eager.pending() == 3
    x.copy_(torch.zeros(64))  # a host-to-device copy into memory queued ops read: flushes first
    assert eager.pending() == 0
    assert torch.equal(z.cpu(), (x.cpu() * 0 + _host((64,)) * 2).to(torch.bfloat16))
    assert torch.equal(w.cpu(), _host((64,)) * 2)


# --- errors ------------------------------------------------------------------------------------------

def _error_of(fn):
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - the class is what is compared
        return error
    return None


@pytest.mark.parametrize("name, program", [
    ("shape", lambda x: x + torch.ones(3, device="neuron")),
    ("dtype", lambda x: torch.bitwise_and(x, x)),
    ("overlap", lambda x: torch.add(x[1:], 1, out=x[:-1])),
    ("integer division by zero", lambda x: torch.remainder(x.to(torch.int32), torch.zeros(1000, dtype=torch.int32,
                                                                                            device="neuron"))),
    ("out dtype", lambda x: torch.add(x, 1, out=torch.empty(1000, dtype=torch.int64, device="neuron"))),
])
def test_errors_surface_at_the_op_with_eager_class(adaptive, name, program):
    x = _host().to("neuron")
    pending = x * 2  # unrelated queued work survives the error
    with torch.neuron.eager_mode("eager"):
        expected = _error_of(lambda: program(x.clone()))
    assert expected is not None
    queued_before = eager.pending()
    got = _error_of(lambda: program(x))
    assert type(got) is type(expected), f"{name}: eager raised {expected!r}, adaptive {got!r}"
    assert eager.pending() <= queued_before + 1  # raised at the call: nothing more waits than before
    assert torch.equal(pending.cpu(), x.cpu() * 2)


def test_out_of_memory_at_the_op_leaves_the_device_usable(adaptive):
    x = _host((1024,)).to("neuron")
    torch.neuron.synchronize()
    gc.collect()  # garbage of earlier tests must not be freed mid-test
    baseline = torch.neuron.memory_allocated()
    y = x + 1
    huge = x.expand(1 << 22, 1024)  # a 16 GiB broadcast result
    with pytest.raises(torch.OutOfMemoryError):
        _ = huge * 2
    assert torch.equal(y.cpu(), x.cpu() + 1)
    del y
    assert torch.neuron.memory_allocated() == baseline and eager.pending() == 0


@pytest.fixture
def failing_divide(monkeypatch):
    """An engine fault on VectorE division (for one element pattern): what a queued op raising at run time
    looks like, whichever mode runs it."""
    original = isa.VectorE.tensor_tensor

    def tensor_tensor(self, out, a, b, op, dtype=None):
        if op == "divide" and (b.read() == 0.25).any():
            raise FloatingPointError("engine fault: injected divide failure")
        return original(self, out, a, b, op, dtype)

    monkeypatch.setattr(isa.VectorE, "tensor_tensor", tensor_tensor)


def test_deferred_error_names_the_op_with_eager_class(adaptive, failing_divide):
    x = _host((500,)).to("neuron")
    d = torch.full((500,), 0.25).to("neuron")
    torch.neuron.synchronize()
    gc.collect()  # garbage of earlier tests must not be freed mid-test
    baseline = torch.neuron.memory_allocated()
    with torch.neuron.eager_mode("eager"):
        eager_error = _error_of(lambda: x / d)
    assert isinstance(eager_error, FloatingPointError)
    before = (x + 1) * 2  # queued ahead of the failing op: runs, in order
    q = x / d  # queued: the fault happens only when it runs
    after = q + 1  # queued behind it
    assert eager.pending() == 4
    with pytest.raises(FloatingPointError) as raised:
        after.cpu()
    message = str(raised.value)
    assert "injected divide failure" in message and "aten::div" in message and "adaptive eager" in message
    assert eager.stats()["errors"] == 1
    # The device stays usable: the queue is empty, work queued before the fault ran, memory returns.
    assert eager.pending() == 0
    assert torch.equal(before.cpu(), (x.cpu() + 1) * 2)
    assert torch.equal((x - 3).cpu(), x.cpu() - 3)
    del before, q, after, raised, eager_error
    gc.collect()  # an exception and its traceback form reference cycles
    assert torch.neuron.memory_allocated() == baseline


def test_deferred_error_inside_a_fused_matmul_epilogue(adaptive, failing_divide):
    a, b = _host((64, 32)).to("neuron"), _host((32, 48), seed=1).to("neuron")
    d = torch.full((64, 48), 0.25).to("neuron")
    y = (a @ b) / d
    assert eager.pending() == 2
    with pytest.raises(FloatingPointError, match="aten::div"):
        y.cpu()
    assert eager.pending() == 0 and eager.stats()["errors"] == 1


# --- kernels that run outside the queue ---------------------------------------------------------------
# A kernel that is not queued writes its outputs in its own launch, and may first make tensors with torch
# ops (an accumulator from torch.zeros_like, an input cast with .to): those ops must run at once, not wait
# for a later flush that would land after the kernel's launch (runtime.hooks.Outside).

def test_a_native_kernel_s_own_tensors_are_ready_before_its_launch(adaptive):
    from device_impl.dispatch.table import TABLE
    from device_impl.kernels.common import hbm

    def planted(x, dims):  # stands in for aten::flip: zeros_like + a cast, then the launch's own writes
        acc = torch.zeros_like(x)
        half = x.to(torch.float16)
        a, h = hbm(acc), hbm(half)
        a[: a.shape[0] // 2] += h[: a.shape[0] // 2].astype(a.dtype)
        return acc

    x = _host((64,)).to("neuron")
    expected = torch.cat([x.cpu()[:32].half().float(), torch.zeros(32)])
    before = x * 2  # queued work ahead of the kernel still runs in order
    with TABLE.overridden("aten::flip", planted):
        got = torch.flip(x, (0,))
    assert torch.equal(got.cpu(), expected) and torch.equal(before.cpu(), x.cpu() * 2)
    assert eager.pending() == 0


def test_grid_sampler_backward_writes_grad_input(adaptive):
    g = torch.Generator().manual_seed(3)
    grid = torch.rand(2, 5, 4, 2, generator=g) * 2.2 - 1.1
    def program(go, x, grid):
        return torch.ops.aten.grid_sampler_2d_backward(go, x, grid, 0, 0, False, (True, True))
    _assert_identical(program, _host((2, 3, 5, 4)), _host((2, 3, 6, 7), seed=1), grid)


@pytest.mark.parametrize("fn", [torch.std, torch.var])
def test_std_var_into_a_narrower_out(adaptive, fn):
    def program(x):  # the input is cast to out's dtype inside the kernel, before its launch reads it
        out = torch.empty(7, dtype=torch.float16, device=x.device)
        return fn(x * 1.5, 0, out=out)
    _assert_identical(program, _host((5, 7)))


# --- bit identity on a mixed program -----------------------------------------------------------------

def _mixed(a, b, c, h, i):
    """Broadcast, type promotion, Python and 0-d scalars, bf16/fp16, integers, bools, casts."""
    s = torch.tensor(1.5)  # a host 0-d tensor: a wrapped scalar
    r1 = (a * b.unsqueeze(1) + 0.1) / (c.abs() + 1)  # [n, m] with [n, 1] and [m] broadcasts
    r2 = torch.where(r1 > 0, r1, r1 * 0.01).to(torch.bfloat16) * 3  # bf16 with a scalar
    r3 = (h + h * s) - torch.tensor(2.0, device="neuron")  # fp16 with host and device 0-d tensors
    r4 = (i * 3 + 7) % 5 - i // 2  # int32 arithmetic (division by a nonzero scalar)
    r5 = i.to(torch.float32) * 0.5 + a[:, :1]  # int -> float promotion
    r6 = (r2.float() > 0.2) & (i > 0)  # bools
    r7 = torch.sigmoid(r2) * torch.tanh(h.float()).mean()  # bf16 activation; a full mean (not queued)
    r8 = torch.clamp(r1, -0.5, 0.5).pow(2).sum(-1)  # a fused last-dim reduction
    r9 = (torch.maximum(a, c) - torch.minimum(a, c)).amax(-1, keepdim=True)
    return r1, r2, r3, r4, r5, r6, r7, r8, r9


def test_mixed_program_is_bit_identical(adaptive):
    n, m = 37, 129
    g = torch.Generator().manual_seed(5)
    inputs = (torch.randn(n, m, generator=g), torch.randn(n, generator=g), torch.randn(m, generator=g),
              torch.randn(n, m, generator=g).to(torch.float16),
              torch.randint(-50, 50, (n, m), generator=g, dtype=torch.int32))
    _assert_identical(_mixed, *inputs)
    assert eager.stats()["fused_groups"] > 0 and eager.stats()["reductions_fused"] >= 1


def test_special_values_are_bit_identical(adaptive):
    x = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, -1e-45, 3.4e38, -3.4e38, 1.0])
    _assert_identical(lambda t: (t * -1, t / 0.0, torch.relu(t), t - t, torch.exp(t) * t, (t + 0.0).to(torch.float16)),
                      x)
