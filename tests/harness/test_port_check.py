"""``python -m harness port-check`` end to end on a tiny causal model and a trace with a known answer.

The trace has three lengths (100, 120, 256) over ten requests; the first request (100) is the 10% warm-up.
Under multiple:128 that is 2 signatures (128, 256): 2 compiles, 1 recompile, and a padded fraction the test
computes by hand; under none it is 3 signatures, and with --exact-up-to 2 --sample 2 the replay runs only the
smallest and largest (100, 256), so 120 is estimated and says so. Three signatures are compiled in all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli
from harness.port import traces
from harness.port.traces import Request

HERE = Path(__file__).parent
LENGTHS = [100, 256, 120, 256, 100, 120, 100, 256, 100, 100]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("port")
    trace = traces.write(root / "lengths.csv", [Request(n) for n in LENGTHS])
    out = root / "reports" / "port.json"
    argv = ["port-check", f"{HERE / 'port_tiny.py'}:tiny", "--trace", str(trace), "--policies", "none",
            "multiple:128", "--exact-up-to", "2", "--sample", "2", "--json", str(out), "--quiet"]
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = cli.main(argv)
    return status, json.loads(out.read_text()), printed.getvalue(), out


def _policy(section: list[dict], name: str) -> dict:
    return next(row for row in section if row["policy"] == name)


def test_exit_status_and_outputs(run):
    status, report, text, out = run
    assert status == 0
    assert (out.parent / "port.html").exists()
    assert report["schema"] == "neuronsim.port/1"
    assert report["model"]["spec"].endswith("port_tiny.py:tiny")


def test_shape_stability_counts_are_exact(run):
    _, report, _, _ = run
    shape = report["shape_stability"]
    assert shape["programs_per_signature"] == 1
    bucketed = _policy(shape["policies"], "multiple:128")
    assert (bucketed["distinct_signatures"], bucketed["compiles"], bucketed["recompiles"]) == (2, 2, 1)
    none = _policy(shape["policies"], "none")
    assert (none["distinct_signatures"], none["compiles"], none["recompiles"]) == (3, 3, 2)
    # after the warm-up (one request of 100): 256 and 120 were never tested; 5 of 9 requests
    assert shape["raw"]["nobody_tested"] == pytest.approx(5 / 9)
    assert none["stall_requests"] == 2 and none["served_by_compiled_after_warmup"] == pytest.approx(7 / 9)
    assert bucketed["nobody_tested"] == pytest.approx(3 / 9)  # 120 shares 100's bucket, 256 does not
    assert bucketed["compile_seconds_estimated_share"] == 0 and none["compile_seconds_estimated_share"] > 0


def test_the_replay_compiled_each_needed_signature_once(run):
    _, report, _, _ = run
    assert report["method"]["measured_signatures"] == 3
    compiler = report["replay"]["compiler"]
    assert compiler["graphs"] == 3 and compiler["recompiles"] == 2
    assert compiler["compiles"] + compiler["cache_hits"] == 3  # compiled now, or served by the NEFF cache
    rows = {(s["batch"], s["length"]): s for s in report["signatures"]}
    assert set(rows) == {(1, 100), (1, 120), (1, 128), (1, 256)}
    assert [rows[k]["measured"] for k in sorted(rows)] == [True, False, True, True]
    assert rows[(1, 120)]["estimated"] is True
    lo, hi = rows[(1, 100)]["device_ms"], rows[(1, 128)]["device_ms"]
    assert min(lo, hi) <= rows[(1, 120)]["device_ms"] <= max(lo, hi)
    for key in ((1, 100), (1, 128), (1, 256)):
        assert rows[key]["device_ms"] > 0 and 0 < rows[key]["tensor_util"] < 1
        assert rows[key]["neff"] in ("compiled", "cache:disk", "cache:memory")


def test_batch_configuration(run):
    _, report, _, _ = run
    rows = report["batch"]["policies"]
    bucketed, none = _policy(rows, "multiple:128"), _policy(rows, "none")
    real = sum(LENGTHS)
    assert bucketed["padded_fraction"] == pytest.approx(1 - real / (7 * 128 + 3 * 256))
    assert none["padded_fraction"] == 0
    assert bucketed["estimated_share"] == 0 and none["estimated_share"] > 0
    assert bucketed["useful_util"] < bucketed["tensor_util"]  # padding keeps TensorE busy on nothing
    assert none["useful_util"] == pytest.approx(none["tensor_util"])
    assert report["batch"]["pareto"] and report["batch"]["recommendation"]["policy"] in report["batch"]["pareto"]
    assert report["batch"]["recommendation"]["rule"].startswith("among Pareto-optimal policies")


def test_correctness_on_real_tokens(run):
    _, report, _, _ = run
    c = report["correctness"]
    assert c["checked"] == 3 and c["passed"] == 3 and c["max_abs_err"] < 1e-3
    rows = {(s["batch"], s["length"]): s for s in report["signatures"]}
    assert rows[(1, 128)]["request_seq_len"] == 100  # replayed a real request of 100 tokens padded to 128


def test_operator_dependence_is_in_the_report(run):
    _, report, _, _ = run
    ops = report["operators"]
    assert ops["forward"] == {"batch": 1, "seq_len": 120}  # the median request (upper median of 10)
    names = {e["op"] for e in ops["ops"]}
    assert {"aten::embedding", "aten::mm", "aten::_softmax"} <= names
    assert ops["custom"] == [] and ops["by_tier"]["unsupported"] == 0


def test_the_summary_prints_three_answers_and_marks_estimates(run):
    _, _, text, _ = run
    assert "1. Shape stability" in text and "2. Operator dependence" in text and "3. Batch configuration" in text
    assert "Recommended:" in text and "Correctness: 3/3" in text
    none_row = next(line for line in text.splitlines() if line.strip().startswith("none ") and "%" in line
                    and "~" in line)
    assert none_row  # policy none rests on an estimated signature
    assert len(text.splitlines()) <= 45


def test_padding_that_changes_the_answer_is_caught(tmp_path, capsys):
    """A model that pools over the whole sequence: padded outputs differ from CPU eager on the real tokens."""
    trace = traces.write(tmp_path / "t.jsonl", [Request(100), Request(100)])
    status = cli.main(["port-check", f"{HERE / 'port_tiny.py'}:pooling", "--trace", str(trace), "--policies",
                       "multiple:128", "--json", str(tmp_path / "port.json"), "--quiet"])
    assert status == 1
    text = capsys.readouterr().out
    assert "Correctness: 0/1" in text and "MISMATCHES: 1x128 (values differ)" in text


def test_bad_inputs_are_clear_errors(tmp_path, capsys):
    (tmp_path / "bad.csv").write_text("seq_len\n12\nabc\n")
    assert cli.main(["port-check", "hf:llama", "--trace", str(tmp_path / "bad.csv")]) == 2
    assert "bad.csv line 3: seq_len must be a positive integer" in capsys.readouterr().err
    assert cli.main(["port-check", "nomodule_here:build", "--synthetic", "fixed:n=2"]) == 2
    assert "cannot import 'nomodule_here'" in capsys.readouterr().err
    assert cli.main(["port-check", "hf:notamodel", "--synthetic", "fixed:n=2"]) == 2
    assert "hf:notamodel is not a model known to transformers" in capsys.readouterr().err
    assert cli.main(["port-check", "hf:llama", "--synthetic", "fixed:n=2", "--policies", "zigzag"]) == 2
    assert "unknown bucketing policy 'zigzag'" in capsys.readouterr().err
