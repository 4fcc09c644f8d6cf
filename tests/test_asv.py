"""asv across commits (issue 21): the configuration builds each commit in its own environment, the
regression gate's two ``asv continuous`` commands select every benchmark once and flag any change of a
deterministic device counter, and the nightly workflow runs asv's documented commands and publishes the
history with the reports. Checked with asv's own configuration loader, command line, benchmark discovery,
selection and comparison, so the test breaks when the README, the workflow or asv disagree."""

from __future__ import annotations

import importlib
import math
import re
import shlex
from pathlib import Path

import pytest
import yaml
from asv import config
from asv.benchmarks import Benchmarks
from asv.commands import make_argparser
from asv.commands.compare import _is_result_better
from asv_runner.discovery import disc_benchmarks

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"


def _conf() -> config.Config:
    return config.Config.load(str(ROOT / "asv.conf.json"))


def _readme_asv_commands() -> list[str]:
    """The asv command lines of README.md's shell blocks, whitespace normalised."""
    lines = [" ".join(line.split()) for line in (ROOT / "README.md").read_text().splitlines()]
    return [line for line in lines if line.startswith(".venv/bin/asv ")]


def _workflow_asv_commands() -> list[str]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    found = []
    for step in doc["jobs"]["asv"]["steps"]:
        for line in str(step.get("run", "")).splitlines():
            line = " ".join(line.split())
            if line.startswith(".venv/bin/asv "):
                found.append(line)
    return found


def _parse(command: str):
    """asv's own command line parses ``command`` (a README line such as `.venv/bin/asv run ...`)."""
    argv = shlex.split(command.replace("$(git rev-parse HEAD)", "0123abcd"))[1:]
    parser, _ = make_argparser()
    return parser.parse_args(argv)


def _gate() -> tuple:
    """The README's two `asv continuous main HEAD` commands: (exact counters, everything else)."""
    gate = [_parse(c) for c in _readme_asv_commands() if " continuous " in c and c.endswith(" main HEAD")]
    assert len(gate) == 2, "README documents the gate as two asv continuous commands"
    exact = [args for args in gate if args.factor == 1.0]
    rest = [args for args in gate if args.factor != 1.0]
    assert len(exact) == 1 and len(rest) == 1, [args.factor for args in gate]
    return exact[0], rest[0]


@pytest.fixture(scope="module")
def discovered() -> list:
    """Every benchmark asv finds in benches/ (imports the suites as asv's runner does)."""
    return list(disc_benchmarks(str(ROOT / "benches")))


def _selected(benchmarks: list, regex: list[str]) -> set[str]:
    """Names asv selects with ``--bench regex`` (its own selection over each parameter combination)."""
    dicts = [{"name": b.name, "params": [[repr(v) for v in values] for values in b.params]} for b in benchmarks]
    return set(Benchmarks(_conf(), dicts, regex=regex).keys())


def _deterministic(benchmarks: list) -> set[str]:
    """track_ benchmarks that read the simulated device's counters (the suites built on TrackSuite)."""
    common = importlib.import_module("benches.common")
    names = set()
    for benchmark in benchmarks:
        module, cls, method = benchmark.name.split(".")
        klass = getattr(importlib.import_module(f"benches.{module}"), cls)
        if issubclass(klass, common.TrackSuite) and method.startswith("track_"):
            names.add(benchmark.name)
    return names


def test_conf_builds_each_commit_in_its_own_environment():
    conf = _conf()
    assert conf.environment_type == "virtualenv"
    requirements = list(conf.matrix["req"].items())
    # torch first and pinned to the release the Makefile installs (a bare `torch` is a CUDA build)
    pinned = re.search(r"torch==([\d.]+)", (ROOT / "Makefile").read_text()).group(1)
    assert requirements[0] == ("torch", f"=={pinned}")
    assert any("--no-build-isolation" in c and "{build_cache_dir}" in c for c in conf.build_command)
    install = " ; ".join(conf.install_command)
    assert "{wheel_file}" in install and "--force-reinstall" in install
    assert install.index("{wheel_file}[test]") < install.index("--no-deps --force-reinstall")
    assert "-m device_impl build-core" in conf.install_command[-1]
    for directory in (conf.env_dir, conf.results_dir, conf.html_dir):
        assert Path(directory).resolve().is_relative_to(ROOT / "build"), directory


