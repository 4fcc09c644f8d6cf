"""One virtual environment per torch version under build/compat/, with the project installed into it.

Steps, each recorded as ``ok`` or the reason it failed (a version that cannot
be installed or built is a finding about that version, not a pile of test
failures): ``install`` (torch first, then the project without letting pip
replace that torch), ``build`` (the C++ core against this torch), ``import``
(``import device_impl`` registers the device). An environment whose stamp
(torch target + pyproject.toml hash) matches is reused, so a second run does
not reinstall gigabytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.env import ROOT

COMPAT_DIR = ROOT / "build" / "compat"
NIGHTLY_INDEX = "https://download.pytorch.org/whl/nightly/cpu"  # PyTorch's own nightly index (CPU builds)


@dataclass(frozen=True)
class Target:
    """What to install for one ``--torch`` value: a release (``2.14.1``), ``nightly``, or ``latest``."""

    label: str
    pip_args: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> "Target":
        text = text.strip()
        if text == "nightly":
            return cls("nightly", ("--pre", "torch", "--index-url", NIGHTLY_INDEX))
        if text == "latest":
            return cls("latest", ("--upgrade", "torch"))
        if re.fullmatch(r"\d+\.\d+(\.\d+)?([a-z0-9.+]*)?", text):
            return cls(text, (f"torch=={text}",))
        if text.endswith(".whl") or "/" in text:
            return cls(Path(text).name, (text,))
        raise ValueError(f"--torch {text!r}: expected a version (2.14.1), 'nightly', 'latest' or a wheel path")

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9.+-]", "_", self.label)


@dataclass
class Environment:
    target: Target
    path: Path
    steps: dict[str, str] = field(default_factory=dict)  # step -> "ok" | reason
    torch_version: str = ""
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def logs(self) -> Path:
        """Beside the venv, not in it: ``venv --clear`` empties the venv's folder, logs included."""
        return self.path.parent / f"{self.path.name}-logs"

    @property
    def usable(self) -> bool:
        return all(self.steps.get(s) == "ok" for s in ("install", "build", "import"))

    def run(self, args: list[str], log: str, timeout: float, env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run a command with this environment's Python first on PATH; its output goes to logs/<log>.log."""
        self.logs.mkdir(parents=True, exist_ok=True)
        full_env = dict(os.environ, VIRTUAL_ENV=str(self.path), PATH=f"{self.path / 'bin'}:{os.environ['PATH']}",
                        **(env or {}))
        full_env.pop("PYTHONPATH", None)
        with open(self.logs / f"{log}.log", "w") as out:
            try:
                done = subprocess.run(args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                      timeout=timeout)
                code = done.returncode
            except subprocess.TimeoutExpired:
                code = 124
        text = (self.logs / f"{log}.log").read_text(errors="replace")
        return code, text


def _project_requirements() -> list[str]:
    """The project's dependencies and test extra, minus torch (installed first, never replaced)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("test", []))
    return [r for r in wanted if not re.match(r"torch(\s|[<>=!~]|$)", r)]


def _stamp(target: Target) -> str:
    digest = hashlib.sha1((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:12]
    return json.dumps({"target": list(target.pip_args), "pyproject": digest})


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() or "Error" in ln]
    return (errors[-1] if errors else (lines[-1] if lines else "no output"))[:300]


def prepare(target: Target, progress=print, install_timeout: float = 3600) -> Environment:
    """Create (or reuse) the environment for ``target`` and run install, build and import."""
    path = COMPAT_DIR / f"torch-{target.slug}"
    environment = Environment(target, path)
    stamp_file = path / ".neuronsim-stamp"
    reuse = stamp_file.exists() and stamp_file.read_text() == _stamp(target) and environment.python.exists()
    started = time.perf_counter()
    if not reuse:
        progress(f"[{target.label}] creating {path.relative_to(ROOT)} and installing torch (minutes for large builds)")
        path.mkdir(parents=True, exist_ok=True)
        code, text = environment.run([sys.executable, "-m", "venv", "--clear", str(path)], "venv", 600)
        if code != 0:
            environment.steps["install"] = f"venv creation failed: {_last_error(text)}"
            return environment
        pip = [str(environment.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        code, text = environment.run(pip + ["setuptools>=64", "wheel"] + list(target.pip_args), "install-torch",
                                     install_timeout)
        if code != 0:
            environment.steps["install"] = f"torch could not be installed: {_last_error(text)}"
            return environment
        code, text = environment.run(pip + ["--no-build-isolation", "--no-deps", "-e", "."], "install-project",
                                     install_timeout)
        if code == 0:
            code, text = environment.run(pip + _project_requirements(), "install-requirements", install_timeout)
        if code != 0:
            environment.steps["install"] = f"the project could not be installed: {_last_error(text)}"
            return environment
    environment.steps["install"] = "ok"
    environment.seconds["install"] = time.perf_counter() - started
    code, text = environment.run([str(environment.python), "-c", "import torch; print(torch.__version__)"],
                                 "torch-version", 300, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    environment.torch_version = text.strip().splitlines()[-1] if code == 0 and text.strip() else "unknown"
    progress(f"[{target.label}] torch {environment.torch_version}: building the C++ core")
    started = time.perf_counter()
    code, text = environment.run([str(environment.python), "-m", "device_impl", "build-core"], "build", 3600,
                                 env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    environment.seconds["build"] = time.perf_counter() - started
    if code != 0:
        environment.steps["build"] = f"the C++ core did not build: {_last_error(text)}"
        return environment
    environment.steps["build"] = "ok"
    code, text = environment.run([str(environment.python), "-c",
                                  "import torch, device_impl; torch.ones(2, device='neuron').sum().item()"],
                                 "import", 600)
    environment.steps["import"] = "ok" if code == 0 else f"import failed: {_last_error(text)}"
    stamp_file.write_text(_stamp(target))
    return environment
