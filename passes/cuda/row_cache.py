"""A row read by several passes from global memory <-> the row read once into shared memory.

Row-wise kernels (softmax, RMSNorm, LayerNorm, ...) often walk one row several times with the
same block-stride loop: a max pass, a sum pass and a write pass, each reading `x[i]` from global
memory again. The forward rule reads the row once: a copy of the row into a static shared array
(`__align__(16)`) by the whole block, a barrier, and each pass reading the shared copy instead
(`vectorize-global` can then read it 16 bytes at a time). The shared array holds at most
`budget` bytes, never more than 48 KB less the kernel's own static shared memory (less a reserve
for dynamic shared memory where the kernel declares `extern __shared__`), and, where the
launch's block size is known, no more than one block's share of an SM holding as many blocks
as its threads allow (the copy costs no occupancy); a row longer than that runs the passes as
written (the check is on the loop bound, at run time, once per row).

Found by role (never by names): in one kernel (or one `__device__` helper every thread of the
block calls alike, `Unit.block_helpers`), two or more `for (v = S; v < E; v += P)` loops
stepping by the block's thread count (`recognize.stride_loops`), statements of one block with
the same start, bound and step, read one global pointer `p` as `p[off + v]` (a row pointer,
`off` empty, or the matrix at the row's offset: the same `off` in every pass, the same for
every thread, nothing else of `p` in those loops; a load intrinsic `__ldg(&p[off + v])` counts
as a read, another taken address is refused). Preconditions, each refusal naming the one that failed:
- the kernel never writes through `p` (nor reassigns it), and no global store or atomic runs
  between the first pass and the last one (the last pass may write; a store of its own
  element after reading it is what a write pass does);
- nothing from the first pass to the end of the last writes what the start, bound, step or
  offset read (the copy is made right before the first pass, again on each trip of a loop
  around them), the bound and the offset are the same for every thread of the block, and no
  pass changes its loop variable or leaves early;
- the passes are not under a condition or loop that differs between the block's threads, and
  no thread may have returned before them (the copy ends with `__syncthreads()`; inside a loop
  over rows it also starts with one, so a slow thread's last pass over the previous row is
  done before the copy overwrites it);
- the element size is known and the budget leaves room for at least 256 elements.

The copy moves 16 bytes per `cp.async` where the row starts on a 16-byte boundary (checked at
run time), element by element otherwise and for the row's tail.

The de-optimization acts on rows kept in shared memory by role (`cached_rows`): the forward
rule's form and the forms an expert writes, a copy guarded by a size check with each pass
`if (C) { on the copy } else { on global memory }`, or an unguarded copy loop `S[v] = p[v]`
whose passes read `S[w]`; the copy goes and each pass reads global memory again.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._tree import (UNIFORM, Scope, callee, children, declared_names, escapes,
                               if_parts, loop_body, subtree, text)
from passes.cuda.annotations import CUDA, SM_BLOCKS, SM_THREADS
from passes.cuda.recognize import (StrideLoop, Unit, block_group_terms, element_bytes,
                                   expand_locals, flat_code, for_parts, global_pointers, loop_var,
                                   stride_loops, struct_bytes, subscript, written_names)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

STATIC_LIMIT = 48 * 1024
"""Static shared memory a block may declare without opting in."""
DYNAMIC_RESERVE = 8 * 1024
"""Bytes left for the dynamic shared memory of a kernel that declares `extern __shared__`."""
MIN_ELEMENTS = 256
SM_SHARED, BLOCK_RESERVED = 228 * 1024, 1024
"""An sm_90 multiprocessor's shared memory and the shared memory the system keeps per block
(its threads and blocks: `annotations.SM_THREADS`, `SM_BLOCKS`): where the launch's block size is known, the copy takes at most the
share of one block when the SM holds as many blocks as its threads allow."""
SLOTS_RESERVE = 1024
"""Bytes of that share left to the shared slots later rules add (a warp-shuffle reduction's
slot per warp)."""
_LOOPS = ("for_statement", "while_statement", "do_statement")


@dataclass(frozen=True, slots=True)
class RowPasses:
    """A row that `loops` (spans, in order) read from global pointer `pointer` at their loop
    variable, with the loops' common header (`start`, `bound`, `step`) and how many elements of
    type `element` the shared copy holds (`capacity`)."""

    kernel: str
    pointer: str
    element: str
    loops: tuple[tuple[int, int], ...]
    start: str
    bound: str
    step: str
    capacity: int
    in_loop: bool
    size: int
    reads: tuple[tuple[int, int, int, str], ...]
    """(loop number, start, end, loop variable) of each `p[off + v]` the passes read."""
    index: tuple[str, str] = ("", "")
    """One read's index as written and its loop variable (`off + v`, the same `off` in all)."""

    def at(self, i: str) -> str:
        """The row's element `i` (`p[off + i]`), as the passes index it."""
        expr, var = self.index
        index = re.sub(rf"(?<![.\w]){re.escape(var)}(?!\w)", f"({i})", expr)
        return f"{self.pointer}[{index}]"

    @property
    def span(self) -> tuple[int, int]:
        return self.loops[0][0], self.loops[-1][1]


