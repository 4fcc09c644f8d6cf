"""torch.autocast("neuron"): PyTorch's cast policy on the device, torch.neuron.amp, GradScaler.

The policy is registered by device_impl.amp.policy on the AutocastPrivateUse1 key (torch 2.13
ships none for PrivateUse1); every test here fails if that registration, the helpers or the
GradScaler kernels are removed.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from device_impl import dispatch
from device_impl.amp import policy

LOW = (torch.bfloat16, torch.float16)
# torch.testing defaults (DESIGN.md section 4), widened for results rounded once to the low type
TOL = {torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2), torch.float16: dict(rtol=1e-3, atol=1e-3),
       torch.float32: dict(rtol=1e-4, atol=1e-5)}


def _pair(*shape: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    cpu = torch.randn(shape, generator=g)
    return cpu, cpu.to("neuron")


def _both(fn, dtype, *cpu_args):
    """fn under CPU autocast and under neuron autocast, with the same inputs."""
    with torch.autocast("cpu", dtype=dtype):
        expected = fn(*cpu_args)
    device_args = [a.to("neuron") if isinstance(a, torch.Tensor) else a for a in cpu_args]
    with torch.autocast("neuron", dtype=dtype):
        actual = fn(*device_args)
    return expected, actual


def test_torch_has_no_privateuse1_policy_of_its_own():
    """Why the policy module exists: the kernels on AutocastPrivateUse1 are ours."""
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::mm", "AutocastPrivateUse1")
    dump = torch._C._dispatch_dump("aten::mm")
    line = next(line for line in dump.splitlines() if line.startswith("AutocastPrivateUse1"))
    assert "autocast_mode.cpp" not in line  # registered from Python, not by ATen
    assert set(policy.registered()) == {name for name in policy.POLICY if policy._resolve(name) is not None}


def _aten_generic_lists() -> dict[str, str]:
    """op -> rule from the AT_FORALL_* lists of the installed torch's ATen/autocast_mode.h (the lists
    CUDA, XPU and MTIA register), parsed rather than copied, so a torch that changes them fails here."""
    import pathlib
    import re

    header = pathlib.Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.exists():
        pytest.skip("this torch build ships no C++ headers")
    text = header.read_text()
    rules = {"AT_FORALL_LOWER_PRECISION_FP": policy.LOWER, "AT_FORALL_FP32": policy.FP32,
             "AT_FORALL_FP32_SET_OPT_DTYPE": policy.FP32_SET_OPT_DTYPE,
             "AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE": policy.FP32_APPEND_DTYPE,
             "AT_FORALL_PROMOTE": policy.PROMOTE}
    found: dict[str, str] = {}
    for macro, rule in rules.items():
        body = re.search(r"#define " + macro + r"\(_\)((?:.*\\\n)*.*)", text).group(1)
        for entry in re.findall(r"_\(([^()]*(?:\([^()]*\)[^()]*)*)\)", body):
            parts = [p.strip() for p in entry.split(",")]
            if rule == policy.FP32_APPEND_DTYPE:  # _(ADD_NS(norm), "norm.Scalar", ...): the overload name
                found[parts[1].replace("\\", "").strip().strip('"')] = rule
            else:
                found[parts[0] + (f".{parts[1]}" if len(parts) > 1 else "")] = rule
    return found


def test_policy_is_pytorchs_non_cpu_lists_exactly():
    expected = _aten_generic_lists()
    assert len(expected) > 100
    ours = {name: rule for name, rule in policy.POLICY.items() if rule != policy.BANNED}
    assert ours == expected
    assert policy.rule_of("aten::binary_cross_entropy") == policy.BANNED
    assert torch.get_autocast_dtype("neuron") == torch.bfloat16  # neuron's own default


def test_binary_cross_entropy_is_unsafe_to_autocast():
    p = torch.rand(4, 3).to("neuron")
    target = torch.rand(4, 3).to("neuron")
    with torch.autocast("neuron"):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(p, target)
        with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
            torch.nn.BCELoss()(p, target)
        assert F.binary_cross_entropy_with_logits(p, target).dtype == torch.float32  # the safe form
    expected = F.binary_cross_entropy(p.cpu(), target.cpu())
    torch.testing.assert_close(F.binary_cross_entropy(p, target).cpu(), expected, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("name, fn, shapes", [
    ("mm", torch.mm, [(5, 7), (7, 3)]),
    ("matmul", torch.matmul, [(2, 5, 7), (7, 3)]),
    ("linear", F.linear, [(4, 7), (3, 7), (3,)]),
    ("bmm", torch.bmm, [(2, 5, 7), (2, 7, 3)]),
    ("baddbmm", torch.baddbmm, [(2, 5, 3), (2, 5, 7), (2, 7, 3)]),
    ("addmm", torch.addmm, [(5, 3), (5, 7), (7, 3)]),
    ("conv2d", F.conv2d, [(1, 2, 6, 6), (3, 2, 3, 3)]),
    ("conv1d", F.conv1d, [(1, 2, 9), (3, 2, 3)]),
])
def test_matmuls_and_convolutions_run_in_low_precision(dtype, name, fn, shapes):
    args = [_pair(*s, seed=i)[0] for i, s in enumerate(shapes)]
    expected, actual = _both(fn, dtype, *args)
    assert expected.dtype == dtype and actual.dtype == dtype, name
    torch.testing.assert_close(actual.cpu(), expected, **TOL[dtype])


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("name, fn", [
    ("softmax", lambda x: torch.softmax(x, -1)),
    ("log_softmax", lambda x: F.log_softmax(x, -1)),
    ("layer_norm", lambda x: F.layer_norm(x, (x.shape[-1],))),
    ("mse_loss", lambda x: F.mse_loss(x, x.flip(0))),
    ("sum", lambda x: x.sum()),
    ("sum.dim", lambda x: x.sum(dim=1)),
    ("prod", lambda x: x.prod(dim=0)),
    ("cumsum", lambda x: x.cumsum(0)),
    ("exp", torch.exp),
    ("norm", lambda x: torch.norm(x)),
])
def test_precision_sensitive_ops_run_in_fp32(dtype, name, fn):
    # Inputs in the low type, as they come out of a matmul inside an autocast region. CPU autocast
    # keeps some of these in the low type (its policy differs), so the reference is the op in fp32.
    low = _pair(6, 5, seed=3)[0].to(dtype)
    expected = fn(low.float())
    with torch.autocast("neuron", dtype=dtype):
        actual = fn(low.to("neuron"))
    assert actual.dtype == torch.float32, f"{name} gave {actual.dtype}"
    torch.testing.assert_close(actual.cpu(), expected, **TOL[torch.float32])


@pytest.mark.parametrize("dtype", LOW)
def test_cross_entropy_follows_the_non_cpu_policy(dtype):
    """cross_entropy_loss is not on the generic lists (CPU adds it): it calls log_softmax with the
    input's own dtype, which fp32_set_opt_dtype respects, then nll_loss in fp32 -- as on CUDA."""
    low = _pair(6, 5, seed=3)[0].to(dtype)
    target = torch.arange(6) % 5
    expected = F.nll_loss(torch.log_softmax(low, -1).float(), target)
    with torch.autocast("neuron", dtype=dtype):
        actual = F.cross_entropy(low.to("neuron"), target.to("neuron"))
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual.cpu(), expected, **TOL[dtype])


