"""CNN ops compile (compiler/opaque_cnn.py): each cut whole and run as its eager kernel's tile program inside the
compiled launch. Before, torch-mlir refused them (max pooling's two-operand reduce_window, batch norm's
``_native_batch_norm_legit_functional``) and every graph holding one ran eagerly, counted as a fallback.

Each case: no fallback, the op's step in the program, the result equal to eager's bit for bit (the same tile
program), and the compiled call's device time no more than eager's (issue 21)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import device_impl.compiler as compiler
from device_impl.compiler import breakdown


def _device_ns(fn, *args) -> tuple[object, int]:
    """``fn(*args)``'s result and the device time of its second (warm) call."""
    fn(*args)
    torch.neuron.synchronize()
    start = torch.neuron.device_time_ns()
    out = fn(*args)
    torch.neuron.synchronize()
    return out, torch.neuron.device_time_ns() - start


def _steps(compiled, *args) -> set[str]:
    with breakdown.capture() as calls:
        compiled(*args)
        torch.neuron.synchronize()
    return {step["kind"] for executable, _ in calls for step in executable.program.steps}


def _flat(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _bn_train(x, w, b, rm, rv):
    # the functional op (a copy of the running statistics updated): what AOTAutograd makes of F.batch_norm
    return torch.ops.aten._native_batch_norm_legit_functional(x, w, b, rm, rv, True, 0.1, 1e-5)


CASES = [
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), [(2, 8, 17, 17)], "max_pool"),
    ("max_pool2d_indices", lambda x: F.max_pool2d(x, 2, return_indices=True), [(2, 4, 16, 15)], "max_pool"),
    ("max_pool3d", lambda x: F.max_pool3d(x, 2, ceil_mode=True), [(1, 3, 5, 6, 7)], "max_pool"),
    ("max_pool2d_backward", lambda g, x: torch.ops.aten.max_pool2d_with_indices_backward(
        g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, F.max_pool2d(x, 2, return_indices=True)[1]),
     [(2, 4, 8, 8), (2, 4, 16, 16)], "max_pool_backward"),
    ("batch_norm_train", _bn_train, [(4, 8, 9, 9), (8,), (8,), (8,), (8,)], "batch_norm"),
    ("batch_norm_eval", lambda x, w, b, rm, rv: F.batch_norm(x, rm, rv.abs(), w, b, False),
     [(4, 8, 9, 9), (8,), (8,), (8,), (8,)], "batch_norm"),
    ("batch_norm_no_stats", lambda x, w, b: F.batch_norm(x, None, None, w, b, True), [(3, 5, 33), (5,), (5,)],
     "batch_norm"),
    ("batch_norm_backward", lambda g, x, w, m, v: torch.ops.aten.native_batch_norm_backward(
        g, x, w, None, None, m, v.abs() + 0.5, True, 1e-5, [True, True, True]),
     [(8, 16, 8, 8), (8, 16, 8, 8), (16,), (16,), (16,)], "batch_norm_backward"),
    ("batch_norm_backward_dx", lambda g, x, m, v: torch.ops.aten.native_batch_norm_backward(
        g, x, None, None, None, m, v.abs() + 0.5, True, 1e-5, [True, False, False]),
     [(4, 3, 65), (4, 3, 65), (3,), (3,)], "batch_norm_backward"),
    ("group_norm", lambda x, w, b: F.group_norm(x, 3, w, b), [(2, 6, 5, 7), (6,), (6,)], "group_norm"),
    ("group_norm_stats", lambda x: torch.ops.aten.native_group_norm(x, None, None, 2, 4, 33, 2, 1e-5),
     [(2, 4, 33)], "group_norm"),
    ("avg_pool2d_backward", lambda g, x: torch.ops.aten.avg_pool2d_backward(g, x, [3, 3], [2, 2], [1, 1], False,
                                                                            False, None),
     [(2, 4, 8, 8), (2, 4, 16, 16)], "avg_pool_backward"),
    ("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (2, 3, 5)), [(2, 3, 5, 7, 11)], "adaptive_avg_pool"),
    ("adaptive_avg_pool2d_backward", lambda g, x: torch.ops.aten._adaptive_avg_pool2d_backward(g, x),
     [(2, 4, 3, 5), (2, 4, 10, 13)], "adaptive_avg_pool_backward"),
    ("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 5), return_indices=True), [(2, 4, 10, 13)],
     "adaptive_max_pool"),
    ("adaptive_max_pool2d_backward", lambda g, x: torch.ops.aten.adaptive_max_pool2d_backward(
        g, x, F.adaptive_max_pool2d(x, (3, 5), return_indices=True)[1]), [(2, 4, 3, 5), (2, 4, 10, 13)],
     "adaptive_max_pool_backward"),
    ("replication_pad2d_backward", lambda g, x: torch.ops.aten.replication_pad2d_backward(g, x, [1, 2, 3, 0]),
     [(2, 3, 10, 8), (2, 3, 7, 5)], "replication_pad_backward"),
    ("grid_sample", lambda x, g: F.grid_sample(x, g.tanh() * 1.1, align_corners=False), [(2, 3, 9, 11), (2, 5, 7, 2)],
     "grid_sample"),
    ("grid_sampler_2d_backward", lambda go, x, g: torch.ops.aten.grid_sampler_2d_backward(
        go, x, g.tanh(), 0, 1, True, [True, True]), [(2, 3, 5, 7), (2, 3, 9, 11), (2, 5, 7, 2)],
     "grid_sample_backward"),
    ("cdist", lambda a, b: torch.cdist(a, b, p=1.5), [(2, 7, 5), (2, 9, 5)], "cdist"),
    # PyTorch's decomposition (augmented rows concatenated, a product, clamp, root) cost 1.34x the kernel
    ("euclidean_dist", lambda a, b: torch.ops.aten._euclidean_dist(a, b), [(2, 8, 4), (513, 4)], "cdist"),
    ("pdist", lambda x: F.pdist(x, p=3.0), [(9, 4)], "pdist"),
    ("convolution_overrideable", lambda x, w, b: torch.ops.aten.convolution_overrideable(
        x, w, b, [1, 2], [1, 0], [1, 1], False, [0, 0], 2), [(2, 4, 9, 8), (6, 2, 3, 3), (6,)],
     "convolution_overrideable"),
    # convolution_backward torch-mlir cannot import (compiler/opaque_conv.py): grouped, depthwise, transposed, dilated,
    # 1-d, 3-d
    ("convolution_backward_grouped", lambda g, x, w: torch.ops.aten.convolution_backward(
        g, x, w, [8], [1, 1], [1, 1], [1, 1], False, [0, 0], 2, [True, True, True]),
     [(2, 8, 12, 12), (2, 4, 12, 12), (8, 2, 3, 3)], "convolution_backward"),
    ("convolution_backward_depthwise_strided", lambda g, x, w: torch.ops.aten.convolution_backward(
        g, x, w, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 4, [True, True, False]),
     [(2, 4, 6, 6), (2, 4, 12, 12), (4, 1, 3, 3)], "convolution_backward"),
    ("convolution_backward_transposed", lambda g, x, w: torch.ops.aten.convolution_backward(
        g, x, w, [6], [2, 2], [1, 1], [1, 1], True, [1, 1], 1, [True, True, True]),
     [(2, 6, 12, 12), (2, 4, 6, 6), (4, 6, 3, 3)], "convolution_backward"),
    ("convolution_backward_dilated_weight", lambda g, x, w: torch.ops.aten.convolution_backward(
        g, x, w, None, [1, 1], [2, 2], [2, 2], False, [0, 0], 1, [False, True, False]),
     [(2, 6, 10, 10), (2, 4, 10, 10), (6, 4, 3, 3)], "convolution_backward"),
    ("convolution_backward_1d", lambda g, x, w: torch.ops.aten.convolution_backward(
        g, x, w, [6], [1], [1], [1], False, [0], 1, [True, True, True]),
     [(2, 6, 16), (2, 4, 16), (6, 4, 3)], "convolution_backward"),
    ("convolution_backward_3d", lambda g, x, w: torch.ops.aten.convolution_backward(
        g, x, w, None, [1, 1, 1], [1, 1, 1], [1, 1, 1], False, [0, 0, 0], 1, [True, True, False]),
     [(2, 4, 5, 6, 6), (2, 3, 5, 6, 6), (4, 3, 3, 3, 3)], "convolution_backward"),
    ("upsample_nearest2d_backward", lambda g: torch.ops.aten.upsample_nearest2d_backward(g, [14, 10], [2, 3, 7, 4]),
     [(2, 3, 14, 10)], "upsample_backward"),
    ("upsample_bilinear2d_backward", lambda g: torch.ops.aten.upsample_bilinear2d_backward(
        g, [14, 10], [2, 3, 7, 4], False), [(2, 3, 14, 10)], "upsample_backward"),
]