def _norm(s: str) -> str:
    return re.sub(r"\s+", "", s)


def _for_node(ir: KernelIR, loop: StrideLoop) -> int:
    return next(n.id for n in ir.walk() if (n.span.start, n.span.end) == loop.span
                and ir.grammar_type_of(n.id) == "for_statement")


def _own_shared_bytes(unit: Unit, fn: int) -> tuple[int | None, bool]:
    """(bytes of the static shared arrays function `fn` sees or None when one has no constant
    size, whether it declares dynamic shared memory). For a `__device__` helper, every shared
    array of the unit counts (its callers' and the other helpers' too)."""
    ir = unit.ir
    helper = fn not in unit.kernels.values()
    seen = {}
    for name, arr in unit.shared_arrays().items():
        owner = next((a for a in ir.ancestors(ir_node(ir, arr.decl))
                      if ir.grammar_type_of(a) == "function_definition"), None)
        if owner is None or owner == fn or helper:
            seen[(name, arr.decl)] = arr
    total, dynamic = 0, False
    for arr in seen.values():
        if arr.dynamic:
            dynamic = True
            continue
        size = arr.element_bytes or struct_bytes(unit, arr.element.replace("volatile", "").strip())
        if size is None or any(e is None for e in arr.extents):
            return None, dynamic
        n = size
        for e in arr.extents:
            n *= e
        total += n
    return total, dynamic


def ir_node(ir: KernelIR, span: tuple[int, int]) -> int:
    """The outermost node whose span is `span`."""
    return next(n.id for n in ir.walk() if (n.span.start, n.span.end) == tuple(span))


