"""The upstream suite: PyTorch's own OpInfo database (``op_db``) run on the device against CPU.

For each OpInfo and dtype CPU supports: its sample inputs (and reference
inputs), run with the op on CPU and on the device with every tensor moved
there, outputs passed through the sample's ``output_process_fn_grad`` on
both sides and compared (harness.compare, default tolerances per dtype);
and its error inputs, where the device must raise what OpInfo says CPU
raises. Ops with nondeterministic output are skipped, as are the
``jiterator_*`` ops (CUDA-only source kernels). Sample generation is seeded
per (op, dtype), so a stored sample index reproduces the sample.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from harness import compare as cmp
from harness.cases import Case
from harness.env import environment
from harness.runner import Result
from harness.store import Store
from harness.values import TensorSpec, dtype_name

SKIP_PREFIXES = ("jiterator_",)
SEED = 0
# Ops whose values depend on a random stream (the device's generator is not CPU's), but which OpInfo
# does not flag as nondeterministic: compared by properties (structure, shapes, dtypes) only.
RANDOM_OPS = frozenset({
    "normal", "uniform", "bernoulli", "multinomial", "randint_like", "rand_like", "randn_like", "cauchy",
    "exponential", "geometric", "log_normal", "nn.functional.rrelu", "nn.functional.dropout",
    "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout", "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "svd_lowrank", "pca_lowrank", "randint",
})


def is_random(op, sample) -> bool:
    if op.name in RANDOM_OPS:
        return True
    return float(sample.kwargs.get("dropout_p", 0) or 0) > 0 or (
        op.name == "nn.functional.multi_head_attention_forward" and sample.kwargs.get("training", True)
        and float(sample.kwargs.get("dropout_p", 0) or 0) > 0)


def _properties(actual: Any, expected: Any, where: str = "output") -> cmp.Comparison:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape or actual.dtype != expected.dtype:
            return cmp.Comparison(False, f"{where}: {getattr(actual, 'dtype', type(actual))} "
                                         f"{tuple(getattr(actual, 'shape', ()))} vs CPU {expected.dtype} "
                                         f"{tuple(expected.shape)}")
        return cmp.Comparison(True, criterion="properties (random op)")
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)) or len(actual) != len(expected):
            return cmp.Comparison(False, f"{where}: structure differs")
        result = cmp.Comparison(True, criterion="properties (random op)")
        for i, (a, e) in enumerate(zip(actual, expected)):
            result = result.merge(_properties(a, e, f"{where}[{i}]"))
        return result
    return cmp.Comparison(True, criterion="properties (random op)")


@dataclass
class SweepCounts:
    ops: set = field(default_factory=set)
    samples: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    skipped_ops: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, verdict: str) -> None:
        self.verdicts[verdict] = self.verdicts.get(verdict, 0) + 1

    def pass_rate(self) -> float:
        judged = self.verdicts.get("pass", 0) + self.verdicts.get("fail", 0)
        return self.verdicts.get("pass", 0) / judged if judged else 0.0


def op_db() -> list:
    from torch.testing._internal.common_methods_invocations import op_db as db

    return db


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def skip_reason(op) -> str | None:
    if op.name.startswith(SKIP_PREFIXES):
        return "jiterator ops compile CUDA source at run time"
    if op.has_nondeterministic_output:
        return "nondeterministic output (has_nondeterministic_output)"
    return None


def _move(sample, device: str):
    return sample.transform(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t)


def _call(op, sample) -> Any:
    return op.op(sample.input, *sample.args, **sample.kwargs)


def _specs_of(sample) -> tuple[TensorSpec, ...]:
    tensors = [sample.input] + [a for a in sample.args] + list(sample.kwargs.values())
    flat = []
    for t in tensors:
        if isinstance(t, torch.Tensor):
            flat.append(TensorSpec(tuple(t.shape), dtype_name(t.dtype), "opinfo", "opinfo"))
        elif isinstance(t, (list, tuple)):
            flat += [TensorSpec(tuple(x.shape), dtype_name(x.dtype), "opinfo", "opinfo") for x in t
                     if isinstance(x, torch.Tensor)]
    return tuple(flat)


def _samples(op, dtype: torch.dtype, max_samples: int | None, reference: bool) -> Iterator[tuple[str, int, Any]]:
    torch.manual_seed(SEED)
    kinds = [("sample", op.sample_inputs)] + ([("reference", op.reference_inputs)] if reference else [])
    for kind, generator in kinds:
        torch.manual_seed(SEED)
        for i, sample in enumerate(generator("cpu", dtype)):
            if max_samples is not None and i >= max_samples:
                break
            yield kind, i, sample


def run_sample(op, sample, dtype: torch.dtype, device: str) -> cmp.Comparison:
    cpu_error = device_error = None
    expected = actual = None
    try:
        expected = sample.output_process_fn_grad(_call(op, sample))
    except Exception as e:  # noqa: BLE001 - error parity is a check
        cpu_error = e
    try:
        actual = sample.output_process_fn_grad(_call(op, _move(sample, device)))
    except Exception as e:  # noqa: BLE001
        device_error = e
    if cpu_error is not None and device_error is not None:
        return cmp.same_error(device_error, cpu_error)
    if cpu_error is not None:
        return cmp.Comparison(False, f"CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:200]}; the device "
                                     f"returned a result")
    if device_error is not None:
        if "to be on cpu" in str(device_error):
            # The sweep moves every tensor to the device; this op requires some on the host.
            return cmp.Comparison(True, criterion="skip: op requires host tensors the sweep moved")
        return cmp.Comparison(False, f"the device raised {type(device_error).__name__}: {str(device_error)[:300]}")
    if is_random(op, sample):
        return _properties(actual, expected)
    return cmp.compare(actual, expected)


def run_error_input(op, error_input, device: str) -> cmp.Comparison:
    sample = error_input.sample_input
    expected_type = error_input.error_type
    try:
        _call(op, _move(sample, device))
    except Exception as e:  # noqa: BLE001
        if isinstance(e, expected_type):
            return cmp.Comparison(True, criterion="error input")
        return cmp.Comparison(False, f"expected {expected_type.__name__}, the device raised {type(e).__name__}: "
                                     f"{str(e)[:200]}")
    return cmp.Comparison(False, f"expected {expected_type.__name__}; the device did not raise")


def _reproducer(op, dtype: torch.dtype, kind: str, index: int, device: str) -> str:
    generator = "sample_inputs" if kind == "sample" else "reference_inputs"
    return (
        "import torch\nimport device_impl  # registers the neuron device\n"
        "from torch.testing._internal.common_methods_invocations import op_db\n"
        "from harness.compare import compare\n\n"
        f"op = next(o for o in op_db if o.name == {op.name!r} and o.variant_test_name == {op.variant_test_name!r})\n"
        f"torch.manual_seed({SEED})\n"
        f"sample = list(op.{generator}('cpu', torch.{dtype_name(dtype)}))[{index}]\n"
        "expected = sample.output_process_fn_grad(op.op(sample.input, *sample.args, **sample.kwargs))\n"
        f"moved = sample.transform(lambda t: t.to({device!r}) if isinstance(t, torch.Tensor) else t)\n"
        "actual = sample.output_process_fn_grad(op.op(moved.input, *moved.args, **moved.kwargs))\n"
        "result = compare(actual, expected)\n"
        "assert result.ok, result.message\n"
        "print('reproducer passed')\n"
    )


def sweep(dtypes: list[torch.dtype], names: list[str] | None = None, device: str = "neuron",
          max_samples: int | None = None, reference: bool = True, errors: bool = True, store: Store | None = None,
          run_id: int | None = None, progress: bool = True) -> SweepCounts:
    counts = SweepCounts()
    started = time.perf_counter()
    ops = [op for op in op_db() if not names or op.name in names or full_name(op) in names]
    warnings.filterwarnings("ignore")
    for n, op in enumerate(ops):
        if progress:
            sys.stderr.write(f"\r[{n + 1}/{len(ops)}] {full_name(op)[:40]:40s} samples={counts.samples}")
            sys.stderr.flush()
        reason = skip_reason(op)
        if reason:
            counts.skipped_ops[full_name(op)] = reason
            continue
        counts.ops.add(full_name(op))
        for dtype in dtypes:
            if not op.supports_dtype(dtype, "cpu"):
                continue
            try:
                samples = list(_samples(op, dtype, max_samples, reference))
            except Exception as e:  # noqa: BLE001 - an OpInfo that cannot build samples here is reported
                counts.skipped_ops[f"{full_name(op)} [{dtype_name(dtype)}]"] = f"sample generation failed: {e}"
                continue
            for kind, index, sample in samples:
                t0 = time.perf_counter()
                comparison = run_sample(op, sample, dtype, device)
                _record(store, run_id, op, dtype, kind, index, sample, comparison, time.perf_counter() - t0,
                        device, counts)
        if errors:
            try:
                error_inputs = list(op.error_inputs("cpu"))
            except Exception:  # noqa: BLE001
                error_inputs = []
            for index, error_input in enumerate(error_inputs[:max_samples] if max_samples else error_inputs):
                comparison = run_error_input(op, error_input, device)
                _record(store, run_id, op, torch.float32, "error", index, error_input.sample_input, comparison, 0.0,
                        device, counts)
        if store is not None:
            store.commit()
    counts.seconds = time.perf_counter() - started
    if progress:
        sys.stderr.write("\n")
    return counts


def _record(store, run_id, op, dtype, kind, index, sample, comparison: cmp.Comparison, seconds: float, device: str,
            counts: SweepCounts) -> None:
    verdict = "skip" if comparison.criterion.startswith("skip") else "pass" if comparison.ok else "fail"
    counts.samples += 1
    counts.add(verdict)
    if store is None:
        return
    case = Case(full_name(op), dtype_name(dtype), _specs_of(sample), {"kind": kind, "index": index}, "eager", device,
                source="opinfo")
    result = Result(case, verdict, comparison.message, comparison, device_ms=seconds * 1e3,
                    expression=f"{op.name}({kind} #{index})")
    if verdict == "fail" and kind != "error":
        result.reproducer = _reproducer(op, dtype, kind, index, device)
    store.add(run_id, result, "opinfo")


def main(args: argparse.Namespace) -> int:
    dtypes = [getattr(torch, d) for d in args.dtypes]
    store = Store(args.results)
    run_id = store.start_run("opinfo", environment(args.device), ",".join(args.dtypes))
    counts = sweep(dtypes, args.ops, args.device, args.max_samples, store=store, run_id=run_id)
    store.finish_run(run_id)
    store.close()
    print(f"OpInfo sweep run {run_id} on {args.device} ({', '.join(args.dtypes)}): {len(counts.ops)} ops, "
          f"{counts.samples} samples in {counts.seconds:.0f}s: " +
          ", ".join(f"{v} {k}" for k, v in sorted(counts.verdicts.items())) +
          f"; pass rate {counts.pass_rate():.1%}; {len(counts.skipped_ops)} skipped")
    return 0
