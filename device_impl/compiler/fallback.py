"""Graph fallback: an AOT graph the compiler cannot lower runs eagerly on neuron, op by op.

Never silently: each fallback is counted (``stats()['fallbacks_by_op']``) and
warned once per op; ``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1`` turns it
into FallbackDisabledError naming the op. The graph that runs is AOT's own
(decomposed, functional) FX graph, so every aten op in it goes through the
neuron dispatch table: native kernels where they exist, the counted CPU
fallback where they do not.

The graph runs in adaptive eager mode (``device_impl.eager``), flushed when it returns: its ops queue and fuse
as adaptive eager runs the same calls (issue 21: a graph the compiler runs eagerly must not lose to the eager
modes, and over the op-spec sweep adaptive's device time is never above plain eager's). ``(x + y) * 2`` beside a
bitcast the compiler cannot lower took a launch per op, 2.64 us, where adaptive fuses them into one, 1.47 us; the
sweep's bernoulli_tensor 6.40 -> 4.37 us, normal_float_tensor 6.31 -> 3.96 us. Bits are the kernels' own in
either mode. The switch is the calling thread's alone (``eager.mode.thread_eager_mode``): a second Python thread
running eager ops meanwhile keeps its own mode (the process-wide switch queued its ops behind the graph).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from device_impl.compiler import counters
from device_impl.compiler.errors import FallbackDisabledError
from device_impl.eager import mode as eager_mode
from device_impl.runtime.config import CompilerConfig

_WARNED: set[str] = set()


def eager(gm: torch.fx.GraphModule, error: Exception, graph: str, config: CompilerConfig) -> Callable[[list], Any]:
    _announce(error, graph, config)

    def run(args: list) -> Any:
        with eager_mode.thread_eager_mode("adaptive"):
            outputs = gm(*args)
        return list(outputs) if isinstance(outputs, (tuple, list)) else [outputs]

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def dynamo_graph(gm: torch.fx.GraphModule, error: Exception, graph: str, config: CompilerConfig
                 ) -> Callable[..., Any]:
    """Dynamo's own graph, run eagerly on neuron before AOTAutograd sees it: for graphs whose meaning
    AOTAutograd's functionalisation changes (``backend.overlapping_written``), so that even the eager run of
    its functional graph would differ. Counted and warned as ``eager``; Dynamo calls it with the inputs spread.
    Queued and fused in adaptive mode, as ``eager``'s graphs."""
    _announce(error, graph, config)

    def run(*args: Any) -> Any:
        with eager_mode.thread_eager_mode("adaptive"):
            return gm(*args)

    return run


def _announce(error: Exception, graph: str, config: CompilerConfig) -> None:
    """Count and warn (once per op) a graph that runs eagerly, or raise where fallback is disabled."""
    op = getattr(error, "op", type(error).__name__)
    if not config.fallback:
        raise FallbackDisabledError(
            f"neuron compiler cannot compile graph {graph}: {error}. Eager fallback is disabled "
            f"(TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1); unset it to run this graph eagerly on neuron, or "
            f"rewrite the model to avoid '{op}'.")
    counters.fallback(op)
    if op not in _WARNED:
        _WARNED.add(op)
        warnings.warn(f"torch.compile(backend='neuron'): '{op}' cannot be compiled ({error}); graph {graph} runs "
                      f"eagerly on neuron instead (TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=1 makes this an error)",
                      RuntimeWarning, stacklevel=4)