def row_passes(ir: KernelIR | Unit, budget: int | None = 32 * 1024) -> list[RowPasses | Skipped]:
    """Each row that several block-stride passes read from global memory, with the plan that
    reads it once, or why it cannot be cached (see the module). `budget` None: the row is not
    copied to shared memory (`row-registers` keeps it in registers), so no room is checked
    there and `capacity` is 0, and what only the copy's barrier needs (no thread returns
    before the passes or runs them under a condition of its own) is not asked."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    out: list[RowPasses | Skipped] = []
    groups: dict[tuple, list[StrideLoop]] = {}
    for loop in stride_loops(unit):
        if loop.kind != "block":
            continue
        node = _for_node(unit.ir, loop)
        parent = unit.ir.parent_of(node)
        groups.setdefault((loop.kernel, parent, _norm(loop.start), _norm(loop.bound),
                           _norm(loop.step)), []).append(loop)
    for (kernel, _parent, *_head), loops in groups.items():
        if len(loops) < 2:
            continue
        fn = unit.block_helpers()[kernel]
        pointers = global_pointers(unit, fn)
        reads: dict[str, list[int]] = {}
        for k, loop in enumerate(loops):
            body = loop_body(unit.ir, _for_node(unit.ir, loop))
            for c in subtree(unit.ir, body):
                if unit.ir.grammar_type_of(c) == "identifier" and unit.ir.name_of(c) in pointers \
                        and not _stored(unit.ir, c):
                    reads.setdefault(unit.ir.name_of(c) or "", []).append(k)
        for pointer, where in reads.items():
            if len(set(where)) >= 2:
                out.append(_plan(unit, fn, kernel, pointer, pointers, loops, budget))
    return out


def _offset(ir: KernelIR, index: int, var: str) -> str | None:
    """`off` of an index `var`, `off + var` or `var + off` (`off` not reading `var`; "" for
    none), else None."""
    flat = flat_code(ir, index)
    if flat == var:
        return ""
    m = re.fullmatch(rf"{re.escape(var)}\+(.+)|(.+)\+{re.escape(var)}", flat)
    if m is None:
        return None
    off = m.group(1) or m.group(2)
    names = set(re.findall(r"(?<![.\w])[A-Za-z_]\w*", off))
    # an operator binding looser than `+` would make the split wrong: such offsets are refused
    return None if var in names or re.search(r"[?:&|^<>=,]|\+\+|--", off) else off


def _read_of(ir: KernelIR, sub: int) -> int | None:
    """The expression reading element `sub` (`p[i]`): itself, or a load call `__ldg(&p[i])`
    (`__ldcg`, ...) around it; None where its address is taken otherwise."""
    parent = ir.parent_of(sub)
    if parent is None or ir.grammar_type_of(parent) != "pointer_expression":
        return sub
    args = ir.parent_of(parent)
    call = ir.parent_of(args) if args is not None else None
    if call is not None and ir.grammar_type_of(args) == "argument_list" and \
            ir.grammar_type_of(call) == "call_expression" and \
            re.fullmatch(r"__ld(?:g|ca|cg|cs|lu|cv)", callee(ir, call)) and \
            sum(ir.grammar_type_of(c) not in ("(", ")", ",", "comment") for c in children(ir, args)) == 1:
        return call
    return None


def _target_name(ir: KernelIR, assign: int) -> str | None:
    """The variable an assignment or update writes (an array's or pointer's own name for an
    element store)."""
    target = children(ir, assign)[0]
    if ir.grammar_type_of(assign) == "update_expression" and ir.grammar_type_of(target) != "identifier":
        target = children(ir, assign)[-1]
    base, _ = subscript(ir, target)
    if base:
        return base
    return next((ir.name_of(t) for t in subtree(ir, target) if ir.grammar_type_of(t) == "identifier"),
                None)


def _stored(ir: KernelIR, ident: int) -> bool:
    """Whether identifier `ident` is the pointer of a plain store `p[..] = value`."""
    sub = ir.parent_of(ident)
    if sub is None or ir.grammar_type_of(sub) != "subscript_expression":
        return False
    assign = ir.parent_of(sub)
    return assign is not None and ir.grammar_type_of(assign) == "assignment_expression" and \
        children(ir, assign)[0] == sub and \
        ir.source[ir.span_of(sub).end:ir.span_of(children(ir, assign)[-1]).start].decode().strip() == "="


def _plan(unit: Unit, fn: int, kernel: str, pointer: str, pointers: dict, loops: list[StrideLoop],
          budget: int | None) -> RowPasses | Skipped:
    ir = unit.ir
    facts = {"kernel": kernel, "pointer": pointer}
    nodes = [_for_node(ir, lp) for lp in loops]
    first, last = loops[0].span, loops[-1].span
    passes, reads = [], []
    offsets: set[str] = set()
    index = ("", "")
    offset_node: int | None = None
    for k, (loop, node) in enumerate(zip(loops, nodes, strict=True)):
        body = loop_body(ir, node)
        mine = []
        for c in subtree(ir, body):
            if ir.grammar_type_of(c) != "identifier" or ir.name_of(c) != pointer:
                continue
            sub = ir.parent_of(c)
            base, idx = subscript(ir, sub) if sub is not None else (None, [])
            offset = _offset(ir, idx[0], loop.var) if base == pointer and len(idx) == 1 else None
            if offset is None or children(ir, sub)[0] != c:
                return Skipped(f"pass {k + 1} uses `{pointer}` otherwise than at its loop "
                               f"variable plus a fixed offset (`{pointer}[{loop.var}]`)", facts)
            read = _read_of(ir, sub)
            if read is None:
                return Skipped(f"pass {k + 1} takes the address of an element of `{pointer}`", facts)
            offsets.add(offset)
            if not index[0]:
                index = (text(ir, idx[0]), loop.var)
                offset_node = next((c for c in children(ir, idx[0]) if offset and
                                    ir.grammar_type_of(c) not in ("+", "comment") and
                                    flat_code(ir, c) != loop.var), None)
            mine.append((ir.span_of(read).start, ir.span_of(read).end))
        if mine:
            passes.append(k)
            reads += [(k, s, e, loop.var) for s, e in mine]
        why = escapes(ir, body)
        if why:
            return Skipped(f"pass {k + 1} can leave by {why}", facts)
        if loop.var in written_names(ir, body):
            return Skipped(f"pass {k + 1} writes its loop variable", facts)
        cond = for_parts(ir, node)[1]
        if cond is None or not re.fullmatch(rf"\s*{re.escape(loop.var)}\s*<\s*[^<>=]+",
                                            text(ir, cond)):
            return Skipped(f"pass {k + 1}'s condition is not `{loop.var} < bound`", facts)
    if len(offsets) > 1:
        return Skipped(f"the passes read `{pointer}` at different offsets ({', '.join(sorted(offsets))})",
                       facts)
    offset = offsets.pop()
    loops = loops[passes[0]:passes[-1] + 1]
    nodes = nodes[passes[0]:passes[-1] + 1]
    reads = [(k - passes[0], s, e, v) for k, s, e, v in reads]
    first, last = loops[0].span, loops[-1].span
    for c in subtree(ir, fn):
        gtype = ir.grammar_type_of(c)
        if gtype in ("assignment_expression", "update_expression"):
            target = children(ir, c)[0]
            base, _ = subscript(ir, target)
            name = base or next((ir.name_of(t) for t in subtree(ir, target)
                                 if ir.grammar_type_of(t) == "identifier"), None)
            if name == pointer:
                return Skipped(f"the kernel writes the row (`{text(ir, c)[:40]}`)", facts)
            if name in pointers and first[0] <= ir.span_of(c).start < last[0] and \
                    ir.grammar_type_of(target) != "identifier":
                return Skipped("a global store runs between the passes over the row "
                               f"(`{text(ir, c)[:40]}`): it could change the row", facts)
        elif gtype == "call_expression" and "atomic" in text(ir, c).split("(")[0] and \
                first[0] <= ir.span_of(c).start < last[0]:
            return Skipped("an atomic runs between the passes over the row", facts)
    loop_var_names = {lp.var for lp in loops}
    header = loops[0]
    # the copy is made right before the first pass: what the passes' header and offset read
    # must keep its value from there to the end of the last pass (a write before, or in the
    # update of a loop around them, happens before the copy is made again)
    written = {name for c in subtree(ir, fn) if first[0] <= ir.span_of(c).start < last[1]
               and ir.grammar_type_of(c) in ("assignment_expression", "update_expression")
               for name in [_target_name(ir, c)] if name} - loop_var_names
    for part in (header.start, header.bound, header.step, offset):
        names = set(re.findall(r"(?<![.\w])[A-Za-z_]\w*", part)) - {"threadIdx", "blockDim"}
        if names & written:
            return Skipped(f"the passes write `{sorted(names & written)[0]}`, which their header "
                           "or the row's offset reads", facts)
    if _norm(block_group_terms(unit, expand_locals(unit, fn, header.start))).strip("()") != "threadIdx.x":
        return Skipped(f"the passes start at `{header.start}`, not at the thread's index "
                       "(the copy covers the row from its first element)", facts)
    scope = Scope(ir)
    scope.enter(fn)
    bound = for_parts(ir, nodes[0])[1]
    if bound is not None and scope.threads(children(ir, bound)[-1]) != UNIFORM:
        return Skipped("the passes' bound differs between threads", facts)
    if offset_node is not None and scope.threads(offset_node) != UNIFORM:
        return Skipped(f"the row's offset `{offset}` differs between threads", facts)
    in_loop = False
    for a in ir.ancestors(nodes[0]):
        if a == fn:
            break
        gtype = ir.grammar_type_of(a)
        cond = None
        if gtype == "if_statement":
            cond = if_parts(ir, a)[0]
        elif gtype in _LOOPS:
            in_loop = True
            cond = for_parts(ir, a)[1] if gtype == "for_statement" else children(ir, a)[1]
        if cond is not None and scope.threads(cond) != UNIFORM and budget is not None:
            return Skipped("the passes sit under a condition that differs between threads (the "
                           "copy's barrier needs the whole block)", facts)
    for c in subtree(ir, fn):  # registers (budget None) take no barrier: any thread may leave
        if budget is not None and ir.grammar_type_of(c) == "return_statement" and \
                ir.span_of(c).start < first[0]:
            guards = [if_parts(ir, a)[0] for a in ir.ancestors(c)
                      if ir.grammar_type_of(a) == "if_statement"]
            if not guards or any(scope.threads(g) != UNIFORM for g in guards):
                return Skipped("a thread may return before the passes (the copy's barrier "
                               "needs the whole block)", facts)
    element = pointers[pointer].replace("const", " ").replace("volatile", " ")
    element = " ".join(element.replace("__restrict__", " ").split())
    size = element_bytes(element)
    if size is None or 16 % size:
        return Skipped(f"the row's element type `{element}` has no known size", facts)
    if budget is None:
        return RowPasses(kernel, pointer, element, tuple(lp.span for lp in loops), header.start,
                         header.bound, header.step, 0, in_loop, size, tuple(reads), index)
    own, dynamic = _own_shared_bytes(unit, fn)
    if own is None:
        return Skipped("the kernel's own shared memory has no compile-time size", facts)
    room = min(budget, STATIC_LIMIT - own - (DYNAMIC_RESERVE if dynamic else 0))
    threads = unit.launch_block().threads
    if threads:  # the copy leaves the SM room for as many blocks as its threads allow
        blocks = max(1, min(SM_BLOCKS, SM_THREADS // threads))
        room = min(room, SM_SHARED // blocks - BLOCK_RESERVED - SLOTS_RESERVE - own -
                   (DYNAMIC_RESERVE if dynamic else 0))
    capacity = (room // size) // 8 * 8
    if capacity < MIN_ELEMENTS:
        return Skipped(f"shared memory leaves room for {max(capacity, 0)} elements of the row "
                       f"(the kernel holds {own} bytes)", {**facts, "own_bytes": own})
    return RowPasses(kernel, pointer, element, tuple(lp.span for lp in loops), header.start,
                     header.bound, header.step, capacity, in_loop, size, tuple(reads), index)


def _fresh(ir: KernelIR) -> str:
    n = 0
    while f"kl_row{n}" in ir.text:
        n += 1
    return f"kl_row{n}"


def _indent(data: bytes, pos: int) -> str:
    """The blanks before byte offset `pos` on its line ("" where code comes before it)."""
    line = data[data.rfind(b"\n", 0, pos) + 1:pos].decode("utf-8")
    return line if not line.strip() else ""


def cached_text(ir: KernelIR, plan: RowPasses) -> str:
    """The text replacing the passes' span: the shared copy and each pass on it or as written."""
    data = ir.source
    name = _fresh(ir)
    fits = f"{name}_fits"
    ind = _indent(data, plan.span[0])
    lanes = 16 // plan.size
    barrier_before = f"\n{ind}  __syncthreads();" if plan.in_loop else ""
    chunk = plan.at(f"kl_c * {lanes}")
    copy = (f'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\\n" :: "r"((unsigned)'
            f'__cvta_generic_to_shared(&{name}[kl_c * {lanes}])), "l"(&{chunk}) '
            f': "memory");')
    head = (f"__shared__ __align__(16) {plan.element} {name}[{plan.capacity}];\n"
            f"{ind}const bool {fits} = ({plan.bound}) <= {plan.capacity};\n"
            f"{ind}if ({fits}) {{  // the row read once into shared memory; the passes read the copy"
            f"{barrier_before}\n"
            f"{ind}  const long long kl_t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n"
            f"{ind}  const long long kl_n = blockDim.x * blockDim.y * blockDim.z, kl_len = ({plan.bound});\n"
            f"{ind}  long long kl_done = 0;\n"
            f"{ind}  if ((reinterpret_cast<unsigned long long>(&{plan.at('0')}) & 15ull) == 0) {{  // 16 bytes per cp.async\n"
            f"{ind}    kl_done = kl_len / {lanes} * {lanes};\n"
            f"{ind}    for (long long kl_c = kl_t; kl_c < kl_len / {lanes}; kl_c += kl_n)\n"
            f"{ind}      {copy}\n"
            f"{ind}    asm volatile(\"cp.async.wait_all;\\n\" ::: \"memory\");\n"
            f"{ind}  }}\n"
            f"{ind}  for (long long kl_i = kl_done + kl_t; kl_i < kl_len; kl_i += kl_n) {name}[kl_i] = {plan.at('kl_i')};\n"
            f"{ind}  __syncthreads();\n"
            f"{ind}}}\n{ind}")
    pieces = [head]
    cursor = plan.span[0]
    for k, (ls, le) in enumerate(plan.loops):
        pieces.append(data[cursor:ls].decode("utf-8"))
        original = data[ls:le].decode("utf-8")
        edits = sorted(((s, e, v) for kk, s, e, v in plan.reads if kk == k), reverse=True)
        if not edits:
            pieces.append(original)
        else:
            cached = data[ls:le]
            for s, e, v in edits:
                cached = cached[:s - ls] + f"{name}[{v}]".encode() + cached[e - ls:]
            inner = cached.decode("utf-8").replace("\n", "\n  ")
            pieces.append(f"if ({fits}) {{\n{ind}  {inner}\n{ind}}} else {{\n"
                          f"{ind}  {original.replace(chr(10), chr(10) + '  ')}\n{ind}}}")
        cursor = le
    return "".join(pieces)


