"""The compile cache (TORCH_NEURONX_NEFF_CACHE_DIR) across processes, damaged entries, the switch that
turns it off, and the compilation artifacts (TORCH_NEURONX_DEBUG_DIR)."""

from __future__ import annotations

import glob
import json
import os
import warnings

import pytest
import torch

import device_impl.compiler as compiler
from device_impl.compiler import backend, cache, neff
from support import padded_conv, run_python

BLOCK = """
import json, time, torch, device_impl
import device_impl.compiler as compiler
from harness.models import DecoderBlock
torch.manual_seed(0)
model = DecoderBlock(hidden=256, heads=4, kv_heads=2, seq=128).to("neuron")
x = torch.randn(2, 128, 256).to("neuron")
compiled = torch.compile(model, backend="neuron", fullgraph=True)
with torch.no_grad():
    out = compiled(x)
import sys
print(json.dumps({"stats": compiler.stats(), "checksum": float(out.cpu().double().sum()),
                  "imported_torch_mlir": "torch_mlir.fx" in sys.modules}))
"""


def _stats_of(result) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_second_process_is_served_from_the_cache(tmp_path):
    env = {"TORCH_NEURONX_NEFF_CACHE_DIR": str(tmp_path), "PYTHONPATH": os.getcwd()}
    cold = _stats_of(run_python(BLOCK, **env))
    warm = _stats_of(run_python(BLOCK, **env))
    assert cold["stats"]["compiles"] == 1 and cold["stats"]["cache_hits"] == 0
    assert warm["stats"]["compiles"] == 0 and warm["stats"]["cache_hits_by_source"]["disk"] == 1
    assert warm["checksum"] == cold["checksum"]
    assert len(glob.glob(str(tmp_path / "**" / "*.neff"), recursive=True)) == 1
    # the FX-level index names the NEFF: the warm process never imports the graph with torch-mlir
    assert cold["imported_torch_mlir"] and not warm["imported_torch_mlir"]
    assert len(glob.glob(str(tmp_path / "**" / "fx" / "**" / "*.key"), recursive=True)) == 1
    # and, the block being a plain inference graph, so does the Dynamo-level one (no AOTAutograd when warm)
    assert len(glob.glob(str(tmp_path / "**" / "dynamo" / "**" / "*.json"), recursive=True)) == 1


def _dynamo_entries(fresh) -> list[str]:
    return glob.glob(str(fresh / "cache" / "**" / "dynamo" / "**" / "*.json"), recursive=True)


def _no_aot(monkeypatch):
    """Make AOTAutograd raise: a compile that still succeeds was served by the Dynamo-level index."""
    import torch._dynamo.backends.common as common

    def refuse(*args, **kwargs):
        raise AssertionError("AOTAutograd ran")

    monkeypatch.setattr(common, "aot_autograd", lambda **kw: refuse)


def test_a_plain_inference_graph_skips_aot_autograd_when_warm(fresh, monkeypatch):
    x = torch.randn(8, 64)
    cold = _run_once(x)
    assert len(_dynamo_entries(fresh)) == 1
    _no_aot(monkeypatch)
    compiler.reset_stats()
    warm = _run_once(x)
    assert torch.equal(warm, cold)  # the same program, bit for bit
    s = compiler.stats()
    assert (s["compiles"], s["cache_hits_by_source"]["disk"]) == (0, 1)
    with torch.no_grad():  # another grad mode is another key: AOTAutograd traces it (and it raises here)
        torch._dynamo.reset()
        compiler.clear_cache()
        with pytest.raises(Exception, match="AOTAutograd ran"):
            torch.compile(_f, backend="neuron")(x.to("neuron"))


def _mutates(x):
    x.add_(1)
    return x * 2


def _view(x):
    return x.t() * 1, x.t()


def _identity_out(x):
    return x, x + 1


@pytest.mark.parametrize("fn,indexed", [(_mutates, False), (_view, False), (_identity_out, True)],
                         ids=["mutates_input", "returns_view", "returns_input"])
