"""A run its time budget cut short is shown as such wherever the reports show its figures: the conformance page
and the summary name it (tests run of tests collected), and a mutation score judged against such a run's cases
says it is not meaningful (most kernels unreached for that reason alone), with the score over the reached kernels
beside it. The store is written through the harness's Store; the reports read only the store."""

from __future__ import annotations

import json

from harness.store import Store
from reports import cli, conformance, data

ENV = {"torch": "2.13.0", "device": "neuron"}


def _opsuite_run(store: Store, mode: str, ran: int, collected: int, stopped: str | None) -> int:
    run = store.start_run("opsuite", ENV, "quick")
    store.add_row(run, source="spec", op="add", mode=mode, verdict="pass", dtypes='["float32"]')
    store.set_progress(run, ran, collected)
    store.commit()
    store.finish_run(run, stopped)
    return run


def _mutate_run(store: Store, source: int) -> int:
    run = store.start_run("mutate", {**ENV, "mutate_source_run": str(source)})
    store.add_mutant(run, "eager", "aten::add.out", "nan_inf", "caught", killer="drawn:add", reached=True)
    store.add_mutant(run, "eager", "aten::add.out", "zero_sign", "survived", reason="never triggered", reached=True)
    for op in ("aten::mul.out", "aten::neg.out", "aten::exp.out"):
        for cls in ("nan_inf", "zero_sign"):
            store.add_mutant(run, "eager", op, cls, "survived", reason="no case of the op suite reaches this kernel",
                             reached=False)
    store.commit()
    store.finish_run(run)
    return run


def test_a_cut_run_and_a_mutation_score_judged_against_it_say_so(tmp_path):
    path = tmp_path / "r.sqlite"
    store = Store(path)
    eager = _opsuite_run(store, "eager", 48, 2104, "interrupted")
    _opsuite_run(store, "adaptive", 900, 900, None)
    _mutate_run(store, eager)
    store.close()
    report = cli.build(path, tmp_path / "out", tmp_path)
    conf = report["conformance"]
    assert conf["cut"] == {"eager": {"run": eager, "tests_run": 48, "tests_collected": 2104,
                                     "stopped": "interrupted"}}  # adaptive ran every test: not listed
    m = conf["mutation"]
    assert not m["meaningful"] and (m["unreached_kernels"], m["unreached_mutants"]) == (3, 6)
    assert (m["reached_caught"], m["reached_judged"], m["reached_score"]) == (1, 2, 0.5)
    page = (tmp_path / "out" / "conformance.html").read_text()
    assert f"eager run {eager} ran 48 of 2,104 tests (interrupted)" in page
    assert "Score not meaningful: 3 kernels reached by no stored case." in page
    assert "over the kernels a stored case reached: 1 of 2 caught (50.0%)" in page.lower()
    text = "\n".join(cli.summary(report))
    assert f"CUT SHORT: run {eager} ran 48 of 2,104 tests (interrupted)" in text
    assert "not meaningful: 3 kernels reached by no stored case" in text
    assert "cut short: 48 of 2,104 tests" in (tmp_path / "out" / "index.html").read_text()


def test_a_whole_run_keeps_its_score_with_the_unreached_count_beside_it(tmp_path):
    path = tmp_path / "r.sqlite"
    store = Store(path)
    eager = _opsuite_run(store, "eager", 2104, 2104, None)
    _mutate_run(store, eager)
    store.close()
    with data.connect(path) as conn:
        conf = conformance.build(conn, tmp_path / "coverage.json")
    m = conf["mutation"]
    assert conf["cut"] == {} and m["meaningful"] and m["score"] == 1 / 8  # unreached kernels are gaps: survivors
    cli.build(path, tmp_path / "out", tmp_path)
    page = (tmp_path / "out" / "conformance.html").read_text()
    assert "not meaningful" not in page and "3 kernels reached by no stored case (their 6 mutants" in page


def test_a_store_from_before_runs_said_how_far_they_got_shows_no_cut(tmp_path):
    path = tmp_path / "r.sqlite"
    store = Store(path)
    run = store.start_run("opsuite", ENV, "quick")
    store.add_row(run, source="spec", op="add", mode="eager", verdict="pass", dtypes=json.dumps(["float32"]))
    store.finish_run(run)  # no set_progress: tests_run/tests_collected NULL, as an older harness left them
    store.close()
    with data.connect(path) as conn:
        assert data.cut_short(conn, run) is None