@dataclass(frozen=True, slots=True)
class CachedRow:
    """A row held in shared array `array`: the statements that go when the passes read global
    memory again (`removed`: the copy, and the array's and the guard's declarations where
    nothing else uses them) and the edits that make the passes read `pointer` (`edits`)."""

    array: str
    pointer: str | None
    removed: tuple[tuple[int, int], ...]
    edits: tuple[tuple[int, int, str], ...]
    span: tuple[int, int]


def _statement_items(ir: KernelIR, block: int) -> list[int]:
    return [c for c in children(ir, block) if ir.grammar_type_of(c) not in ("comment", "{", "}")]


def _upto_next(ir: KernelIR, items: list[int], at: int) -> tuple[int, int]:
    """Statement `items[at]` with the space after it (up to the next statement or the block's end)."""
    start = ir.span_of(items[at]).start
    end = ir.span_of(items[at]).end
    if at + 1 < len(items):
        return start, ir.span_of(items[at + 1]).start
    rest = ir.source[end:]
    return start, end + len(rest) - len(rest.lstrip(b" \t\n"))


def _writes_array(ir: KernelIR, nid: int, array: str) -> bool:
    for c in subtree(ir, nid):
        gtype = ir.grammar_type_of(c)
        if gtype in ("assignment_expression", "update_expression"):
            base, _ = subscript(ir, children(ir, c)[0])
            if base == array:
                return True
        elif gtype == "gnu_asm_expression" and re.search(rf"&\s*{re.escape(array)}\s*\[", text(ir, c)):
            return True
    return False


