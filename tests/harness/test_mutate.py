"""Mutants (harness.mutate): planted over the device's kernel through torch.library and removed
again; caught by the op suite's cases that trigger them; excluded only by rule."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness import design, mutate
from harness.specs import SPECS


def _cases(*names):
    out = []
    for name in names:
        for d in design.cases(name):
            out.append(mutate.StoredCase(d.case, {"aten::mul.out", "aten::exp.out", "aten::neg.out"},
                                         d.cell.to_dict(), d.id))
    return out


def _facts(op, specs):
    ov = mutate.overload(op)
    return mutate.OpFacts(op, ov._schema, tuple(str(t).split(".")[-1] for t in ov.tags), specs)


def test_a_planted_mutant_replaces_the_kernel_and_is_removed():
    x = torch.tensor([1.0, float("nan"), -2.0], device="neuron")
    mc = mutate.CLASSES["nan_inf"]
    mutant = mc.make("aten::mul.out", "nan_inf", _facts("aten::mul.out", ("mul",)))
    with mutate.Planted(mutant):
        planted = torch.mul(x, x).cpu()
    assert planted.tolist() == [1.0, 0.0, 4.0] and mutant.triggered
    assert torch.isnan(torch.mul(x, x).cpu()[1]), "the device's own kernel must be back"


def test_the_designed_cases_catch_what_chance_missed():
    """The issue's misses: mul turning NaN into 0, neg losing the sign of zero."""
    cases = _cases("mul", "neg")
    for op, cls, spec in (("aten::mul.out", "nan_inf", "mul"), ("aten::neg.out", "zero_sign", "neg"),
                          ("aten::mul.out", "layout", "mul"), ("aten::mul.out", "tile_edge", "mul")):
        outcome = mutate.run_mutant(op, mutate.CLASSES[cls], _facts(op, (spec,)), cases, "eager")
        assert outcome.status == "caught", (op, cls, outcome.reason)
        assert outcome.killer.startswith(spec + "-")


def test_rules_exclude_what_cannot_be_caught():
    f = _facts("aten::mul.out", ("mul",))
    assert mutate.CLASSES["index_bounds"].rule(f) == "no index argument in its signature"
    assert mutate.CLASSES["inplace"].rule(f) is not None and mutate.CLASSES["out"].rule(f) is None
    ints = _facts("aten::bitwise_and.Tensor_out", ("bitwise_and",))
    assert "no NaN-able dtype" in mutate.CLASSES["nan_inf"].rule(ints)
    rand = _facts("aten::uniform_", ("rand",))
    assert "random op" in mutate.CLASSES["tile_edge"].rule(rand)


def test_index_bounds_rule_reads_which_indices_are_inputs():
    """Max pooling writes its argmax indices (out=) and its backward reads them back: neither can be given an
    out-of-range index that CPU rejects; gather's and embedding backward's indices are inputs CPU checks."""
    rule = mutate.CLASSES["index_bounds"].rule
    assert "out= tensor it writes" in rule(_facts("aten::max_pool2d_with_indices.out", ("max_pool2d",)))
    assert "forward's own output" in rule(_facts("aten::adaptive_max_pool2d_backward.grad_input", ()))
    assert "forward's own output" in rule(_facts("aten::max_pool3d_with_indices_backward", ()))
    for op in ("aten::gather", "aten::embedding_dense_backward", "aten::nll_loss2d_backward"):
        assert rule(_facts(op, ())) is None, op


def test_an_equivalent_mutant_is_excluded_not_counted():
    """exp maps -0.0 and +0.0 to 1 and never returns -0.0: losing the sign of zero changes nothing."""
    cases = [c for c in _cases("exp") if c.cell["domain"] in ("signed_zero", "special")]
    outcome = mutate.run_mutant("aten::exp.out", mutate.CLASSES["zero_sign"], _facts("aten::exp.out", ("exp",)),
                                cases, "eager")
    assert outcome.status == "excluded" and "equivalent" in outcome.reason


