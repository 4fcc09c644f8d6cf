"""Graphs torch-mlir cannot import because of ops the device has eager kernels for (compiler/eager_cut.py): those ops
run as their eager kernels and the rest of the graph compiles, instead of the whole graph running eagerly (issue 21's
op spec sweep: angle, cummax, mode, kthvalue, frexp, nextafter, fmax, the RNN cells ... were ``eager-graph``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from device_impl import compiler
from device_impl.compiler import eager_cut
from support import compiled_run, eager_run, warm_call_ns

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _randn(shape: tuple, seed: int = 0) -> torch.Tensor:
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
    if x.numel() >= 3:
        x.view(-1)[:3] = torch.tensor([float("nan"), -0.0, -1.0])
    return x


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().view(torch.uint8).numpy()


def _stats() -> tuple[dict, dict]:
    s = compiler.stats()
    return dict(s["fallbacks_by_op"]), dict(s["eager_cuts_by_op"])


def test_angle_runs_as_its_eager_kernel_and_the_softmax_compiles():
    """angle(a) beside softmax(b * 2): torch-mlir converts no angle. The graph is not a fallback; angle is one eager
    cut (its bits eager's), the softmax and the concatenation a compiled program, the call no costlier than adaptive
    eager's."""
    x, y = _randn((64, 513)), _randn((64, 513), 1)

    def fn(a, b):
        angle = torch.angle(a)
        return torch.cat([angle, torch.softmax(b * 2, -1) + angle])

    fallbacks, cuts = _stats()
    got, compiled_ns, steps = compiled_run(fn, x, y)
    after_fallbacks, after_cuts = _stats()
    assert after_fallbacks == fallbacks
    assert after_cuts.get("aten.angle.default", 0) == cuts.get("aten.angle.default", 0) + 1
    assert "fused" in [step["kind"] for step in steps], [step["kind"] for step in steps]
    with torch.neuron.eager_mode("adaptive"):
        expected, adaptive_ns = eager_run(fn, x, y)
    assert compiled_ns <= adaptive_ns, (compiled_ns, adaptive_ns)
    assert np.array_equal(_bits(got[:64]), _bits(expected[:64]))
    torch.testing.assert_close(got[64:], expected[64:], equal_nan=True)


def test_multiple_results_and_cuts_between_compiled_runs():
    """cummax's (values, indices) and mode's between compiled runs: both eager cuts, no fallback, eager's results."""
    x = _randn((4, 513))

    def fn(a):
        values, indices = torch.cummax(a * 3, 0)
        mode = torch.mode(values - 1, 1)
        return values + 1, indices, mode.values, mode.indices

    fallbacks, _ = _stats()
    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    got = compiled(x.to("neuron"))
    assert _stats()[0] == fallbacks
    expected = fn(x.to("neuron"))
    for g, e in zip(got, expected):
        assert np.array_equal(_bits(g.cpu()), _bits(e.cpu()))


def test_a_compiled_run_costlier_than_its_eager_kernels_stays_eager():
    """gru_cell of the op spec sweep's case, its inputs requiring grad: its cell op is an eager cut, and the forward
    graph's two products (with the saved values' copy) cost more compiled than as eager mm kernels (13.43 us split
    against 11.53 for the call): the whole graph keeps running eagerly, as before the split, so the compiled call
    costs no more than eager (counted as the fallback it is)."""
    shapes = [(1, 1), (1, 130), (390, 1), (390, 130), (390,), (390,)]
    inputs = [_randn(s, i).requires_grad_() for i, s in enumerate(shapes)]  # a training graph, as the sweep's

    def fn(*t):
        return torch.gru_cell(*t)

    expected, eager_ns = eager_run(fn, *inputs)
    fallbacks = compiler.stats()["fallbacks"]
    got, compiled_ns, _ = compiled_run(fn, *inputs)
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)
    assert compiler.stats()["fallbacks"] == fallbacks + 1
    assert np.array_equal(_bits(got), _bits(expected))


def test_which_nodes_are_eager_cuts():
    """torch-mlir is asked per node: angle is refused and has a native kernel (an eager cut); add imports; a random
    op and a data-dependent output shape never qualify."""
    import torch.fx

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x.meta["val"] = torch.empty(3, 5, device="neuron")
        nodes = {}
        for name, op in (("angle", torch.ops.aten.angle.default), ("add", torch.ops.aten.add.Tensor),
                         ("bernoulli", torch.ops.aten.bernoulli.default), ("nonzero", torch.ops.aten.nonzero.default)):
            node = graph.call_function(op, (x, x) if name == "add" else (x,))
            node.meta["val"] = torch.empty(3, 5, device="neuron") if name != "nonzero" else \
                torch.empty(4, 2, dtype=torch.int64, device="neuron")
            nodes[name] = node
    assert not eager_cut.imports_alone(nodes["angle"]) and eager_cut.eager_kernel(nodes["angle"])
    assert eager_cut.imports_alone(nodes["add"])
    assert not eager_cut.eager_kernel(nodes["bernoulli"]) and not eager_cut.eager_kernel(nodes["nonzero"])


def test_a_factory_is_no_eager_cut():
    """The op spec sweep's bfloat16 ``empty_strided((5, 4), (1, 6)).fill_(1)`` (torch-mlir imports no empty_strided):
    not split (a compiled fill of the factory's result came out contiguous and was then copied into its strides,
    3.13 us against 1.13 eagerly, outside what the split's first call times), so compiled costs what eager does."""
    def fn():
        return torch.empty_strided((5, 4), (1, 6), dtype=torch.bfloat16, device="neuron").fill_(1)

    eager_ns, expected = warm_call_ns(fn)
    compiled_ns, got = warm_call_ns(torch.compile(fn, backend="neuron", dynamic=False))
    assert compiled_ns <= eager_ns, (compiled_ns, eager_ns)
    assert torch.equal(got.cpu(), expected.cpu())


def test_a_node_whose_result_is_no_tensor_is_not_known_to_import_and_leaves_the_graph_eager():
    """A higher-order op's node (a stream's control_deps) has no tensor meta: asking torch-mlir about it alone must
    answer "no" (the graph then falls back whole), not raise out of the backend (it raised TypeError)."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(4)
    node = graph.call_function(torch.ops.aten.angle.default, (x,))
    node.meta["val"] = None
    graph.output((node,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert not eager_cut.imports_alone(node)
    assert eager_cut.cuts(gm) == set()
