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
import re
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from harness import compare as cmp
from harness import modes
from harness.cases import Case
from harness.env import environment
from harness.runner import Result, _reset_stats, _stats
from harness.shards import Shard
from harness.store import Store
from harness.xfails import XFails
from harness.values import TensorSpec, dtype_name

# an op refusing a tensor it wants on the host (tensor_split's indices), which the sweep moved to the device
_HOST_ONLY = re.compile(r"\b(to|must) be on cpu\b", re.IGNORECASE)

SKIP_PREFIXES = ("jiterator_",)
SEED = 0
# Ops whose values depend on a random stream (the device's generator is not CPU's), but which OpInfo
# does not flag as nondeterministic: compared by properties (structure, shapes, dtypes) only.
RANDOM_OPS = frozenset({
    "normal", "uniform", "bernoulli", "multinomial", "randint_like", "rand_like", "randn_like", "cauchy",
    "exponential", "geometric", "log_normal", "nn.functional.rrelu", "nn.functional.dropout",
    "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
    "nn.functional.feature_alpha_dropout", "nn.functional.fractional_max_pool2d",
    "nn.functional.fractional_max_pool3d", "svd_lowrank", "pca_lowrank", "randint", "randn",
})


def is_random(op, sample) -> bool:
    if op.name in RANDOM_OPS:
        return True
    dropout = sample.kwargs.get("dropout_p", 0)
    if op.name == "nn.functional.multi_head_attention_forward":
        # F.multi_head_attention_forward takes dropout_p as its 10th positional argument
        dropout = sample.args[9] if len(sample.args) > 9 else dropout
        return bool(sample.kwargs.get("training", True)) and float(dropout or 0) > 0
    return float(dropout or 0) > 0


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
    """PyTorch's OpInfo database. It is internal API: a torch that moved or broke it gets an error
    naming the version, not a bare ImportError deep in a sweep. Importing it loads PyTorch's own
    Hypothesis profile (torch.testing._internal.common_utils: "dev", 10 random examples); the caller's
    profile is put back, so the op suite's derandomized draws do not change after the first OpInfo."""
    from hypothesis import settings

    profile = settings.get_current_profile_name()
    try:
        from torch.testing._internal.common_methods_invocations import op_db as db
    except Exception as e:  # noqa: BLE001 - ImportError, or an internal module failing at import
        raise ImportError(
            f"torch {torch.__version__}: torch.testing._internal.common_methods_invocations.op_db is not importable "
            f"({type(e).__name__}: {e}). The OpInfo sweep needs PyTorch's internal test database (and the "
            f"'expecttest' package); this torch moved or changed it — run `python -m harness compat` to see what "
            f"else changed, or skip the sweep.") from e
    finally:
        if settings.get_current_profile_name() != profile:
            settings.load_profile(profile)
    return db


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def skip_reason(op) -> str | None:
    if op.name.startswith(SKIP_PREFIXES):
        return "jiterator ops compile CUDA source at run time"
    if op.has_nondeterministic_output:
        return "nondeterministic output (has_nondeterministic_output)"
    return None


def to_device(t: Any, device: str, moved: dict | None = None) -> Any:
    """``t`` on ``device`` with the same sizes, strides and storage offset: the whole storage moves and
    the view is rebuilt on it, so views (sliced, expanded, as_strided on a larger storage, an out=
    tensor with stride 0) reach the device as they reach CPU. ``Tensor.to`` would copy only the
    view's elements into a fresh, dense storage, and an op that reads the storage around a view,
    or an error that depends on the layout, would then differ for reasons of the harness's making.

    ``moved`` (one per sample) keeps aliasing between a sample's tensors: a storage moves once and
    the same tensor object maps to the same device tensor, so ``out=`` that is (or overlaps) an
    input on CPU is so on the device too, and aliasing errors can be compared at all."""
    if not isinstance(t, torch.Tensor):
        return t
    if moved is None:
        moved = {}
    if id(t) in moved:
        return moved[id(t)][1]
    if t.device.type == "meta":  # an error input's deliberately misplaced tensor (gradient's spacing): kept
        return t
    if t.layout != torch.strided or t.device.type != "cpu" or t.is_conj() or t.is_neg():
        result = t.to(device)
    else:
        storage = t.untyped_storage()
        key = ("storage", storage.data_ptr(), storage.nbytes())
        if key not in moved:
            host_bytes = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
            moved[key] = (storage, host_bytes.to(device))
        device_bytes = moved[key][1]
        result = torch.empty(0, dtype=t.dtype, device=device).set_(
            device_bytes.untyped_storage(), t.storage_offset(), t.shape, t.stride())
        if t.requires_grad:
            result.requires_grad_()
    moved[id(t)] = (t, result)  # t is kept so its id is not reused while the memo lives
    return result


