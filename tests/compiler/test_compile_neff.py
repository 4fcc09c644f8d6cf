"""The NEFF file: a versioned, self-describing artifact that round-trips, and a loader that refuses damage."""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from device_impl.compiler import neff
from device_impl.compiler.errors import NeffFormatError
from device_impl.compiler.program import Program


def _program() -> Program:
    steps = [{"kind": "fill", "result": 3, "value": float("-inf"), "waits": []},
             {"kind": "copy", "output": 0, "src": 4, "waits": [0]}]
    return Program(name="g0_0_forward", inputs=[0], outputs=[4],
                   types={0: ((2, 3), "float32"), 1: ((3,), "bfloat16"), 3: ((), "float32"), 4: ((3, 2), "float32")},
                   views={4: {"op": "transpose", "src": 0, "permutation": [1, 0]}}, splats={3: float("-inf")},
                   buffers={0: {"kind": "input", "index": 0}, 1: {"kind": "constant"}}, steps=steps,
                   memory={"scratch_bytes": 128}, constants={1: np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)})


def test_round_trip_keeps_program_constants_and_metadata(tmp_path):
    program = _program()
    data = neff.dumps(program, {"platform": "trn1"}, "ab" * 32)
    path = tmp_path / "g.neff"
    neff.write(str(path), data)
    loaded = neff.read(str(path))
    assert loaded.compiler_version == neff.COMPILER_VERSION and loaded.format_version == neff.FORMAT_VERSION
    assert loaded.flags == {"platform": "trn1"} and loaded.stablehlo_sha256 == "ab" * 32
    p = loaded.program
    assert p.to_json() == program.to_json()  # steps, views, buffers, types, splats (-inf included)
    assert p.splats[3] == float("-inf")
    assert p.constants[1].dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(p.constants[1].astype(np.float32), [1.5, -2.0, 3.25])


def test_header_is_self_describing_json():
    data = neff.dumps(_program(), {}, "0" * 64)
    magic, version, length = struct.unpack_from("<8sII", data)
    header = json.loads(data[16:16 + length])
    assert magic == neff.MAGIC and version == neff.FORMAT_VERSION
    assert {"format", "compiler_version", "flags", "stablehlo_sha256", "program", "memory_plan",
            "constants"} <= set(header)
    assert header["constants"][0]["dtype"] == "bfloat16" and header["constants"][0]["shape"] == [3]


@pytest.mark.parametrize("damage, reason", [
    (lambda d: d[: len(d) // 2], "checksum|truncated"),
    (lambda d: d[:10], "truncated"),
    (lambda d: b"NOTANEFF" + d[8:], "not a NEFF"),
    (lambda d: d[:8] + struct.pack("<I", neff.FORMAT_VERSION + 1) + d[12:], "format version"),
    (lambda d: d[:200] + bytes([d[200] ^ 0xFF]) + d[201:], "checksum"),
])
def test_loader_refuses_damaged_files_naming_the_file_and_the_fix(tmp_path, damage, reason):
    path = tmp_path / "entry.neff"
    path.write_bytes(damage(neff.dumps(_program(), {}, "0" * 64)))
    with pytest.raises(NeffFormatError, match=reason) as info:
        neff.read(str(path))
    assert str(path) in str(info.value) and "Delete the file" in str(info.value)


def test_writes_are_atomic(tmp_path):
    path = tmp_path / "sub" / "x.neff"
    neff.write(str(path), b"first")
    neff.write(str(path), b"second")
    assert path.read_bytes() == b"second"
    assert [p.name for p in path.parent.iterdir()] == ["x.neff"]  # no temporary files left behind
