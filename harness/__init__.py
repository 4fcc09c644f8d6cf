"""The differential conformance harness (see docs/architecture.md).

It drives torch on any device (``neuron`` by default) against CPU eager and
never imports device_impl: it only speaks PyTorch. The case model,
strategies, comparator, runner and results store land with the harness issue.
"""