def _move(sample, device: str, name_device: bool = True):
    """The sample with its tensors on ``device``. A factory's ``device=`` argument names the device
    too, and (``name_device``) a sample with no tensor at all (a factory called without ``device=``,
    add(2, 3.5)) gets one: otherwise both sides would run on the host and compare CPU with CPU."""
    memo: dict = {}
    moved = sample.transform(lambda t: to_device(t, device, memo))
    if "device" in moved.kwargs or (name_device and not _has_tensor(sample)):
        moved.kwargs = {**moved.kwargs, "device": device}
    return moved


def _has_tensor(sample) -> bool:
    from torch.utils._pytree import tree_leaves

    return any(isinstance(x, torch.Tensor) for x in tree_leaves([sample.input, list(sample.args),
                                                                  dict(sample.kwargs)]))


def _call(op, sample) -> Any:
    return op.op(sample.input, *sample.args, **sample.kwargs)


def _widen(t: Any) -> Any:
    if isinstance(t, torch.Tensor) and t.is_floating_point():
        return t.detach().double()
    if isinstance(t, torch.Tensor) and t.is_complex():
        return t.detach().to(torch.complex128)
    return t


def _fp64_reference(op, sample) -> Any:
    """The op on CPU in float64 (None if it cannot run there): the float64-reference criterion lets
    a result through whose error is no more than 3x CPU's own, as reductions, matmuls and
    convolutions accumulate in a different order on the device (harness.compare)."""
    try:
        return sample.output_process_fn_grad(_call(op, sample.transform(_widen)))
    except Exception:  # noqa: BLE001 - no reference, no second criterion
        return None


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
    """(kind, index, sample) of the op's sample inputs, then its reference inputs; generation is
    seeded before each kind, so (kind, index) names one sample again (reproducers rely on it)."""
    kinds = [("sample", op.sample_inputs)] + ([("reference", op.reference_inputs)] if reference else [])
    for kind, generator in kinds:
        torch.manual_seed(SEED)
        for i, sample in enumerate(generator("cpu", dtype)):
            if max_samples is not None and i >= max_samples:
                break
            yield kind, i, sample


_BY_NAME: dict[str, Any] = {}


def find(name: str):
    """The OpInfo whose ``full_name`` is ``name`` (a stored case's op), or None."""
    if not _BY_NAME:
        _BY_NAME.update({full_name(op): op for op in op_db()})
    return _BY_NAME.get(name)


def sample_at(op, dtype: torch.dtype, kind: str, index: int) -> Any:
    """The sample (kind ``sample``/``reference``) or error input (kind ``error``) a stored case names,
    generated again under the same seed the sweep used; None if the op no longer yields it."""
    if kind == "error":
        torch.manual_seed(SEED)
        for i, error_input in enumerate(op.error_inputs("cpu")):
            if i == index:
                return error_input
        return None
    for k, i, sample in _samples(op, dtype, index + 1, reference=kind == "reference"):
        if k == kind and i == index:
            return sample
    return None


def rerun(op, dtype: torch.dtype, kind: str, index: int, device: str, mode: str = "eager") -> cmp.Comparison:
    """One stored sweep case again (harness.mutate reruns it with a planted kernel)."""
    item = sample_at(op, dtype, kind, index)
    if item is None:
        return cmp.Comparison(True, criterion="skip: the sample is no longer generated")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "error":
            return run_error_input(op, item, device, mode)
        return run_sample(op, item, dtype, device, mode)


def _error_parity(cpu_error: BaseException | None, device_error: BaseException | None) -> cmp.Comparison:
    """Worded as harness.runner's error parity, so failure kinds agree across the two sources."""
    if cpu_error is not None and device_error is not None:
        return cmp.same_error(device_error, cpu_error)
    if cpu_error is not None:
        return cmp.Comparison(False, f"CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:200]}; the device "
                                     f"returned a result", criterion="error parity")
    return cmp.Comparison(False, f"the device raised {type(device_error).__name__}: {str(device_error)[:300]}; CPU "
                                 f"returned a result", criterion="error parity")


