"""Block reductions through atomics: every thread of the block adds (or takes the max / min of)
its value into one address with `atomicAdd` / `atomicMax` / `atomicMin`.

An `AtomicFold` is such a call standing as a statement of its own (its old value unused), at an
address every thread of a warp names alike (a shared scalar, a slot picked by block or warp
indices, a global output of the block), reached by whole warps together: every condition of a
branch or loop around it is the same for the threads of a warp (`Scope.threads`: uniform, or
constant on groups of 32), and so is the condition of a `return` / `goto` before it or in a
loop around it and of a `break` / `continue` of a loop around it (lanes leaving after it would
miss it the next time round). Then the warp may fold its values with shuffles first and one
lane make the warp's one atomic: the same fold in another order (a sum rounds differently, as
the atomics' own order already makes it; max / min of integers are exact). `atomic_folds`
gives the folds and, for an atomic that looks like one but is not, why (`recognize.Refusal`).
Positions are byte offsets of `KernelIR.source`. No GPU library is imported here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from passes.cuda._tree import (UNIFORM, Scope, callee, children, declared_names, if_parts,
                               subtree, text)
from passes.cuda.recognize import Refusal, Unit, _pointer_params, for_parts, subscript

if TYPE_CHECKING:
    from kir import KernelIR

_OPS = {"atomicAdd": "sum", "atomicAdd_block": "sum", "atomicMax": "max", "atomicMax_block": "max",
        "atomicMin": "min", "atomicMin_block": "min"}
_TYPES = {"sum": {"float", "double", "int", "unsigned", "unsigned int", "unsigned long long",
                  "unsigned long long int"},
          "max": {"int", "unsigned", "unsigned int", "unsigned long long", "long long"},
          "min": {"int", "unsigned", "unsigned int", "unsigned long long", "long long"}}
_TRIVIA = frozenset({"comment", "preproc_call"})


@dataclass(frozen=True, slots=True)
class AtomicFold:
    """`call(address, value);` at `span` (the statement), folding with `op` (sum | max | min)
    into an address of type `element`; `block` the launch's block where the host sets it."""

    kernel: str
    call: str
    op: str
    address: str
    value: str
    element: str
    span: tuple[int, int]
    block: tuple[int, int, int] | None


