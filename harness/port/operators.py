"""Operator dependence: every op one forward executes on the device, and how the device serves it.

One eager forward runs on the device under a TorchDispatchMode that sees each
op as the model calls it (after autograd, before the backend: ``aten::mm``,
``aten::_softmax``, a custom ``mylib::rope``). Each op gets a tier:

=============  ==================================================================
native         a device kernel (the lowering table's native tier)
decomposed     rewritten into native ops, by the device (``torch._decomp``) or by
               PyTorch itself (composite ops; a custom op written in torch)
fallback       the explicit CPU fallback: copied to the host, run there, copied back
unsupported    raises on the device even with the fallback, while the CPU runs it
               (the forward continues on the CPU for that op, so every op is listed)
=============  ==================================================================

Tiers come from ``torch.<device>.lowering(op)`` and are confirmed by the
device's per-op counters (``dispatch_stats``): an op the counters saw on the CPU
fallback is ``fallback`` whatever the table says. Ops outside the ``aten`` and
``prim`` namespaces are listed as custom, by name; a custom op is listed once,
as the model calls it (the ops inside its body run with the mode off and are
not listed again). Counts are per forward.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from harness.port.device import NOT_AVAILABLE, DeviceProbe

TIERS = ("native", "decomposed", "fallback", "unsupported")
# lowering-table tier -> the answer's tier
_TABLE_TIERS = {"native": "native", "decomposed": "decomposed", "composite": "decomposed", "fallback": "fallback"}
_ERRORS = (NotImplementedError, RuntimeError, TypeError, ValueError)


class _Recorder(TorchDispatchMode):
    """Counts each op; an op that raises on the device is run on the CPU instead and remembered."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device = device
        self.calls: Counter[str] = Counter()
        self.failures: dict[str, str] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.name()
        self.calls[name] += 1
        try:
            return func(*args, **kwargs)
        except _ERRORS as error:
            on_host = tree_map(lambda v: v.cpu() if isinstance(v, torch.Tensor) else v, (args, kwargs))
            try:
                result = func(*on_host[0], **on_host[1])
            except Exception:
                raise error from None  # the CPU refuses too: a model bug, not a port problem
            self.failures.setdefault(name, f"{type(error).__name__}: {str(error).splitlines()[0][:300]}")
            return tree_map(lambda v: v.to(self.device) if isinstance(v, torch.Tensor) else v, result)


def _namespace(op: str) -> str:
    return op.split("::", 1)[0] if "::" in op else "aten"


def dependence(model: torch.nn.Module, inputs: Mapping[str, torch.Tensor], device: str | torch.device,
               probe: DeviceProbe | None = None) -> dict[str, Any]:
    """Run one eager forward of ``model`` (already on ``device``) on ``inputs``; list the ops with tiers."""
    device = torch.device(device)
    probe = probe or DeviceProbe(device)
    on_device = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    probe.reset_dispatch_stats()
    recorder = _Recorder(device)
    with torch.no_grad(), recorder:
        model(**on_device)
    probe.synchronize()
    served = probe.dispatch_stats() or {}
    fell_back = {op for op, tiers in served.items() if tiers.get("fallback", 0)}
    ops = []
    for op, count in sorted(recorder.calls.items()):
        namespace = _namespace(op)
        entry: dict[str, Any] = {"op": op, "count": count, "custom": namespace not in ("aten", "prim"),
                                 "namespace": namespace}
        lowering = probe.lowering(op)
        if op in recorder.failures:
            entry.update(tier="unsupported", via="raises on the device; the CPU runs it",
                         error=recorder.failures[op])
        elif op in fell_back:
            entry.update(tier="fallback", via="CPU fallback (counted by the device)")
        elif lowering is None:
            entry.update(tier="unknown", via=NOT_AVAILABLE)
        else:
            table_tier = str(lowering.get("tier", "unknown"))
            entry.update(tier=_TABLE_TIERS.get(table_tier, table_tier), via=f"{table_tier}: {lowering.get('source')}")
        ops.append(entry)
    by_tier = {tier: sum(1 for e in ops if e["tier"] == tier) for tier in TIERS}
    calls_by_tier = {tier: sum(e["count"] for e in ops if e["tier"] == tier) for tier in TIERS}
    if any(e["tier"] == "unknown" for e in ops):
        by_tier["unknown"] = sum(1 for e in ops if e["tier"] == "unknown")
    device_calls = {tier: sum(t.get(tier, 0) for t in served.values()) for tier in ("native", "decomposed",
                                                                                   "fallback")} if served else None
    return {
        "ops": ops,
        "distinct_ops": len(ops),
        "calls_per_forward": sum(recorder.calls.values()),
        "by_tier": by_tier,
        "calls_by_tier": calls_by_tier,
        "custom": [e["op"] for e in ops if e["custom"]],
        "fallback": [e["op"] for e in ops if e["tier"] == "fallback"],
        "unsupported": [e["op"] for e in ops if e["tier"] == "unsupported"],
        # the backend's own view: kernel calls by tier, including ops inside decompositions and out= variants
        "device_calls_by_tier": device_calls if device_calls is not None else NOT_AVAILABLE,
        "tiers_from": "torch.{0}.lowering + torch.{0}.dispatch_stats".format(device.type)
        if probe.available("lowering") else NOT_AVAILABLE,
    }
