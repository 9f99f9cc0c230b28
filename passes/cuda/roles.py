"""Warp specialization (producer / consumer warp roles) <-> one schedule for every warp.

A warp-specialized kernel splits its warps into roles with a branch on a warp-uniform index,
`if (warp_group == 0) { producer: copies } else { consumers: math }`: the producer issues the
asynchronous copies (TMA, cp.async) of a shared-memory ring, the consumers compute on it, and
the two hand stages over through mbarriers (or named barriers) while running concurrently,
often with `setmaxnreg` moving registers from the producer to the consumers.

De-optimization collapses the roles into one schedule that every warp follows: the loop nest
both roles walk (the same loop headers, block-uniform bounds) is written once, and each of its
innermost iterations runs the producer's step, `__syncthreads()`, the consumer's step,
`__syncthreads()`. What each role did before and after its loops runs at the same place of
the shared nest, under the role's condition; declarations they need later are hoisted (they
touch only registers), statements both roles run alike are kept once, and a role's variable
whose name the other role also uses is renamed. `setmaxnreg` goes (each warp keeps the
registers the launch bounds give it); mbarriers, expected transaction counts and named
barriers stay as they are, so every hand-over the roles made still happens, now in a fixed
order: the producer's step k follows every consumer step before k, and the consumer's step k
follows the producer's step k. A ring the roles ran without deadlock (the producer waits only
for stages released in earlier steps) therefore runs the same way with one stage in flight.
The work partition (which thread issues a copy, which rows a warp group computes) is kept.

Preconditions (each refusal names the one that failed): the branch splits whole warps (its
condition is warp-uniform) and exactly one side issues asynchronous copies; the split is not
under a thread-dependent branch or loop; the roles walk the same loop nest with uniform bounds
that no role changes inside; the role code leaves its loops only at their ends (no `return`,
`goto`, or `break`/`continue` of a shared loop); what is hoisted touches only registers.

The forward rule restores the recorded split (which warps take which role, and how the ring is
handed over, is kernel-specific).
"""
from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, indent_of, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._c import code_view, tokens
from passes.cuda._tree import (UNIFORM, Item, Scope, block_items, children, declared_names,
                               escapes, if_parts, key, loop_body, subtree, text)
from passes.cuda.annotations import CUDA

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

_LOOPS = frozenset({"for_statement", "while_statement"})
_DECLARATIONS = frozenset({"declaration", "type_definition", "alias_declaration"})
_SHAREABLE = _DECLARATIONS | {"expression_statement"}
_SYNC = "__syncthreads();"
PRODUCER, CONSUMER = "producer", "consumer"


class _Refused(Exception):
    """A precondition of the collapse does not hold (the message says which)."""


Guard = tuple[tuple[int, bool], ...]
"""A conjunction of conditions: (condition node, negated)."""


@dataclass(frozen=True, slots=True)
class _Part:
    """A statement of one role and the guard under which that role ran it."""

    item: Item
    guard: Guard
    role: str


@dataclass
class _Level:
    """One level of the shared loop nest: what each role runs before the shared loop, the
    loop, what it runs after; a level without a loop is the innermost step."""

    pre: dict[str, list[_Part]]
    loop: dict[str, _Part] | None = None
    post: dict[str, list[_Part]] = field(default_factory=dict)
    inner: _Level | None = None


@dataclass(frozen=True, slots=True)
class _Split:
    node: int  # the if statement
    fn: int
    sides: dict[str, int]  # role -> then- or else-statement
    guards: dict[str, Guard]