def test_explicit_dtype_is_respected():
    x = torch.randn(4, 4, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        low = x @ x
        assert low.sum(dtype=torch.bfloat16).dtype == torch.bfloat16
        assert torch.softmax(low, -1, dtype=torch.bfloat16).dtype == torch.bfloat16
        assert low.sum().dtype == torch.float32


@pytest.mark.parametrize("dtype", LOW)
def test_multi_input_ops_promote_to_the_widest_type(dtype):
    wide = torch.randn(3, 4, device="neuron")
    with torch.autocast("neuron", dtype=dtype):
        narrow = wide @ torch.eye(4, device="neuron")
        assert narrow.dtype == dtype
        assert torch.cat([narrow, wide]).dtype == torch.float32
        assert torch.stack([narrow, wide]).dtype == torch.float32
        assert torch.cat([narrow, narrow]).dtype == dtype
        assert torch.addcmul(wide, narrow, narrow).dtype == torch.float32
        # index_put without autocast refuses mismatched dtypes; autocast promotes both to fp32
        target = torch.zeros(5, 4, device="neuron")
        index = torch.tensor([0, 2, 4], device="neuron")
        put = target.index_put((index,), narrow)
        assert put.dtype == torch.float32
    torch.testing.assert_close(put.cpu()[index.cpu()], narrow.float().cpu())
    with pytest.raises(RuntimeError):
        target.index_put((index,), narrow)


def test_other_ops_other_devices_and_disabled_regions_are_untouched():
    x = torch.randn(4, 4, device="neuron")
    host = torch.randn(4, 4)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        assert (x + x).dtype == torch.float32  # no policy: the fallthrough passes it on
        assert (host @ host).dtype == torch.float32  # CPU tensors do not carry the neuron autocast key
        assert x.to(torch.float64).mm(x.to(torch.float64)).dtype == torch.float64  # doubles are not eligible
        with torch.autocast("neuron", enabled=False):
            assert (x @ x).dtype == torch.float32
    assert (x @ x).dtype == torch.float32


def test_gradients_reach_fp32_leaves_in_fp32():
    w_cpu, w = _pair(6, 6, seed=1)
    x_cpu, x = _pair(4, 6, seed=2)
    w.requires_grad_(True)
    w_cpu.requires_grad_(True)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        loss = torch.softmax(x @ w, -1).square().sum()
    loss.backward()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.softmax(x_cpu @ w_cpu, -1).square().sum().backward()
    assert w.grad.dtype == torch.float32
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad, rtol=3e-2, atol=3e-3)


