"""The C++ core is built once per torch version and source hash, then loaded without compiling."""

import json
import os
from pathlib import Path

from support import run_python

from device_impl import _build


def test_loaded_core_comes_from_the_keyed_cache():
    directory = _build.build_dir()
    assert directory.name == _build.build_key()
    assert f"torch-{__import__('torch').__version__}" == directory.parent.name
    assert (directory / f"{_build.EXTENSION_NAME}.so").exists()
    info = json.loads((directory / "build_info.json").read_text())
    assert info["key"] == _build.build_key()


def test_second_import_does_not_recompile():
    shared_object = _build.build_dir() / f"{_build.EXTENSION_NAME}.so"
    before = shared_object.stat().st_mtime_ns
    result = run_python("import json, device_impl._build as b; import device_impl; print(json.dumps(b.last_build))")
    assert result.returncode == 0, result.stderr
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert last["compiled"] is False
    assert shared_object.stat().st_mtime_ns == before


def test_key_changes_when_a_source_changes(tmp_path, monkeypatch):
    original = _build.build_key()
    fake_csrc = tmp_path / "csrc"
    fake_csrc.mkdir()
    for path in Path(_build.CSRC).iterdir():
        (fake_csrc / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(_build, "CSRC", fake_csrc)
    assert _build.build_key() == original
    (fake_csrc / "allocator.cpp").write_text((fake_csrc / "allocator.cpp").read_text() + "\n// edit\n")
    assert _build.build_key() != original


def test_cache_location_can_be_overridden(monkeypatch, tmp_path):
    monkeypatch.setenv("NEURONSIM_EXT_CACHE", os.fspath(tmp_path))
    assert str(_build.build_dir()).startswith(os.fspath(tmp_path))
