"""The modelled device time of one call compiled alone, cut whole or decomposed: what ``costed.cut_wins`` compares.

``call_ns`` traces the call by itself into an AOT-style FX graph (fake tensors of the call's shapes, strides and
dtypes on the neuron device; the backend's decomposition table), with the op's own decision forced
(``costed.forcing``), builds it as ``driver.compile_graph`` builds a graph (legalize, ``opaque.cut``, the torch-mlir
import, ``opaque.splice``, ``build``; no cache, no counters) and runs the program once at the instruction level on
zero-filled host arrays, as ``executor.record_schedule`` does (data-dependent steps too: zero indices pick row 0; the
cost of these programs follows from the shapes): the launch's end. ``backend`` installs it into ``costed`` when it
loads, with its decomposition table and settings (``install``; this module does not import ``backend``, which
imports it).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import threading
from typing import Any, Callable

import numpy as np
import torch
import torch.fx

from device_impl.compiler import build, cache, conv_padding, costed, driver, importer, legalize, neff, opaque, replay
from device_impl.compiler.executor import Env, Executable
from device_impl.engine.core import NeuronCore
from device_impl.runtime.config import CompilerConfig

# backend's decomposition table and settings (``install``)
_BACKEND: dict[str, Callable[[], Any]] = {}


def call_graph(op: Any, args: tuple, kwargs: dict) -> torch.fx.GraphModule:
    """The call alone as an AOT-style FX graph: its tensors placeholders, the backend's decompositions applied."""
    from torch._dispatch.python import enable_python_dispatcher
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from device_impl.compiler.numerics import traced_forms

    flat, spec = torch.utils._pytree.tree_flatten((tuple(args), dict(kwargs)))
    positions = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)]

    def call(*tensors: torch.Tensor) -> Any:
        values = list(flat)
        for i, t in zip(positions, tensors):
            values[i] = t
        a, k = torch.utils._pytree.tree_unflatten(values, spec)
        return op(*a, **k)

    with FakeTensorMode():
        inputs = [torch.empty_strided(tuple(flat[i].shape), tuple(flat[i].stride()), dtype=flat[i].dtype,
                                      device="neuron") for i in positions]
    # traced as the backend traces a graph: numerics' traced forms (an op's Python kernels swapped, e.g.
    # opaque_resample's upsample kernels, which ask this costing) run, as under AOTAutograd
    with traced_forms(), enable_python_dispatcher():
        gm = make_fx(call, decomposition_table=_BACKEND["decompositions"](), tracing_mode="fake")(*inputs)
    gm.graph.eliminate_dead_code()  # unread results' getitems, which AOTAutograd's graphs do not keep either
    gm.recompile()
    return gm


def call_ns(op: Any, args: tuple, kwargs: dict, cut: bool) -> float:
    """The modelled device time (the launch's end, ns) of the call's one-op program, cut whole or decomposed.

    Built on a thread of its own: a costing asked from a decomposition or an op's Python kernel runs inside
    AOTAutograd's trace, whose functionalization, fake, proxy and tracing-context state are the calling thread's
    (Dynamo's fake mode would make the sizes symbolic, its proxy mode record the costing's own ops, and torch-mlir
    would meet FunctionalTensor values); a new thread starts with none of them."""
    result: list = []

    def build() -> None:
        try:
            with costed.forcing(op, cut):
                result.append(program_ns(call_graph(op, args, kwargs)))
        except BaseException as error:  # noqa: BLE001 - re-raised on the caller's thread
            result.append(error)

    worker = threading.Thread(target=build, name="neuron-costing")
    worker.start()
    worker.join()
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def program_ns(gm: torch.fx.GraphModule) -> float:
    """``gm`` built as ``driver.compile_graph`` builds it, run once on zeros (``zero_run_ns``)."""
    work = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    legalize.legalize(work)
    legalize.drop_none_outputs(work)
    n_inputs = sum(1 for n in work.graph.nodes if n.op == "placeholder")
    out = work.graph.output_node().args[0]
    n_outputs = len(out) if isinstance(out, (tuple, list)) else 1
    cuts = opaque.cut(work)
    padded = conv_padding.decide(work)
    module = importer.to_stablehlo(work)
    imported = opaque.splice(importer.read_module(module), cuts, n_inputs, n_outputs)
    return zero_run_ns(build.build(imported, "costed", conv_padding=padded))


def zero_run_ns(program: Any) -> float:
    """The launch end of one instruction-level run of ``program`` on zero-filled host arrays, its scratch arena in
    HBM (``executor.record_schedule``'s run, data-dependent steps included)."""
    program.memory["arena"] = "hbm"
    executable = Executable(program, 0)
    inputs, outputs, constants = executable.zero_arrays()
    core = NeuronCore()
    core.reset(False)
    arena = np.zeros(executable.scratch_bytes, dtype=np.uint8)
    env = Env(program, executable.arrays(inputs, outputs, constants, arena), outputs, None, ())
    env._scratch = replay.HostScratch()
    with np.errstate(all="ignore"):
        executable.run_steps(core, env)
    return float(core.timeline.end)


def _path(key: tuple) -> str | None:
    """Where the compile cache keeps a costing's answer (under the compiler version: a change to the code that
    models either form is a new version), or None when the cache is off."""
    config: CompilerConfig = _BACKEND["settings"]()
    if not config.neff_cache:
        return None
    digest = hashlib.sha256(repr((key, sorted(driver.flags().items()))).encode()).hexdigest()
    return os.path.join(config.neff_cache_dir, neff.COMPILER_VERSION.replace(" ", "-"), "costed", digest[:2],
                        f"{digest}.json")


def load(key: tuple) -> bool | None:
    """The answer a costing in an earlier process stored for ``key``, or None."""
    path = _path(key)
    if path is None:
        return None
    try:
        with open(path, encoding="ascii") as handle:
            answer = json.load(handle)
    except (OSError, ValueError):
        return None
    return answer.get("cut") if isinstance(answer, dict) and isinstance(answer.get("cut"), bool) else None


def store(key: tuple, cut: bool) -> None:
    path = _path(key)
    if path is not None:
        cache._write(path, json.dumps({"cut": cut}).encode("ascii"), "a costing's answer")


def install(decompositions: Callable[[], dict], settings: Callable[[], CompilerConfig]) -> None:
    """Make ``costed.cut_wins`` cost calls with these (``backend``'s AOTAutograd table and compiler settings)."""
    _BACKEND.update(decompositions=decompositions, settings=settings)
    costed.install(costed.Coster(call_ns, load, store))
