"""The import layering of device_impl: no import circle, and the lower layers never import the upper ones.

Every ``import`` statement counts, including those inside functions (a lazy import is still a dependency a
reader must follow). Layers, lowest first: ``_core``/``_build``/``_compat`` → ``engine`` → ``runtime`` →
``dispatch`` → ``kernels``/``amp``/``eager``/``compiler``/``distributed`` → ``neuron`` (the ``torch.neuron``
module) and the package's top level. ``harness`` never imports ``device_impl`` (it works against any device).
"""

from __future__ import annotations

import ast
import pathlib

import device_impl

ROOT = pathlib.Path(device_impl.__file__).parent
# package -> the device_impl packages it may import (besides itself)
ALLOWED = {
    "engine": {"_core", "_build", "_compat"},
    "runtime": {"_core", "_build", "_compat", "engine"},
    "dispatch": {"_core", "_build", "_compat", "engine", "runtime"},
}


def _modules(root: pathlib.Path) -> dict[str, pathlib.Path]:
    found = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(modules: dict[str, pathlib.Path], prefix: str) -> dict[str, set[str]]:
    def resolve(name: str) -> str:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target.startswith(prefix):
                    resolved = resolve(target)
                    if resolved and resolved != module:
                        edges[module].add(resolved)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_circle_inside_device_impl():
    assert _cycles(_imports(_modules(ROOT), "device_impl")) == []


def test_lower_layers_do_not_import_upper_ones():
    edges = _imports(_modules(ROOT), "device_impl")
    wrong = sorted(f"{m} imports {t}" for m, targets in edges.items() for t in targets
                   if _package(m) in ALLOWED and _package(t) != _package(m)
                   and _package(t) not in ALLOWED[_package(m)])
    assert wrong == []


def test_the_checks_see_a_planted_circle(tmp_path):
    pkg = tmp_path / "device_impl"
    (pkg / "runtime").mkdir(parents=True)
    (pkg / "dispatch").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "runtime" / "__init__.py").write_text("")
    (pkg / "dispatch" / "__init__.py").write_text("")
    (pkg / "runtime" / "a.py").write_text("def f():\n    from device_impl.dispatch import b\n")
    (pkg / "dispatch" / "b.py").write_text("from device_impl.runtime.a import f\n")
    edges = _imports(_modules(pkg), "device_impl")
    assert _cycles(edges) == [["device_impl.dispatch.b", "device_impl.runtime.a"]]


def _imports_device_impl(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").startswith("device_impl")
    return isinstance(node, ast.Import) and any(a.name.startswith("device_impl") for a in node.names)


def test_harness_never_imports_device_impl():
    harness = ROOT.parent / "harness"
    offenders = sorted(str(p.relative_to(harness.parent)) for p in harness.rglob("*.py")
                       if any(_imports_device_impl(n) for n in ast.walk(ast.parse(p.read_text()))))
    assert offenders == []


def test_test_modules_have_unique_basenames():
    """pytest imports each test file under its basename (rootdir-relative packages are not used here), so two
    ``test_x.py`` in different folders of one run collide ("import file mismatch", which stopped CI once:
    tests/harness/test_contract.py beside opsuite/test_contract.py)."""
    repo = ROOT.parent
    seen: dict[str, list[str]] = {}
    for folder in ("tests", "opsuite", "benches"):
        for path in (repo / folder).rglob("test_*.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(repo)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not clashes, f"test files sharing a basename (rename one): {clashes}"
