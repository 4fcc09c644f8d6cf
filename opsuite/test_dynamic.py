"""Automatic dynamic shapes (harness.dynamic): per op spec and dtype, one function compiled with torch.compile's
default ``dynamic=None`` and the device's backend, called at three sizes (static, recompiled symbolic, the symbolic
graph reused), each call judged against CPU eager.

Which specs run depends on ``--neuron-mode`` (``dynamic.specs_for``, ``variants_for``): every spec in float32 (else
its first dtype), with contiguous and with transposed inputs, under ``compiled`` (``make report``'s compiled mode); a
fixed sample, contiguous, under ``eager`` (``make test``'s default run: ``dynamic.ALWAYS`` and one spec in
``dynamic.SAMPLE_EVERY``); none under ``adaptive``. Results go to the store with ``source = 'dynamic'`` and
``check_name = 'dynamic_sizes'``, mode ``compiled``; expected differences are ``source = "dynamic"`` entries of
opsuite/xfails.toml (Dynamo's own limitations only), and the spec's compiled-mode entries.
"""

import warnings

import pytest

from harness import dynamic, modes
from harness.pytest_plugin import report_results
from harness.specs import SPECS


def _pairs(mode: str) -> list[tuple[str, str, str]]:
    return [(s.name, d, layout) for s in dynamic.specs_for(mode) for d, layout in dynamic.variants_for(s, mode)]


def pytest_generate_tests(metafunc):
    if "spec_dtype" not in metafunc.fixturenames:
        return
    chosen = metafunc.config.getoption("--neuron-mode")
    pairs = list(dict.fromkeys(p for m in (modes.MODES if chosen == "all" else [chosen]) for p in _pairs(m)))
    metafunc.parametrize("spec_dtype", pairs, ids=[f"{s}-{d}-{layout}" for s, d, layout in pairs])


@pytest.mark.opsuite
@pytest.mark.opsuite_dynamic
def test_dynamic_sizes(harness_session, spec_dtype, mode, request):
    if spec_dtype not in _pairs(mode):
        pytest.skip(f"{spec_dtype[0]} [{spec_dtype[1]}, {spec_dtype[2]}] is not in {mode} mode's selection "
                    f"(harness.dynamic.specs_for)")
    spec = SPECS[spec_dtype[0]]
    seq = dynamic.sequence(spec, spec_dtype[1], harness_session.device, spec_dtype[2])
    if isinstance(seq, str):
        pytest.skip(f"{spec.name}: {seq}")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Operator '.*' executed via CPU fallback")
        results = dynamic.run_sequence(seq, harness_session.xfails, harness_session.device)
    report_results(harness_session, results, request.node.nodeid, f"{spec.name} {dynamic.CHECK}")
