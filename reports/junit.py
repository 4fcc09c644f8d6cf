"""pytest's own outcome of each op-suite mode, from the JUnit XML `make report` writes (build/junit).

The store holds the harness's verdicts; a test can also fail outside them (an error in drawing a
case, a Hypothesis health check). Those show here, so the report never says "0 failures" while
pytest said otherwise.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

PREFIX = "opsuite-"


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:300] if (text or "").strip() else ""


def outcome(path: Path) -> dict[str, Any] | None:
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {"tests": 0, "failed": 0, "errors": 0, "skipped": 0, "xfailed": 0, "passed": 0}
    seconds = 0.0
    failed = []
    for suite in suites:
        seconds += float(suite.get("time", 0) or 0)
        for case in suite.iter("testcase"):
            counts["tests"] += 1
            name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
            failure, error, skipped = case.find("failure"), case.find("error"), case.find("skipped")
            if failure is not None or error is not None:
                node = failure if failure is not None else error
                counts["failed" if failure is not None else "errors"] += 1
                failed.append({"test": name, "kind": "failure" if failure is not None else "error",
                               "message": _first_line(node.get("message") or node.text)})
            elif skipped is not None:
                counts["xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"] += 1
            else:
                counts["passed"] += 1
    return {"counts": counts, "seconds": seconds, "failed": failed, "file": str(path)}


SHARD = re.compile(r"-(\d+)of(\d+)$")  # opsuite-compiled-1of2.xml: one of the processes a mode was split over


def outcomes(directory: Path) -> dict[str, dict[str, Any]]:
    """mode -> pytest outcome, for every build/junit/opsuite-<mode>.xml; a mode split over processes side by side
    (opsuite-<mode>-<k>of<n>.xml) is their sum, its seconds the longest one's (they ran at once)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.glob(f"{PREFIX}*.xml")) if directory.is_dir() else []:
        result = outcome(path)
        if result is None:
            continue
        mode = SHARD.sub("", path.stem[len(PREFIX):])
        if mode not in found:
            found[mode] = result
            continue
        whole = found[mode]
        whole["counts"] = {k: whole["counts"][k] + result["counts"][k] for k in whole["counts"]}
        whole["seconds"] = max(whole["seconds"], result["seconds"])
        whole["failed"] = whole["failed"] + result["failed"]
        whole["file"] = f"{whole['file']}, {result['file']}"
    return found
