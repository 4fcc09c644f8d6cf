"""Root conftest: the harness's pytest plugin (options --neuron-mode, --device, --results; Hypothesis profiles)."""

pytest_plugins = ["harness.pytest_plugin"]