def test_neuron_amp_helpers():
    amp = torch.neuron.amp
    assert amp.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.neuron.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]
    assert torch.neuron.is_bf16_supported()
    assert not amp.is_autocast_enabled()
    with amp.autocast():
        assert amp.is_autocast_enabled() and torch.is_autocast_enabled("neuron")
        assert amp.get_autocast_dtype() == torch.bfloat16
        assert (torch.ones(2, 2, device="neuron") @ torch.ones(2, 2, device="neuron")).dtype == torch.bfloat16
    with amp.autocast(dtype=torch.float16):
        assert amp.get_autocast_dtype() == torch.float16
    with torch.autocast("neuron"):  # the device default set at registration (this thread)
        assert torch.get_autocast_dtype("neuron") == torch.bfloat16
    with pytest.raises(ValueError, match="bfloat16"):
        amp.set_autocast_dtype(torch.float64)


def test_custom_fwd_casts_inputs_for_neuron():
    class Square(torch.autograd.Function):
        @staticmethod
        @torch.neuron.amp.custom_fwd(cast_inputs=torch.float32)
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @torch.neuron.amp.custom_bwd
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    x = torch.randn(3, device="neuron", dtype=torch.bfloat16, requires_grad=True)
    with torch.neuron.amp.autocast():
        y = Square.apply(x)
    assert y.dtype == torch.float32


def test_unsupported_autocast_dtype_warns_and_disables():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast("neuron", dtype=torch.float64):
            x = torch.ones(2, 2, device="neuron")
            assert (x @ x).dtype == torch.float32
    assert any("not supported" in str(w.message) for w in caught)


# --- GradScaler: native kernels ------------------------------------------------------------------