def _in_mode(mode: str, fn, device: str) -> Any:
    """``fn()`` on the device in ``mode`` (harness.modes: eager, adaptive, compiled)."""
    return fn() if mode == "eager" else modes.get(mode).run(fn, device)


def run_sample(op, sample, dtype: torch.dtype, device: str, mode: str = "eager") -> cmp.Comparison:
    cpu_error = device_error = None
    expected = actual = None
    try:
        expected = sample.output_process_fn_grad(_call(op, sample))
    except Exception as e:  # noqa: BLE001 - error parity is a check
        cpu_error = e
    try:
        moved = _move(sample, device)
        actual = sample.output_process_fn_grad(_in_mode(mode, lambda: _call(op, moved), device))
    except Exception as e:  # noqa: BLE001
        device_error = e
    if cpu_error is None and device_error is not None and _HOST_ONLY.search(str(device_error)):
        # The sweep moves every tensor to the device; this op requires some on the host. (ATen says "expected
        # ... to be on cpu"; compiled, Dynamo reports the Python decomposition's "must be on CPU".)
        return cmp.Comparison(True, criterion="skip: op requires host tensors the sweep moved")
    if cpu_error is None and isinstance(device_error, TypeError) and "device" in str(device_error) \
            and not _has_tensor(sample):
        return cmp.Comparison(True, criterion="skip: no tensor input and no device argument: the sample "
                                              "cannot run on the device")
    if cpu_error is not None or device_error is not None:
        return _error_parity(cpu_error, device_error)
    if is_random(op, sample):
        return _properties(actual, expected)
    # The result must be on the device, unless the sample moves it elsewhere itself (x.to('cpu')).
    on = None if _names_host(sample) else device
    return compare_values(actual, expected, on, lambda: _fp64_reference(op, sample))


def compare_values(actual: Any, expected: Any, device: str | None, reference: Callable[[], Any]) -> cmp.Comparison:
    """CPU's result within its tolerance; where that fails on tolerance, the second criterion against
    ``reference()``, the op's float64 result on CPU (computed only then): the device's error no more
    than 3x CPU's own, as reductions, matmuls and convolutions accumulate in another order."""
    comparison = cmp.compare(actual, expected, device=device)
    if not comparison.ok and comparison.criterion.startswith("rtol"):
        ref = reference()
        shapes_differ = isinstance(ref, torch.Tensor) and isinstance(expected, torch.Tensor) \
            and ref.shape != expected.shape
        if ref is not None and not shapes_differ:
            comparison = cmp.compare(actual, expected, None, ref, device=device)
    return comparison


def _names_host(sample) -> bool:
    values = list(sample.args) + list(sample.kwargs.values())
    return any((isinstance(v, str) and v.startswith("cpu")) or (isinstance(v, torch.device) and v.type == "cpu")
               for v in values)


def run_error_input(op, error_input, device: str, mode: str = "eager") -> cmp.Comparison:
    """An OpInfo error input: CPU raises (OpInfo says what); the device must raise the same class.
    An error input that does not raise on CPU as the sweep calls it (OpInfo's own tests call some
    through another entry point) is skipped with that reason, not failed."""
    sample = error_input.sample_input
    if not _has_tensor(sample) and "device" not in sample.kwargs:
        # torch.cat([]) or 2 / "x": the error is raised before any device is involved
        return cmp.Comparison(True, criterion="skip: the error input has no tensor; nothing runs on the device")
    try:
        _call(op, sample)
        return cmp.Comparison(True, criterion="skip: the error input does not raise on CPU when called directly")
    except Exception as e:  # noqa: BLE001
        cpu_error = e
    try:
        moved = _move(sample, device, name_device=False)
        _in_mode(mode, lambda: _call(op, moved), device)
    except Exception as e:  # noqa: BLE001
        return _error_parity(cpu_error, e)
    return cmp.Comparison(False, f"CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:200]}; the device "
                                 f"did not raise", criterion="error parity")


