"""Each package reads bottom-up: no import cycle between its modules, counting imports made
inside functions (a lazy import is still a dependency)."""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_imports(package: str) -> nx.DiGraph:
    """module -> modules of the same package it imports (anywhere in its text)."""
    graph = nx.DiGraph()
    modules = {p.stem: p for p in (ROOT / package).glob("*.py") if p.stem != "__init__"}
    for name, path in modules.items():
        graph.add_node(name)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == package:  # from kir import cuda
                    targets = [a.name for a in node.names]
                elif node.module.startswith(package + "."):
                    targets = [node.module.split(".")[1]]
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".")[1] for a in node.names
                           if a.name.startswith(package + ".")]
            for target in targets:
                if target in modules and target != name:
                    graph.add_edge(name, target)
    return graph


@pytest.mark.parametrize("package", ["kir", "anchors"])
def test_no_import_cycle_inside_the_package(package: str) -> None:
    graph = module_imports(package)
    assert graph.number_of_edges() > 0  # the scan sees the package's imports at all
    cycles = list(nx.simple_cycles(graph))
    assert cycles == [], f"{package}: import cycles {cycles}"


def test_the_scan_sees_a_lazy_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("from pkg.b import x\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import a\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    assert list(nx.simple_cycles(module_imports("pkg")))
