"""Designed coverage (harness.design): each op spec's cases cover the cells its dtypes make applicable,
on layouts the device itself holds, reproducibly; the store records and answers which cells ran."""

from __future__ import annotations

import pytest
import torch

from harness import design
from harness.cases import Case
from harness.runner import Result
from harness.specs import SPECS
from harness.store import Store
from harness.values import LAYOUTS, TensorSpec, materialize


@pytest.mark.parametrize("name", sorted(SPECS))
def test_no_op_spec_loses_a_cell_its_dtypes_make_applicable(name):
    """Every dtype of the spec meets every value domain that applies to it (NaN, infinities, signed
    zeros, denormals, near overflow, saturation tails, near zero, negatives; integer min/max), in the
    coordinates its cases really have (read from the tensors, not from what the design asked)."""
    spec = SPECS[name]
    missing = design.required_cells(spec) - design.realized(spec)["dtype_domain"]
    assert not missing, f"{name}: designed cases cover no case of {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_edge_values_reach_cpus_contiguous_kernels_in_every_float_dtype(name):
    """CPU takes another kernel for a contiguous tensor of more than a few elements (its vectorized loop, or oneDNN's:
    float32 gelu there gives +0.0 where the strided path gives -0.0): every float dtype of the spec meets each edge
    domain (NaN and infinities, signed zeros, denormals, near overflow, tails) on a contiguous tensor at a tile edge,
    or a device kernel that mimics CPU's contiguous path wrongly passes every designed case."""
    spec = SPECS[name]
    missing = design.required_host_path(spec) - design.realized(spec)["host_path"]
    assert not missing, f"{name}: no contiguous tile-edge case of {sorted(missing)}"


def test_no_edge_domain_is_spent_on_a_tensor_without_elements():
    """An empty tensor holds no values (near_overflow on one covers nothing), a 0-dim one value on CPU's scalar path:
    the designed rows of an edge domain take neither; the plain domain covers those sizes."""
    for name in ("gelu", "mul", "sum", "neg", "add_scalar"):
        cells = design.design(name)
        assert not [c.id for c in cells if c.domain in design.HOST_PATH_DOMAINS and c.size in design.NO_ELEMENTS]
        assert not [c.id for c in cells if c.size == "empty" and c.domain != design.design_domains(c.dtype)[0]]
        assert {"0-dim", "empty"} <= design.realized(SPECS[name])["size"], name


def test_gelu_meets_its_edge_values_where_cpu_runs_onednn():
    """The gap that let a wrong float32 gelu pass: CPU's oneDNN gelu (a contiguous float32 tensor of more than one
    element) gives +0.0 for x below ~-5.6 and for -0.0; tails and signed zeros must reach it."""
    got = design.realized(SPECS["gelu"])["host_path"]
    assert {("float32", "tails"), ("float32", "signed_zero"), ("bfloat16", "tails")} <= got


def test_elementwise_specs_reach_every_layout_and_tile_edge():
    for name in ("mul", "neg", "sigmoid", "add_scalar", "sum"):
        got = design.realized(SPECS[name])
        assert set(LAYOUTS) <= got["layout"], name
        assert {"127", "128", "129", "511", "512", "513", "2047", "2048", "2049", "0-dim", "empty"} <= got["edge"], name


def test_index_specs_have_their_error_inputs():
    for name in ("gather", "index_select", "scatter", "embedding"):
        assert {"oob_index", "index_dtype"} <= design.realized(SPECS[name])["error"], name
    assert "shape_mismatch" in design.realized(SPECS["add"])["error"]


def test_designed_cases_are_reproducible_and_named_by_their_coordinates():
    cases = design.cases("mul")
    ids = [d.id for d in cases]
    assert len(ids) == len(set(ids))
    first = cases[0]
    assert first.id.startswith("mul-") and first.target.dtype in first.id and first.target.layout in first.id
    again = design.designed_case(SPECS["mul"], first.target)
    assert again == first.case
    assert Case.from_json(first.case.to_json()) == first.case


@pytest.mark.parametrize("layout", [lay for lay in LAYOUTS if lay != "contiguous"])
def test_layouts_are_made_on_the_device(layout):
    spec = TensorSpec((2, 3, 4, 5), "float32", layout, "normal", 3)
    cpu, dev = materialize(spec, "cpu"), materialize(spec, "neuron")
    assert dev.device.type == "neuron"
    assert dev.stride() == cpu.stride() and dev.storage_offset() == cpu.storage_offset()
    assert not dev.is_contiguous() or layout == "offset"
    assert torch.equal(dev.cpu(), cpu)
    if layout == "expanded":
        assert 0 in dev.stride(), "an expanded input must reach the device's kernel with stride 0"


def test_edge_domains_hold_what_they_promise():
    near = materialize(TensorSpec((64,), "bfloat16", "contiguous", "near_overflow", 1), "cpu").float()
    assert bool((near.abs() >= torch.finfo(torch.bfloat16).max / 2.01).all()) and bool(torch.isfinite(near).all())
    tails = materialize(TensorSpec((64,), "float32", "contiguous", "tails", 1), "cpu")
    assert bool((tails.abs() >= 10).all()) and bool((tails < 0).any())
    oob = materialize(TensorSpec((16,), "int64", "contiguous", "oob:5", 1), "cpu")
    assert bool(((oob >= 5) | (oob < -5)).all())


