"""How the device serves PyTorch's core ATen opset, and every overload it has seen.

``python -m device_impl.coverage`` prints, for each core-tagged overload of
the installed torch (``torch.Tag.core``), its tier on neuron:

* ``native``: a device kernel (engine tile program or C++ metadata kernel),
  registered for the overload itself or reached through PyTorch's own
  composite kernel of it (``add.Tensor`` -> ``add.out``);
* ``fallback``: the counted CPU fallback;
* for overloads PyTorch decomposes before any backend sees them, the tier is
  *measured*: a probe call runs on neuron and the tier is native only if no
  op of the decomposition fell back.

``--json`` prints the same as JSON; ``--seen`` adds every overload called in
this process (from ``device_impl.dispatch.stats()``).
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any, Callable

import torch

import device_impl
from device_impl import dispatch
from device_impl.dispatch import counters
from device_impl.dispatch import Tier

device_impl.register()


def core_overloads() -> list[str]:
    """Every overload of the installed torch tagged ``core``, as 'aten::name.overload'."""
    names = set()
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        packet = getattr(torch.ops.aten, schema.name[6:], None)
        if packet is None:
            continue
        try:
            overload = getattr(packet, schema.overload_name or "default")
        except AttributeError:
            continue
        if torch.Tag.core in overload.tags:
            names.add(f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name)
    return sorted(names)


def _t(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype).to("neuron")


# Probe calls for overloads PyTorch decomposes above the backend (CompositeImplicitAutograd):
# the tier is what the decomposition actually reaches on the device. Each entry is
# (inputs, call): inputs are built before the counters are reset, so only the call is measured.
PROBES: dict[str, tuple[Callable[[], tuple], Callable[..., Any]]] = {
    "aten::adaptive_avg_pool1d": (lambda: (_t(1, 2, 8),), lambda x: torch.ops.aten.adaptive_avg_pool1d(x, [4])),
    "aten::avg_pool1d": (lambda: (_t(1, 2, 8),), lambda x: torch.ops.aten.avg_pool1d(x, [2])),
    "aten::sym_is_contiguous": (lambda: (_t(2, 3),), lambda x: torch.ops.aten.sym_is_contiguous(x)),
    "aten::sym_numel": (lambda: (_t(2, 3),), lambda x: torch.ops.aten.sym_numel(x)),
    "aten::sym_size.int": (lambda: (_t(2, 3),), lambda x: torch.ops.aten.sym_size.int(x, 1)),
    "aten::sym_storage_offset": (lambda: (_t(2, 3),), lambda x: torch.ops.aten.sym_storage_offset(x)),
    "aten::sym_stride.int": (lambda: (_t(2, 3),), lambda x: torch.ops.aten.sym_stride.int(x, 0)),
    "aten::upsample_bilinear2d.vec": (lambda: (_t(1, 1, 4, 4),),
                                      lambda x: torch.ops.aten.upsample_bilinear2d.vec(x, None, False, [2.0, 2.0])),
    "aten::upsample_nearest2d.vec": (lambda: (_t(1, 1, 4, 4),),
                                     lambda x: torch.ops.aten.upsample_nearest2d.vec(x, None, [2.0, 2.0])),
    "aten::var.dim": (lambda: (_t(3, 4),), lambda x: torch.ops.aten.var.dim(x, [1])),
}


def _probe(op: str) -> dict[str, Any]:
    probe = PROBES.get(op)
    if probe is None:
        return {"tier": Tier.COMPOSITE.value, "source": "torch composite (no probe)", "reaches": []}
    make_inputs, call = probe
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            inputs = make_inputs()
            dispatch.reset_stats()
            call(*inputs)
    except Exception as e:  # noqa: BLE001 - a failing probe is reported, not hidden
        return {"tier": "error", "source": f"probe raised {type(e).__name__}: {e}", "reaches": []}
    stats = dispatch.stats()
    reached = sorted(stats)
    fell_back = [op_ for op_, c in stats.items() if c["fallback"]]
    tier = Tier.FALLBACK.value if fell_back else Tier.NATIVE.value
    via = ", ".join(reached) if reached else "C++ TensorImpl metadata (no backend op)"
    return {"tier": tier, "source": f"torch decomposition -> {via}", "reaches": reached}


def classify(op: str) -> dict[str, Any]:
    lowering = dispatch.TABLE.lookup(op)
    if lowering.tier is Tier.COMPOSITE:
        return _probe(op)
    return {"tier": lowering.tier.value, "source": lowering.source}


def report(include_seen: bool = False) -> dict[str, Any]:
    """The coverage report. Probes run ops on the device; the caller's counters are restored after."""
    seen_before = dispatch.stats()
    saved = {op: list(slots) for op, slots in counters._counts.items()}
    try:
        core = {op: classify(op) for op in core_overloads()}
    finally:
        counters._counts.clear()
        counters._counts.update(saved)
    counts: dict[str, int] = {}
    for entry in core.values():
        counts[entry["tier"]] = counts.get(entry["tier"], 0) + 1
    result: dict[str, Any] = {
        "torch": torch.__version__,
        "core": core,
        "summary": {"core_overloads": len(core), **counts},
    }
    if include_seen:
        result["seen"] = {op: {**classify(op), "calls": c} for op, c in sorted(seen_before.items())}
    return result


def _print(result: dict[str, Any]) -> None:
    summary = result["summary"]
    print(f"torch {result['torch']}: {summary['core_overloads']} core ATen overloads")
    for tier in ("native", "fallback", "composite", "error"):
        if tier in summary:
            print(f"  {tier:9s} {summary[tier]}")
    for op, entry in result["core"].items():
        print(f"{op:48s} {entry['tier']:9s} {entry['source']}")
    if "seen" in result:
        print("\noverloads seen in this process:")
        for op, entry in result["seen"].items():
            print(f"{op:48s} {entry['tier']:9s} calls={entry['calls']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m device_impl.coverage", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--seen", action="store_true", help="include overloads called in this process")
    args = parser.parse_args(argv)
    result = report(include_seen=args.seen)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
