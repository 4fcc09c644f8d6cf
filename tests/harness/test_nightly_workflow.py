"""The nightly workflow (.github/workflows/nightly.yml) cannot run here, so it must not be untested prose: every
command it runs is one the README documents, word for word, and parses with the project's own command lines."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"


def _commands() -> list[str]:
    """Each `run:` line of the workflow with the workflow's variables written as the README writes them."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    env = doc["env"]
    found = []
    for job in doc["jobs"].values():
        for step in job["steps"]:
            for line in str(step.get("run", "")).splitlines():
                line = " ".join(line.split())
                line = re.sub(r"\s*\|\|\s*true$", "", line)
                if not line or line.startswith(("set ", "echo ", "exit ")):
                    continue
                line = line.replace("$TARGETS", env["TARGETS"]).replace('"$TAG"', "T")
                line = line.replace("${{ matrix.shard }}/$SHARDS", "K/N").replace("${{ matrix.shard }}", "K")
                found.append(line)
    return found


def _readme_commands() -> set[str]:
    text = (ROOT / "README.md").read_text()
    return {" ".join(line.split()) for line in text.splitlines()}


def test_workflow_runs_the_documented_commands():
    commands = _commands()
    assert any("-m harness compat" in c and "--shard K/N" in c for c in commands)
    assert any("-m harness merge" in c for c in commands) and any("--diff-only" in c for c in commands)
    readme = _readme_commands()
    for command in commands:
        if command.startswith("make "):
            target = command.split()[1]
            assert re.search(rf"^{target}:", (ROOT / "Makefile").read_text(), re.M), command
            continue
        assert command in readme, f"not in README.md: {command}"


@pytest.mark.parametrize("command", [c for c in _commands() if "-m harness " in c])
def test_harness_commands_parse(command):
    argv = shlex.split(command.split("-m harness ", 1)[1])
    argv = [a for a in argv if "*" not in a] + (["x.sqlite"] if argv[0] == "merge" else [])
    args = build_parser().parse_args(argv)
    assert callable(args.func)


def test_pytest_options_exist():
    """The op-suite command's options are registered by the harness plugin and pytest-xdist."""
    command = next(c for c in _commands() if "-m pytest opsuite" in c)
    options = {a.split("=")[0] for a in shlex.split(command) if a.startswith("-") and a != "-m"}
    done = subprocess.run([sys.executable, "-m", "pytest", "opsuite", "--help", "-p", "no:cacheprovider"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for option in options:
        assert re.search(rf"(^|[\s,]){re.escape(option)}([\s=,]|$)", done.stdout, re.M), option
