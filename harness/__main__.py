"""``python -m harness run | summary | opinfo | port-check | compat``: see harness.cli."""

from harness.cli import main

raise SystemExit(main())