def test_the_table_comes_from_the_device_surface_not_device_impl():
    ops = mutate.table("neuron")
    assert "aten::mul.out" in ops and all(torch._C._dispatch_has_kernel_for_dispatch_key(o, "PrivateUse1") for o in ops)
    assert "aten::mul.Tensor" not in ops  # served through PyTorch's composite kernel: no kernel of its own


# --- the contract checks and the OpInfo sweep are rerun too --------------------------------------

def _contract_cases(name, *checks):
    """Stored-case form of a contract check's results (as the op suite stores them, with the overloads
    each reached on the device)."""
    from harness import contract, coverage, opinfo

    op = opinfo.find(name)
    cases = []
    for check in checks:
        for result in contract.run_check(op, check, [torch.float32], "neuron", max_samples=1):
            if result.verdict == "pass":
                cases.append(mutate._sweep_case(result.case, coverage.reached([result])))
    return cases


def test_a_contract_check_records_the_overloads_it_reached():
    (case,) = _contract_cases("neg", "out_resize")
    assert "aten::neg.out" in case.reached and case.cell["check"] == "out_resize"


def test_an_out_overload_mutant_is_caught_by_a_contract_check():
    """out= ignored where it must be resized: no op spec case passes a wrong-shaped out tensor, the
    contract's out_resize check does."""
    cases = _contract_cases("neg", "out_values", "out_resize")
    f = mutate.facts("aten::neg.out", cases)
    outcome = mutate.run_mutant("aten::neg.out", mutate.CLASSES["out"], f, cases, "eager")
    assert outcome.status == "caught", outcome.reason
    assert outcome.killer.startswith("contract:neg out_resize") and outcome.cases_run == 1  # tried first


def test_an_error_class_mutant_is_caught_by_an_error_input():
    """index_select's out overload raising TypeError for an out-of-range index: OpInfo's error input
    (CPU raises IndexError) catches it through the contract's error_inputs check."""
    cases = _contract_cases("index_select", "out_values", "error_inputs")
    assert any("aten::index_select.out" in c.reached for c in cases if c.cell["check"] == "error_inputs")
    f = mutate.facts("aten::index_select.out", cases)
    outcome = mutate.run_mutant("aten::index_select.out", mutate.CLASSES["error_class"], f, cases, "eager")
    assert outcome.status == "caught", outcome.reason
    assert outcome.killer.startswith("contract:index_select error_inputs")


def _spec_cases(spec, *ops):
    return [mutate.StoredCase(d.case, set(ops), d.cell.to_dict(), d.id) for d in design.cases(spec)]


def test_an_error_class_mutant_is_caught_by_the_cross_device_probe_or_a_designed_error_input():
    """native_batch_norm has no designed error input: the probe (a host input among device tensors) makes it
    raise; view's designed shape_mismatch case (one element too many) does."""
    for spec, op in (("batch_norm", "aten::native_batch_norm"), ("view", "aten::view")):
        cases = _spec_cases(spec, op)
        outcome = mutate.run_mutant(op, mutate.CLASSES["error_class"], mutate.facts(op, cases), cases, "eager")
        assert outcome.status == "caught", (op, outcome.reason)


def test_an_error_class_mutant_of_an_op_with_no_input_to_reject_is_excluded_by_asking_cpu():
    """any(self): one tensor, no other argument; CPU raises for no dtype or shape, so nothing makes it raise.
    hardtanh's bool input, view_as_complex's vector and _local_scalar_dense's empty tensor are rejected by CPU:
    those stay coverage gaps, never excluded."""
    assert "no input to reject" in mutate.no_error_input(mutate.facts("aten::any", []))
    for op in ("aten::hardtanh", "aten::view_as_complex", "aten::_local_scalar_dense", "aten::flip", "aten::mm"):
        assert mutate.no_error_input(mutate.facts(op, [])) is None, op
    cases = _spec_cases("any_all_elements", "aten::any")[:3]
    outcome = mutate.run_mutant("aten::any", mutate.CLASSES["error_class"], mutate.facts("aten::any", cases),
                                cases, "eager")
    assert outcome.status == "excluded" and "no input to reject" in outcome.reason


