"""The conformance page's mutation score comes from the store's mutants table (reports never import
the harness's mutate module; this test writes the table through the harness's Store)."""

from __future__ import annotations

from harness.store import Store
from reports import conformance, data


def test_mutation_score_per_class_with_survivors_and_rules(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    run = store.start_run("mutate", {"torch": "test"})
    store.add_mutant(run, "eager", "aten::mul.out", "nan_inf", "caught", killer="mul-float32-special-contiguous-7")
    store.add_mutant(run, "eager", "aten::neg.out", "nan_inf", "survived", reason="never triggered")
    store.add_mutant(run, "eager", "aten::eq.Tensor_out", "zero_sign", "excluded", reason="no NaN-able dtype")
    store.commit()
    store.finish_run(run)
    store.close()
    with data.connect(tmp_path / "r.sqlite") as conn:
        m = conformance.mutation(conn)
    assert (m["caught"], m["judged"], m["mutants"]) == (1, 2, 3) and m["score"] == 0.5
    by_class = {r["class"]: r for r in m["classes"]}
    assert by_class["nan_inf"]["survived"] == 1 and by_class["zero_sign"]["score"] is None
    assert m["survivors"][0]["op"] == "aten::neg.out" and m["survivors"][0]["reason"] == "never triggered"
    assert m["rules"][0]["reason"] == "no NaN-able dtype"


def test_no_mutation_run_shows_nothing(tmp_path):
    Store(tmp_path / "r.sqlite").close()
    with data.connect(tmp_path / "r.sqlite") as conn:
        assert conformance.mutation(conn) is None
