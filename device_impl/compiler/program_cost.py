"""A graph's modelled device time at compile time: built as the neuron backend builds it, run once on a private core.

``cheaper.whole_is_cheaper`` compares an op cut whole with its decomposition by these figures. Nothing here touches
the device, its clock or the compile caches: the program is built from the FX graph directly (legalized, its opaque
ops cut and spliced back, no cache, no counters) and its steps run at the instruction level on zero-filled host
arrays, as ``executor.record_schedule`` runs a new program.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import numpy as np
import torch
import torch.fx


def program_ns(gm: torch.fx.GraphModule) -> float:
    """The modelled device time (ns, launch overhead excluded) of ``gm`` compiled as the neuron backend compiles a
    graph (legalized, its opaque ops cut and spliced back), run once on zero-filled host arrays on a private core."""
    from device_impl.compiler import build, importer, legalize, opaque
    from device_impl.compiler.executor import Env, Executable
    from device_impl.compiler.replay import HostScratch
    from device_impl.engine.core import NeuronCore
    from device_impl.engine.dtypes import TORCH_TO_NUMPY

    work = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    legalize.legalize(work)
    legalize.drop_none_outputs(work)
    n_inputs = sum(1 for n in work.graph.nodes if n.op == "placeholder")
    own = work.graph.output_node().args[0]
    n_outputs = len(own) if isinstance(own, (tuple, list)) else 1
    cuts = opaque.cut(work)
    imported = opaque.splice(importer.read_module(importer.to_stablehlo(work)), cuts, n_inputs, n_outputs)
    program = build.build(imported, "cheaper", weights=frozenset())
    program.memory["arena"] = "hbm"
    executable = Executable(program, 0)
    inputs = [np.zeros(shape, dtype=TORCH_TO_NUMPY[dtype]) for shape, dtype in executable.input_specs]
    outputs = [np.zeros(shape, dtype=TORCH_TO_NUMPY[dtype]) for shape, dtype in executable.output_specs]
    constants = {vid: np.ascontiguousarray(array) for vid, array in program.constants.items()}
    constants.update(executable.layouts.zeros(program.types))
    arena = np.zeros(executable.scratch_bytes, dtype=np.uint8)
    core = NeuronCore()
    core.reset(False)
    env = Env(program, executable.arrays(inputs, outputs, constants, arena), outputs, None, ())
    env._scratch = HostScratch()
    with np.errstate(all="ignore"):
        executable.run_steps(core, env)
    return float(core.timeline.end)


def _neuron_like(meta: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(meta.shape), tuple(meta.stride()), dtype=meta.dtype, device="neuron")


def traced_ns(fn: Callable[..., Any], metas: list[torch.Tensor], decompositions: dict) -> float:
    """``program_ns`` of ``fn`` traced (fake tensors shaped as ``metas``) as the neuron backend traces a graph:
    ``decompositions`` (its table), its traced forms, the ops' Python kernels."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from device_impl.compiler.numerics import traced_forms

    from torch._dispatch.python import enable_python_dispatcher

    with traced_forms(), enable_python_dispatcher():  # as AOTAutograd traces: the ops' Python kernels run
        gm = make_fx(fn, decomposition_table=decompositions, tracing_mode="fake")(
            *[_neuron_like(m) for m in metas])
    return program_ns(gm)