def test_a_promotion_mutant_of_an_out_overload_is_caught_by_the_out_dtype_check():
    """A kernel computing in the out tensor's dtype does not refuse a float result into a long out."""
    cases = _contract_cases("neg", "out_dtype")
    f = mutate.facts("aten::neg.out", cases)
    outcome = mutate.run_mutant("aten::neg.out", mutate.CLASSES["promotion"], f, cases, "eager")
    assert outcome.status == "caught" and outcome.killer.startswith("contract:neg out_dtype"), outcome.reason


@pytest.mark.parametrize("name, op", [("softmax", "aten::_softmax.out"), ("addcdiv", "aten::addcdiv.out")])
def test_a_float_out_of_another_dtype_catches_a_kernel_computing_in_it(name, op):
    """The out_dtype check also tries a float out PyTorch's casting allows (float16 for a float32 result):
    softmax refuses it on CPU (the mutant computes instead); addcdiv computes in float32 and casts, so the
    mutant's float16 arithmetic differs from the device's own functional result cast, bit for bit."""
    cases = _contract_cases(name, "out_dtype")
    outcome = mutate.run_mutant(op, mutate.CLASSES["promotion"], mutate.facts(op, cases), cases, "eager")
    assert outcome.status == "caught" and outcome.killer.startswith(f"contract:{name} out_dtype"), outcome.reason


def test_suite_cases_include_the_opinfo_and_contract_rows(tmp_path):
    from harness import contract, opinfo
    from harness.runner import run_case
    from harness.store import Store

    store = Store(tmp_path / "r.sqlite")
    run = store.start_run("opsuite", {}, "quick")
    designed = design.cases("neg")[0]
    result = run_case(designed.case)
    result.design_id = designed.id
    store.add(run, result, "pointwise")
    for r in contract.run_check(opinfo.find("neg"), "out_resize", [torch.float32], "neuron", 1):
        store.add(run, r, "contract")
    for r in opinfo.run_op(opinfo.find("neg"), [torch.float32], "neuron", 1, False, False):
        store.add(run, r, "opinfo")
    store.finish_run(run)
    _, cases = mutate.suite_cases(store)
    by_source = {c.source: c for c in cases}
    assert set(by_source) == {"spec", "opinfo", "contract"}
    assert "aten::neg.out" in by_source["contract"].reached and "aten::neg.out" in by_source["opinfo"].reached
    f = mutate.facts("aten::neg.out", cases)
    assert f.specs == ("neg",) and {"float32", "bfloat16"} <= f.sweep_dtypes and f.sweep_values
    outcome = mutate.run_mutant("aten::neg.out", mutate.CLASSES["out"], f, cases, "eager")
    assert outcome.status == "caught" and outcome.killer.startswith("contract:neg out_resize")
    store.close()


def test_an_op_reached_only_by_the_sweep_is_judged_by_its_rules():
    """No op spec reaches it, a contract case does: the rules read the sweep's dtypes (not a coverage gap)."""
    ov = mutate.overload("aten::index_select.out")
    f = mutate.OpFacts("aten::index_select.out", ov._schema, (), (), frozenset({"float32"}), True)
    assert f.reached and mutate.CLASSES["nan_inf"].rule(f) is None
    assert "no bfloat16" in mutate.CLASSES["bf16_rounding"].rule(f)


