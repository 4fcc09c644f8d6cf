"""A stored failure's reproducer, run on its own, fails the same way (issue 4, acceptance 4).

For each planted bug, the failing case's reproducer is read back from the SQLite store and written
to a file. A fresh interpreter (tests/harness/planted.py) that never imports the harness runs each
file as ``__main__`` with the same bug planted there: it must raise an AssertionError of the kind of
the stored failure (harness.compare.failure_kind); then it runs it again with the real kernel back,
and it must pass. One interpreter runs all the files, one after the other, to keep the suite quick.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.compare import failure_kind
from harness import runner
from harness.pytest_plugin import Session, check_case
from harness.store import Store
from harness.xfails import XFails
from planted import PLANTS, plant
from test_planted_bugs import CASES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory) -> dict:
    """Plant each bug, run its case through the opsuite path into a store, read the reproducers back
    from the store, run them all in one fresh interpreter."""
    folder = tmp_path_factory.mktemp("reproducers")
    store = Store(folder / "results.sqlite")
    session = Session(store, store.start_run("planted", {}), XFails(), "neuron")
    with pytest.MonkeyPatch.context() as patch:  # the layout check on (``--check-strides on``), as test_planted_bugs
        patch.setattr(runner, "STRIDES", True)
        for name in sorted(PLANTS):
            with plant(name), pytest.raises(pytest.fail.Exception):
                check_case(session, CASES[name], name)
            session.record(name, "planted")
    rows = store.query("SELECT op, message, reproducer FROM results WHERE verdict = 'fail' ORDER BY id")
    store.close()
    assert len(rows) == len(PLANTS)
    messages, argv = {}, []
    for name, row in zip(sorted(PLANTS), rows):
        assert row["op"] == CASES[name].spec
        script = folder / f"repro_{name}.py"
        script.write_text(row["reproducer"])
        messages[name] = row["message"]
        argv += [name, str(script)]
    run = subprocess.run([sys.executable, str(HERE / "planted.py"), *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    return {"messages": messages, **report}


def test_reproducers_need_only_torch_and_the_device(reproduced):
    assert not reproduced["harness_imported"]


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_stored_reproducer_fails_the_same_way(name, reproduced):
    outcome, message = reproduced["outcomes"][name], reproduced["messages"][name]
    assert outcome["planted"] is not None, "the reproducer passed with the bug planted"
    assert failure_kind(outcome["planted"]) == failure_kind(message), (outcome["planted"], message)
    assert outcome["clean"] is None, f"the reproducer fails without the bug: {outcome['clean']}"