def _uses(ir: KernelIR, nid: int, name: str) -> list[int]:
    return [c for c in subtree(ir, nid) if ir.grammar_type_of(c) == "identifier" and
            ir.name_of(c) == name]


def cached_rows(ir: KernelIR | Unit) -> list[CachedRow]:
    """Rows a kernel keeps in shared memory for its passes, by role: a one-dimensional shared
    array written by one statement of a block (the copy), read by later statements of that
    block and nowhere else, in one of two forms:
    - guarded: the copy is `if (C) { ... }`, and each pass that reads the array is
      `if (C) { pass on the array } else { pass on global memory }`: the passes become their
      `else` side;
    - plain: the copy is `for (...) S[v] = p[v];` and the passes are block-stride loops with
      the copy's bound reading `S[w]` at their loop variable: they read `p[w]` instead.
    The copy goes (a barrier after it stays), and so do the array's declaration and a guard
    variable's when nothing else uses them."""
    unit = ir if isinstance(ir, Unit) else Unit(ir)
    ir_ = unit.ir
    out = []
    for fn in unit.kernels.values():
        for name, arr in unit.shared_arrays(fn).items():
            if len(arr.extents) != 1 or arr.dynamic:
                continue
            found = _cached_row(unit, fn, name, ir_node(ir_, arr.decl))
            if found is not None:
                out.append(found)
    return out


