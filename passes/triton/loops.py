"""Counted `while` loops of Triton kernels and the `for` loops over a range they are.

A kernel may count its K loop by hand:

    k = 0
    while k < K:
        ...            # no other write to k, no break / continue
        k += BLOCK_K

which is `for k in range(0, K, BLOCK_K)` with the counter's value after the loop left unread.
`counted_while` recognises such a loop where the reading is exact and `as_for` writes it as the
`for` loop (over `range`, or over `tl.range` with a pipeline depth: the software-pipelining
rule, `passes.triton.launch`). The rules that act on a counted loop (tensor descriptors, the
K-loop split of a causal kernel, ...) recognise the `for` form; `counted_loops` writes every
counted `while` of a kernel in that form so that a card without a site on the kernel as written
is asked again on it (`lineage.moves._normalized`). The gate checks every candidate made from
the result as from any other kernel.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from passes._source import ByteEdit
from passes.triton._py import PyModule, bound_names, names_in

if TYPE_CHECKING:
    from kir import KernelIR


@dataclass(frozen=True, slots=True)
class CountedWhile:
    """`name = start` ... `while name < stop:` body `name += step`: the `for` loop it is."""

    name: str
    start: ast.expr
    stop: ast.expr
    step: ast.expr
    increment: ast.AugAssign
    init: ast.Assign | None
    """The assignment of `start`, dropped by `as_for` (None where it shares a line with the
    loop)."""


def _assigns(node: ast.AST, name: str) -> bool:
    """Whether `node` (re)binds `name` anywhere inside it."""
    return any(name in bound_names(sub) for sub in ast.walk(node))


def counted_while(mod: PyModule, loop: ast.While) -> CountedWhile | None:
    """The counted form of `loop`, or None when it is not one: the test is `name < stop`, the
    body's last statement `name += step` is its only change of `name` (and of nothing the
    bounds read) and not its only statement, the body neither breaks nor continues, `name`
    was last set by a plain assignment in the same block with nothing between changing what
    that start reads, `name` is read nowhere but in the loop (a `for` leaves it at its last
    value, the `while` one step past it), and there is no `else:`."""
    test = loop.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Lt)
            and isinstance(test.left, ast.Name)) or loop.orelse or len(loop.body) < 2:
        return None
    name, stop = test.left.id, test.comparators[0]
    last = loop.body[-1]
    if not (isinstance(last, ast.AugAssign) and isinstance(last.op, ast.Add)
            and isinstance(last.target, ast.Name) and last.target.id == name):
        return None
    step = last.value
    limits = names_in(stop) | names_in(step)
    if name in limits or any(_assigns(stmt, n) for stmt in loop.body[:-1]
                             for n in limits | {name}):
        return None
    if any(isinstance(sub, (ast.Break, ast.Continue)) for stmt in loop.body for sub in ast.walk(stmt)):
        return None
    parent = mod.parents.get(loop)
    block = next((getattr(parent, f) for f in ("body", "orelse", "finalbody")
                  if loop in getattr(parent, f, [])), None)
    if block is None:
        return None
    at = block.index(loop)
    start, init, between = None, None, []
    for stmt in reversed(block[:at]):
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id == name):
            start, init = stmt.value, stmt
            break
        between.append(stmt)
    if start is None or any(_assigns(stmt, n) for stmt in between for n in names_in(start) | {name}):
        return None  # the start would be read at the loop with other values than at its assignment
    kernel = mod.kernel_of(loop)
    lo, hi = mod.span(loop)
    if kernel is None or any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                             and not lo <= mod.start(n) < hi for n in ast.walk(kernel)):
        return None  # read outside the loop (after it, or on an enclosing loop's next trip)
    if loop.body[-2].end_lineno >= last.lineno:
        return None  # the increment shares a line: it cannot be removed on its own
    if init is not None and init.end_lineno >= loop.lineno:
        init = None
    return CountedWhile(name, start, stop, step, last, init)


def as_for(mod: PyModule, loop: ast.While, counted: CountedWhile, *,
           stages: int | None = None) -> list[ByteEdit]:
    """Edits that write the counted `loop` as `for name in range(start, stop, step):`, or over
    `tl.range(..., num_stages=stages)` with `stages`: the header, the increment dropped, and
    the start's assignment dropped where `counted.init` names it (the loop binds the name)."""
    bounds = f"{mod.text(counted.start)}, {mod.text(counted.stop)}, {mod.text(counted.step)}"
    header = (f"for {counted.name} in tl.range({bounds}, num_stages={stages})" if stages is not None
              else f"for {counted.name} in range({bounds})")
    edits = [ByteEdit(mod.start(loop), mod.end(loop.test), header),
             ByteEdit(*mod.stmt_span(counted.increment), "")]
    if counted.init is not None:
        edits.insert(0, ByteEdit(*mod.stmt_span(counted.init), ""))
    return edits


def counted_loops(ir: KernelIR) -> KernelIR | None:
    """`ir` with every counted `while` loop of its kernels written as a `for` over a `range`
    (`counted_while`, `as_for`), or None when no kernel has one."""
    from kir import Edit, Span  # noqa: PLC0415

    mod = PyModule(ir)
    edits: list[ByteEdit] = []
    for kernel in mod.kernels():
        for loop in [n for n in ast.walk(kernel) if isinstance(n, ast.While)]:
            counted = counted_while(mod, loop)
            if counted is not None:
                edits.extend(as_for(mod, loop, counted))
    if not edits:
        return None
    edits.sort(key=lambda e: e.start)
    return ir.apply(Edit(Span(e.start, e.end), e.text) for e in edits)