def test_a_gradient_mutant_is_caught_by_a_module_check():
    """nn.GELU's train check (forward and backward on the device) reaches gelu_backward's kernel."""
    from harness import coverage, modules

    results = modules.run_check(modules.find("nn_GELU"), "train", [torch.float32], "neuron", 1)
    cases = [mutate._sweep_case(r.case, coverage.reached([r])) for r in results if r.verdict == "pass"]
    op = "aten::gelu_backward.grad_input"
    assert cases and all(op in c.reached for c in cases)
    outcome = mutate.run_mutant(op, mutate.CLASSES["gradient"], mutate.facts(op, cases), cases, "eager")
    assert outcome.status == "caught" and outcome.killer.startswith("module:nn_GELU train"), outcome.reason


def test_an_in_place_kernel_reads_its_written_tensors_through_the_break():
    """_amp_foreach_non_finite_check_and_unscale_ returns nothing and reads the gradients it writes: a value break
    acts on them (before, no break reached them: its value mutants were never triggered)."""
    op = "aten::_amp_foreach_non_finite_check_and_unscale_"
    grads = [torch.tensor([1.0, float("nan"), -2.0], device="neuron")]
    found, inv = torch.zeros(1, device="neuron"), torch.ones(1, device="neuron")
    mutant = mutate.CLASSES["nan_inf"].make(op, "nan_inf", _facts(op, ()))
    with mutate.Planted(mutant):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert mutant.triggered and grads[0].cpu().tolist() == [1.0, 0.0, -2.0] and found.item() == 0.0
    strided = torch.arange(6.0, device="neuron").reshape(2, 3).t()
    mutant = mutate.CLASSES["layout"].make(op, "layout", _facts(op, ()))
    with mutate.Planted(mutant):
        torch._amp_foreach_non_finite_check_and_unscale_([strided], found, inv)
    assert mutant.triggered and strided.cpu().tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]  # read linearly


def test_index_bounds_counts_calls_with_an_integer_index():
    """A regression loss's ``target`` is named like an index and holds floats: no call gives it an index to clamp,
    which the rule of run_mutant reads (``index_reads``); nll_loss's target is one."""
    for op, call, reads in (
            ("aten::mse_loss", lambda a: F.mse_loss(a, a * 2), 0),
            ("aten::nll_loss_forward", lambda a: F.nll_loss(a, torch.tensor([0, 1], device="neuron")), 1)):
        mutant = mutate.CLASSES["index_bounds"].make(op, "index_bounds", _facts(op, ()))
        with mutate.Planted(mutant):
            call(torch.randn(2, 3, device="neuron"))
        assert mutant.calls == 1 and mutant.index_reads == reads, op


def test_an_index_bounds_mutant_of_an_op_cpu_does_not_bounds_check_is_excluded_by_its_own_cases():
    """CPU's embedding_dense_backward skips an out-of-range index (no error): the designed out-of-range case gives
    the kernel one and it returns, so a clamp "instead of raising" has no raise to replace. index_add.out raises
    for it, as CPU: the same rule leaves it to be caught."""
    for op, spec, status in (("aten::embedding_dense_backward", "embedding_dense_backward", "excluded"),
                             ("aten::index_add.out", "index_add", "caught")):
        cases = [mutate.StoredCase(d.case, {op}, {**d.cell.to_dict(), "design": d.id}, d.id)
                 for d in design.cases(spec) if d.cell.error == "oob_index"]
        outcome = mutate.run_mutant(op, mutate.CLASSES["index_bounds"], _facts(op, (spec,)), cases, "eager")
        assert outcome.status == status, (op, outcome.reason)
        assert status == "caught" or "does not bounds-check" in outcome.reason