def _cached_row(unit: Unit, fn: int, array: str, decl: int) -> CachedRow | None:
    ir = unit.ir
    writers = [c for c in subtree(ir, fn) if ir.grammar_type_of(c) in
               ("expression_statement", "gnu_asm_expression") and _writes_array(ir, c, array)]
    if not writers:
        return None
    block = ir.parent_of(decl)
    items = _statement_items(ir, block) if block is not None else []
    fill = next((i for i, c in enumerate(items) if all(
        ir.span_of(c).start <= ir.span_of(w).start < ir.span_of(c).end for w in writers)), None)
    if fill is None:
        return None
    node = items[fill]
    uses = [u for u in _uses(ir, fn, array) if not ir.span_of(decl).start <= ir.span_of(u).start
            < ir.span_of(decl).end and not ir.span_of(node).start <= ir.span_of(u).start
            < ir.span_of(node).end]
    removed = [_upto_next(ir, items, fill)]
    edits: list[tuple[int, int, str]] = []
    pointer = None
    if ir.grammar_type_of(node) == "if_statement" and if_parts(ir, node)[2] is None:
        guard = _norm(text(ir, if_parts(ir, node)[0])).strip("()")
        passes = []
        for c in items[fill + 1:]:
            if ir.grammar_type_of(c) != "if_statement":
                continue
            cond, then, alt = if_parts(ir, c)
            if alt is not None and _norm(text(ir, cond)).strip("()") == guard and _uses(ir, then, array):
                passes.append(c)
                inner = text(ir, alt).strip()
                if ir.grammar_type_of(alt) == "compound_statement":
                    inner = inner[1:-1].strip().replace("\n  ", "\n")
                edits.append((ir.span_of(c).start, ir.span_of(c).end, inner))
        inside = lambda u: any(ir.span_of(p).start <= ir.span_of(u).start < ir.span_of(p).end  # noqa: E731
                               for p in passes)
        if not passes or not all(inside(u) for u in uses):
            return None
        if re.fullmatch(r"[A-Za-z_]\w*", guard):
            gdecl = next((i for i, c in enumerate(items[:fill]) if ir.grammar_type_of(c) == "declaration"
                          and [n for n, _i, _v in declared_names(ir, c)] == [guard]), None)
            if gdecl is not None and all(inside(u) or ir.span_of(node).start <= ir.span_of(u).start
                                         < ir.span_of(node).end or ir.span_of(items[gdecl]).start <=
                                         ir.span_of(u).start < ir.span_of(items[gdecl]).end
                                         for u in _uses(ir, fn, guard)):
                removed.append(_upto_next(ir, items, gdecl))
    elif ir.grammar_type_of(node) == "for_statement":
        body = [c for c in subtree(ir, loop_body(ir, node))
                if ir.grammar_type_of(c) == "assignment_expression"]
        var = loop_var(ir, node)
        if len(body) != 1 or var is None:
            return None
        lhs, rhs = children(ir, body[0])[0], children(ir, body[0])[-1]
        base, idx = subscript(ir, lhs)
        pbase, pidx = subscript(ir, rhs)
        if base != array or len(idx) != 1 or flat_code(ir, idx[0]) != var or pbase is None or \
                len(pidx) != 1 or flat_code(ir, pidx[0]) != var:
            return None
        pointer = pbase
        bound = _norm(text(ir, for_parts(ir, node)[1] or node)).split("<", 1)[-1]
        loops = {lp.span: lp for lp in stride_loops(unit) if lp.kind == "block"}
        for u in uses:
            sub = ir.parent_of(u)
            loop = next((a for a in ir.ancestors(u) if ir.grammar_type_of(a) == "for_statement"
                         and _span_of(ir, a) in loops), None)
            if loop is None or sub is None or ir.grammar_type_of(sub) != "subscript_expression" or \
                    _stored(ir, u) or _norm(loops[_span_of(ir, loop)].bound) != bound:
                return None
            _b, sidx = subscript(ir, sub)
            if len(sidx) != 1 or flat_code(ir, sidx[0]) != loops[_span_of(ir, loop)].var:
                return None
            edits.append((ir.span_of(u).start, ir.span_of(u).end, pointer))
    else:
        return None
    if not edits:
        return None
    others = [u for u in _uses(ir, fn, array) if not any(s <= ir.span_of(u).start < e for s, e in removed)
              and not any(s <= ir.span_of(u).start < e for s, e, _t in edits)
              and not ir.span_of(decl).start <= ir.span_of(u).start < ir.span_of(decl).end]
    if not others and len(declared_names(ir, decl)) == 1 and decl in items:
        removed.append(_upto_next(ir, items, items.index(decl)))
    span = (min([s for s, _e in removed] + [s for s, _e, _t in edits]),
            max([e for _s, e in removed] + [e for _s, e, _t in edits]))
    return CachedRow(array, pointer, tuple(sorted(removed)), tuple(sorted(edits)), span)