def test_store_answers_which_cells_ran(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    run = store.start_run("opsuite", {"torch": "test"})
    for designed in design.cases("neg")[:5]:
        result = Result(designed.case, "pass", design_id=designed.id)
        store.add(run, result, "pointwise")
    store.commit()
    cells = store.cells("neg")
    assert len(cells) == 5 and all(c["designed"] == 1 and c["verdicts"] == {"pass": 1} for c in cells)
    assert {(c["dtype"], c["domain"], c["layout"]) for c in cells} == {
        (d.cell.dtype, d.cell.domain, d.cell.layout) for d in design.cases("neg")[:5]}


def test_extra_domains_decide_any_and_all_on_strided_layouts():
    """any/all add sparse and dense values (a few elements decide each answer) on layouts whose storage holds
    other elements (harness.values.SPARSE_DOMAINS): a kernel that ignores the strides then reads other ones."""
    from harness.values import TensorSpec, base_values

    extra = [c for c in design.design("any") if c.domain in ("sparse", "dense")]
    assert {(c.dtype, c.domain) for c in extra} == {(d, m) for d in ("bool", "float32") for m in ("sparse", "dense")}
    assert all(c.layout in ("sliced", "overlapping", "transposed") for c in extra)
    sparse = base_values(TensorSpec((4, 40), "float32", "contiguous", "sparse", 3))
    dense = base_values(TensorSpec((4, 40), "bool", "contiguous", "dense", 3))
    assert int((sparse != 0).sum()) == 5 and int((~dense).sum()) == 5


def test_the_designed_table_on_disk_is_the_one_drawn(tmp_path, monkeypatch):
    """The op suite reads every spec's designed cases from disk (drawing them costs ~30 s a process): what it
    reads must be, case for case, what the specs draw; a changed harness source draws them again (another key)."""
    monkeypatch.setenv("NEURONSIM_CACHE", str(tmp_path))
    drawn = design.all_cases(mode="compiled")
    assert design._cache_file().exists()
    loaded = design.all_cases(mode="compiled")
    assert [(d.id, d.case.to_json()) for d in loaded] == [(d.id, d.case.to_json()) for d in drawn]
    assert {d.case.mode for d in loaded} == {"compiled"}
    design._cache_file().write_text("{not json")
    assert [d.id for d in design.all_cases()] == [d.id for d in drawn]  # unreadable: drawn again


_DRAW_TOGETHER = """
import hashlib, json, sys
from harness import design
design.SPECS = dict(list(design.SPECS.items())[::12])  # every 12th spec: the protocol, at a 12th of the cost
drawn = []
rows = design._rows
design._rows = lambda name: (drawn.append(name), rows(name))[1]
table = [(d.id, d.case.to_json()) for d in design.all_cases(mode="compiled")]
print(json.dumps({"drew": drawn, "specs": list(design.SPECS),
                  "digest": hashlib.sha256(json.dumps(table).encode()).hexdigest()}))
"""


def test_processes_side_by_side_draw_the_table_together(tmp_path):
    """Op-suite processes started at once with no table on disk draw each spec once between them (``make
    report``'s four), and every one gets the table a single process draws, case for case."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "NEURONSIM_CACHE": str(tmp_path / "together"), "PYTHONPATH": os.getcwd()}
    procs = [subprocess.Popen([sys.executable, "-c", _DRAW_TOGETHER], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(3)]
    results = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    drew = [name for r in results for name in r["drew"]]
    assert sorted(drew) == sorted(results[0]["specs"]) and len(drew) > 20  # each spec drawn once, by one of them
    alone = subprocess.run([sys.executable, "-c", _DRAW_TOGETHER], capture_output=True, text=True, timeout=600,
                           env={**env, "NEURONSIM_CACHE": str(tmp_path / "alone")})
    single = json.loads(alone.stdout.strip().splitlines()[-1])
    assert sorted(single["drew"]) == sorted(single["specs"])
    assert {r["digest"] for r in results} == {single["digest"]}
    assert not list((tmp_path / "together" / "design").glob("*.parts"))  # the parts are gone, the table stays
    assert len(list((tmp_path / "together" / "design").glob("*.json"))) == 1


def test_a_spec_claimed_by_a_process_that_died_is_drawn_by_another(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("NEURONSIM_CACHE", str(tmp_path))
    parts = design._cache_file().with_suffix(".parts")
    parts.mkdir(parents=True)
    name = next(iter(SPECS))
    claim = parts / f"{name}.claim"
    claim.touch()
    os.utime(claim, (0, 0))  # claimed long ago, never drawn
    loaded = design.all_cases()
    assert {d.spec for d in loaded} == set(SPECS)
    assert [d.id for d in loaded if d.spec == name] == [d.id for d in design.cases(name)]


_DRAW_ALONE = """
import json
from harness import design
print(json.dumps([[d.id, d.case.to_json()] for name in ("remainder_scalar", "gelu", "mul") for d in design.cases(name)]))
"""


def test_a_designed_case_does_not_hang_on_the_process_that_drew_it():
    """Hypothesis injects constants from every project module a process has loaded (its local constant pool, cached
    at first use): a designed draw must not read them, or the table on disk is whichever process drew it
    (remainder_scalar-float32-near_overflow-contiguous-128 divided by 0.0447 in a plain process, by -0.0 in the
    op suite). This process has loaded the tests, the harness and the device, and run Hypothesis tests."""
    import json
    import os
    import subprocess
    import sys

    from hypothesis import given, settings, strategies as st

    @settings(max_examples=20, database=None)
    @given(st.floats(), st.integers())
    def touch_the_constant_pools(x, n):
        pass

    touch_the_constant_pools()
    design.cases.cache_clear()
    here = [[d.id, d.case.to_json()] for name in ("remainder_scalar", "gelu", "mul") for d in design.cases(name)]
    alone = subprocess.run([sys.executable, "-c", _DRAW_ALONE], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHONPATH": os.getcwd()}, cwd=os.getcwd())
    assert json.loads(alone.stdout.strip().splitlines()[-1]) == here