def test_a_zero_sign_mutant_seen_only_where_the_spec_frees_zero_signs_is_excluded():
    """avg_pool2d_backward's float32 result never holds -0.0 (CPU's zero-initialised sum, and the device's): losing
    -0.0 changes its result only in the float16/bfloat16 cases (denormal inputs), whose zero signs the spec leaves
    free (ignore_zero_sign: CPU flushes denormals); the rule reads that from its calls, case by case."""
    op, spec = "aten::avg_pool2d_backward.grad_input", "avg_pool2d_backward"
    # the cells as drawn for every dtype x zero-bearing domain, half-precision denormals on strided layouts among them
    # (the design's own cells move as it grows: these coordinates hold the rule's case)
    cells = [design.Cell(dtype, domain, layout, size, edge) for dtype, domain, layout, size, edge in (
        ("float32", "special", "sliced", "tile-128", 127), ("float32", "signed_zero", "expanded", "tile-512", 511),
        ("float32", "denormal", "offset", "tile-2048", 2047), ("bfloat16", "special", "expanded", "small", 7),
        ("bfloat16", "signed_zero", "sliced", "tile-2048", 2048),
        ("bfloat16", "denormal", "channels_last", "tile-128", 129),
        ("float16", "special", "contiguous", "tile-2048", 2049), ("float16", "signed_zero", "offset", "tile-128", 129),
        ("float16", "denormal", "overlapping", "tile-512", 511))]
    drawn = [(cell, design.designed_case(SPECS[spec], cell)) for cell in cells]
    cases = [mutate.StoredCase(case, {op}, {**design.cells_of(case).to_dict(), "design": f"{spec}-{cell.id}"},
                               f"{spec}-{cell.id}") for cell, case in drawn]
    outcome = mutate.run_mutant(op, mutate.CLASSES["zero_sign"], _facts(op, (spec,)), cases, "eager")
    assert outcome.status == "excluded" and "equivalent where zero signs are compared" in outcome.reason, \
        outcome.reason


def test_an_in_place_random_mutant_is_caught_by_the_spec_invariant():
    """random_ on a strided view: its values are never compared, but every draw lies in [from, to), which a kernel
    that writes a temporary and leaves the view as it was breaks (the spec's invariant)."""
    op = "aten::random_.from"
    cases = [mutate.StoredCase(d.case, {op}, d.cell.to_dict(), d.id) for d in design.cases("random_")]
    outcome = mutate.run_mutant(op, mutate.CLASSES["inplace"], _facts(op, ("random_",)), cases, "eager")
    assert outcome.status == "caught", outcome
    assert any(layout in outcome.killer for layout in ("transposed", "sliced", "offset")), outcome.killer


def test_a_break_of_what_an_in_place_kernel_only_overwrites_is_equivalent():
    """fill_.Tensor writes its value over self without reading it: a NaN in self read as 0 changes nothing, which
    the clones' run tells (excluded as equivalent, not a survivor)."""
    op = "aten::fill_.Tensor"
    mutant = mutate.CLASSES["nan_inf"].make(op, "nan_inf", _facts(op, ()))
    x = torch.tensor([float("nan"), 1.0, 2.0], device="neuron")
    with mutate.Planted(mutant):
        x.fill_(torch.tensor(3.0, device="neuron"))
    assert x.cpu().tolist() == [3.0, 3.0, 3.0]
    assert mutant.triggered == 1 and mutant.equivalent == 1


def test_a_layout_mutant_of_an_op_that_reads_only_shapes_is_equivalent():
    """fill.Scalar_out reads only its input's shape: whichever order the mutant reads a transposed input in, the
    result is bit-identical (counted ``equivalent``); mul.out's result changes (not equivalent)."""
    x = torch.arange(12.0).reshape(3, 4).to("neuron").t()
    for op, call, equivalent in (("aten::fill.Scalar_out", lambda: torch.ops.aten.fill.Scalar_out(
            x, 2.0, out=torch.empty(0, device="neuron")), True), ("aten::mul.out", lambda: torch.mul(x, x), False)):
        mutant = mutate.CLASSES["layout"].make(op, "layout", _facts(op, ()))
        with mutate.Planted(mutant):
            call()
        assert mutant.triggered == 1 and (mutant.equivalent == 1) is equivalent, op


