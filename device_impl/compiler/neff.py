"""NEFF: the compiled artifact, a versioned and self-describing file.

Layout (little-endian)::

    magic            8 bytes   b"NEFFSIM\\0"
    format version   u32
    header length    u32
    header           JSON (utf-8): format, compiler version, flags, StableHLO sha256,
                     program (steps, buffers, views, the schedule recorded at compile time),
                     memory plan, constants index
    constants        raw bytes, each payload 64-byte aligned, at the offsets the index names
    checksum         32 bytes  sha256 of everything before it

``loads`` checks the magic, the format version, the lengths and the checksum
before trusting a byte, and raises NeffFormatError naming the file and what
to do. The format version changes whenever the layout or the program schema
does; the compiler version (``COMPILER_VERSION``) whenever code generation
does, so a cache never serves a program an older compiler produced.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from device_impl.compiler.errors import NeffFormatError
from device_impl.compiler.ir import numpy_dtype
from device_impl.compiler.program import Program

MAGIC = b"NEFFSIM\0"
FORMAT_VERSION = 2  # 2: the program carries its recorded schedule (compiler.replay)


def _source_digest() -> str:
    """A digest of the source a program's code generation and recorded schedule come from: the compiler's
    own, and the tile kernels and engine its steps run (an attention step runs kernels/attention.py's tile
    program; a NEFF stores the device time that program measured). Any change changes the version, so a
    cache never serves a program, or a schedule, that an older build produced."""
    digest = hashlib.sha256()
    for name, path in digested_sources():
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def digested_sources() -> list:
    """(name relative to device_impl, path) of every file the compiler version digests, sorted."""
    import pathlib

    package = pathlib.Path(__file__).parent.parent
    paths = [*package.joinpath("compiler").glob("*.py"), *package.joinpath("kernels").rglob("*.py"),
             *package.joinpath("engine").glob("*.py")]
    return sorted((path.relative_to(package).as_posix(), path) for path in paths)


def _snapshot(sources: list) -> dict[str, tuple[int, int]]:
    """name -> (modification time in ns, size) of each digested file: what ``changed_sources`` compares."""
    snapshot = {}
    for name, path in sources:
        try:
            stat = path.stat()
        except OSError:
            continue  # removed: absent from the snapshot, so it reads as changed
        snapshot[name] = (stat.st_mtime_ns, stat.st_size)
    return snapshot


def changed_sources() -> list[str]:
    """The digested files (relative to device_impl) that changed, appeared or disappeared since this process
    computed ``COMPILER_VERSION``.

    The version is a digest of the sources read when this module is imported, but the compiler's other modules
    (and the kernels a step runs) are imported later, lazily. A process whose checkout changes while it runs (a
    branch switch, an edit during a long sweep) can then produce programs with the new code under the old
    version, or with old code under a version a fresh process would compute for the new sources: either way a
    later process would be served a program its own code did not produce (seen twice: an acosh program without a
    fold that the current sources make). The cache asks this before it writes anything and writes nothing for
    such a process (``cache._write``). A few hundred ``stat`` calls: run only when something is about to be
    stored, after a compile."""
    now = _snapshot(digested_sources())
    return sorted(name for name in now.keys() | _SNAPSHOT.keys() if now.get(name) != _SNAPSHOT.get(name))


_SNAPSHOT = _snapshot(digested_sources())  # before the digest reads them: a change during the read shows too
COMPILER_VERSION = f"neuronsim-cc 0.1.0+{_source_digest()}"
_ALIGN = 64
_PREFIX = struct.Struct("<8sII")


@dataclass
class Neff:
    program: Program
    compiler_version: str
    flags: dict[str, Any]
    stablehlo_sha256: str
    created: float
    format_version: int = FORMAT_VERSION


def dumps(program: Program, flags: dict[str, Any], stablehlo_sha256: str) -> bytes:
    blobs: list[bytes] = []
    index = []
    offset = 0
    for vid, array in sorted(program.constants.items()):
        data = np.ascontiguousarray(array).tobytes()
        index.append({"value": vid, "dtype": str(array.dtype) if array.dtype.name != "bfloat16" else "bfloat16",
                      "shape": list(array.shape), "offset": offset, "nbytes": len(data)})
        padded = data + b"\0" * (-len(data) % _ALIGN)
        blobs.append(padded)
        offset += len(padded)
    header = {
        "format": "neuronsim-neff", "format_version": FORMAT_VERSION, "compiler_version": COMPILER_VERSION,
        "flags": flags, "stablehlo_sha256": stablehlo_sha256, "created": time.time(),
        "program": program.to_json(), "memory_plan": program.memory, "constants": index,
    }
    head = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    body = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(head)) + head + b"".join(blobs)
    return body + hashlib.sha256(body).digest()


def loads(data: bytes, path: str = "<bytes>") -> Neff:
    def fail(what: str) -> NeffFormatError:
        return NeffFormatError(f"{path}: {what}. Delete the file (a compile cache entry is rebuilt on the next "
                               f"compile) or recompile the model with this compiler ({COMPILER_VERSION}).")

    if len(data) < _PREFIX.size + 32:
        raise fail(f"truncated NEFF ({len(data)} bytes, shorter than its fixed header and checksum)")
    magic, version, head_len = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        raise fail(f"not a NEFF (magic {magic!r}, expected {MAGIC!r})")
    if version != FORMAT_VERSION:
        raise fail(f"NEFF format version {version}; this runtime reads version {FORMAT_VERSION}")
    body, checksum = data[:-32], data[-32:]
    if _PREFIX.size + head_len > len(body):
        raise fail(f"truncated NEFF (header of {head_len} bytes does not fit in {len(data)} bytes)")
    if hashlib.sha256(body).digest() != checksum:
        raise fail("checksum mismatch: the NEFF is corrupted or truncated")
    try:
        header = json.loads(body[_PREFIX.size:_PREFIX.size + head_len])
    except ValueError as e:
        raise fail(f"unreadable header ({e})") from None
    blob = body[_PREFIX.size + head_len:]
    constants = {}
    for entry in header["constants"]:
        start, n = entry["offset"], entry["nbytes"]
        if start + n > len(blob):
            raise fail(f"constant {entry['value']} lies outside the file")
        dtype = numpy_dtype(entry["dtype"])
        constants[int(entry["value"])] = np.frombuffer(blob[start:start + n], dtype=dtype).reshape(entry["shape"]).copy()
    program = Program.from_json(header["program"], constants)
    return Neff(program, header["compiler_version"], header["flags"], header["stablehlo_sha256"], header["created"],
                header["format_version"])


def write(path: str, data: bytes) -> None:
    """Atomically: a reader never sees a half-written file under ``path``."""
    import os
    import tempfile

    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=".neff-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def read(path: str) -> Neff:
    with open(path, "rb") as handle:
        return loads(handle.read(), path)
