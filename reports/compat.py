"""The compat page: what a new torch release (or nightly) broke or fixed on the device.

Reads the ``compat`` table of the results store, which ``python -m harness
compat`` fills with one record per session: the targets and, for each
consecutive pair, the diff (verdict counts per version, newly failing and newly
passing cases with causes and reproducers, install/build/import status, API
surface changes, core-opset drift).
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from typing import Any


def latest(conn: sqlite3.Connection) -> dict[str, Any] | None:
    """The newest compat session in the store, or None when the store has none (or no compat table)."""
    try:
        row = conn.execute("SELECT tag, created, payload FROM compat ORDER BY id DESC LIMIT 1").fetchone()
    except sqlite3.OperationalError:  # a store written before the compat table existed
        return None
    if row is None:
        return None
    payload = json.loads(row[2])
    for diff in payload.get("diffs", []):
        for key in ("newly_failing", "newly_passing"):
            groups: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
            for change in diff.get(key, []):
                groups[change["op"]][change["cause"]].append(change)
            diff[f"{key}_groups"] = {op: dict(causes) for op, causes in sorted(groups.items())}
        diff["verdicts"] = sorted({v for counts in diff.get("counts", {}).values() for v in counts})
    return {"tag": row[0], "created": row[1], **payload}
