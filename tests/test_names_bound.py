"""Every name a module of the package reads is bound somewhere it can reach.

A name read where no scope around it binds it raises NameError only when that line runs, and
some lines run only on a GPU (the device branch of the gate's launch wrapper once named
`contextlib`, imported only inside other functions: every device gate raised, and no CPU test
reached the line). pyflakes finds such reads; what it also reports, a name a closure reads
that its function deletes after defining the closure (`del key` once the window is closed),
is bound in a scope around the read and is left out here."""
from __future__ import annotations

import ast
from pathlib import Path

from pyflakes import checker, messages

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kir", "anchors", "passes", "lineage", "gate", "grammars", "experts", "bench")
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _own_nodes(node: ast.AST) -> list[ast.AST]:
    """The nodes of `node`'s own scope: nested functions and classes are not walked into
    (their names, decorators and defaults are the scope's)."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(node))
    while todo:
        sub = todo.pop()
        out.append(sub)
        if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            todo += sub.decorator_list
            if not isinstance(sub, ast.ClassDef):
                todo += [*sub.args.defaults, *(d for d in sub.args.kw_defaults if d is not None)]
            continue
        if isinstance(sub, ast.Lambda):
            continue
        todo += list(ast.iter_child_nodes(sub))
    return out


def _bound(node: ast.AST) -> set[str]:
    """Names a function, lambda or module binds in its own scope (a function's parameters
    among them)."""
    out: set[str] = set()
    a = getattr(node, "args", None)
    if isinstance(a, ast.arguments):
        out |= {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
        out |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    for sub in _own_nodes(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
            out.add(sub.id)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in sub.names}
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(sub.name)
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            out.add(sub.name)
        elif isinstance(sub, (ast.Global, ast.Nonlocal)):
            out |= set(sub.names)
    return out


def unbound_reads(path: Path) -> list[str]:
    """`path:line: name` for each read of a name no scope around it binds."""
    source = path.read_text()
    tree = ast.parse(source, str(path))
    found = [m for m in checker.Checker(tree, filename=str(path)).messages
             if isinstance(m, messages.UndefinedName)]
    if not found:
        return []
    scopes = [n for n in ast.walk(tree) if isinstance(n, _FUNCTIONS)]
    top = _bound(tree)
    out = []
    for m in found:
        name = m.message_args[0]
        around = [s for s in scopes if s.lineno <= m.lineno <= (s.end_lineno or s.lineno)]
        if name in top or any(name in _bound(s) for s in around):
            continue
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        out.append(f"{shown}:{m.lineno}: {name}")
    return out


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
                  if "__pycache__" not in p.parts)


def test_every_name_a_module_reads_is_bound_in_a_scope_around_it() -> None:
    unbound = [line for path in _modules() for line in unbound_reads(path)]
    assert not unbound, "names read where nothing binds them:\n" + "\n".join(unbound)


def test_a_name_imported_only_in_another_function_is_found(tmp_path: Path) -> None:
    """The shape of the defect: `contextlib` imported inside one method, read in another."""
    path = tmp_path / "probe.py"
    path.write_text("class A:\n    def one(self):\n        import contextlib\n"
                    "        return contextlib.nullcontext()\n\n"
                    "    def two(self):\n        return contextlib.nullcontext()\n")
    assert unbound_reads(path) == ["probe.py:7: contextlib"]


def test_a_closure_over_a_name_its_function_deletes_is_not_reported(tmp_path: Path) -> None:
    path = tmp_path / "probe.py"
    path.write_text("def f():\n    key = 1\n    g = lambda: key\n    del key\n    return g\n")
    assert unbound_reads(path) == []

