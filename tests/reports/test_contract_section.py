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
