"""PyTorch's rules for arguments an op writes (out=, in-place self), device against the live CPU.

Where each rule lives: the device of a written argument is checked once for every neuron call
(device_impl/dispatch/written.py: native kernels' wrapper, the CPU fallback, and a guard in front of
PyTorch's CompositeExplicitAutograd out= kernels); out= dtype rules per packet in
kernels/registry.OUT_DTYPE_RULES; the read-write (out is also an input) shape rule in kernels/common.check_out.
"""

from __future__ import annotations

import warnings

import pytest
import torch

from device_impl.dispatch import TABLE
from device_impl.dispatch.table import resolve
from device_impl.dispatch.tiers import Tier

DEV = "neuron"


def _outcome(fn) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()
    except Exception as e:  # noqa: BLE001 - the class is the outcome under test
        return type(e).__name__
    return "ok"


def _unary_out_ops() -> list[str]:
    """Native out= overloads whose only required arguments are tensors (self [, other]) and out."""
    found = []
    for op in TABLE.ops(Tier.NATIVE):
        if not op.endswith(".out"):
            continue
        args = resolve(op)._schema.arguments
        tensors = [a for a in args if str(a.type) == "Tensor" and not a.is_out]
        others = [a for a in args if not a.is_out and str(a.type) != "Tensor" and not a.has_default_value()]
        if len(tensors) in (1, 2) and not others:
            found.append(op)
    return found


OUT_OPS = _unary_out_ops()
DTYPE_PAIRS = [(torch.int64, torch.float32), (torch.float32, torch.float64), (torch.float32, torch.int64),
               (torch.bool, torch.float32)]


def test_the_out_dtype_sweep_reaches_the_table():
    assert len(OUT_OPS) > 40 and "aten::neg.out" in OUT_OPS and "aten::add.out" in OUT_OPS


@pytest.mark.parametrize("op", OUT_OPS)
def test_out_dtype_rule_matches_cpu(op):
    """out= of another dtype: the device raises where CPU raises (check_all_same_dtype, exact, castable)
    and accepts where CPU accepts, so the dtype rule table cannot drift from the running torch."""
    overload = resolve(op)
    n = sum(1 for a in overload._schema.arguments if str(a.type) == "Tensor" and not a.is_out)
    for in_dtype, out_dtype in DTYPE_PAIRS:
        outcomes = []
        for dev in ("cpu", DEV):
            inputs = [torch.tensor([1, 0, 3], dtype=in_dtype, device=dev) for _ in range(n)]
            out = torch.empty(3, dtype=out_dtype, device=dev)
            outcomes.append(_outcome(lambda: overload(*inputs, out=out)))
        cpu, device = outcomes
        # Both refusing counts as agreement in class only when CPU's class is a RuntimeError family
        # member the device also raised; a different class is a failure.
        assert device == cpu, f"{op} {in_dtype}->{out_dtype}: CPU {cpu}, device {device}"


@pytest.mark.parametrize("call", [
    lambda o: torch.abs(torch.randn(4, device=DEV), out=o),                      # native kernel
    lambda o: torch.hypot(torch.randn(4, device=DEV), torch.randn(4, device=DEV), out=o),
    lambda o: torch.addr(torch.randn(4, 4, device=DEV), torch.randn(4, device=DEV),
                         torch.randn(4, device=DEV), out=o.view(4, 4) if o.numel() == 16 else o),  # composite
    lambda o: torch.logsumexp(torch.randn(4, device=DEV), 0, out=o),
    lambda o: torch.cumsum(torch.randn(4, device=DEV), 0, out=o),
], ids=["abs", "hypot", "addr-composite", "logsumexp-composite", "cumsum"])
@pytest.mark.parametrize("shape", [(4,), (), (16,)], ids=["same-shape", "0-dim", "other-shape"])
def test_out_on_the_host_is_refused_and_left_alone(call, shape):
    out = torch.full(shape, 7.0)
    with pytest.raises(RuntimeError, match="Expected out tensor to have device neuron:0, but got cpu"):
        call(out)
    assert torch.equal(out, torch.full(shape, 7.0))
    torch.ones(2, device=DEV).add_(1)  # the device stays usable


def test_fallback_out_on_the_host_is_refused():
    # aten::mode.values runs through PyTorch's composite kernel over the device's mode
    x = torch.tensor([[1.0, 2.0, 2.0]], device=DEV)
    values, indices = torch.empty(1), torch.empty(1, dtype=torch.long)
    with pytest.raises(RuntimeError, match="Expected out tensor to have device"):
        torch.mode(x, 1, out=(values, indices))


@pytest.mark.parametrize("method", ["logical_and_", "logical_or_", "logical_xor_", "ldexp_", "mul_"])
def test_in_place_never_broadcasts_self(method):
    for dev in ("cpu", DEV):
        x = torch.ones(5, 1, device=dev)
        with pytest.raises(RuntimeError, match=r"output with shape \[5, 1\] doesn't match the broadcast shape"):
            getattr(x, method)(torch.ones(5, 5, device=dev))
        assert x.shape == (5, 1)


@pytest.mark.parametrize("self_shape", [(5, 1), ()])
def test_addr_in_place_keeps_self_shape(self_shape):
    v1, v2 = torch.ones(5), torch.ones(10)
    with pytest.raises(RuntimeError):
        torch.ones(self_shape).addr_(v1, v2)
    x = torch.ones(self_shape, device=DEV)
    with pytest.raises(RuntimeError):
        x.addr_(v1.to(DEV), v2.to(DEV))
    assert x.shape == self_shape and torch.equal(x.cpu(), torch.ones(self_shape))
    full = torch.ones(5, 10, device=DEV)
    full.addr_(v1.to(DEV), v2.to(DEV))
    assert torch.equal(full.cpu(), torch.ones(5, 10).addr_(v1, v2))