def _unscale_both(grads_cpu: list[torch.Tensor], found: float = 0.0, inv: float = 0.25):
    grads_dev = [g.to("neuron") for g in grads_cpu]
    found_cpu, found_dev = torch.full((), found), torch.full((), found, device="neuron")
    inv_cpu, inv_dev = torch.full((), inv), torch.full((), inv, device="neuron")
    torch._amp_foreach_non_finite_check_and_unscale_(grads_cpu, found_cpu, inv_cpu)
    torch._amp_foreach_non_finite_check_and_unscale_(grads_dev, found_dev, inv_dev)
    return grads_cpu, found_cpu, grads_dev, found_dev


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16))
@pytest.mark.parametrize("special", (None, float("inf"), float("-inf"), float("nan")))
def test_unscale_kernel_matches_cpu(fresh_stats, dtype, special):
    g = torch.Generator().manual_seed(0)
    grads = [(torch.randn(300, generator=g) * 100).to(dtype), (torch.randn(7, 129, generator=g)).to(dtype),
             torch.randn(3, 5, generator=g).to(dtype).t()]  # non-contiguous
    if special is not None:
        grads[1][6, 128] = special
    grads_cpu, found_cpu, grads_dev, found_dev = _unscale_both(grads)
    for c, d in zip(grads_cpu, grads_dev):
        torch.testing.assert_close(d.cpu(), c, equal_nan=True, rtol=0, atol=0)
    assert found_dev.item() == found_cpu.item() == (0.0 if special is None else 1.0)
    counts = fresh_stats.stats()["aten::_amp_foreach_non_finite_check_and_unscale_"]
    assert counts == {"native": 1, "decomposed": 0, "fallback": 0}


def test_unscale_keeps_a_found_inf_of_an_earlier_call():
    _, found_cpu, _, found_dev = _unscale_both([torch.ones(4)], found=1.0)
    assert found_dev.item() == found_cpu.item() == 1.0


@pytest.mark.parametrize("bad, message", [
    (dict(grads=[torch.ones(3, dtype=torch.int32)]), "not implemented for 'int32'"),
    (dict(found=torch.zeros((), dtype=torch.float16)), "found_inf must be a float tensor"),
    (dict(inv=torch.ones(2)), "inv_scale must be a 1-element tensor"),
    (dict(grads=[torch.ones(3, device="cpu")], host=True), "was not a neuron tensor"),
])
def test_unscale_kernel_errors(bad, message):
    grads = [g if bad.get("host") else g.to("neuron") for g in bad.get("grads", [torch.ones(3)])]
    found = bad.get("found", torch.zeros(())).to("neuron")
    inv = bad.get("inv", torch.ones(())).to("neuron")
    with pytest.raises((RuntimeError, NotImplementedError), match=message):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert (torch.ones(2, device="neuron") + 1).sum().item() == 4.0  # device still usable


def test_unscale_rejects_an_expanded_gradient_as_cpu_does():
    """A stride-0 gradient cannot be written in place: CPU's TensorIterator raises when its turn comes, the gradients
    before it already unscaled (the device wrote every gradient and returned; designed case
    amp_unscale-float32-signed_zero-expanded-511)."""
    errors = []
    for device in ("cpu", "neuron"):
        written = torch.ones(4, device=device)
        grads = [written, torch.ones(3, 1, device=device).expand(3, 5)]
        found, inv = torch.zeros(1, device=device), torch.full((1,), 0.5, device=device)
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor") as info:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
        errors.append(type(info.value))
        assert written.cpu().tolist() == [0.5] * 4  # the gradient before it was unscaled
    assert errors[0] is errors[1]