_OPINFO_REPRO = '''

_MOVED = {}  # one sample's moves: a storage moves once, the same tensor maps to the same device tensor


def to_device(t):
    """The tensor on DEVICE with the same sizes, strides and storage offset (its whole storage moves,
    once per sample, so tensors that alias on CPU alias on the device too)."""
    if not isinstance(t, torch.Tensor):
        return t
    if id(t) in _MOVED:
        return _MOVED[id(t)][1]
    if t.layout != torch.strided or t.is_conj() or t.is_neg():
        result = t.to(DEVICE)
    else:
        storage = t.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in _MOVED:
            _MOVED[key] = (storage, torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,)).to(DEVICE))
        result = torch.empty(0, dtype=t.dtype, device=DEVICE).set_(
            _MOVED[key][1].untyped_storage(), t.storage_offset(), t.shape, t.stride())
        if t.requires_grad:
            result.requires_grad_()
    _MOVED[id(t)] = (t, result)
    return result


def widen(t):
    if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
        return t.detach().to(torch.complex128 if t.is_complex() else torch.float64)
    return t


def moved(sample):
    _MOVED.clear()
    result = sample.transform(to_device)
    leaves = torch.utils._pytree.tree_leaves([sample.input, list(sample.args), dict(sample.kwargs)])
    if "device" in result.kwargs or not any(isinstance(x, torch.Tensor) for x in leaves):
        result.kwargs = {**result.kwargs, "device": DEVICE}  # a factory: make it on the device too
    return result


def call(sample):
    return op.op(sample.input, *sample.args, **sample.kwargs)

'''


def _reproducer(op, dtype: torch.dtype, kind: str, index: int, device: str, message: str = "",
                mode: str = "eager") -> str:
    """A self-contained script (torch, device_impl and PyTorch's own op_db) that rebuilds the sample
    and makes the sweep's checks; it asserts what the sweep found."""
    from harness.repro import checker_source, mode_runner_source

    generator = {"sample": "sample_inputs", "reference": "reference_inputs"}[kind]
    verdict = message.replace("\n", " ")
    tolerances = ", ".join(f"{k}: {v!r}" for k, v in cmp.DEFAULT_TOLERANCE.items())
    return "\n".join([
        f"# neuronsim OpInfo reproducer: {full_name(op)} [{dtype_name(dtype)}] {kind} #{index} on {device}, "
        f"{mode} mode",
        f"# sweep verdict: {verdict}".rstrip(),
        "import torch",
        "import torch.utils._pytree",
        "import device_impl  # registers the neuron device (plain `import torch` does once installed)",
        "from torch.testing._internal.common_methods_invocations import op_db",
        "",
        f"DEVICE = {device!r}",
        f"MODE = {mode!r}",
        f"DEFAULT_TOLERANCE = {{{tolerances}}}  # (rtol, atol)",
        "TOLERANCE = None",
        f"FP64_MULTIPLIER = {cmp.FP64_MULTIPLIER!r}",
        "",
        checker_source(),
        _OPINFO_REPRO.rstrip("\n"),
        mode_runner_source(),
        "",
        "",
        f"op = next(o for o in op_db if o.name == {op.name!r} and o.variant_test_name == {op.variant_test_name!r})",
        f"torch.manual_seed({SEED})",
        f"sample = list(op.{generator}('cpu', torch.{dtype_name(dtype)}))[{index}]",
        "try:",
        "    expected, cpu_error = sample.output_process_fn_grad(call(sample)), None",
        "except Exception as e:",
        "    expected, cpu_error = None, e",
        "try:",
        "    dev_sample = moved(sample)",
        "    actual, dev_error = sample.output_process_fn_grad(run_in_mode(lambda: call(dev_sample))), None",
        "except Exception as e:",
        "    actual, dev_error = None, e",
        "if cpu_error is not None or dev_error is not None:",
        "    error_parity(cpu_error, dev_error)",
        "else:",
        "    problem = check(actual, expected)",
        "    if problem and ' elements outside ' in problem:",
        "        problem = check(actual, expected, reference=sample.output_process_fn_grad(call(sample.transform(widen))))",
        "    assert not problem, problem",
        "print('reproducer passed: the device matches CPU for this sample')",
        "",
    ])


