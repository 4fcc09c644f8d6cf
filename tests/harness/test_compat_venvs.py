"""Compat environments: a step's log survives `python -m venv --clear` of the environment (it used to live
inside the venv, so the first step of a fresh target lost its own log and the job crashed reading it)."""

from __future__ import annotations

import sys

from harness.compat.venvs import Environment, Target


def test_logs_survive_clearing_the_venv(tmp_path):
    environment = Environment(Target.parse("2.13.0"), tmp_path / "torch-2.13.0")
    code, text = environment.run([sys.executable, "-m", "venv", "--clear", "--without-pip", str(environment.path)],
                                 "venv", 300)
    assert code == 0, text
    assert (environment.logs / "venv.log").exists()
    assert not environment.logs.is_relative_to(environment.path)
    code, text = environment.run([sys.executable, "-c", "print('step output')"], "step", 60)
    assert (code, text.strip()) == (0, "step output")