def test_readme_asv_commands_parse():
    commands = _readme_asv_commands()
    for verb in ("machine", "continuous", "run", "publish"):
        assert any(c.split()[1] == verb for c in commands), verb
    assert any("--python=same" in c for c in commands), "the .venv-only run stays documented"
    ranges = [_parse(c) for c in commands if c.split()[1] == "run" and "--python=same" not in c]
    assert ranges and all(args.range and ".." in args.range for args in ranges)
    for command in commands:
        assert callable(_parse(command).func), command


def test_gate_selects_every_benchmark_once(discovered):
    exact, rest = _gate()
    everything = {b.name for b in discovered}
    deterministic = _deterministic(discovered)
    assert deterministic and "bench_compile.CompileSeconds.track_cold_compile_seconds" not in deterministic
    assert _selected(discovered, exact.bench) == deterministic
    assert _selected(discovered, rest.bench) == everything - deterministic


def test_exact_half_flags_any_change():
    """asv's comparison with the exact half's factor marks a one-ulp change of a counter, either way;
    the other half's factor would let a 5% change of a counter pass unflagged."""
    exact, rest = _gate()
    for value in (1.25e-5, 20523524.0, 0.27425684514412):
        for changed in (math.nextafter(value, math.inf), math.nextafter(value, 0.0)):
            worse_or_better = (_is_result_better(changed, value, None, None, exact.factor)
                               or _is_result_better(value, changed, None, None, exact.factor))
            assert worse_or_better, (value, changed)
        assert not _is_result_better(value, value, None, None, exact.factor)
    assert not _is_result_better(1.05, 1.0, None, None, rest.factor)
    assert not _is_result_better(1.0, 1.05, None, None, rest.factor)


def test_nightly_runs_the_documented_asv_commands(discovered):
    commands = _workflow_asv_commands()
    readme = set(_readme_asv_commands())
    for command in commands:
        assert command in readme, f"not in README.md: {command}"
    verbs = [c.split()[1] for c in commands]
    assert verbs.index("machine") < verbs.index("run") < verbs.index("publish"), verbs
    parsed = [_parse(c) for c in commands]
    machine = {args.machine for args in parsed if getattr(args, "machine", None)}
    assert len(machine) == 1, f"every night benchmarks under one machine name: {machine}"
    run = next(args for c, args in zip(commands, parsed) if c.split()[1] == "run")
    assert run.range and run.skip_existing_commits and run.python is None  # per-commit environments
    exact = [args for c, args in zip(commands, parsed) if c.split()[1] == "continuous"]
    assert exact and exact[0].factor == _gate()[0].factor
    assert _selected(discovered, exact[0].bench) == _deterministic(discovered)


def test_nightly_keeps_and_publishes_the_history():
    doc = yaml.safe_load(WORKFLOW.read_text())
    steps = doc["jobs"]["asv"]["steps"]
    checkout = next(s for s in steps if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0, "asv builds commits from the history"
    results = _conf().results_dir
    rel = str(Path(results).resolve().relative_to(ROOT))
    restore = next(s for s in steps if str(s.get("uses", "")).startswith("actions/cache/restore"))
    save = next(s for s in steps if str(s.get("uses", "")).startswith("actions/cache/save"))
    assert restore["with"]["path"] == save["with"]["path"] == rel
    assert save.get("if") == "always()"
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    html = str(Path(_conf().html_dir).resolve().relative_to(ROOT))
    assert rel in upload["with"]["path"] and html in upload["with"]["path"]
    report = doc["jobs"]["report"]
    assert "asv" in report["needs"]
    download = next(s for s in report["steps"] if s.get("with", {}).get("name") == upload["with"]["name"])
    assert download["with"]["path"] == "build"
    render = [i for i, s in enumerate(report["steps"]) if "-m reports" in str(s.get("run", ""))]
    assert render and report["steps"].index(download) < render[0], "the reports read asv's results"
    published = next(s for s in report["steps"] if s.get("with", {}).get("name") == "reports")
    assert html in published["with"]["path"], "the reports' link to asv's HTML resolves in the artifact"
