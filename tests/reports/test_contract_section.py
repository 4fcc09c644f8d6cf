"""The conformance page's device-contract section: rows per (source, check, mode) from the store alone."""

from reports import conformance, data
from harness.store import Store


def test_contract_section_counts_checks_and_lists_failures(tmp_path):
    path = tmp_path / "results.sqlite"
    store = Store(path)
    run = store.start_run("opsuite", {})
    for op, check, verdict in [("add", "out_device", "fail"), ("neg", "out_device", "pass"),
                               ("add", "variants", "pass"), ("nn_Linear", "train", "pass")]:
        store.add_row(run, source="module" if op.startswith("nn_") else "contract", op=op, mode="eager",
                      verdict=verdict, message=f"{op} {check} {verdict}", check_name=check, dtypes='["float32"]')
    store.finish_run(run)
    store.close()
    section = conformance.contract(data.connect(path))
    rows = {(r["source"], r["check"]): r for r in section["rows"]}
    assert rows[("contract", "out_device")]["fail"] == 1 and rows[("contract", "out_device")]["pass"] == 1
    assert rows[("module", "train")]["pass"] == 1
    assert [(f["op"], f["check"]) for f in section["failures"]] == [("add", "out_device")]


def test_no_contract_run_gives_no_section(tmp_path):
    path = tmp_path / "results.sqlite"
    store = Store(path)
    store.finish_run(store.start_run("opsuite", {}))
    store.close()
    assert conformance.contract(data.connect(path)) is None


def test_dynamic_sequences_come_from_the_run_holding_the_most(tmp_path):
    """make report's compiled run holds every spec's sequences, a later eager run a sample: the full sweep is shown
    beside the latest run's contract checks."""
    path = tmp_path / "results.sqlite"
    store = Store(path)
    for ops in (["add", "neg", "sin"], ["add"]):  # the compiled run's full sweep, then an eager run's sample
        run = store.start_run("opsuite", {})
        store.add_row(run, source="contract", op="add", mode="eager", verdict="pass", check_name="variants",
                      dtypes='["float32"]')
        for op in ops:
            store.add_row(run, source="dynamic", op=op, mode="compiled", verdict="fail" if op == "sin" else "pass",
                          check_name="dynamic_sizes", dtypes='["float32"]')
        store.finish_run(run)
    store.close()
    section = conformance.contract(data.connect(path))
    rows = {(r["source"], r["check"]): r for r in section["rows"]}
    assert rows[("dynamic", "dynamic_sizes")]["ops"] == 3 and rows[("contract", "variants")]["pass"] == 1
    assert section["run"] == "2, 1"
    assert [(f["op"], f["check"]) for f in section["failures"]] == [("sin", "dynamic_sizes")]
