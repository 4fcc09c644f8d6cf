"""``python -m harness compat --torch A --torch B ...``: the nightly job against upstream PyTorch.

For each torch target: prepare its environment (venvs.py), probe the API
surface the device relies on (probe.py), run the unit tests, ``pytest
opsuite`` (quick profile, every mode) and the OpInfo sweep inside it, all
writing to the same results store with the torch version on every run. Then
diff consecutive targets (diff.py), print the summary, write
``build/compat/diff.json``, record the diff in the store for the report, and
exit non-zero when something newly fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from harness.compat import diff as compat_diff
from harness.compat.venvs import COMPAT_DIR, Environment, Target, prepare
from harness.shards import Shard
from harness.store import DEFAULT_PATH, Store

SUITES = ("unit", "opsuite", "opinfo")


def _progress(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def junit_rows(path: Path) -> list[dict[str, Any]]:
    """pytest's JUnit XML as result rows: one per test, verdict pass/fail/error/skip/xfail."""
    if not path.exists():
        return []
    rows = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        verdict, message = "pass", ""
        for child in case:
            tag = child.tag
            if tag in ("failure", "error"):
                verdict, message = ("fail" if tag == "failure" else "error"), child.get("message") or ""
            elif tag == "skipped":
                kind = child.get("type", "")
                verdict = "xfail" if "xfail" in kind else "skip"
                message = child.get("message") or ""
        rows.append({"source": "unit", "op": name, "family": name.split("::")[0].rsplit(".", 1)[-1],
                     "mode": "unit", "verdict": verdict, "message": message[:2000]})
    return rows


def run_suites(environment: Environment, store_path: Path, suites: tuple[str, ...], modes: str,
               opinfo_samples: int | None, tag: str, shard: Shard | None = None, jobs: str | None = None,
               ) -> dict[str, str]:
    """Run the chosen suites in ``environment``; returns suite -> exit status text.

    With a shard, the op suite and the OpInfo sweep run their part of the work and the unit
    tests run in shard 1 only (they are one indivisible promise: the device works on this torch)."""
    python = str(environment.python)
    env = {"NEURONSIM_RUN_TAG": tag, "NEURONSIM_RESULTS": str(store_path)}
    shard_args = ["--shard", str(shard)] if shard else []
    outcomes: dict[str, str] = {}
    label = environment.target.label
    if "unit" in suites and (shard is None or shard.index == 1):
        _progress(f"[{label}] unit tests")
        junit = environment.logs / "unit.xml"
        code, _ = environment.run([python, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
                                   f"--junitxml={junit}"], "unit", 3600, env)
        rows = junit_rows(junit)
        store = Store(store_path)
        run_id = store.start_run("unit", {"torch": environment.torch_version, "tag": tag, "device": "neuron"})
        for row in rows:
            store.add_row(run_id, **row)
        store.commit()
        store.finish_run(run_id)
        outcomes["unit"] = f"exit {code}, {len(rows)} tests"
    if "opsuite" in suites:
        _progress(f"[{label}] pytest opsuite --neuron-mode {modes} (quick profile)")
        parallel = ["-n", jobs] if jobs else []
        code, _ = environment.run([python, "-m", "pytest", "opsuite", "-q", "-p", "no:cacheprovider",
                                   "--neuron-mode", modes, "--results", str(store_path), *shard_args, *parallel],
                                  "opsuite", 7200, env)
        outcomes["opsuite"] = f"exit {code}"
    if "opinfo" in suites:
        _progress(f"[{label}] OpInfo sweep (float32)")
        args = [python, "-m", "harness", "opinfo", "--dtypes", "float32", "--results", str(store_path), *shard_args]
        if opinfo_samples:
            args += ["--max-samples", str(opinfo_samples)]
        code, _ = environment.run(args, "opinfo", 7200, env)
        outcomes["opinfo"] = f"exit {code}"
    return outcomes


