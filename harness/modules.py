"""nn.Modules on the device against CPU: PyTorch's ModuleInfo database (common_modules.module_db).

For each ModuleInfo, dtype and module input (its ``module_inputs_func``): the module built on CPU
under a fixed seed, a deep copy moved to the device, the same forward inputs on both sides.

- ``train`` / ``eval``: the forward in that mode matches CPU, and so does the backward (seeded
  random output gradients): the inputs' gradients and every parameter's gradient, by name.
- ``state_dict``: after a training forward (so running statistics moved), the device module's
  state_dict has CPU's keys, tensors on the device, CPU's values; it loads into a fresh CPU module
  and gives those values back, and CPU's state_dict loads into a device module keeping it on the device.

Any exception the device raises of a class PyTorch does not (harness.contract.foreign_exception)
is a failure by itself. Modules with random output in training (dropout, RReLU) are compared by
shapes and dtypes only there.
"""

from __future__ import annotations

import copy
import time
import warnings
from typing import Any

import torch
from torch.utils._pytree import tree_leaves, tree_map

from harness import compare as cmp
from harness import contract, opinfo
from harness.cases import Case
from harness.runner import Result, _reset_stats, _stats
from harness.values import TensorSpec, dtype_name

CHECKS = ("train", "eval", "state_dict")
SEED = 0
RANDOM_IN_TRAINING = ("Dropout", "RReLU")


def module_db() -> list:
    from hypothesis import settings

    profile = settings.get_current_profile_name()
    try:
        from torch.testing._internal.common_modules import module_db as db
    except Exception as e:  # noqa: BLE001
        raise ImportError(f"torch {torch.__version__}: torch.testing._internal.common_modules.module_db is not "
                          f"importable ({type(e).__name__}: {e})") from e
    finally:
        if settings.get_current_profile_name() != profile:
            settings.load_profile(profile)
    return db


def name_of(info) -> str:
    return info.formatted_name if hasattr(info, "formatted_name") else info.name


def supports(info, dtype: torch.dtype) -> bool:
    return dtype in info.supported_dtypes("cpu")


def _random(info, training: bool) -> bool:
    return training and any(r in info.name for r in RANDOM_IN_TRAINING)


def _inputs(info, dtype: torch.dtype, training: bool, max_samples: int | None) -> list:
    torch.manual_seed(SEED)
    found = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=True, training=training)
    return list(found)[:max_samples] if max_samples is not None else list(found)


def _leaf_inputs(function_input, device: str | None):
    """(args, kwargs) of a FunctionInput as fresh leaves (on ``device`` if given), keeping requires_grad."""
    memo: dict = {}

    def fresh(t):
        if not isinstance(t, torch.Tensor):
            return t
        base = t.detach()
        moved = opinfo.to_device(base, device, memo) if device else base.clone()
        return moved.requires_grad_(t.requires_grad) if moved.is_floating_point() or moved.is_complex() else moved

    return tree_map(fresh, list(function_input.args)), tree_map(fresh, dict(function_input.kwargs))


def _build(info, module_input, dtype: torch.dtype, training: bool):
    torch.manual_seed(SEED)
    c = module_input.constructor_input
    module = info.module_cls(*c.args, **c.kwargs)
    module = module.to(dtype)
    module.train(training)
    return module