class _Collapse:
    """Plans and writes the one-schedule form of a role split."""

    def __init__(self, ir: KernelIR, scope: Scope, split: _Split) -> None:
        self.ir, self.scope, self.split = ir, scope, split
        self.renames: dict[int, str] = {}  # identifier node -> new name
        self.shared: set[int] = set()      # item nodes kept once (the producer's copy)
        self.twins: set[int] = set()       # the consumer's copies of those
        self.excluded: list[tuple[int, int]] = []  # byte spans that are no role's own code
        self.guards: list[int] = [split.guards[PRODUCER][0][0]]  # the conditions roles run under

    # ---- structure ---------------------------------------------------------------------------
    def plan(self) -> _Level:
        ir, split = self.ir, self.split
        parts = {role: [_Part(i, split.guards[role], role) for i in block_items(ir, side)]
                 for role, side in split.sides.items()}
        level = self._level(parts, top=True)
        self._decide_shared(level)
        self._rename(level)
        self._check(level)
        return level

    def _level(self, parts: dict[str, list[_Part]], top: bool) -> _Level:
        parts = {role: self._without_setmaxnreg(ps) for role, ps in parts.items()}
        pair = self._match(parts)
        while pair is None:
            unwrapped = self._unwrap(parts)
            if unwrapped is None:
                break
            parts = unwrapped
            pair = self._match(parts)
        if pair is None:
            if top and any(self._loops(ps) for ps in parts.values()):
                raise _Refused("the roles do not walk the same loop nest (no loop header in "
                               "common)")
            return _Level(pre=parts)
        loops = {role: parts[role][i] for role, i in pair.items()}
        ir = self.ir
        inner = {role: [_Part(i, p.guard, role)
                        for i in block_items(ir, loop_body(ir, p.item.node))]
                 for role, p in loops.items()}
        for p in loops.values():
            body = loop_body(ir, p.item.node)
            self.excluded.append((ir.span_of(p.item.node).start, ir.span_of(body).start))
        return _Level(pre={role: parts[role][:i] for role, i in pair.items()}, loop=loops,
                      post={role: parts[role][i + 1:] for role, i in pair.items()},
                      inner=self._level(inner, top=False))

    def _without_setmaxnreg(self, parts: list[_Part]) -> list[_Part]:
        out = []
        for p in parts:
            asm = [c for c in subtree(self.ir, p.item.node)
                   if self.ir.grammar_type_of(c) == "gnu_asm_expression"]
            ops = [op for a in asm for op in self.ir.attrs_of(a).get("ops", ())]
            if (self.ir.grammar_type_of(p.item.node) == "expression_statement" and ops
                    and all(op.startswith("setmaxnreg") for op in ops)):
                continue
            out.append(p)
        return out

    def _header(self, node: int) -> str:
        """A loop's header (up to its body) as whitespace- and comment-free tokens."""
        ir = self.ir
        start, body = ir.span_of(node).start, ir.span_of(loop_body(ir, node)).start
        return " ".join(tokens(code_view(ir.source[start:body].decode("utf-8", "replace"))))

    def _loops(self, parts: list[_Part]) -> list[int]:
        return [i for i, p in enumerate(parts) if self.ir.grammar_type_of(p.item.node) in _LOOPS]

    def _match(self, parts: dict[str, list[_Part]]) -> dict[str, int] | None:
        producer, consumer = parts[PRODUCER], parts[CONSUMER]
        for i in self._loops(producer):
            head = self._header(producer[i].item.node)
            for j in self._loops(consumer):
                if self._header(consumer[j].item.node) == head:
                    return {PRODUCER: i, CONSUMER: j}
        return None

    def _unwrap(self, parts: dict[str, list[_Part]]) -> dict[str, list[_Part]] | None:
        """A role whose loop nest sits under an `if` of its own (e.g. one elected thread)
        walks that nest under the condition: the `if` is replaced by its statements, guarded."""
        ir = self.ir
        for role, other in ((PRODUCER, CONSUMER), (CONSUMER, PRODUCER)):
            heads = {self._header(parts[other][j].item.node) for j in self._loops(parts[other])}
            for i, p in enumerate(parts[role]):
                if ir.grammar_type_of(p.item.node) != "if_statement":
                    continue
                cond, then, alt = if_parts(ir, p.item.node)
                if alt is not None:
                    continue
                body = block_items(ir, then)
                if not any(self._leads_to(b.node, heads) for b in body):
                    continue
                why = self.scope.thread_local(cond)
                if why is not None:
                    raise _Refused(f"the {role}'s condition `{text(ir, cond)}` has effects "
                                   f"({why})")
                self.excluded.append((ir.span_of(cond).start, ir.span_of(cond).end))
                self.guards.append(cond)
                guard = p.guard + ((cond, False),)
                inner = [_Part(b, guard, role) for b in body]
                return {**parts, role: parts[role][:i] + inner + parts[role][i + 1:]}
        return None

    def _leads_to(self, node: int, heads: set[str]) -> bool:
        """Whether `node` is a loop with one of `heads`, or an else-less `if` holding one."""
        ir = self.ir
        if ir.grammar_type_of(node) in _LOOPS:
            return self._header(node) in heads
        if ir.grammar_type_of(node) != "if_statement" or if_parts(ir, node)[2] is not None:
            return False
        return any(self._leads_to(b.node, heads) for b in block_items(ir, if_parts(ir, node)[1]))

    # ---- statements kept once, renamed variables ------------------------------------------
    def _levels(self, level: _Level | None) -> Iterator[_Level]:
        while level is not None:
            yield level
            level = level.inner

    def _pairs(self, level: _Level) -> list[tuple[str, int, int, int, int]]:
        a = [key(self.ir, p.item.node) for p in level.pre[PRODUCER]]
        b = [key(self.ir, p.item.node) for p in level.pre[CONSUMER]]
        return difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()

    def _decide_shared(self, root: _Level) -> None:
        """Statements both roles run alike before a shared loop are kept once when they touch
        only registers and what they define is changed by no role's own code."""
        ir, scope = self.ir, self.scope
        candidates: list[tuple[int, int]] = []
        for level in self._levels(root):
            if level.loop is None:
                continue
            for op, i1, i2, j1, j2 in self._pairs(level):
                if op != "equal":
                    continue
                for i, j in zip(range(i1, i2), range(j1, j2)):
                    p, c = level.pre[PRODUCER][i], level.pre[CONSUMER][j]
                    if ir.grammar_type_of(p.item.node) not in _SHAREABLE:
                        continue
                    if scope.thread_local(p.item.node) is None:
                        candidates.append((p.item.node, c.item.node))
        while True:
            self.shared = {p for p, _ in candidates}
            self.twins = {c for _, c in candidates}
            own = self._own_writes()
            keep = [(p, c) for p, c in candidates
                    if not (self._defines(p) & own)]
            if len(keep) == len(candidates):
                return
            candidates = keep

    def _defines(self, nid: int) -> set[str]:
        """Names a statement declares or writes."""
        ir = self.ir
        names = set()
        for c in subtree(ir, nid):
            if ir.grammar_type_of(c) in _DECLARATIONS:
                names |= {n for n, _, _ in declared_names(ir, c)}
            names |= set(self.scope.written(c))
        return names

    def _own_writes(self) -> set[str]:
        """Names written by some role's own code (not a shared loop header, not a statement
        kept once)."""
        ir = self.ir
        spans = list(self.excluded) + [(ir.span_of(n).start, ir.span_of(n).end)
                                       for n in self.shared | self.twins]
        out = set()
        for side in self.split.sides.values():
            for c in subtree(ir, side):
                start = ir.span_of(c).start
                if any(a <= start < b for a, b in spans):
                    continue
                out |= set(self.scope.written(c))
        return out

    def _hoisted(self, root: _Level) -> dict[str, list[int]]:
        """Per role, the declarations lifted into the shared nest (not kept once)."""
        out: dict[str, list[int]] = {PRODUCER: [], CONSUMER: []}
        for level in self._levels(root):
            if level.loop is None:
                continue
            for role in out:
                out[role] += [p.item.node for p in level.pre[role]
                              if self.ir.grammar_type_of(p.item.node) in _DECLARATIONS
                              and p.item.node not in self.shared | self.twins]
        return out

    def _rename(self, root: _Level) -> None:
        """A hoisted declaration whose name the other role uses (or declares) is renamed in
        its role's code, so each role keeps seeing its own variable."""
        ir = self.ir
        hoisted = self._hoisted(root)
        used = {role: {ir.name_of(c) for c in subtree(ir, side)
                       if ir.grammar_type_of(c) == "identifier"}
                for role, side in self.split.sides.items()}
        for role, guard in self.split.guards.items():
            for cond, _ in guard:
                for other in used:
                    if other != role:
                        used[other] |= {ir.name_of(c) for c in subtree(ir, cond)}
        fn_names = {ir.name_of(c) for c in subtree(ir, self.split.fn)
                    if ir.grammar_type_of(c) == "identifier"}
        declared = {role: {n for d in decls for n, _, _ in declared_names(ir, d)}
                    for role, decls in hoisted.items()}
        for role, other in ((PRODUCER, CONSUMER), (CONSUMER, PRODUCER)):
            for decl in hoisted[role]:
                for name, ident, _ in declared_names(ir, decl):
                    clash = name in used[other] or (role == PRODUCER and name in declared[other])
                    if not clash:
                        continue
                    new, n = f"{name}_{role}", 1
                    while new in fn_names:
                        new, n = f"{name}_{role}{n}", n + 1
                    fn_names.add(new)
                    start = ir.span_of(ident).start
                    for c in subtree(ir, self.split.sides[role]):
                        if (ir.grammar_type_of(c) == "identifier" and ir.name_of(c) == name
                                and ir.span_of(c).start >= start):
                            self.renames[c] = new

    # ---- preconditions -------------------------------------------------------------------------
    def _check(self, root: _Level) -> None:
        ir, scope = self.ir, self.scope
        own = self._own_writes()
        for node in sorted(self.shared | self.twins):
            renamed = next((c for c in subtree(ir, node) if c in self.renames), None)
            if renamed is not None:
                raise _Refused(f"`{text(ir, node)}` runs in both roles with each role's own "
                               f"`{ir.name_of(renamed)}`")
        written = {name for side in self.split.sides.values() for c in subtree(ir, side)
                   for name in scope.written(c)}
        for cond in self.guards:
            changed = sorted({ir.name_of(c) for c in subtree(ir, cond)} & written)
            if changed:
                raise _Refused(f"a role changes `{changed[0]}` of its condition "
                               f"`{text(ir, cond)}`")
        for level in self._levels(root):
            if level.loop is not None:
                node = level.loop[CONSUMER].item.node
                body = loop_body(ir, node)
                head = [c for c in children(ir, node) if c != body]
                if any(scope.threads(c) != UNIFORM for c in _controls(ir, node)):
                    raise _Refused(f"the shared loop `{self._header_text(node)}` has bounds "
                                   "that differ between threads")
                for p in level.loop.values():
                    pbody = loop_body(ir, p.item.node)
                    for c in subtree(ir, p.item.node):
                        if c in self.renames and ir.span_of(c).end <= ir.span_of(pbody).start:
                            raise _Refused(f"the shared loop `{self._header_text(node)}` uses "
                                           f"the {p.role}'s own `{ir.name_of(c)}`")
                names = {ir.name_of(c) for h in head for c in subtree(ir, h)
                         if ir.grammar_type_of(c) == "identifier"}
                changed = sorted(names & own)
                if changed:
                    raise _Refused(f"a role changes `{changed[0]}` of the shared loop "
                                   f"`{self._header_text(node)}` inside it")
            for role, parts in level.pre.items():
                for p in parts:
                    self._check_part(p, hoist=level.loop is not None)
            for parts in level.post.values():
                for p in parts:
                    self._check_part(p, hoist=False)

    def _check_part(self, p: _Part, hoist: bool) -> None:
        ir = self.ir
        node = p.item.node
        if node in self.shared | self.twins:
            return
        if hoist and ir.grammar_type_of(node) in _DECLARATIONS:
            why = self.scope.thread_local(node)
            if why is not None:
                names = ", ".join(n for n, _, _ in declared_names(ir, node))
                raise _Refused(f"the {p.role} declares `{names}` before its loop with {why}: "
                               "every warp would run it")
            return
        left = escapes(ir, node)
        if left is not None:
            raise _Refused(f"the {p.role} jumps out with `{left}`: every warp must reach "
                           "the block barriers of the shared loops")

    def _header_text(self, node: int) -> str:
        ir = self.ir
        start, body = ir.span_of(node).start, ir.span_of(loop_body(ir, node)).start
        return " ".join(ir.source[start:body].decode("utf-8", "replace").split())

    # ---- writing -------------------------------------------------------------------------------
    def render(self, root: _Level, unit: str) -> str:
        lines = self._emit(root, unit)
        base = indent_of(self.ir.source, self.ir.span_of(self.split.node).start)
        body = "".join(f"{base}{unit}{line}\n" if line else "\n" for line in lines)
        return "{\n" + body + base + "}"

    def _emit(self, level: _Level, unit: str) -> list[str]:
        if level.loop is None:  # the innermost step: producer, barrier, consumer, barrier
            out: list[str] = []
            for role in (PRODUCER, CONSUMER):
                out += self._guarded(level.pre[role], unit)
                out.append(_SYNC)
            return out
        out = self._emit_pre(level, unit)
        trivia: list[str] = []
        for role in (PRODUCER, CONSUMER):
            p = level.loop[role]
            lead = self._text(p.item.start, self.ir.span_of(p.item.node).start).strip("\n")
            for line in _dedent(lead):
                if line.strip() and line not in trivia:
                    trivia.append(line)
        out += trivia
        out.append(self._header_text(level.loop[CONSUMER].item.node) + " {")
        out += [unit + line if line else line for line in self._emit(level.inner, unit)]
        out.append("}")
        for role in (PRODUCER, CONSUMER):
            out += self._guarded(level.post[role], unit)
        return out

    def _emit_pre(self, level: _Level, unit: str) -> list[str]:
        out: list[str] = []
        pending: list[_Part] = []
        producer, consumer = level.pre[PRODUCER], level.pre[CONSUMER]
        ordered: list[_Part] = []
        for op, i1, i2, j1, j2 in self._pairs(level):
            ordered += producer[i1:i2]
            ordered += [c for c in consumer[j1:j2] if c.item.node not in self.twins]
        for p in ordered:
            kept = p.item.node in self.shared or \
                self.ir.grammar_type_of(p.item.node) in _DECLARATIONS
            if kept:
                out += self._guarded(pending, unit)
                pending = []
                out += self._item(p.item)
            else:
                pending.append(p)
        return out + self._guarded(pending, unit)

    def _guarded(self, parts: list[_Part], unit: str) -> list[str]:
        """The parts under their guards, consecutive parts with one guard in one block."""
        out: list[str] = []
        i = 0
        while i < len(parts):
            j = i
            while j < len(parts) and parts[j].guard == parts[i].guard:
                j += 1
            out.append(f"if ({self._condition(parts[i].guard)}) {{")
            for p in parts[i:j]:
                out += [unit + line if line else line for line in self._item(p.item)]
            out.append("}")
            i = j
        return out

    def _condition(self, guard: Guard) -> str:
        terms = []
        for cond, negated in guard:
            span = self.ir.span_of(cond)
            expr = " ".join(self._text(span.start, span.end).split())
            terms.append(f"!({expr})" if negated else f"({expr})" if len(guard) > 1 else expr)
        return " && ".join(terms)

    def _item(self, item: Item) -> list[str]:
        return _dedent(self._text(item.start, item.end))

    def _text(self, start: int, end: int) -> str:
        """Source bytes `[start, end)` with the renames applied; the first line is completed
        with the indentation in front of it."""
        ir = self.ir
        line = ir.source.rfind(b"\n", 0, start) + 1
        if not ir.source[line:start].strip():
            start = line
        edits = sorted((ir.span_of(n).start, ir.span_of(n).end, new)
                       for n, new in self.renames.items()
                       if start <= ir.span_of(n).start < end)
        out, pos = [], start
        for a, b, new in edits:
            out.append(ir.source[pos:a].decode("utf-8", "replace"))
            out.append(new)
            pos = b
        out.append(ir.source[pos:end].decode("utf-8", "replace"))
        return "".join(out)


