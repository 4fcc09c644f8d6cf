"""Port readiness (DESIGN.md §6): the seed's three questions, answered in numbers on a model and its traffic.

``python -m harness port-check MODEL --trace FILE | --synthetic SPEC`` replays a
trace of request shapes under several bucketing policies in compiled mode and
reports (1) shape stability: signatures, compiles, recompiles, compile seconds,
traffic served by an already-compiled NEFF and shapes nobody tested; (2)
operator dependence: every op of a forward with its tier and custom ops by
name; (3) batch configuration: padding, device latency, TensorE utilization,
the Pareto front and a recommended policy. One module per job:

* ``traces``: read/write CSV and JSONL traces, seeded synthetic traces;
* ``models``: ``module:function`` factories and ``hf:NAME`` small-config models;
* ``device``: what the device module offers (``torch.neuron.compiler_stats`` ...),
  degrading to "not available on this device";
* ``signatures``: policies resolved against the trace, exact shape-stability counts, sampling;
* ``replay``: compile and run the chosen signatures once, check them against CPU eager;
* ``estimate``: interpolation for signatures not run;
* ``operators``: the ops of one eager forward and their tiers;
* ``answers``: the per-policy numbers, the Pareto front, the recommendation;
* ``check``: one port-check end to end -> a JSON-ready dict; ``summary``: the terminal text;
* ``cli``: the ``port-check`` subcommand.

Like the rest of the harness it speaks only PyTorch: device facts come from ``torch.<device>``.
"""
