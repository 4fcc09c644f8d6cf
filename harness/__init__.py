"""The differential conformance harness (DESIGN.md section 4).

It drives torch on any device (``neuron`` by default) against CPU eager and
never imports device_impl: it only speaks PyTorch. One module per job:
cases (the case model), values and strategies (Hypothesis draws of shapes,
dtypes, layouts, value domains), specs (how each op is called and judged),
compare (the comparator), runner (one case, every check), modes, store
(SQLite results), repro (reproducers), xfails (expected failures as data),
coverage (what the cases reach of the device's lowering table), opinfo
(PyTorch's own op_db), pytest_plugin (`pytest opsuite`) and cli
(`python -m harness run | summary | opinfo`).
"""
