"""The house reads bottom-up: packages import one way (kir -> anchors -> passes -> lineage;
gate imports kir and experts only; experts and kir import no package of the project) and no
package has an import cycle between its modules, counting imports made inside functions (a
lazy import is still a dependency) and the modules of its sub-packages."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kir", "anchors", "passes", "gate", "lineage", "experts")
# package -> the project's packages it may import (the floors below it)
ALLOWED: dict[str, set[str]] = {
    "kir": set(),
    "anchors": {"kir"},
    "gate": {"kir", "experts"},
    "passes": {"kir", "anchors", "gate", "experts"},
    "lineage": {"kir", "anchors", "passes", "gate", "experts"},
    "experts": set(),
}


def _modules(package: str) -> dict[str, Path]:
    """Dotted module name (without the package) -> file, sub-packages included."""
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT / package).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported(path: Path) -> list[str]:
    """The absolute dotted names `path` imports (`from a.b import c` gives a.b and a.b.c)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    return names


def module_imports(package: str) -> nx.DiGraph:
    """module -> modules of the same package it imports (anywhere in its text). A package's
    `__init__` (the empty name) is left out: it re-exports its modules, and a module importing
    the package means the module the name comes from."""
    graph = nx.DiGraph()
    modules = _modules(package)
    for name, path in modules.items():
        if not name:
            continue
        graph.add_node(name)
        for target in _imported(path):
            if not target.startswith(package + "."):
                continue
            rest = target[len(package) + 1:]
            # the longest module the dotted name reaches (a.b.c: module a.b, name c)
            while rest and rest not in modules:
                rest = rest.rpartition(".")[0]
            if rest and rest != name:
                graph.add_edge(name, rest)
    return graph


def package_imports() -> dict[tuple[str, str], list[str]]:
    """(package, imported package) -> the files holding such an import."""
    found: dict[tuple[str, str], list[str]] = {}
    for package in PACKAGES:
        for path in _modules(package).values():
            for target in _imported(path):
                top = target.split(".")[0]
                if top in PACKAGES and top != package:
                    found.setdefault((package, top), []).append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside_the_package(package: str) -> None:
    graph = module_imports(package)
    cycles = list(nx.simple_cycles(graph))
    assert cycles == [], f"{package}: import cycles {cycles}"


def test_the_scan_sees_the_gates_imports() -> None:
    graph = module_imports("gate")
    assert graph.has_edge("executor", "check") and graph.has_edge("ray_executor", "executor_base")
    assert graph.has_edge("executor", "ray_executor")  # the lazy import in open_executor


def test_packages_import_one_way() -> None:
    found = package_imports()
    assert ("lineage", "gate") in found and ("anchors", "kir") in found  # the scan sees them
    wrong = {f"{a} -> {b}": sorted(set(files)) for (a, b), files in found.items()
             if b not in ALLOWED[a]}
    assert wrong == {}, wrong


def test_the_scan_sees_a_lazy_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("from pkg.sub.b import x\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from pkg import a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert list(nx.simple_cycles(module_imports("pkg")))
