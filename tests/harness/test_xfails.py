"""Meta tests of harness.xfails and of opsuite/xfails.toml itself."""

from __future__ import annotations

import pytest

from harness import opinfo
from harness.cases import Case
from harness.specs import SPECS
from harness.values import TensorSpec
from harness.xfails import CATEGORIES, XFails

TOML = '''
[[xfail]]
op = "cdist"
domain = "special"
category = "upstream"
message = "NaN at different positions"
reason = "CPU drops NaN"

[[xfail]]
op = "rfft"
dtype = "float32"
category = "numerics"
reason = "always differs"

[[xfail]]
op = "gather"
category = "semantics"
reason = "never fails"

[[xfail]]
source = "opinfo"
op = "cdist"
category = "unsupported"
reason = "the OpInfo of the same name"
'''


def case(op, domain="normal", dtype="float32", source="spec"):
    return Case(op, dtype, (TensorSpec((2,), dtype, "contiguous", domain, 0),), source=source)


def test_match_by_op_domain_dtype_and_message():
    xf = XFails.parse(TOML)
    assert xf.match(case("cdist", "special"), True, "output: NaN at different positions (1, 0)").op == "cdist"
    assert xf.match(case("cdist", "special"), True, "output: 3 elements outside") is None  # another failure
    assert xf.match(case("cdist", "normal"), True, "output: NaN at different positions") is None  # other domain
    assert xf.match(case("cdist", "special"), False) is None  # a message filter claims no passes
    assert xf.match(case("rfft", dtype="bfloat16"), True, "x") is None
    entry = xf.match(case("rfft"), False)  # passes where a failure was expected: xpass
    assert entry is not None and entry.passed == 1


def test_match_by_layout():
    xf = XFails.parse('''
[[xfail]]
op = "sdpa"
layout = "overlapping"
category = "upstream"
message = "NaN at different positions"
reason = "CPU reads memory it never wrote"
''')
    overlapping = Case("sdpa", "float32", (TensorSpec((2,), "float32", "overlapping", "normal", 0),))
    assert xf.match(overlapping, True, "output: NaN at different positions (0, 3)").op == "sdpa"
    assert xf.match(case("sdpa"), True, "output: NaN at different positions (0, 3)") is None  # contiguous


def test_sources_are_separate():
    xf = XFails.parse(TOML)
    assert xf.match(case("cdist", "normal", source="opinfo"), True, "anything").source == "opinfo"
    assert xf.match(case("gather", source="opinfo"), True, "x") is None


def test_stale_entries_are_those_whose_op_ran_without_a_match():
    xf = XFails.parse(TOML)
    xf.match(case("gather"), True, "x")  # an entry without message filter: matches (xfail)
    xf.match(case("cdist", "normal"), False)  # cdist ran, its entry never matched
    stale = [(e.source, e.op) for e in xf.stale()]
    assert stale == [("spec", "cdist")]  # rfft never ran: unknown, not stale
    assert xf.stale(source="opinfo") == []


def test_an_entry_naming_a_dtype_is_stale_only_once_that_dtype_ran():
    xf = XFails.parse('''
[[xfail]]
op = "sinh"
dtype = "bfloat16"
category = "numerics"
message = "elements outside"
reason = "bfloat16 only"
''')
    xf.match(case("sinh", dtype="float32"), False)  # a float32-only run says nothing about it
    assert xf.stale() == []
    xf.match(case("sinh", dtype="bfloat16"), False)
    assert [e.op for e in xf.stale()] == ["sinh"]


def test_unknown_ops_are_reported():
    xf = XFails.parse(TOML + '\n[[xfail]]\nop = "no_such_spec"\ncategory = "numerics"\nreason = "typo"\n')
    assert [e.op for e in xf.unknown(SPECS)] == ["no_such_spec"]


@pytest.mark.parametrize("entry,error", [
    ('op = "x"\ncategory = "flaky"\nreason = "r"', "category 'flaky'"),
    ('op = "x"\ncategory = "numerics"', "needs a reason"),
    ('op = "x"\ncategory = "numerics"\nreason = "r"\nsource = "mps"', "source 'mps'"),
    ('op = "x"\ncategory = "numerics"\nreason = "r"\ndtpye = "float32"', "unknown key"),
    ('op = "x"\ncategory = "numerics"\nreason = "r"\nmessage = "("', "not a regular expression"),
    ('category = "numerics"\nreason = "r"', "has no op"),
])
def test_malformed_entries_are_refused(entry, error):
    with pytest.raises(ValueError, match=error.replace("(", r"\(")):
        XFails.parse(f"[[xfail]]\n{entry}\n")


def test_the_suites_xfails_file_names_real_ops_and_categories():
    xf = XFails.load()
    assert xf.entries
    assert not xf.unknown(SPECS, "spec")
    assert not xf.unknown({opinfo.full_name(op) for op in opinfo.op_db()}, "opinfo")
    assert {e.category for e in xf.entries} <= set(CATEGORIES)
    assert all(len(e.reason) > 20 for e in xf.entries)