def atomic_folds(ir: KernelIR | Unit) -> tuple[list[AtomicFold], list[Refusal]]:
    """Every `AtomicFold` of the unit's kernels, and the atomics that are not, with why."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    out: list[AtomicFold] = []
    refused: list[Refusal] = []
    for name, fn in unit.kernels.items():
        scope = Scope(unit.ir)
        scope.enter(fn)
        for nid in subtree(unit.ir, fn):
            if unit.ir.grammar_type_of(nid) == "call_expression" and \
                    callee(unit.ir, nid) in _OPS:
                found = _fold(unit, scope, name, fn, nid)
                (out if isinstance(found, AtomicFold) else refused).append(found)  # type: ignore[arg-type]
    return out, refused


def _fold(unit: Unit, scope: Scope, kernel: str, fn: int, call: int) -> AtomicFold | Refusal:
    ir = unit.ir
    stmt = ir.parent_of(call)
    span = (ir.span_of(call).start, ir.span_of(call).end)
    name = callee(ir, call)

    def refuse(why: str) -> Refusal:
        return Refusal("atomic-fold", f"{name}: {why}", span, kernel)

    if stmt is None or ir.grammar_type_of(stmt) != "expression_statement":
        return refuse("its old value is used (or it is not a statement of its own)")
    args = [a for a in children(ir, children(ir, call)[-1]) if ir.grammar_type_of(a) not in _TRIVIA]
    if len(args) != 2:
        return refuse(f"{len(args)} arguments")
    address, value = args
    element = _pointee(unit, fn, address)
    op = _OPS[name]
    if element is None or element not in _TYPES[op]:
        return refuse(f"the address's element type ({element or 'not told'}) is not one the "
                      f"warp folds by {op}")
    if not _address_alike(ir, scope, address):
        return refuse(f"the address {text(ir, address).strip()} may differ between the "
                      "threads of a warp")
    diverged = _divergence(ir, scope, fn, stmt)
    if diverged:
        return refuse(f"whole warps may not reach it together ({diverged})")
    return AtomicFold(kernel, name, op, " ".join(text(ir, address).split()),
                      " ".join(text(ir, value).split()), element,
                      (ir.span_of(stmt).start, ir.span_of(stmt).end), unit.launch_block().dims)


def _address_alike(ir: KernelIR, scope: Scope, address: int) -> bool:
    """Whether the threads of a warp name the same address: `&v` of a variable, `&a[i]` with
    warp-alike indices, or an expression of warp-alike values."""
    node = address
    while ir.grammar_type_of(node) == "parenthesized_expression":
        node = [c for c in children(ir, node) if ir.grammar_type_of(c) not in _TRIVIA][0]
    if ir.grammar_type_of(node) == "pointer_expression" and ir.name_of(node) == "&":
        target = children(ir, node)[-1]
        while ir.grammar_type_of(target) == "parenthesized_expression":
            target = [c for c in children(ir, target) if ir.grammar_type_of(c) not in _TRIVIA][0]
        if ir.grammar_type_of(target) == "identifier":
            return True
        base, idx = subscript(ir, target)
        return base is not None and all(_warp_alike(scope, i) for i in idx) and \
            (base in scope.params and base not in scope.writes or base not in scope.params)
    return _warp_alike(scope, node)


def _warp_alike(scope: Scope, nid: int) -> bool:
    g = scope.threads(nid)
    return g == UNIFORM or g % 32 == 0


def _divergence(ir: KernelIR, scope: Scope, fn: int, stmt: int) -> str:
    """A condition around `stmt` (or of an early exit before it) that may differ between the
    threads of a warp, as text; '' where there is none."""
    for a in ir.ancestors(stmt):
        if a == fn:
            break
        gtype = ir.grammar_type_of(a)
        if gtype == "if_statement":
            cond: int | None = if_parts(ir, a)[0]
        elif gtype == "for_statement":
            cond = for_parts(ir, a)[1]
        elif gtype in ("while_statement", "do_statement"):
            cond = next((c for c in children(ir, a) if ir.grammar_type_of(c) in (
                "condition_clause", "parenthesized_expression")), None)
        elif gtype in ("switch_statement", "case_statement"):
            return "a switch"
        else:
            continue
        if cond is None and gtype != "for_statement":
            return " ".join(text(ir, a).split("{")[0].split())
        if cond is not None and not _warp_alike(scope, cond):
            return " ".join(text(ir, cond).split())
    # exits before it, or anywhere in a loop around it (lanes leaving after it miss the next
    # time round)
    start = ir.span_of(stmt).start
    loops = [ir.span_of(a) for a in ir.ancestors(stmt) if ir.grammar_type_of(a) in (
        "for_statement", "while_statement", "do_statement")]
    end = max([lp.end for lp in loops], default=start)
    for nid in subtree(ir, fn):
        if ir.span_of(nid).start >= end:
            break
        if ir.span_of(nid).start >= start and not any(
                lp.start <= ir.span_of(nid).start < lp.end for lp in loops):
            continue
        gtype = ir.grammar_type_of(nid)
        if gtype in ("break_statement", "continue_statement"):  # only its own loop's lanes part
            own = next((a for a in ir.ancestors(nid) if ir.grammar_type_of(a) in (
                "for_statement", "while_statement", "do_statement", "switch_statement")), None)
            if own is None or ir.span_of(own) not in loops:
                continue
        if gtype in ("return_statement", "break_statement", "continue_statement",
                     "goto_statement"):
            for a in ir.ancestors(nid):
                if a == fn:
                    break
                if ir.grammar_type_of(a) == "if_statement" and \
                        not _warp_alike(scope, if_parts(ir, a)[0]):
                    return " ".join(text(ir, nid).split()) + " under " + \
                        " ".join(text(ir, if_parts(ir, a)[0]).split())
    return ""


def _pointee(unit: Unit, fn: int, address: int) -> str | None:
    """The element type an atomic's address points to: `&s` / `&a[i]` of a shared or local
    array or scalar, a pointer parameter `p` or `p + i`, `&p[i]`."""
    ir = unit.ir
    t = re.sub(r"\s+", "", text(ir, address))
    m = re.fullmatch(r"&\(?([A-Za-z_]\w*)\)?(?:\[.*\])*|\(?([A-Za-z_]\w*)\)?(?:\+.*)?", t)
    base = (m.group(1) or m.group(2)) if m else None
    if base is None:
        return None
    shared = unit.shared_arrays(None)
    if base in shared:
        return shared[base].element
    params = _pointer_params(ir, fn)
    if base in params:
        return re.sub(r"\b(?:const|volatile|__restrict__|restrict)\b", "", params[base]).strip() \
            if t.startswith("&") is False or "[" in t else None
    for nid in subtree(ir, fn):  # a local of the thread: no fold across threads
        if ir.grammar_type_of(nid) == "declaration" and \
                any(n == base for n, _i, _v in declared_names(ir, nid)):
            return None
    return None