def test_a_layout_mutant_of_an_op_cpu_reads_as_dense_is_excluded_by_asking_cpu():
    """native_group_norm_backward's CPU kernel indexes its tensors as dense (autograd hands it contiguous ones): the
    rule asks CPU with the same values strided and sees its own result change. add.Tensor honours strides on CPU:
    nothing is blamed on CPU there."""
    x = torch.randn(2, 6, 5)
    _, mean, rstd = torch.ops.aten.native_group_norm(x, None, None, 2, 6, 5, 3, 1e-5)
    args = (torch.randn(2, 6, 5), x, mean, rstd, torch.randn(6), 2, 6, 5, 3, (True, True, True))
    op = "aten::native_group_norm_backward"
    assert "grad_out" in mutate._cpu_stride_blind(_facts(op, ()), args, {})
    assert mutate._cpu_stride_blind(_facts("aten::add.Tensor", ()), (torch.randn(3, 4), torch.randn(3, 4)), {}) == ()
    mutant = mutate.CLASSES["layout"].make(op, "layout", _facts(op, ()))
    device_args = tuple(a.to("neuron") if isinstance(a, torch.Tensor) else a for a in args)
    with mutate.Planted(mutant):
        torch.ops.aten.native_group_norm_backward(*device_args)
    assert mutant.triggered == 0 and "grad_out" in mutant.cpu_blind


def test_a_zero_sign_mutant_of_an_overload_cpu_serves_through_a_composite_is_excluded_by_rule():
    """CPU has no _thnn_fused_gru_cell_backward: gru_cell's composite decides its zero signs, which the gru_cell spec
    frees; the LSTM cell's spec compares them, so its fused backward stays in."""
    rule = mutate.CLASSES["zero_sign"].rule
    gru = mutate.OpFacts("aten::_thnn_fused_gru_cell_backward",
                         mutate.overload("aten::_thnn_fused_gru_cell_backward")._schema, (), ("gru_cell",),
                         frozenset({"float32"}), True)
    assert "no kernel for this overload" in rule(gru)
    lstm = mutate.OpFacts("aten::_thnn_fused_lstm_cell_backward_impl",
                          mutate.overload("aten::_thnn_fused_lstm_cell_backward_impl")._schema, (), ("lstm_cell",),
                          frozenset({"float32"}), True)
    assert rule(lstm) is None


def test_the_zero_sign_break_reaches_complex_parts():
    z = torch.complex(torch.tensor([-0.0, 1.0]), torch.tensor([2.0, -0.0]))
    broken = mutate.zero_sign_host(z)
    assert not torch.signbit(torch.view_as_real(broken)).any()
    assert mutate.zero_sign_host(torch.complex(torch.ones(2), torch.ones(2))) is None


def test_a_case_that_fails_without_the_mutant_acting_catches_nothing(monkeypatch):
    """A stored case that fails on its rerun while the planted mutant never acted in it (a nondeterministic case)
    is not the mutant's catch: the kernel behaved as the real one."""
    cases = _cases("mul")[:3]
    monkeypatch.setattr(mutate, "rerun", lambda stored, mode: ("fail", "values differ", ""))
    outcome = mutate.run_mutant("aten::mul.out", mutate.CLASSES["nan_inf"], _facts("aten::mul.out", ("mul",)),
                                cases, "eager")
    assert outcome.status == "survived" and "failed without the mutant acting" in outcome.reason, outcome