@pytest.mark.parametrize("name,fn,shapes,kind", CASES, ids=[c[0] for c in CASES])
def test_cnn_op_compiles_to_its_eager_kernel(fresh, name, fn, shapes, kind):
    torch.manual_seed(0)
    inputs = [torch.randn(s).to("neuron") for s in shapes]
    expected, eager_ns = _device_ns(fn, *[t.clone() for t in inputs])
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    out, compiled_ns = _device_ns(compiled, *[t.clone() for t in inputs])
    s = compiler.stats()
    assert s["fallbacks"] == 0, s["fallbacks_by_op"]
    assert kind in _steps(compiled, *[t.clone() for t in inputs])
    for got, want in zip(_flat(out), _flat(expected)):
        if want is None:  # a gradient output_mask did not ask for
            assert got is None
            continue
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.cpu(), want.cpu()), name
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)


def test_eval_batch_norm_whose_statistics_are_read_keeps_cpus_empty_ones(fresh):
    """In evaluation CPU (and the eager kernel) returns empty saved statistics where the meta function gives the
    running mean and invstd: a graph that returns them is not cut, and runs eagerly as before."""
    x, w, b, rm, rv = (torch.rand(s).to("neuron") for s in [(2, 3, 4), (3,), (3,), (3,), (3,)])

    def fn(x, w, b, rm, rv):
        return torch.ops.aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)

    out = torch.compile(fn, backend="neuron", dynamic=False)(x, w, b, rm, rv)
    assert [tuple(t.shape) for t in out[1:]] == [(0,), (0,)]