def _grad_outputs(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    torch.manual_seed(SEED + 1)
    return [torch.randn(o.shape, dtype=o.dtype) for o in outputs]


def _differentiable(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(value) if isinstance(t, torch.Tensor) and t.requires_grad]


def _compare(actual: Any, expected: Any, device: str, where: str) -> cmp.Comparison:
    result = cmp.compare(actual, expected, device=device)
    if not result.ok:
        return cmp.Comparison(False, f"{where}: {result.message}", result.max_abs, result.max_rel, result.ulp,
                              result.criterion)
    return result


def _device_error(error: BaseException, cpu_error: BaseException | None, device: str, where: str) -> cmp.Comparison:
    error = contract.traced_error(error)
    why = contract.foreign_exception(error, device, cpu_error)
    if why:
        return cmp.Comparison(False, f"{where}: {why}: {contract._describe(error)}", criterion="exception class")
    if cpu_error is not None:
        return cmp.same_error(error, cpu_error)
    return cmp.Comparison(False, f"{where}: the device raised {contract._describe(error)}; CPU did not raise",
                          criterion="error parity")


def _cpu_run(info, module_input, dtype: torch.dtype, training: bool, widen: bool = False):
    """(module, args, kwargs, outputs, output grads, named results) of the module on CPU; ``widen``:
    built in ``dtype`` then run in float64 (the float64 reference: same parameters and inputs)."""
    module = _build(info, module_input, dtype, training)
    args, kwargs = _leaf_inputs(module_input.forward_input, None)
    if widen:
        module = module.double()
        args, kwargs = tree_map(_widened_leaf, args), tree_map(_widened_leaf, kwargs)
    out = module(*args, **kwargs)
    return module, args, kwargs, out


def _widened_leaf(t):
    if isinstance(t, torch.Tensor) and t.is_floating_point():
        return t.detach().double().requires_grad_(t.requires_grad)
    return t


def _named_grads(module, args, kwargs) -> dict[str, Any]:
    named = {}
    leaves = [t for t in tree_leaves([args, kwargs]) if isinstance(t, torch.Tensor) and t.requires_grad]
    for i, t in enumerate(leaves):
        named[f"input[{i}].grad"] = t.grad
    for name, p in module.named_parameters():
        named[f"{name}.grad"] = p.grad
    return named


def check_mode(info, module_input, dtype: torch.dtype, training: bool, device: str,
               mode: str = "eager") -> cmp.Comparison:
    """Forward and backward (input and parameter gradients) in train or eval mode. A value outside the
    dtype's tolerance is judged again against the module run in float64 on CPU (harness.compare's
    float64-reference criterion: convolutions and matmuls accumulate in another order on the device)."""
    where = "train" if training else "eval"
    try:
        cpu_module = _build(info, module_input, dtype, training)
        dev_module = copy.deepcopy(cpu_module).to(device)
        args, kwargs = _leaf_inputs(module_input.forward_input, None)
        expected = cpu_module(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - a module CPU cannot run here is not the device's to match
        return contract._skip(f"the module raises on CPU: {contract._describe(e)}")
    dargs, dkwargs = _leaf_inputs(module_input.forward_input, device)
    try:
        actual = opinfo._in_mode(mode, lambda: dev_module(*dargs, **dkwargs), device)
    except Exception as e:  # noqa: BLE001
        return _device_error(e, None, device, f"{where} forward")
    if _random(info, training):
        return opinfo._properties(actual, expected)
    outs, douts = _differentiable(expected), _differentiable(actual)
    cpu_named: dict[str, Any] = {"forward": expected}
    dev_named: dict[str, Any] = {"forward": actual}
    if outs:
        if len(outs) != len(douts):
            return cmp.Comparison(False, f"{where}: {len(douts)} differentiable outputs, CPU {len(outs)}")
        grads = _grad_outputs(outs)
        try:
            torch.autograd.backward(outs, grads)
            cpu_named.update(_named_grads(cpu_module, args, kwargs))
        except Exception:  # noqa: BLE001 - no backward on CPU: the forward alone is compared
            outs = []
        if outs:
            try:
                dgrads = [opinfo.to_device(g, device) for g in grads]
                opinfo._in_mode(mode, lambda: torch.autograd.backward(douts, dgrads), device)
            except Exception as e:  # noqa: BLE001
                return _device_error(e, None, device, f"{where} backward")
            dev_named.update(_named_grads(dev_module, dargs, dkwargs))
    reference: dict[str, Any] | None = None
    result = cmp.Comparison(True, criterion=f"{where} forward and backward")
    for key, value in cpu_named.items():
        if key not in dev_named:
            result = result.merge(cmp.Comparison(False, f"{where}: {key} missing on the device"))
            continue
        if value is None and dev_named[key] is None:
            continue
        one = cmp.compare(dev_named[key], value, device=device)
        if not one.ok and one.criterion.startswith("rtol") and dtype != torch.float64:
            if reference is None:
                reference = _reference(info, module_input, dtype, training, grads if outs else None)
            if key in reference:
                one = cmp.compare(dev_named[key], value, None, reference[key], device=device)
        if not one.ok:
            one = cmp.Comparison(False, f"{where} {key}: {one.message}", one.max_abs, one.max_rel, one.ulp,
                                 one.criterion)
        result = result.merge(one)
    return result


def _reference(info, module_input, dtype, training: bool, grads) -> dict[str, Any]:
    try:
        module, args, kwargs, out = _cpu_run(info, module_input, dtype, training, widen=True)
        named = {"forward": out}
        if grads is not None:
            torch.autograd.backward(_differentiable(out), [g.double() for g in grads])
            named.update(_named_grads(module, args, kwargs))
        return named
    except Exception:  # noqa: BLE001 - no reference, no second criterion
        return {}


def check_state_dict(info, module_input, dtype: torch.dtype, device: str, mode: str = "eager") -> cmp.Comparison:
    try:
        cpu_module = _build(info, module_input, dtype, True)
        dev_module = copy.deepcopy(cpu_module).to(device)
        args, kwargs = _leaf_inputs(module_input.forward_input, None)
        with torch.no_grad():
            cpu_module(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        return contract._skip(f"the module raises on CPU: {contract._describe(e)}")
    dargs, dkwargs = _leaf_inputs(module_input.forward_input, device)
    try:
        with torch.no_grad():
            opinfo._in_mode(mode, lambda: dev_module(*dargs, **dkwargs), device)
        state = dev_module.state_dict()
    except Exception as e:  # noqa: BLE001
        return _device_error(e, None, device, "state_dict forward")
    expected = cpu_module.state_dict()
    if list(state) != list(expected):
        return cmp.Comparison(False, f"state_dict keys {list(state)[:8]} != CPU {list(expected)[:8]}")
    result = cmp.Comparison(True, criterion="state_dict")
    for key, value in expected.items():
        result = result.merge(_compare(state[key], value, device, f"state_dict[{key!r}]"))
    try:
        fresh = _build(info, module_input, dtype, True)
        if getattr(info, "is_lazy", False):
            fresh = copy.deepcopy(cpu_module)
        fresh.load_state_dict({k: v.cpu() for k, v in state.items()})
        back = fresh.state_dict()
        target = copy.deepcopy(fresh).to(device)
        target.load_state_dict(expected)
        loaded = target.state_dict()
    except Exception as e:  # noqa: BLE001
        return result.merge(_device_error(e, None, device, "state_dict round trip"))
    for key, value in expected.items():
        moved_back = back[key]
        if isinstance(value, torch.Tensor) and not torch.equal(moved_back, state[key].cpu()):
            result = result.merge(cmp.Comparison(False, f"state_dict[{key!r}]: the device's values did not load into "
                                                        f"a CPU module unchanged"))
        result = result.merge(_compare(loaded[key], value, device, f"CPU state_dict[{key!r}] loaded on the device"))
    return result


def _specs(module_input) -> tuple[TensorSpec, ...]:
    tensors = [t for t in tree_leaves([list(module_input.forward_input.args), dict(module_input.forward_input.kwargs)])
               if isinstance(t, torch.Tensor)]
    return tuple(TensorSpec(tuple(t.shape), dtype_name(t.dtype), "module", "module") for t in tensors)


def run_check(info, check: str, dtypes: list[torch.dtype], device: str, max_samples: int | None = 2,
              mode: str = "eager", xfails=None) -> list[Result]:
    results = []
    for dtype in dtypes:
        if not supports(info, dtype):
            continue
        training = check != "eval"
        try:
            inputs = _inputs(info, dtype, training, max_samples)
        except Exception as e:  # noqa: BLE001
            inputs = []
            results.append(_result(info, check, dtype, -1, None, contract._skip(f"input generation failed: {e}"),
                                   0.0, device, mode, xfails))
        for index, module_input in enumerate(inputs):
            t0 = time.perf_counter()
            _reset_stats(device)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    comparison = (check_state_dict(info, module_input, dtype, device, mode) if check == "state_dict"
                                  else check_mode(info, module_input, dtype, training, device, mode))
            except Exception as e:  # noqa: BLE001
                comparison = cmp.Comparison(False, f"harness error in {check}: {contract._describe(e)}",
                                            criterion="harness")
            results.append(_result(info, check, dtype, index, module_input, comparison, time.perf_counter() - t0,
                                   device, mode, xfails))
            results[-1].device_ops = _stats(device)  # the overloads the check reached on the device
    return results


_BY_NAME: dict[str, Any] = {}


def find(name: str):
    """The ModuleInfo whose ``name_of`` is ``name`` (a stored case's op), or None."""
    if not _BY_NAME:
        _BY_NAME.update({name_of(info): info for info in module_db()})
    return _BY_NAME.get(name)


def rerun(info, check: str, dtype: torch.dtype, index: int, device: str, mode: str = "eager") -> cmp.Comparison:
    """One stored module check (module, check, dtype, input) again, as ``run_check`` ran it (harness.mutate
    reruns it with a planted kernel)."""
    training = check != "eval"
    inputs = _inputs(info, dtype, training, index + 1)
    if index >= len(inputs):
        return contract._skip("the module input is no longer generated")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return (check_state_dict(info, inputs[index], dtype, device, mode) if check == "state_dict"
                    else check_mode(info, inputs[index], dtype, training, device, mode))
    except Exception as e:  # noqa: BLE001 - as run_check
        return cmp.Comparison(False, f"harness error in {check}: {contract._describe(e)}", criterion="harness")


def _result(info, check, dtype, index, module_input, comparison, seconds, device, mode, xfails) -> Result:
    verdict = "skip" if comparison.criterion.startswith("skip") else "pass" if comparison.ok else "fail"
    case = Case(name_of(info), dtype_name(dtype), _specs(module_input) if module_input is not None else (),
                {"check": check, "index": index}, mode, device, source="module")
    result = Result(case, verdict, comparison.message or (comparison.criterion if verdict == "skip" else ""),
                    comparison, device_ms=seconds * 1e3, expression=f"{name_of(info)} {check} (input #{index})",
                    check=check)
    if xfails is not None and verdict in ("pass", "fail"):
        entry = xfails.match(case, verdict == "fail", comparison.message)
        if entry is not None:
            result.xfail_reason = f"{entry.category}: {entry.reason}"
            result.verdict = "xfail" if verdict == "fail" else "xpass"
    return result
