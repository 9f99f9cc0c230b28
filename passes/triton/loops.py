"""Counted `while` loops of Triton kernels read as `for ... in range(...)` loops.

A kernel may count its K loop by hand:

    k = 0
    while k < K:
        ...            # no other write to k, no break / continue
        k += BLOCK_K

which is `for k in range(0, K, BLOCK_K)` with the counter's value after the loop left unread.
The rules that act on a counted loop (tensor descriptors, pipelining, the K-loop split of a
causal kernel, ...) recognise the `for` form; `counted_loops` writes every such `while` of a
kernel in that form so that a card without a site on the kernel as written is asked again on it
(`lineage.moves._normalized`). The gate checks every candidate made from the result as from any
other kernel.

A loop is rewritten only where the reading is exact: its test is `counter < bound` (the bound
not written in the body), its last statement `counter += step` with a positive literal step or
a name the kernel never assigns (a constexpr block size), no other statement of the loop writes
the counter, nothing breaks out of it or skips to its next turn, it has no `else`, and the
kernel reads the counter nowhere after it. The counter's start is the value of its last
assignment before the loop in the same block when nothing between reads it (that assignment is
then dropped); else the counter's value as the loop starts (`range(k, ...)`).
"""
from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from passes._source import ByteEdit
from passes.triton._py import PyModule

if TYPE_CHECKING:
    from kir import KernelIR


def _writes(node: ast.AST, name: str) -> bool:
    """Whether `node` assigns `name` anywhere (assignment, augmented, loop target, walrus)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, (ast.Store, ast.Del)):
            return True
    return False


def _reads(nodes: list[ast.stmt], name: str) -> bool:
    return any(isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, ast.Load)
               for node in nodes for sub in ast.walk(node))


def _jumps(body: list[ast.stmt]) -> bool:
    """A `break` or `continue` of this loop (those of loops nested in it are theirs)."""
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Break, ast.Continue)):
            return True
        if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
            todo.extend(node.orelse)  # a nested loop's body jumps within itself
            continue
        todo.extend(ast.iter_child_nodes(node))
    return False


def _step(stmt: ast.stmt, counter: str, kernel: ast.FunctionDef) -> ast.expr | None:
    """The step of `counter += step` when it is a positive literal or a name the kernel never
    assigns, else None."""
    if not (isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add)
            and isinstance(stmt.target, ast.Name) and stmt.target.id == counter):
        return None
    step = stmt.value
    if isinstance(step, ast.Constant) and type(step.value) is int and step.value > 0:
        return step
    if isinstance(step, ast.Name) and not any(_writes(s, step.id) for s in kernel.body):
        return step
    return None


def _blocks(node: ast.AST) -> list[list[ast.stmt]]:
    """Every statement list under `node` (bodies, else branches, handlers)."""
    out = []
    for sub in ast.walk(node):
        for field in ("body", "orelse", "finalbody"):
            value = getattr(sub, field, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                out.append(value)
    return out


def _after(kernel: ast.FunctionDef, loop: ast.While) -> list[ast.stmt]:
    """The statements that may run after `loop`: those after it in its block and in every
    enclosing block (a loop around it runs it again: its own body counts too)."""
    out: list[ast.stmt] = []
    for block in _blocks(kernel):
        for i, stmt in enumerate(block):
            if stmt is loop:
                out.extend(block[i + 1:])
            elif stmt is not loop and any(sub is loop for sub in ast.walk(stmt)):
                out.extend(block[i + 1:])
                if isinstance(stmt, (ast.For, ast.While)):
                    out.extend(s for s in stmt.body if not any(sub is loop for sub in ast.walk(s)))
    return out


def _loop_edits(mod: PyModule, kernel: ast.FunctionDef, loop: ast.While) -> list[ByteEdit] | None:
    test = loop.test
    if loop.orelse or len(loop.body) < 2 or not (
            isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Lt)
            and isinstance(test.left, ast.Name)):
        return None
    counter, bound = test.left.id, test.comparators[0]
    step = _step(loop.body[-1], counter, kernel)
    if step is None or _jumps(loop.body) or any(_writes(s, counter) for s in loop.body[:-1]):
        return None
    if any(_writes(s, n.id) for s in loop.body for n in ast.walk(bound) if isinstance(n, ast.Name)):
        return None
    if _reads(_after(kernel, loop), counter):
        return None
    start_text, edits = counter, []
    block = next(b for b in _blocks(kernel) if any(s is loop for s in b))
    at = next(i for i, s in enumerate(block) if s is loop)
    for i in range(at - 1, -1, -1):
        stmt = block[i]
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == counter:
            if not _reads(block[i + 1:at], counter) and not _reads([stmt.value], counter):
                start_text = mod.text(stmt.value)
                edits.append(ByteEdit(*mod.stmt_span(stmt), ""))
            break
        if _writes(stmt, counter):
            break
    header_end = mod.source.index(b":", mod.end(test)) + 1
    edits.append(ByteEdit(mod.start(loop), header_end,
                          f"for {counter} in range({start_text}, {mod.text(bound)}, {mod.text(step)}):"))
    edits.append(ByteEdit(*mod.stmt_span(loop.body[-1]), ""))
    return edits


def counted_loops(ir: KernelIR) -> KernelIR | None:
    """`ir` with every counted `while` loop of its kernels written as a `for` over a `range`
    (module docstring), or None when no kernel has one."""
    from kir import Edit, Span  # noqa: PLC0415

    mod = PyModule(ir)
    edits: list[ByteEdit] = []
    for kernel in mod.kernels():
        for loop in [n for n in ast.walk(kernel) if isinstance(n, ast.While)]:
            done = _loop_edits(mod, kernel, loop)
            if done:
                edits.extend(done)
    if not edits:
        return None
    edits.sort(key=lambda e: e.start)
    return ir.apply(Edit(Span(e.start, e.end), e.text) for e in edits)