def _dedent(block: str) -> list[str]:
    """The lines of `block` without their common indentation; preprocessor lines (often at
    column 0 in front of indented code) take the indentation of the line after them."""
    lines = block.split("\n")
    code = [i for i, x in enumerate(lines) if x.strip() and not x.lstrip().startswith("#")]
    cut = min((len(lines[i]) - len(lines[i].lstrip()) for i in code), default=0)
    out = []
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            following = next((lines[j] for j in code if j > i), "")
            width = len(following) - len(following.lstrip())
            out.append(" " * max(0, width - cut) + line.strip())
        else:
            out.append(line[cut:].rstrip())
    return out


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WarpSpecialization(Pass):
    """Producer/consumer warp roles handing a shared-memory ring over through barriers <-> one
    schedule in which every warp runs the producer's step, a block barrier, the consumer's step
    and a block barrier."""

    before: str = ""
    """The exact role split to restore (recorded by a de-optimization)."""
    after: str = ""
    """What the de-optimization wrote in its place."""

    name: ClassVar[str] = "warp-specialization"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "producer/consumer warp roles <-> one lockstep schedule for all warps"
    requires: ClassVar[tuple[str, ...]] = ("pipelined",)
    provides: ClassVar[tuple[str, ...]] = ("warp-specialized",)
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_90",)

    def _splits(self, ir: KernelIR, scope: Scope) -> list[_Split]:
        """Role splits: an if/else on a thread-dependent condition of which exactly one side
        issues asynchronous copies into shared memory (the producer; a consumer may still
        write its results with bulk stores); the outermost of nested ones."""
        out: list[_Split] = []
        for node in ir.find(kind="branch"):
            if node.grammar_type != "if_statement" or any(
                    s.node in set(ir.ancestors(node.id)) for s in out):
                continue
            cond, then, alt = if_parts(ir, node.id)
            if alt is None:
                continue
            fn = scope.fn_of(node.id)
            if fn is None:
                continue
            copies = (scope.issues_loads(then), scope.issues_loads(alt))
            if copies[0] == copies[1]:
                continue
            scope.enter(fn)
            if scope.threads(cond) == UNIFORM:
                continue
            first = PRODUCER if copies[0] else CONSUMER
            second = CONSUMER if first == PRODUCER else PRODUCER
            out.append(_Split(node.id, fn, {first: then, second: alt},
                              {first: ((cond, False),), second: ((cond, True),)}))
        return out

    def _lockstep(self, ir: KernelIR) -> list[tuple[int, int]]:
        """(function, loop) of loops whose body ends with the collapsed step: a guarded block,
        a block barrier, a guarded block, a block barrier."""
        out = []
        for node in ir.find(kind="loop"):
            if node.grammar_type not in _LOOPS:
                continue
            items = block_items(ir, loop_body(ir, node.id))
            tail = [ir.grammar_type_of(i.node) if ir.grammar_type_of(i.node) == "if_statement"
                    else key(ir, i.node) for i in items[-4:]]
            if tail == ["if_statement", "__syncthreads ( ) ;"] * 2:
                fn = next((a for a in ir.ancestors(node.id)
                           if ir.grammar_type_of(a) == "function_definition"), None)
                if fn is not None and all(f != fn for f, _ in out):
                    out.append((fn, node.id))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        scope = Scope(ir)
        out = []
        for s in self._splits(ir, scope):
            span = ir.span_of(s.node)
            cond = s.guards[PRODUCER][0][0]
            out.append(make_site(self.name, ir, index, (span.start, span.end), True,
                                 {"condition": " ".join(text(ir, cond).split()),
                                  "producer": "then" if not s.guards[PRODUCER][0][1] else "else"},
                                 (ir.span_of(cond).start, ir.span_of(cond).end)))
        for fn, loop in self._lockstep(ir):
            body = children(ir, fn, "compound_statement")[-1]
            span = ir.span_of(body)
            out.append(make_site(self.name, ir, index, (span.start, span.end), False,
                                 {"function": ir.name_of(fn) or ""},
                                 (ir.span_of(loop).start, ir.span_of(loop).end)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        scope = Scope(ir)
        split = next((s for s in self._splits(ir, scope)
                      if (ir.span_of(s.node).start, ir.span_of(s.node).end) == tuple(site.span)),
                     None)
        if split is None:
            return Skipped("no warp-role split at the site", {"site": site.anchor})
        scope.enter(split.fn)
        cond = split.guards[PRODUCER][0][0]
        facts = {"condition": " ".join(text(ir, cond).split())}
        size = scope.threads(cond)
        if size % 32:
            within = "between neighbouring threads" if size == 1 else f"every {size} threads"
            return Skipped(f"the role condition `{facts['condition']}` does not split whole "
                           f"warps (it can change {within})", {**facts, "threads": size})
        for a in ir.ancestors(split.node):
            if a == split.fn:
                break
            if any(scope.threads(c) != UNIFORM for c in _controls(ir, a)):
                return Skipped("the role split sits under a branch or loop that differs "
                               "between threads: a block barrier there would not be reached "
                               "by every warp", facts)
        collapse = _Collapse(ir, scope, split)
        try:
            plan = collapse.plan()
        except _Refused as refusal:
            return Skipped(str(refusal), facts)
        start, end = ir.span_of(split.node).start, ir.span_of(split.node).end
        unit = _indent_unit(ir, split)
        after = collapse.render(plan, unit)
        before = ir.source[start:end].decode("utf-8")
        return finish(ir, site, [ByteEdit(start, end, after)],
                      options={"before": before, "after": after})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        if not self.before:
            return Skipped("splitting warps into roles needs the recorded split (which warps "
                           "produce and how stages are handed over is kernel-specific)", {})
        results, skip = self.check(ctx)
        if skip:
            return skip
        region = ir.source[site.span[0]:site.span[1]]
        needle = self.after.encode("utf-8")
        if not needle or region.count(needle) != 1:
            return Skipped("the recorded one-schedule form is not at the site",
                           {"site": site.anchor})
        at = site.span[0] + region.find(needle)
        return finish(ir, site, [ByteEdit(at, at + len(needle), self.before)],
                      preconditions=results)


def _controls(ir: KernelIR, node: int) -> list[int]:
    """The expressions that decide whether and how often a statement's body runs: a branch's
    condition, a loop's header (initializers, condition, step)."""
    gtype = ir.grammar_type_of(node)
    if gtype == "if_statement":
        return [if_parts(ir, node)[0]]
    if gtype == "switch_statement":
        return children(ir, node, "condition_clause")
    if gtype in (*_LOOPS, "do_statement"):
        body = loop_body(ir, node) if gtype != "do_statement" else children(ir, node)[0]
        out = []
        for c in children(ir, node):
            if c == body or ir.grammar_type_of(c) == "comment":
                continue
            out += [init for _, _, init in declared_names(ir, c) if init is not None] \
                if ir.grammar_type_of(c) == "declaration" else [c]
        return out
    return []


def _indent_unit(ir: KernelIR, split: _Split) -> str:
    base = indent_of(ir.source, ir.span_of(split.node).start)
    for side in split.sides.values():
        for item in block_items(ir, side):
            inner = indent_of(ir.source, ir.span_of(item.node).start)
            if inner.startswith(base) and len(inner) > len(base):
                return inner[len(base):]
    return "  "