def _span_of(ir: KernelIR, nid: int) -> tuple[int, int]:
    return ir.span_of(nid).start, ir.span_of(nid).end


def passes_back(ir: KernelIR, site: Site, removed: tuple[tuple[int, int], ...],
                edits: tuple[tuple[int, int, str], ...], options: dict) -> PassResult:
    """The de-optimization of a row kept apart: the `removed` statements go, each pass becomes
    its text in `edits` (the pass reading global memory), `options` re-derive the step."""
    out = [ByteEdit(s, e, "") for s, e in removed] + [ByteEdit(s, e, t) for s, e, t in edits]
    return finish(ir, site, sorted(out, key=lambda e: e.start), options=options)


@dataclass(frozen=True, slots=True)
class RowCache(Pass):
    """Passes re-reading a row from global memory <-> the row read once into shared memory."""

    budget: int = 32 * 1024
    """Bytes of static shared memory the row's copy may take (at most 48 KB less the kernel's
    own static shared memory, less 8 KB where it declares dynamic shared memory)."""

    name: ClassVar[str] = "row-cache"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "a row read once into shared memory <-> every pass re-reads it"
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        out = [make_site(self.name, ir, index, c.span, True, {"array": c.array,
                                                              "reads": len(c.edits)})
               for c in cached_rows(ir)]
        for plan in row_passes(ir, self.budget):
            if isinstance(plan, RowPasses):
                out.append(make_site(self.name, ir, index, plan.span, False, {
                    "pointer": plan.pointer, "passes": len(plan.loops),
                    "capacity": plan.capacity}, plan.loops[0]))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        for c in cached_rows(ir):
            if c.span == tuple(site.span):
                return passes_back(ir, site, c.removed, c.edits, {"budget": self.budget})
        return Skipped("no cached row at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        for plan in row_passes(ir, self.budget):
            if isinstance(plan, RowPasses) and plan.span == tuple(site.span):
                return finish(ir, site, [ByteEdit(*plan.span, cached_text(ir, plan))])
        refused = [p for p in row_passes(ir, self.budget) if isinstance(p, Skipped)]
        if refused:
            return refused[0]
        return Skipped("no row read by several passes at the site", {"site": site.anchor})
