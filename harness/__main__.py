"""``python -m harness run | summary | opinfo | port-check | compat | mutate | coverage-cells``: see harness.cli."""

import os
import sys

if sys.argv[1:2] == ["mutate"]:
    # Mutants rerun the op suite's cases as `pytest opsuite` runs them: native kernels under the
    # host-compute guard (opsuite/conftest.py), set before anything imports torch and the device.
    os.environ.setdefault("NEURONSIM_ASSERT_NO_CPU", "1")

from harness.cli import main  # noqa: E402

raise SystemExit(main())