def _probe(environment: Environment) -> dict[str, Any] | None:
    code, text = environment.run([str(environment.python), "-m", "harness.compat.probe"], "probe", 600,
                                 {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    if code != 0:
        return None
    start = text.find("{")
    try:
        return json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError:
        return None


def run_target(target: Target, store_path: Path, tag: str, args: argparse.Namespace) -> None:
    """Prepare one target's environment, record its status and API probe, run its suites."""
    environment = prepare(target, progress=_progress)
    probe = _probe(environment) if environment.steps.get("install") == "ok" else None
    store = Store(store_path)
    status_run = store.start_run("compat-env", {
        "torch": environment.torch_version or target.label, "target": target.label, "tag": f"{tag}|{target.label}",
        "steps": environment.steps, "seconds": environment.seconds, "probe": probe})
    store.finish_run(status_run)
    store.close()
    _progress(f"[{target.label}] " + ", ".join(f"{k}: {v}" for k, v in environment.steps.items()))
    if environment.usable:
        shard = Shard.parse(args.shard) if args.shard else None
        outcomes = run_suites(environment, store_path, tuple(s for s in SUITES if s in args.suites), args.modes,
                              args.opinfo_samples, f"{tag}|{target.label}", shard, args.jobs)
        _progress(f"[{target.label}] " + ", ".join(f"{k}: {v}" for k, v in outcomes.items()))


def _target_rows(store: Store, tag: str, label: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(result rows, merged environment status) of one target in a compat session, from the store only
    (shards each record a status; a step is ok only if it was ok in every shard)."""
    key = f"{tag}|{label}"
    rows = [dict(r) for r in store.query(
        "SELECT r.* FROM results r JOIN runs u ON r.run_id = u.id "
        "WHERE json_extract(u.environment, '$.tag') = ? AND u.kind != 'compat-env'", (key,))]
    status: dict[str, Any] = {"steps": {}, "probe": None}
    for run in store.query("SELECT environment FROM runs WHERE kind = 'compat-env' "
                           "AND json_extract(environment, '$.tag') = ? ORDER BY id", (key,)):
        env = json.loads(run["environment"])
        for step, value in env.get("steps", {}).items():
            if status["steps"].get(step) in (None, "ok"):
                status["steps"][step] = value
        status["probe"] = status["probe"] or env.get("probe")
    return rows, status


def diff_session(store: Store, tag: str, labels: list[str]) -> list[compat_diff.VersionDiff]:
    """The diff of each consecutive pair of targets of session ``tag``, computed from the store."""
    data = {label: _target_rows(store, tag, label) for label in labels}
    diffs = []
    for base, new in zip(labels, labels[1:]):
        (rows_a, env_a), (rows_b, env_b) = data[base], data[new]
        d = compat_diff.diff_results(rows_a, rows_b, base, new)
        compat_diff.diff_environment(d, env_a["steps"], env_b["steps"])
        compat_diff.diff_apis(d, env_a["probe"], env_b["probe"])
        diffs.append(d)
    return diffs


def main(args: argparse.Namespace) -> int:
    targets = [Target.parse(t) for t in args.torch]
    if len(targets) < 2 and not args.single:
        print("compat needs at least two --torch targets to diff (or --single to run one)", file=sys.stderr)
        return 2
    store_path = Path(args.results)
    tag = args.tag or time.strftime("compat-%Y%m%dT%H%M%S")
    if not args.diff_only:
        for target in targets:
            run_target(target, store_path, tag, args)
        if args.shard:  # a shard's store is merged and diffed by the job that collects all shards
            _progress(f"shard {args.shard} done; merge the shard stores, then run with --diff-only --tag {tag}")
            return 0
    store = Store(store_path)
    labels = [t.label for t in targets]
    diffs = diff_session(store, tag, labels)
    for d in diffs:
        print(compat_diff.summary_text(d))
    payload = {"tag": tag, "targets": labels, "diffs": [compat_diff.to_json(d) for d in diffs]}
    COMPAT_DIR.mkdir(parents=True, exist_ok=True)
    out = COMPAT_DIR / "diff.json"
    out.write_text(json.dumps(payload, indent=1))
    store.record_compat(tag, payload)
    store.close()
    print(f"diff: {out}; store: {store_path}")
    return 1 if any(d.regressed for d in diffs) else 0


def add_parser(sub) -> None:
    p = sub.add_parser("compat", help="run the suites against several torch versions and diff them")
    p.add_argument("--torch", action="append", required=True, metavar="VERSION",
                   help="a torch release (2.14.1), 'nightly' or 'latest'; repeat, oldest first")
    p.add_argument("--suites", nargs="*", default=list(SUITES), choices=list(SUITES))
    p.add_argument("--modes", default="all", help="opsuite --neuron-mode (default: all)")
    p.add_argument("--opinfo-samples", type=int, default=None, help="cap OpInfo samples per op and dtype")
    p.add_argument("--tag", default=None, help="label of this compat session (default: a timestamp)")
    p.add_argument("--shard", default=None, metavar="K/N", help="run shard K of N of the op suite and OpInfo sweep")
    p.add_argument("--jobs", default=None, metavar="N", help="pytest-xdist workers for the op suite (-n N, 'auto')")
    p.add_argument("--diff-only", action="store_true", help="run nothing: diff session --tag from the store")
    p.add_argument("--single", action="store_true", help="allow a single target (no diff)")
    p.add_argument("--results", default=str(DEFAULT_PATH))
    p.set_defaults(func=main)