def test_graphs_whose_aot_wrapper_does_work_are_not_indexed(fresh, fn, indexed):
    """An input mutation, an output aliasing an input: AOTAutograd's runtime wrapper does real work for them
    (copies back, regenerates the view), so they never skip it; warm runs keep eager's semantics. (An input
    returned as is never reaches the graph: Dynamo returns it itself, so that graph is plain.)"""
    def run():
        torch._dynamo.reset()
        compiler.clear_cache()
        x = torch.arange(12.0).reshape(3, 4).to("neuron")
        out = torch.compile(fn, backend="neuron")(x)
        return x, out

    for _ in range(2):
        x, out = run()
        ref_x = torch.arange(12.0).reshape(3, 4)
        ref = fn(ref_x)
        torch.testing.assert_close(x.cpu(), ref_x)
        for o, r in zip(out if isinstance(out, tuple) else (out,), ref if isinstance(ref, tuple) else (ref,)):
            torch.testing.assert_close(o.cpu(), r)
        if fn is _view:
            assert out[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        if fn is _identity_out:
            assert out[0] is x
    assert len(_dynamo_entries(fresh)) == indexed


def test_a_training_graph_is_not_indexed(fresh):
    w = torch.randn(64, 64, device="neuron", requires_grad=True)
    torch.compile(lambda x: (x @ w).sum(), backend="neuron")(torch.randn(8, 64, device="neuron")).backward()
    assert w.grad is not None and _dynamo_entries(fresh) == []


@pytest.mark.parametrize("damage", ["garbage", "bad_key", "dangling"])
def test_a_bad_dynamo_index_entry_is_a_miss(fresh, damage):
    x = torch.randn(8, 64)
    _run_once(x)
    (entry,) = _dynamo_entries(fresh)
    if damage == "garbage":
        open(entry, "w").write("{not json")
    elif damage == "bad_key":
        open(entry, "w").write(json.dumps({"neff": "0" * 63 + "g", "kept": [True]}))
    else:
        (path,) = glob.glob(str(fresh / "cache" / "**" / "*.neff"), recursive=True)
        os.unlink(path)
    compiler.reset_stats()
    torch.testing.assert_close(_run_once(x), _f(x))
    assert compiler.stats()["compiles"] == (1 if damage == "dangling" else 0)
    assert json.load(open(entry))["neff"] != "0" * 63 + "g"  # rewritten by the compile through AOTAutograd


@pytest.mark.parametrize("damage", ["garbage", "dangling"])
def test_a_bad_fx_index_entry_is_a_miss(fresh, damage):
    """An index entry that is not a key, or names a NEFF that is gone, costs an import, never a wrong
    program: the graph is imported, compiled if need be, and the entry rewritten."""
    x = torch.randn(8, 64)
    _run_once(x)
    for dynamo_entry in _dynamo_entries(fresh):  # the index in front of this one: this test is about the FX one
        os.unlink(dynamo_entry)
    (entry,) = glob.glob(str(fresh / "cache" / "**" / "fx" / "**" / "*.key"), recursive=True)
    if damage == "garbage":
        open(entry, "w").write("not a key")
    else:
        (path,) = glob.glob(str(fresh / "cache" / "**" / "*.neff"), recursive=True)
        os.unlink(path)
    compiler.reset_stats()
    torch.testing.assert_close(_run_once(x), _f(x))
    s = compiler.stats()
    assert (s["compiles"], s["cache_hits_by_source"]["disk"]) == ((0, 1) if damage == "garbage" else (1, 0))
    assert len(open(entry).read()) == 64
    compiler.reset_stats()
    _run_once(x)
    assert compiler.stats()["cache_hits_by_source"]["disk"] == 1 and compiler.stats()["compiles"] == 0


def _f(x):
    return torch.softmax(x * 3, dim=-1) + 1


def _run_once(x):
    torch._dynamo.reset()
    compiler.clear_cache()
    return torch.compile(_f, backend="neuron")(x.to("neuron")).cpu()


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_entry_is_reported_once_and_rebuilt(fresh, damage):
    x = torch.randn(8, 64)
    _run_once(x)
    (path,) = glob.glob(str(fresh / "cache" / "**" / "*.neff"), recursive=True)
    data = open(path, "rb").read()
    with open(path, "wb") as handle:
        handle.write(data[: len(data) // 3] if damage == "truncate" else data[:100] + b"\0" * 8 + data[108:])
    compiler.reset_stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _run_once(x)
        _run_once(x)  # the rebuilt entry serves the next compile, with no new warning
    torch.testing.assert_close(out, _f(x))
    reports = [w for w in caught if "compile cache" in str(w.message) and path in str(w.message)]
    assert len(reports) == 1
    s = compiler.stats()
    assert s["cache_corrupt"] == 1 and s["compiles"] == 1 and s["cache_hits_by_source"]["disk"] == 1
    neff.read(path)  # the entry on disk is valid again


def _memo_entries(fresh) -> list[str]:
    return glob.glob(str(fresh / "cache" / "stablehlo" / "**" / "*.json"), recursive=True)


def _another_compiler(monkeypatch):
    """What a change to the compiler's sources does to the cache: a new compiler version, so a new NEFF
    directory and new FX and Dynamo indexes (nothing compiled before is found)."""
    monkeypatch.setattr(neff, "COMPILER_VERSION", neff.COMPILER_VERSION + "-changed")
    torch._dynamo.reset()
    compiler.clear_cache()
    compiler.reset_stats()


def _no_import(monkeypatch):
    """Make the torch-mlir import raise: a compile that still succeeds took its StableHLO from the memo."""
    from device_impl.compiler import importer

    def refuse(gm):
        raise AssertionError("torch-mlir imported the graph")

    monkeypatch.setattr(importer, "to_stablehlo", refuse)


def test_a_compiler_change_reuses_the_import_and_recompiles(fresh, monkeypatch):
    x = torch.randn(8, 64)
    cold = _run_once(x)
    assert len(_memo_entries(fresh)) == 1
    _another_compiler(monkeypatch)
    _no_import(monkeypatch)
    again = _run_once(x)
    s = compiler.stats()
    assert torch.equal(again, cold)
    # every pass ran again (a compile, no cache hit), from the memo's StableHLO
    assert (s["compiles"], s["cache_hits"], s["import_memo_hits"]) == (1, 0, 1)
    assert len(glob.glob(str(fresh / "cache" / "**" / "*.neff"), recursive=True)) == 2


def test_the_import_memo_is_keyed_by_the_graph_and_the_versions(fresh, monkeypatch):
    """Another graph, or the same one under another torch-mlir, is imported anew."""
    from device_impl.compiler import cache

    _run_once(torch.randn(8, 64))
    _another_compiler(monkeypatch)
    _run_once(torch.randn(8, 32))  # another input shape: another graph
    assert compiler.stats()["import_memo_hits"] == 0 and len(_memo_entries(fresh)) == 2
    monkeypatch.setattr(cache, "_VERSIONS", {**cache._versions(), "torch-mlir": "another"})
    _another_compiler(monkeypatch)
    _run_once(torch.randn(8, 64))
    assert compiler.stats()["import_memo_hits"] == 0 and len(_memo_entries(fresh)) == 3


def _stable_sort(x):
    """A graph torch-mlir refuses (lgamma: no conversion; sort.stable, the earlier example, now compiles)."""
    return torch.lgamma(x) * 2


def test_a_refused_import_is_remembered(fresh, monkeypatch):
    """torch-mlir's refusal of a graph is memoized too: the graph runs eagerly with the same reason, and neither
    a warm compile nor one after a compiler change imports it again."""
    from device_impl.compiler import fallback

    x = torch.randn(16)

    def run():
        monkeypatch.setattr(fallback, "_WARNED", set())  # warned once per op and process: each run warns
        torch._dynamo.reset()
        compiler.clear_cache()
        compiler.reset_stats()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = torch.compile(_stable_sort, backend="neuron")(x.to("neuron")).cpu()
        # the compiler's warnings (lgamma's eager run also takes the dispatcher's CPU fallback, warned once a process)
        return out, compiler.stats()["fallbacks_by_op"], [str(w.message) for w in caught
                                                           if str(w.message).startswith("torch.compile")]

    first, ops, messages = run()
    (entry,) = _memo_entries(fresh)
    assert "failure" in json.load(open(entry))["entry"]
    _another_compiler(monkeypatch)
    _no_import(monkeypatch)
    again, ops_again, messages_again = run()
    torch.testing.assert_close(again, _stable_sort(x))
    assert torch.equal(again, first) and ops_again == ops and ops
    assert messages_again == messages and any("lgamma" in m for m in messages)  # the same reason, in words


@pytest.mark.parametrize("damage", ["garbage", "flip"])
def test_a_damaged_import_memo_entry_is_a_miss(fresh, monkeypatch, damage):
    """A memo entry that is not JSON, or whose text no longer matches its checksum, costs an import, never a
    wrong program; the import rewrites it."""
    x = torch.randn(8, 64)
    cold = _run_once(x)
    (entry,) = _memo_entries(fresh)
    good = open(entry).read()
    if damage == "garbage":
        open(entry, "w").write("{not json")
    else:
        stored = json.loads(good)
        stored["entry"]["stablehlo"] = stored["entry"]["stablehlo"].replace("stablehlo.multiply", "stablehlo.add")
        assert stored["entry"]["stablehlo"] != json.loads(good)["entry"]["stablehlo"]
        open(entry, "w").write(json.dumps(stored))
    _another_compiler(monkeypatch)
    assert torch.equal(_run_once(x), cold)
    assert compiler.stats()["import_memo_hits"] == 0 and open(entry).read() == good


def test_disabling_the_cache_writes_nothing(fresh, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "1")
    backend.reload_settings()
    x = torch.randn(4, 16)
    _run_once(x)
    _run_once(x)
    assert not glob.glob(str(fresh / "cache" / "**" / "*.neff"), recursive=True) and not _memo_entries(fresh)
    assert compiler.stats()["compiles"] == 2 and compiler.stats()["cache_hits"] == 0


def test_changed_sources_names_edited_added_and_removed_files(tmp_path, monkeypatch):
    files = {name: tmp_path / name for name in ("a.py", "b.py", "c.py")}
    for path in files.values():
        path.write_text("x = 1\n")
    monkeypatch.setattr(neff, "digested_sources", lambda: sorted((n, p) for n, p in files.items() if p.exists()))
    monkeypatch.setattr(neff, "_SNAPSHOT", neff._snapshot(neff.digested_sources()))
    assert neff.changed_sources() == []
    files["a.py"].write_text("x = 22\n")  # another size: changed even within the clock's resolution
    files["b.py"].unlink()
    files["d.py"] = tmp_path / "d.py"
    files["d.py"].write_text("y = 2\n")
    assert neff.changed_sources() == ["a.py", "b.py", "d.py"]


def test_a_process_whose_compiler_sources_changed_caches_nothing(fresh, monkeypatch, caplog):
    """A checkout edited under a running process: its programs may come from code the version does not name,
    so it keeps them in memory only (they still run) and writes no NEFF, index or import memo."""
    name = sorted(neff._SNAPSHOT)[0]
    monkeypatch.setattr(cache, "_STALE_REPORTED", [])
    x = torch.randn(8, 64)
    with monkeypatch.context() as edited, caplog.at_level("WARNING", logger="torch_neuronx.cache"):
        edited.setitem(neff._SNAPSHOT, name, (0, -1))  # as if the file had been edited since the import
        first = _run_once(x)
        second = _run_once(x)
    torch.testing.assert_close(first, _f(x))
    assert torch.equal(second, first)
    assert not glob.glob(str(fresh / "cache" / "**" / "*.*"), recursive=True)
    assert compiler.stats()["compiles"] == 2
    warned = [r.getMessage() for r in caplog.records if "sources changed" in r.getMessage()]
    assert len(warned) == 1 and name in warned[0] and "restart the process" in warned[0]
    assert torch.equal(_run_once(x), first)  # the sources as imported again: the same graph is cached
    assert len(glob.glob(str(fresh / "cache" / "**" / "*.neff"), recursive=True)) == 1


def test_preserved_artifacts_hold_fx_stablehlo_and_neff(fresh, monkeypatch):
    debug = fresh / "debug"
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(debug))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    backend.reload_settings()
    _run_once(torch.randn(4, 16))
    (fx,) = glob.glob(str(debug / "fx_graphs" / "*.py"))
    (mlir,) = glob.glob(str(debug / "stablehlo" / "*.mlir"))
    (neff_file,) = glob.glob(str(debug / "neff" / "*.neff"))
    assert "torch.ops.aten" in open(fx).read()
    assert "stablehlo.reduce" in open(mlir).read() and "func.func @main" in open(mlir).read()
    assert any(step["kind"] == "fused" for step in neff.read(neff_file).program.steps)


def test_artifacts_are_not_kept_by_default(fresh, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(fresh / "debug"))
    backend.reload_settings()
    _run_once(torch.randn(4, 16))
    assert not (fresh / "debug").exists()


def test_bad_environment_values_name_the_variable(monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_NEFF_CACHE", "maybe")
    with pytest.raises(ValueError, match="TORCH_NEURONX_DISABLE_NEFF_CACHE"):
        backend.reload_settings()
    monkeypatch.delenv("TORCH_NEURONX_DISABLE_NEFF_CACHE")
    backend.reload_settings()


def test_a_neff_where_cpu_skips_padding_is_not_served_where_it_multiplies(fresh):
    """A program records whether its convolutions multiply their padding, as CPU's kernel for them does on this host
    now (compiler.conv_padding). With oneDNN turned off CPU multiplies it: the NEFF compiled while oneDNN skipped it
    must not be served, from the Dynamo-level index (an inference graph) or the FX-level one, and the recompiled
    program gives CPU's NaN."""
    from device_impl.kernels import cpu_host

    fn, x, w = padded_conv("conv2d")
    if not cpu_host.conv_skips_padding(x, w, [1, 1], [1, 1], [1, 1], 1):
        pytest.skip("this host's oneDNN multiplies this convolution's padding too: nothing to tell apart")
    nans = {}
    for onednn in (True, False, True):
        with torch.backends.mkldnn.flags(enabled=onednn):
            torch._dynamo.reset()
            compiler.clear_cache()  # the in-memory programs: only the disk cache can serve the call
            got = torch.compile(fn, backend="neuron", dynamic=False)(x.to("neuron"), w.to("neuron")).cpu()
            want = fn(x, w)
        assert torch.equal(got.isnan(), want.isnan())
        nans[onednn] = int(want.isnan().sum())
    assert nans[True] < nans[False]  # CPU's answer changed with the switch (60 and 132 NaN here)
    s = compiler.stats()
    # oneDNN on, compiled; off, compiled again (another key); on again, served from the disk
    assert (s["compiles"], s["cache_hits_by_source"]["disk"]) == (2, 1)


def test_the_thread_count_keys_only_graphs_that_may_convolve():
    """oneDNN's facts (its switch, the thread count ATen's backend heuristic reads, the ISA) are part of the
    Dynamo-level key only where a convolution may run: a process with another thread count (a benchmark's
    warm-compile child, a server pinning threads) still links a cached matmul graph without AOTAutograd."""
    graphs = {}

    def keep(gm, example_inputs):
        graphs.setdefault("gm", (gm, example_inputs))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(lambda x, w: torch.relu(x @ w), backend=keep, dynamic=False)(torch.randn(4, 4), torch.randn(4, 4))
    plain = graphs.pop("gm")
    torch.compile(lambda x, w: torch.nn.functional.conv2d(x, w, padding=1), backend=keep, dynamic=False)(
        torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3))
    conv = graphs.pop("gm")
    threads = torch.get_num_threads()
    keys = {}
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            keys[n] = [cache.dynamo_key(gm, inputs, {}) for gm, inputs in (plain, conv)]
    finally:
        torch.set_num_threads(threads)
        torch._dynamo.reset()
    assert keys[1][0] == keys[2][0]  # the matmul graph: one key whatever the threads
    assert keys[1][1] != keys[2][1]  # the convolution's: CPU's kernel choice may follow them
