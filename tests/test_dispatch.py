"""The dispatch table and the boxed CPU fallback: correctness for every kind of op, counters, strict mode."""

import warnings

import pytest
import torch

from support import run_python

from device_impl import dispatch
from device_impl.dispatch import Tier


def both(cpu: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return cpu.clone(), cpu.to("neuron")


def assert_same(dev: torch.Tensor, cpu: torch.Tensor) -> None:
    assert dev.device.type == "neuron"
    assert dev.dtype == cpu.dtype and dev.shape == cpu.shape
    torch.testing.assert_close(dev.cpu(), cpu, rtol=0, atol=0, equal_nan=True)


# These tests use ops the device has no kernel for (lgamma, digamma, hypot, frexp, kthvalue, ...),
# so they exercise the CPU fallback itself.

def test_functional_op(fresh_stats):
    cpu, dev = both(torch.rand(5, 7) + 0.5)
    assert_same(torch.lgamma(dev), torch.lgamma(cpu))
    assert fresh_stats.stats()["aten::lgamma.out"]["fallback"] == 1


def test_in_place_op_mutates_the_original():
    cpu, dev = both(torch.rand(5, 7) + 0.5)
    ptr = dev.data_ptr()
    returned = dev.lgamma_()
    cpu.lgamma_()
    assert returned is dev and dev.data_ptr() == ptr
    assert_same(dev, cpu)


def test_in_place_op_on_a_strided_view_changes_only_the_view():
    cpu, dev = both(torch.arange(36.0).reshape(6, 6) + 1)
    cpu[::2, 1::3].digamma_()
    dev[::2, 1::3].digamma_()
    assert_same(dev, cpu)


def test_aliasing_inside_one_op():
    cpu, dev = both(torch.arange(12.0).reshape(3, 4))
    torch.hypot(cpu, cpu, out=cpu)
    torch.hypot(dev, dev, out=dev)
    torch.hypot(cpu[0], cpu[1], out=cpu[2])  # out is another row of the same storage
    torch.hypot(dev[0], dev[1], out=dev[2])
    assert_same(dev, cpu)
    with pytest.raises(RuntimeError, match="single memory location"):
        torch.hypot(dev[1:], dev[:-1], out=dev[1:])  # partial overlap: refused exactly as on CPU


def test_out_variant_with_resize():
    cpu_a, dev_a = both(torch.rand(4, 3) + 0.5)
    cpu_out, dev_out = torch.empty(0), torch.empty(0, device="neuron")
    returned = torch.lgamma(dev_a, out=dev_out)
    torch.lgamma(cpu_a, out=cpu_out)
    assert returned is dev_out
    assert_same(dev_out, cpu_out)


def test_out_variant_into_a_strided_destination():
    cpu_base, dev_base = both(torch.zeros(4, 6))
    torch.lgamma(torch.full((4, 3), 3.5), out=cpu_base[:, ::2])
    torch.lgamma(torch.full((4, 3), 3.5, device="neuron"), out=dev_base[:, ::2])
    assert_same(dev_base, cpu_base)


def test_out_resized_by_the_cpu_kernel_to_a_strided_layout():
    """linalg_lstsq's solution for a tall A is a view of a taller column-major buffer (strides (1, 4)
    for a 3 x 2 result): the out= tensor the fallback writes back must get storage reaching that
    layout's last element (it raised setStorage out of bounds)."""
    a, b = torch.randn(4, 3), torch.randn(4, 2)
    expected = torch.linalg.lstsq(a, b).solution
    solution = torch.linalg.lstsq(a.to("neuron"), b.to("neuron")).solution
    assert solution.stride() == expected.stride()
    torch.testing.assert_close(solution.cpu(), expected)


def test_multiple_outputs():
    cpu, dev = both(torch.randn(6, 9))
    for f in (lambda t: torch.frexp(t), lambda t: torch.kthvalue(t, 3), lambda t: torch.mode(t, 1)):
        for d, c in zip(f(dev), f(cpu)):
            assert_same(d, c)


def test_multiple_out_arguments():
    cpu, dev = both(torch.randn(5, 5))
    cv, ci = torch.empty(0), torch.empty(0, dtype=torch.long)
    dv, di = torch.empty(0, device="neuron"), torch.empty(0, dtype=torch.long, device="neuron")
    torch.kthvalue(cpu, 2, 1, out=(cv, ci))
    rv, ri = torch.kthvalue(dev, 2, 1, out=(dv, di))
    assert rv is dv and ri is di
    assert_same(dv, cv)
    assert_same(di, ci)


def test_view_op_through_the_fallback_aliases_device_memory():
    """The fallback rebuilds a view output over the device storage. view_as_real has a native kernel
    now, so the fallback is called directly, as the dispatcher would call it for a view op without one."""
    from device_impl.dispatch.fallback import cpu_fallback

    cpu, dev = both(torch.randn(3, 4, dtype=torch.complex64))
    real = cpu_fallback(torch.ops.aten.view_as_real.default, dev)
    assert real.untyped_storage().data_ptr() == dev.untyped_storage().data_ptr()
    assert_same(real, torch.view_as_real(cpu))
    real.zero_()
    torch.view_as_real(cpu).zero_()
    assert_same(dev, cpu)
    x_cpu, x_dev = both(torch.randn(4, 6))
    window = cpu_fallback(torch.ops.aten.unfold.default, x_dev, 1, 2, 1)
    assert window.stride() == x_cpu.unfold(1, 2, 1).stride()
    assert window.untyped_storage().data_ptr() == x_dev.untyped_storage().data_ptr()


def test_list_inputs_and_outputs():
    cpus = [torch.rand(2, 3) + 0.5 for _ in range(3)]
    devs = [c.to("neuron") for c in cpus]
    for d, c in zip(torch._foreach_lgamma(devs), torch._foreach_lgamma(cpus)):
        assert_same(d, c)
    torch._foreach_lgamma_(devs)
    torch._foreach_lgamma_(cpus)
    for d, c in zip(devs, cpus):
        assert_same(d, c)
    assert_same(torch.block_diag(*devs), torch.block_diag(*cpus))


def test_factory_ops():
    assert_same(torch.tril_indices(4, 3, device="neuron"), torch.tril_indices(4, 3))
    assert_same(torch.triu_indices(3, 3, 1, device="neuron:1"), torch.triu_indices(3, 3, 1))
    assert torch.tril_indices(3, 3, device="neuron:1").device.index == 1


def test_scalar_results_and_integer_dtypes():
    cpu, dev = both(torch.randint(-100, 100, (7,)))
    assert torch.equal(dev.sum().cpu(), cpu.sum())
    assert dev.max().item() == cpu.max().item()
    assert torch.equal(dev, dev.clone()) and not torch.equal(dev, dev + 1)
    assert bool((dev == dev).all())


def test_cpu_scalar_tensors_mix_with_neuron_tensors():
    cpu, dev = both(torch.randn(4))
    assert_same(dev * torch.tensor(3.0), cpu * torch.tensor(3.0))


def test_mixing_devices_is_an_error_like_cuda():
    dev = torch.randn(4, device="neuron")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        dev + torch.randn(4)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        dev + torch.randn(4, device="neuron:1")


F = torch.nn.functional


@pytest.mark.parametrize("call", [
    # each once returned a result read from host memory, or raised TypeError on the host tensor's missing device
    # index, before the table's wrapper checked every tensor argument (dispatch/devices.py)
    lambda d, h: torch.mm(d, h),
    lambda d, h: torch.cdist(d, h),
    lambda d, h: torch.ops.aten.native_batch_norm(h, d[0], d[0], None, None, True, 0.1, 1e-5),
    lambda d, h: torch.ops.aten.native_layer_norm(h, [3], d[0], d[0], 1e-5),
    lambda d, h: torch.ops.aten._adaptive_avg_pool2d_backward(h.view(1, 3, 3), d.view(1, 3, 3)),
    lambda d, h: torch.ops.aten.grid_sampler_2d(d.view(1, 1, 3, 3), h.view(1, 3, 3, 1).expand(1, 3, 3, 2), 0, 0,
                                                False),
], ids=["mm", "cdist", "native_batch_norm", "native_layer_norm", "adaptive_avg_pool2d_backward", "grid_sampler_2d"])
def test_a_host_tensor_among_neuron_tensors_is_refused_before_computing(call):
    dev, host = torch.randn(3, 3, device="neuron"), torch.randn(3, 3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        call(dev, host)
    assert (torch.ones(3, device="neuron") + 1).cpu().tolist() == [2.0, 2.0, 2.0]


@pytest.mark.parametrize("src_shape", [(9,), (2, 7)])
def test_a_converting_copy_from_a_src_that_does_not_broadcast_raises_cpus_runtime_error(src_shape):
    """The dtype-converting copy_ (kernels/copy.py device_cast) raised numpy's ValueError from broadcast_to."""
    for make in (lambda t: t, lambda t: t.to("neuron")):
        dst, src = make(torch.zeros(1, 5, 7, dtype=torch.bool)), make(torch.ones(src_shape, dtype=torch.int64))
        with pytest.raises(RuntimeError, match="must match the size|doesn't match the broadcast shape"):
            dst.copy_(src)


def test_what_pytorch_accepts_from_the_host_stays_accepted():
    dev = torch.arange(6.0, device="neuron").view(2, 3)
    assert dev[torch.tensor([1, 0])].cpu().tolist() == [[3.0, 4.0, 5.0], [0.0, 1.0, 2.0]]  # host indices
    assert torch.mm(dev, torch.ones(3, 1, device="neuron") * torch.tensor(2.0)).cpu().tolist() == [[6.0], [24.0]]
    like = torch.empty_like(torch.ones(2), device="neuron")  # a host tensor reaching a neuron factory
    assert like.device.type == "neuron" and like.shape == (2,)


@pytest.mark.parametrize("call", [
    lambda d: torch.mm(d(torch.randn(2, 3)), d(torch.randn(4, 5))),
    lambda d: d(torch.randn(3)).view(2, 2),
    lambda d: torch.cat([d(torch.randn(2, 3)), d(torch.randn(2, 4))]),
    lambda d: d(torch.randn(2)).add_(d(torch.randn(3))),
    lambda d: torch.sqrt(d(torch.tensor([1, 2]))).int().add_(0.5),
])
def test_errors_match_cpu_and_leave_the_device_usable(call):
    with pytest.raises(Exception) as cpu_error:
        call(lambda t: t)
    before = torch.neuron.memory_allocated()
    with pytest.raises(type(cpu_error.value)):
        call(lambda t: t.to("neuron"))
    assert torch.neuron.memory_allocated() == before
    assert torch.neuron.check_allocator_invariants() == []
    assert (torch.ones(3, device="neuron") + 1).cpu().tolist() == [2.0, 2.0, 2.0]


def test_fallback_warns_once_per_op_with_torchneuron_wording():
    x = torch.randn(3, device="neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.special.erfcx(x)
        torch.special.erfcx(x)
    messages = [str(w.message) for w in caught if "CPU fallback" in str(w.message)]
    assert messages == ["Operator 'aten::special_erfcx.out' executed via CPU fallback"]


def test_stats_count_by_tier_and_reset(fresh_stats):
    x = torch.randn(3, device="neuron")
    fresh_stats.reset_stats()
    torch.lgamma(x)
    torch.lgamma(x)
    assert fresh_stats.stats()["aten::lgamma.out"] == {"native": 0, "decomposed": 0, "fallback": 2}
    assert fresh_stats.fallback_count() == 2
    fresh_stats.reset_stats()
    assert fresh_stats.stats() == {}


def test_strict_mode_context_manager():
    x = torch.randn(3, device="neuron")
    with dispatch.strict():
        with pytest.raises(NotImplementedError, match="Operator 'aten::lgamma.out'.*strict mode"):
            torch.lgamma(x)
        # Metadata and copies are device kernels, so strict mode allows them.
        assert x.t().view(3).cpu().shape == (3,)
    assert torch.lgamma(x).device.type == "neuron"


def test_strict_mode_from_the_environment():
    result = run_python(
        "import torch\n"
        "x = torch.tensor([1.0, 2.0]).to('neuron')\n"
        "try:\n"
        "    x.lgamma()\n"
        "except NotImplementedError as e:\n"
        "    print('refused', 'aten::lgamma.out' in str(e))\n",
        NEURON_STRICT="1",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["refused", "True"]


def test_table_knows_each_tier():
    table = dispatch.TABLE
    assert table.lookup("aten::empty_strided").tier is Tier.NATIVE
    assert table.lookup("aten::copy_").source == "csrc"
    assert table.lookup("aten::linear").tier is Tier.COMPOSITE
    lowering = table.lookup("aten::special_erfcx")
    assert lowering.tier is Tier.FALLBACK and lowering.source == "cpu"
    assert "aten::view" in table.ops(Tier.NATIVE)
    with pytest.raises(ValueError, match="already has a neuron lowering"):
        table.native("aten::view")(lambda *a: None)


def test_random_op_through_the_fallback_uses_the_neuron_generator():
    x = torch.rand(50, device="neuron")
    torch.neuron.manual_seed(11)
    a = torch.poisson(x).cpu()  # poisson has no device kernel
    torch.manual_seed(999)  # the CPU generator must not matter...
    torch.neuron.manual_seed(11)  # ...only the neuron one
    assert torch.equal(torch.poisson(x).cpu(), a)


def test_a_host_input_is_refused_before_the_out_tensor_is_resized():
    """bernoulli(p on the host, out= on neuron) runs on neuron: the host p is refused before the kernel resizes
    out (the cross-device probe found out resized to p's shape by a call that then raised)."""
    out = torch.empty(0, device="neuron")
    with pytest.raises(RuntimeError, match="same device"):
        torch.bernoulli(torch.ones(5), out=out)
    assert out.shape == (0,)
