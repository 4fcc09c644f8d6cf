"""A pytest plugin for ``pytest opsuite --neuron-mode compiled -p tests.compiler.opsuite_report``.

Prints, after the run, how the compiled cases were served: graphs compiled, cache hits, graphs that
fell back to eager (by op) and programs executed (device_impl.compiler.stats()). Also registers the
Hypothesis profile ``noshrink`` (the quick profile's cases without shrinking), for looking at many
failures fast: ``--hypothesis-profile noshrink``.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

settings.register_profile("noshrink", max_examples=4, derandomize=True, database=None, deadline=None,
                          phases=[Phase.explicit, Phase.generate], print_blob=False,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    import device_impl.compiler as compiler

    s = compiler.stats()
    tr = terminalreporter
    tr.write_sep("-", "neuron compiler")
    tr.write_line(f"dynamo graphs {s['graphs']}, AOT graphs compiled {s['compiles']}, cache hits {s['cache_hits']} "
                  f"{s['cache_hits_by_source']}, fallbacks {s['fallbacks']}, executions {s['executions']}, "
                  f"compile seconds {s['compile_seconds']:.1f}")
    for op, n in sorted(s["fallbacks_by_op"].items(), key=lambda kv: -kv[1]):
        tr.write_line(f"  fallback {n:4d}  {op}")