@pytest.mark.parametrize("mask_shape", [(5, 5), (2, 5, 1), (5, 1), (1,)])
def test_masked_fill_in_place_mask_broadcast(mask_shape):
    mask = torch.ones(mask_shape, dtype=torch.bool)
    outcomes = []
    for dev in ("cpu", DEV):
        x = torch.ones(5, 1, device=dev)
        outcomes.append((_outcome(lambda: x.masked_fill_(mask.to(dev), 2.0)), tuple(x.shape), x.cpu().tolist()))
    assert outcomes[0] == outcomes[1]


def test_mode_out_on_the_device_matches_cpu():
    x = torch.tensor([[1.0, 2.0, 2.0, 3.0], [4.0, 4.0, 0.0, 0.0]])
    expected = torch.mode(x, 1)
    values, indices = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.long, device=DEV)
    got = torch.mode(x.to(DEV), 1, out=(values, indices))
    assert got[0] is values and got[1] is indices
    assert torch.equal(values.cpu(), expected.values) and torch.equal(indices.cpu(), expected.indices)
    with pytest.raises(RuntimeError, match="expected scalar type 'Float' but got 'Double' for values output"):
        torch.mode(x.to(DEV), 1, out=(torch.empty(0, dtype=torch.float64, device=DEV), indices))


@pytest.mark.parametrize("shape", [(1,), (0,), (7,)])
def test_batch_norm_out_in_evaluation_leaves_the_saved_statistics_alone(shape):
    x, rm, rv = torch.randn(3, 4, 5), torch.zeros(4), torch.ones(4)
    results = []
    for dev in ("cpu", DEV):
        outs = [torch.full(shape, 3.0, device=dev) for _ in range(3)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.ops.aten.native_batch_norm.out(x.to(dev), None, None, rm.to(dev), rv.to(dev), False, 0.1, 1e-5,
                                                 out=outs[0], save_mean=outs[1], save_invstd=outs[2])
        results.append([(tuple(o.shape), o.cpu().tolist()) for o in outs[1:]])
    assert results[0] == results[1]


@pytest.mark.parametrize("call", [
    lambda x, o: torch.mm(x, x, out=o),
    lambda x, o: torch.addmm(x, x, x, out=o),
    lambda x, o: torch.bmm(x[None], x[None], out=o),
    lambda x, o: torch.baddbmm(x[None], x[None], x[None], out=o),
    lambda x, o: torch.where(x > 0, x, x, out=o),
    lambda x, o: torch.ops.aten.avg_pool2d.out(x[None], 2, out=o),
    lambda x, o: torch.ops.aten.avg_pool3d.out(x[None, None], 1, out=o),
    lambda x, o: torch.ops.aten.native_batch_norm.out(x[None], None, None, None, None, True, 0.1, 1e-5, out=o,
                                                     save_mean=torch.empty(0, device=x.device),
                                                     save_invstd=torch.empty(0, device=x.device)),
], ids=["mm", "addmm", "bmm", "baddbmm", "where", "avg_pool2d", "avg_pool3d", "native_batch_norm"])
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float64], ids=str)
def test_exact_out_dtype_ops_refuse_another_float(call, out_dtype):
    """These ops' out= must have the result's dtype exactly, even where casting would allow it (ATen's generated
    out= wrappers and explicit checks). The old device kernels cast float32 results into a float16 or float64
    out instead of raising (found by the contract's out_dtype check once it tried a castable float)."""
    outcomes = []
    for dev in ("cpu", DEV):
        x = torch.randn(4, 4, device=dev)
        outcomes.append(_outcome(lambda: call(x, torch.empty(0, dtype=out_dtype, device=dev))))
    assert outcomes == ["RuntimeError", "RuntimeError"], outcomes


@pytest.mark.parametrize("op", ["clamp.out", "clamp_min.out", "clamp_max.out", "clamp.Tensor_out",
                                "clamp_min.Tensor_out", "clamp_max.Tensor_out"])
@pytest.mark.parametrize("dtypes", [(torch.int8, torch.float16), (torch.float16, torch.float32),
                                    (torch.int8, torch.float32), (torch.float16, torch.float16)])
def test_clamp_out_dtype_matches_cpu(op, dtypes):
    """CPU's Scalar clamps (a borrowing unary op over self promoted with the bound) require an out of the result's
    dtype ("Found dtype Half but expected Float" for clamp_max.out(int8 x, 0.5)); their Tensor forms cast into any
    out. The device wrote any out (the designed clamp twins found it)."""
    packet, _, overload = op.partition(".")
    fn = getattr(getattr(torch.ops.aten, packet), overload)
    self_dtype, out_dtype = dtypes

    def call(device):
        x = torch.ones(3, dtype=self_dtype, device=device)
        bound = torch.tensor(0.5, dtype=self_dtype, device=device) if "Tensor" in overload else 0.5
        bounds = (bound, None) if packet == "clamp" else (bound,)
        out = torch.empty(3, dtype=out_dtype, device=device)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(x, *bounds, out=out)
        except RuntimeError as e:
            return str(e)
        return out.cpu().tolist()

    assert call(DEV) == call("cpu")
