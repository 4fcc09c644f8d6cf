"""``python -m device_impl build-core | smoke``.

build-core: compile the C++ core into its cache (or report that it is cached).
smoke: a short measured tour of the device (what `make report` prints first).
"""

from __future__ import annotations

import argparse
import json


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m device_impl")
    parser.add_argument("command", choices=["build-core", "smoke"])
    args = parser.parse_args()
    if args.command == "build-core":
        from device_impl import _build

        _build.load()  # already loaded by `import device_impl`; this reports how
        print(json.dumps(_build.last_build))
    else:
        from device_impl import smoke

        smoke.main()


if __name__ == "__main__":
    main()