def _cnn() -> torch.nn.Module:
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(16 * 4 * 4, 10))


def test_small_cnn_training_step_compiles_whole_and_matches_cpu(fresh):
    """conv-bn-relu-maxpool twice and a linear layer: one forward and one backward program, no graph run
    eagerly; loss, every gradient and the running statistics match CPU eager."""
    torch.manual_seed(0)
    reference = _cnn()
    model = _cnn().to("neuron")
    model.load_state_dict(reference.state_dict())
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))

    def step(m, x, y):
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        return loss

    expected = step(reference, x, y)
    loss = torch.compile(step, backend="neuron")(model, x.to("neuron"), y.to("neuron"))
    s = compiler.stats()
    assert s["fallbacks"] == 0, s["fallbacks_by_op"]
    assert s["compiles"] == 2
    torch.testing.assert_close(loss.detach().cpu(), expected.detach())
    for (name, p), (_, q) in zip(reference.named_parameters(), model.named_parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-5, msg=name)
    for (name, p), (_, q) in zip(reference.named_buffers(), model.named_buffers()):
        torch.testing.assert_close(q.cpu(), p, msg=name)


def test_reduced_float_batch_norm_training_returns_cpus_statistics_dtype(fresh):
    """The meta function traces a bfloat16 training batch norm's saved statistics as float32, CPU and the eager
    kernel return them in bfloat16: where the graph only returns them, the step is cut with CPU's dtype for them
    (``opaque.cut``'s retyped results) instead of the whole graph running eagerly (the sweep's [2, 4] call: 10.69 us
    against the eager kernel's 6.69); the eager kernel's bits. A graph that computes with them keeps running eagerly
    (their dtype would change its arithmetic)."""
    g = torch.Generator().manual_seed(0)
    x, w, b, rm, rv = (torch.randn(s, generator=g).bfloat16().to("neuron") for s in [(2, 4), (4,), (4,), (4,), (4,)])

    def fn(x, w, b, rm, rv):
        return torch.ops.aten._native_batch_norm_legit(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)

    expected, eager_ns = _device_ns(fn, x, w, b, rm, rv)
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    out, compiled_ns = _device_ns(compiled, x, w, b, rm, rv)
    assert compiler.stats()["fallbacks"] == 0, compiler.stats()["fallbacks_by_op"]
    assert "batch_norm" in _steps(compiled, x, w, b, rm, rv)
    for got, want in zip(out, expected):
        assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got.cpu(), want.cpu())
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)

    def reads(x, w, b, rm, rv):
        out, mean, invstd = fn(x, w, b, rm, rv)
        return out, mean * 2, invstd

    torch._dynamo.reset()
    compiled = torch.compile(reads, backend="neuron", dynamic=False)
    for got, want in zip(compiled(x, w, b, rm, rv), reads(x, w, b, rm, rv)):
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want.cpu())
