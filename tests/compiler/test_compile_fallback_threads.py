"""A graph the compiler runs eagerly switches its own thread to adaptive eager, not the process.

compiler.fallback runs such graphs in adaptive mode so their ops fuse; the switch was process-wide, so a second
Python thread running eager ops meanwhile had them queued behind the graph (and its copies routed through the
queue). It is the calling thread's alone (eager.mode.thread_eager_mode).
"""

from __future__ import annotations

import threading
import warnings

import torch

from device_impl import eager
from device_impl.compiler import fallback
from device_impl.eager.queue import QUEUE
from device_impl.runtime.config import CompilerConfig


def _pausing_graph(pause) -> torch.fx.GraphModule:
    """``pause(x) + pause(x)`` as an AOT graph the compiler would run eagerly."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    p = graph.call_function(pause, (x,))
    graph.output((graph.call_function(torch.ops.aten.add.Tensor, (p, p)),))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_a_graph_run_eagerly_leaves_another_threads_ops_unqueued(tmp_path):
    """While one thread runs a fallback graph (paused inside it), another thread's eager add and clone run at the
    call: its mode stays eager and nothing of it is queued. Failed before: the other thread read 'adaptive' and its
    add and clone were queued behind the graph (2 steps)."""
    assert eager.get_eager_mode() == "eager"
    inside, resume = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def pause(x):
        seen["graph mode"] = eager.get_eager_mode()
        inside.set()
        resume.wait()
        return x

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the fallback's own warning
        run = fallback.eager(_pausing_graph(pause), RuntimeError("test graph"), "g_threads",
                             CompilerConfig(neff_cache_dir=str(tmp_path)))
    x = torch.arange(6.0).to("neuron")

    def graph_thread():
        try:
            seen["graph out"] = run([x])[0].cpu()
        finally:
            inside.set()  # never leave the main thread waiting

    worker = threading.Thread(target=graph_thread)
    worker.start()
    try:
        inside.wait()
        b = torch.ones(4).to("neuron")
        queued = len(QUEUE.steps)
        mode = eager.get_eager_mode()
        y = b + 1
        c = y.clone()
        queued_after = len(QUEUE.steps)
    finally:
        resume.set()
        worker.join()
    assert queued_after == queued, f"{queued_after - queued} of the other thread's ops were queued"
    assert seen["graph mode"] == "adaptive"
    assert mode == "eager"
    assert torch.equal(c.cpu(), torch.full((4,), 2.0))
    assert torch.equal(seen["graph out"], torch.arange(6.0) * 2)
    assert eager.get_eager_mode() == "eager" and not QUEUE.steps


def test_a_thread_mode_block_restores_the_process_mode():
    """Inside the process-wide adaptive mode, a thread's adaptive block changes nothing on exit (its queued work
    stays queued, as before); a thread's eager block runs its ops at the call and leaves adaptive on afterwards."""
    with eager.eager_mode("adaptive"):
        with eager.mode.thread_eager_mode("adaptive"):
            assert eager.get_eager_mode() == "adaptive"
        assert eager.get_eager_mode() == "adaptive"
        a = torch.ones(3).to("neuron")
        with eager.mode.thread_eager_mode("eager"):
            assert eager.get_eager_mode() == "eager"
            before = len(QUEUE.steps)
            b = a + 1
            assert len(QUEUE.steps) == before
        assert eager.get_eager_mode() == "adaptive"
        assert torch.equal((b * 2).cpu(), torch.full((3,), 4.0))
    assert eager.get_eager_mode() == "eager"