def sweep(dtypes: list[torch.dtype], names: list[str] | None = None, device: str = "neuron",
          max_samples: int | None = None, reference: bool = True, errors: bool = True, store: Store | None = None,
          run_id: int | None = None, progress: bool = True, xfails: XFails | None = None,
          shard: Shard | None = None) -> SweepCounts:
    counts = SweepCounts()
    started = time.perf_counter()
    ops = [op for op in op_db() if (not names or op.name in names or full_name(op) in names)
           and (shard is None or shard.owns(full_name(op)))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n, op in enumerate(ops):
            if progress:
                sys.stderr.write(f"\r[{n + 1}/{len(ops)}] {full_name(op)[:40]:40s} samples={counts.samples}")
                sys.stderr.flush()
            for result in run_op(op, dtypes, device, max_samples, reference, errors, xfails, counts):
                if store is not None:
                    store.add(run_id, result, "opinfo")
            if store is not None:
                store.commit()
    counts.seconds = time.perf_counter() - started
    if progress:
        sys.stderr.write("\n")
    return counts


def run_op(op, dtypes: list[torch.dtype], device: str = "neuron", max_samples: int | None = None,
           reference: bool = True, errors: bool = True, xfails: XFails | None = None,
           counts: SweepCounts | None = None, mode: str = "eager") -> list[Result]:
    """Every sample (and reference and error input) of one OpInfo, in each dtype CPU supports, run on
    the device in ``mode``."""
    counts = counts if counts is not None else SweepCounts()
    reason = skip_reason(op)
    if reason:
        counts.skipped_ops[full_name(op)] = reason
        return []
    counts.ops.add(full_name(op))
    results = []
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
            _reset_stats(device)
            comparison = run_sample(op, sample, dtype, device, mode)
            results.append(_result(op, dtype, kind, index, sample, comparison, time.perf_counter() - t0, device,
                                   counts, xfails, mode))
            results[-1].device_ops = _stats(device)  # the overloads the sample reached on the device
    if errors:
        try:
            error_inputs = list(op.error_inputs("cpu"))
        except Exception:  # noqa: BLE001
            error_inputs = []
        for index, error_input in enumerate(error_inputs[:max_samples] if max_samples else error_inputs):
            _reset_stats(device)
            comparison = run_error_input(op, error_input, device, mode)
            results.append(_result(op, torch.float32, "error", index, error_input.sample_input, comparison, 0.0,
                                   device, counts, xfails, mode))
            results[-1].device_ops = _stats(device)
    return results


def _result(op, dtype, kind, index, sample, comparison: cmp.Comparison, seconds: float, device: str,
            counts: SweepCounts, xfails: XFails | None, mode: str = "eager") -> Result:
    verdict = "skip" if comparison.criterion.startswith("skip") else "pass" if comparison.ok else "fail"
    case = Case(full_name(op), dtype_name(dtype), _specs_of(sample), {"kind": kind, "index": index}, mode, device,
                source="opinfo")
    result = Result(case, verdict, comparison.message or (comparison.criterion if verdict == "skip" else ""),
                    comparison, device_ms=seconds * 1e3, expression=f"{op.name}({kind} #{index})")
    if xfails is not None and verdict in ("pass", "fail"):
        entry = xfails.match(case, verdict == "fail", comparison.message)
        if entry is not None:
            result.xfail_reason = f"{entry.category}: {entry.reason}"
            result.verdict = "xfail" if verdict == "fail" else "xpass"
    if result.verdict in ("fail", "xpass") and kind != "error":
        result.reproducer = _reproducer(op, dtype, kind, index, device, comparison.message, mode)
    counts.samples += 1
    counts.add(result.verdict)
    return result


def main(args: argparse.Namespace) -> int:
    dtypes = [getattr(torch, d) for d in args.dtypes]
    store = Store(args.results)
    shard = Shard.parse(args.shard) if getattr(args, "shard", None) else None
    env = environment(args.device)
    env["shard"] = str(shard) if shard else ""
    run_id = store.start_run("opinfo", env, ",".join(args.dtypes))
    xfails = XFails.load()
    counts = sweep(dtypes, args.ops, args.device, args.max_samples, store=store, run_id=run_id, xfails=xfails,
                   shard=shard)
    store.finish_run(run_id)
    store.close()
    verdicts = ("pass", "fail", "xfail", "xpass", "skip")
    print(f"OpInfo sweep run {run_id} on {args.device} ({', '.join(args.dtypes)}): {len(counts.ops)} ops, "
          f"{counts.samples} samples in {counts.seconds:.0f}s: " +
          ", ".join(f"{counts.verdicts.get(v, 0)} {v}" for v in verdicts) +
          f"; pass rate {counts.pass_rate():.1%}; {len(counts.skipped_ops)} ops skipped")
    for name, reason in sorted(counts.skipped_ops.items()):
        print(f"  skipped {name}: {reason}")
    for entry in xfails.stale(source="opinfo"):
        print(f"  xfails.toml entry matched nothing (stale?): {entry.op}: {entry.reason}")
    return 0