def test_planting_is_transparent_for_a_wrapped_number_an_aliased_out_and_a_storage_view():
    """A planted mutant that never acts must leave every call as the real kernel makes it:
    - ``x & 3`` reaches bitwise_and.Tensor_out with the 3 as a Python number (a wrapped number), which
      ``call_boxed`` refuses for a Tensor argument: the planting makes it a tensor again;
    - ``cumprod_`` is cumprod.out(self, out=self): a clean call before the real one would scan twice;
    - as_strided reads its input's storage, not its strides: the layout break has nothing to ignore there."""
    x = torch.tensor([5, 6, 7], dtype=torch.int32, device="neuron")
    op = "aten::bitwise_and.Tensor_out"
    mutant = mutate.CLASSES["nan_inf"].make(op, "nan_inf", _facts(op, ()))
    with mutate.Planted(mutant):
        assert (x & 3).cpu().tolist() == [1, 2, 3]
    assert mutant.calls == 1 and mutant.triggered == 0

    base = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    op = "aten::cumprod.out"
    mutant = mutate.CLASSES["bf16_rounding"].make(op, "bf16_rounding", _facts(op, ()))
    d = base.to("neuron")
    with mutate.Planted(mutant):
        d.cumprod_(0)
    assert mutant.calls == 1 and torch.equal(d.cpu(), base.cumprod(0))

    t = torch.arange(24.0).reshape(4, 6).to("neuron").t()
    op = "aten::as_strided"
    mutant = mutate.CLASSES["layout"].make(op, "layout", _facts(op, ()))
    with mutate.Planted(mutant):
        view = torch.as_strided(t, (3, 2), (2, 5), 1).cpu()
    assert torch.equal(view, torch.as_strided(torch.arange(24.0), (3, 2), (2, 5), 1))
    assert mutant.triggered == 1 and mutant.storage_reads == 1


def test_the_saturation_and_tile_edge_breaks_reach_complex_values():
    z = torch.complex(torch.tensor([-20.0, 1.0]), torch.tensor([2.0, 30.0]))
    broken = torch.view_as_real(mutate.saturation_host(z))
    assert broken.tolist() == [[0.0, 2.0], [1.0, 0.0]]
    long = torch.complex(torch.ones(129), torch.ones(129))
    assert torch.isnan(mutate.tile_edge_host(long)[-1]) and not torch.isnan(mutate.tile_edge_host(long)[:-1]).any()


def test_an_integer_result_written_into_a_float_out_reads_no_float():
    """bitwise_and with a float32 out= computes on integers (the out is written, not read): the rule for an op that
    rejects float operands must not count it as a float read that returned."""
    op = "aten::bitwise_and.Tensor_out"
    mutant = mutate.CLASSES["nan_inf"].make(op, "nan_inf", _facts(op, ()))
    a = torch.tensor([5, 6], device="neuron")
    with mutate.Planted(mutant):
        torch.bitwise_and(a, a, out=torch.empty(2, device="neuron"))
    assert mutant.float_reads == 0


def test_a_run_stopped_before_its_designed_cases_still_gives_its_cases(tmp_path):
    """``make report``'s eager run, cut by its time budget before the designed cases on a loaded machine, held only
    drawn cases: the mutation stage raised LookupError and stopped the whole report. Its cases are used instead
    (the report calls a score from few reached kernels not meaningful); a run with designed cases is preferred, and
    a store with no finished run in the mode is still an error."""
    from harness.runner import run_case
    from harness.store import Store

    store = Store(tmp_path / "r.sqlite")
    with pytest.raises(LookupError):
        mutate.suite_cases(store)
    designed = design.cases("neg")[0]
    drawn = design.cases("neg")[1].case
    run = store.start_run("opsuite", {}, "quick")
    store.add(run, run_case(drawn), "pointwise")  # no design id: a drawn case
    store.finish_run(run, "interrupted")
    run_id, cases = mutate.suite_cases(store)
    assert run_id == run and [c.case.spec for c in cases] == ["neg"] and cases[0].label == "drawn:neg"
    later = store.start_run("opsuite", {}, "quick")
    result = run_case(designed.case)
    result.design_id = designed.id
    store.add(later, result, "pointwise")
    store.finish_run(later)
    newest = store.start_run("opsuite", {}, "quick")
    store.add(newest, run_case(drawn), "pointwise")
    store.finish_run(newest)
    assert mutate.suite_cases(store)[0] == later  # the run with designed cases, though an older one
    store.close()