@pytest.mark.parametrize("found, tracker, interval, scale", [
    (0.0, 0, 3, 1024.0),  # clean step below the interval: tracker grows
    (0.0, 2, 3, 1024.0),  # clean step at the interval: scale grows, tracker resets
    (1.0, 2, 3, 1024.0),  # overflow: back off, reset
    (float("nan"), 1, 3, 1024.0),  # NaN found_inf counts as found
    (0.0, 0, 1, 3.0e38),  # growth would overflow fp32: scale kept, tracker reset
])
def test_update_scale_kernel_matches_cpu(fresh_stats, found, tracker, interval, scale):
    results = []
    for device in ("cpu", "neuron"):
        s = torch.full((), scale, device=device)
        t = torch.full((), tracker, dtype=torch.int32, device=device)
        torch._amp_update_scale_(s, t, torch.full((), found, device=device), 2.0, 0.5, interval)
        results.append((s.item(), t.item()))
    assert results[0] == results[1]
    assert fresh_stats.stats()["aten::_amp_update_scale_"]["native"] == 1


def test_update_scale_kernel_errors():
    s = torch.ones((), device="neuron")
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(s, torch.zeros((), device="neuron"), torch.zeros((), device="neuron"), 2.0, 0.5, 1)
    with pytest.raises(RuntimeError, match="current_scale must be a 1-element tensor"):
        torch._amp_update_scale_(torch.ones(2, device="neuron"), torch.zeros((), dtype=torch.int32, device="neuron"),
                                 torch.zeros((), device="neuron"), 2.0, 0.5, 1)


# --- training steps ------------------------------------------------------------------------------


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _train(device: str, dtype: torch.dtype, steps: int = 3, scaler_factory=None) -> tuple[list[float], list]:
    model = _mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = scaler_factory(device) if scaler_factory else None
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(8, 16, generator=g).to(device)
        y = torch.randn(8, 4, generator=g).to(device)
        with torch.autocast(device, dtype=dtype):
            out = model(x)
            assert out.dtype == dtype
            loss = F.mse_loss(out, y)
            assert loss.dtype == torch.float32
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_bf16_autocast_training_matches_cpu_autocast():
    cpu_losses, cpu_params = _train("cpu", torch.bfloat16)
    dev_losses, dev_params = _train("neuron", torch.bfloat16)
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=1.6e-2, atol=1e-3)
    for d, c in zip(dev_params, cpu_params):
        torch.testing.assert_close(d, c, rtol=1.6e-2, atol=2e-3)


def test_fp16_training_with_neuron_grad_scaler_stays_on_device(fresh_stats):
    def scaler(device):
        return torch.neuron.amp.GradScaler(init_scale=2.0**10) if device == "neuron" else \
            torch.amp.GradScaler("cpu", init_scale=2.0**10)

    cpu_losses, cpu_params = _train("cpu", torch.float16, scaler_factory=scaler)
    fresh_stats.reset_stats()
    dev_losses, dev_params = _train("neuron", torch.float16, scaler_factory=scaler)
    torch.testing.assert_close(torch.tensor(dev_losses), torch.tensor(cpu_losses), rtol=1e-2, atol=1e-3)
    for d, c in zip(dev_params, cpu_params):
        torch.testing.assert_close(d, c, rtol=1e-2, atol=1e-3)
    stats = fresh_stats.stats()
    assert stats["aten::_amp_foreach_non_finite_check_and_unscale_"]["native"] == 3
    assert stats["aten::_amp_update_scale_"]["native"] == 3
    assert dispatch.fallback_count() == 0, {op: c for op, c in stats.items() if c["fallback"]}


def test_torch_amp_grad_scaler_on_neuron_skips_overflowing_steps(fresh_stats):
    model = _mlp().to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("neuron", init_scale=2.0**8, growth_interval=1)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    with torch.autocast("neuron", dtype=torch.float16):
        loss = model(torch.randn(4, 16, device="neuron")).float().sum()
    scaler.scale(loss).backward()
    next(model.parameters()).grad[0, 0] = float("inf")
    scaler.step(opt)  # skipped: a gradient overflowed
    scaler.update()
    assert scaler.get_scale() == 2.0**7
    for b, p in zip(before, model.parameters()):
        assert torch.equal(b, p.detach().cpu())
    assert fresh_stats.stats()["aten::_amp_update_scale_"]["native"] == 1
