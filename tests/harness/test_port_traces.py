"""Port-check traces (harness.port.traces): CSV/JSONL round trips, errors that name the line, and seeded synthetic
traces whose distributions have the advertised shape."""

from __future__ import annotations

import math
import statistics
from collections import Counter

import pytest

from harness.port import traces
from harness.port.traces import Request, TraceError


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize("timed", [False, True])
def test_round_trip(tmp_path, suffix, timed):
    requests = [Request(412, 1, 0.0 if timed else None), Request(97, 4, 0.125 if timed else None),
                Request(2048, 2, 3.5 if timed else None)]
    path = traces.write(tmp_path / f"t{suffix}", requests)
    assert traces.read(path) == requests


def test_csv_spellings_defaults_comments_and_extra_columns():
    text = "# exported from the gateway\nid,length,batch_size\n\na,12,\nb,7,3\n"
    assert traces.parse_csv(text) == [Request(12, 1), Request(7, 3)]


def test_jsonl_reads_objects_and_skips_blank_lines():
    text = '{"seq_len": 5}\n\n{"tokens": 9, "batch": 2, "arrival_s": 1.5}\n'
    with pytest.raises(TraceError, match="arrival_s is given for some requests but not others"):
        traces.parse_jsonl(text)
    assert traces.parse_jsonl('{"seq_len": 5}\n{"tokens": 9, "batch": 2}\n') == [Request(5), Request(9, 2)]


@pytest.mark.parametrize("text, message", [
    ("seq_len,batch\n12,1\n0,1\n", r"line 3: seq_len must be a positive integer \(got 0\)"),
    ("seq_len,batch\n12,1\n12.5,1\n", r"line 3: seq_len must be a positive integer \(got '12.5'\)"),
    ("seq_len,batch\n12,x\n", r"line 2: batch must be a positive integer"),
    ("seq_len,batch\n12\n", r"line 2: 1 values for 2 columns"),
    ("12,1\n13,1\n", r"line 1: the first line must be a header naming seq_len"),
    ("seq_len,arrival_s\n12,-1\n", r"line 2: arrival_s must be a finite number of seconds >= 0"),
    ("seq_len,arrival_s\n12,nan\n", r"line 2: arrival_s must be a finite number"),
    ("seq_len\n", r"a header but no requests"),
    ("", r"no requests"),
])
def test_csv_errors_name_the_line_and_the_fix(text, message):
    with pytest.raises(TraceError, match=message):
        traces.parse_csv(text, "lengths.csv")


@pytest.mark.parametrize("text, message", [
    ('{"seq_len": 3}\nnot json\n', r"lengths.jsonl line 2: not JSON"),
    ('[3, 1]\n', r"line 1: expected a JSON object"),
    ('{"batch": 2}\n', r"line 1: no seq_len"),
    ('{"seq_len": true}\n', r"line 1: seq_len must be a positive integer"),
    ('{"seq_len": 3, "length": 4}\n', r"line 1: two columns mean seq_len"),
])
def test_jsonl_errors_name_the_line(text, message):
    with pytest.raises(TraceError, match=message):
        traces.parse_jsonl(text, "lengths.jsonl")


def test_read_refuses_unknown_formats_and_missing_files(tmp_path):
    with pytest.raises(TraceError, match="unknown trace format '.txt'"):
        traces.read(tmp_path / "t.txt")
    with pytest.raises(TraceError, match="no such trace file"):
        traces.read(tmp_path / "missing.csv")


def test_synthetic_traces_are_seeded():
    a = traces.synthetic("lognormal:n=200,seed=3")
    assert a == traces.synthetic("lognormal:n=200,seed=3")
    assert a != traces.synthetic("lognormal:n=200,seed=4")
    assert len(a) == 200 and all(r.batch == 1 and r.arrival_s is None for r in a)


def test_fixed_and_uniform():
    assert {r.seq_len for r in traces.synthetic("fixed:n=20,length=300,batch=4")} == {300}
    assert {r.batch for r in traces.synthetic("fixed:n=20,length=300,batch=4")} == {4}
    lengths = [r.seq_len for r in traces.synthetic("uniform:n=2000,low=10,high=20")]
    assert min(lengths) == 10 and max(lengths) == 20 and len(set(lengths)) == 11


def test_lognormal_has_its_median_and_a_heavy_right_tail():
    lengths = [r.seq_len for r in traces.synthetic("lognormal:n=4000,median=300,sigma=0.9,max=100000,seed=1")]
    assert statistics.median(lengths) == pytest.approx(300, rel=0.06)
    # heavy right tail: the mean sits above the median by exp(sigma^2 / 2) = 1.5
    assert statistics.mean(lengths) / statistics.median(lengths) == pytest.approx(math.exp(0.81 / 2), rel=0.1)
    clipped = [r.seq_len for r in traces.synthetic("lognormal:n=4000,median=300,sigma=0.9,max=1000,seed=1")]
    assert max(clipped) == 1000


def test_bimodal_has_two_modes_in_the_given_proportion():
    lengths = [r.seq_len for r in traces.synthetic("bimodal:n=4000,short=64,long=1024,p_long=0.3,spread=0.1")]
    long = [n for n in lengths if n > 256]
    short = [n for n in lengths if n <= 256]
    assert len(long) / len(lengths) == pytest.approx(0.3, abs=0.03)
    assert statistics.median(short) == pytest.approx(64, rel=0.05)
    assert statistics.median(long) == pytest.approx(1024, rel=0.05)
    # nothing in between: the two modes are separate
    assert not [n for n in lengths if 128 < n < 512]


def test_poisson_arrivals_with_a_rate():
    requests = traces.synthetic("uniform:n=2000,low=1,high=4,rate=10")
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert arrivals[-1] / (len(arrivals) - 1) == pytest.approx(0.1, rel=0.1)


@pytest.mark.parametrize("spec, message", [
    ("gaussian:n=3", "unknown synthetic trace 'gaussian'"),
    ("lognormal:n=3,mode=4", "bad parameter 'mode=4'"),
    ("lognormal:median=abc", "parameter median .* must be a number"),
    ("lognormal:n=0", "n must be a positive integer"),
    ("uniform:low=10,high=5", "need 1 <= low <= high"),
    ("bimodal:p_long=2", "0 <= p_long <= 1"),
])
def test_bad_synthetic_specs(spec, message):
    with pytest.raises(TraceError, match=message):
        traces.synthetic(spec)


def test_describe_spells_out_every_parameter():
    text = traces.describe_synthetic("lognormal:n=10")
    assert text.startswith("lognormal:n=10,batch=1,seed=0")
    assert "median=384" in text and "sigma=0.9" in text


def test_arrival_order():
    requests = [Request(1, 1, 2.0), Request(2, 1, 0.5), Request(3, 1, 1.0)]
    assert [r.seq_len for r in traces.in_arrival_order(requests)] == [2, 3, 1]
    assert Counter(r.seq_len for r in traces.in_arrival_order([Request(5), Request(4)])) == {5: 1, 4: 1}
