"""The op suite repeats each passing call (harness.runner._check_repeats): a device may serve a call it has seen
before from what earlier calls left (the eager plans of kernels/elementwise/recurring.py serve the third call of
one metadata key; a compiled graph replays its recorded schedule from its second execution), a path a suite that
calls each case once never reaches. A kernel wrong only on recurring calls must fail the case, with a reproducer
that makes the calls again."""

from __future__ import annotations

import runpy

import numpy as np
import pytest

from harness import modes
from harness.cases import Case
from harness.pytest_plugin import Session, check_case
from harness.runner import REPEATS
from harness.store import Store
from harness.values import TensorSpec as T
from harness.xfails import XFails
from device_impl.dispatch import TABLE
from device_impl.engine.hbm import view as hbm

F32 = "float32"
SIGMOID_NAN = Case("sigmoid", F32, (T((8, 16), F32, "contiguous", "special", 3),))


def _nan_dropped_when_recurring(original, calls: list[int]):
    """sigmoid.out that, from the third call with one metadata key on (the input's and out's dtype, shape and
    strides as given: an out= twin's empty out, resized by the call, is another key, as for the eager plans),
    turns NaN into 0 (a plan learnt from the second call whose instruction has fmax semantics)."""
    seen: dict[tuple, int] = {}

    def kernel(*args, **kwargs):
        out = kwargs.get("out", args[-1])
        key = tuple((t.dtype, tuple(t.shape), t.stride()) for t in (args[0], out))
        result = original(*args, **kwargs)
        seen[key] = seen.get(key, 0) + 1
        calls.append(seen[key])
        if seen[key] >= 3 and out.numel():
            o = hbm(out)
            o[np.isnan(o)] = 0
        return result
    return kernel


@pytest.fixture
def session(tmp_path) -> Session:
    store = Store(tmp_path / "results.sqlite")
    run_id = store.start_run("repeats", {"torch": "test"})
    yield Session(store, run_id, XFails(), "neuron")
    store.close()


def test_repeats_reach_a_third_call():
    assert REPEATS >= 2  # with the first call, a plan learnt from the second call serves the third


def test_a_kernel_wrong_only_on_recurring_calls_fails_the_case(session, tmp_path):
    clean = check_case(session, SIGMOID_NAN, "clean")
    assert clean.verdict == "pass", clean.message
    calls: list[int] = []
    op = "aten::sigmoid.out"
    with TABLE.overridden(op, _nan_dropped_when_recurring(TABLE.kernel(op), calls)):
        with pytest.raises(pytest.fail.Exception):
            check_case(session, SIGMOID_NAN, "planted")
    assert max(calls) >= 3
    result = session.record("planted", "planted")[0]
    assert result.verdict == "fail" and "repeated call" in result.message, result.message
    assert "NaN at different positions" in result.message

    script = tmp_path / "reproducer.py"  # the reproducer makes the calls again: it fails planted, passes clean
    script.write_text(result.reproducer)
    assert "CALLS = " in result.reproducer
    with TABLE.overridden(op, _nan_dropped_when_recurring(TABLE.kernel(op), [])):
        with pytest.raises(AssertionError):
            runpy.run_path(str(script), run_name="__main__")
    runpy.run_path(str(script), run_name="__main__")


def test_compiled_repeat_runs_the_function_compiled_once(monkeypatch):
    """Compiled mode's repeat calls the function the case compiled (Dynamo's guards pass, the backend runs what it
    kept), not a fresh compile: a fresh torch.compile per repeat would cost a compile and could be served a new
    executable. Another expression is compiled afresh."""
    import torch

    mode = modes.get("compiled")
    compiles: list[object] = []
    real = torch.compile

    def counting(fn, *args, **kwargs):
        compiles.append(fn)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(torch, "compile", counting)
    def call(expression: str, ns: dict):  # as harness.runner makes the call: the text and namespace captured
        return lambda: eval(expression, ns)  # noqa: S307

    x = torch.randn(5).to("neuron")
    first = mode.run(call("torch.sigmoid(x0)", {"torch": torch, "x0": x}), "neuron")
    second = mode.repeat(call("torch.sigmoid(x0)", {"torch": torch, "x0": x.clone()}), "neuron")
    assert len(compiles) == 1
    assert torch.equal(first.cpu(), second.cpu())
    mode.repeat(call("torch.tanh(x0)", {"torch": torch, "x0": x}), "neuron")
    assert len(compiles) == 2
