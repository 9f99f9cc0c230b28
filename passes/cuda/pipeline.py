"""`cp.async` multi-stage pipelines <-> synchronous shared-memory staging.

De-optimization turns every asynchronous copy of a translation unit into a synchronous one at
the point where it was issued, and the commit/wait operations into compiler memory barriers.
This keeps the program's meaning: a pipeline never reads a stage between issuing its copy and
waiting for it, so the data simply arrives earlier; the stage ring stays as it is. Handled
forms: inline PTX `cp.async.{ca,cg}.shared.global [dst], [src], N[, src_size]`,
`cp.async.commit_group`, `cp.async.wait_group N` / `wait_all`, and the CUDA pipeline
primitives `__pipeline_memcpy_async`, `__pipeline_commit`, `__pipeline_wait_prior`.

The forward rule also pipelines a K loop a user wrote with synchronous staging, found by role
(`passes.cuda.recognize.stagings`, in any of their forms): a loop whose body stages tiles into
shared arrays, then synchronizes, computes on them and synchronizes again. Each staged array
gets a ring of `stages` slots; the copies of tile i + stages - 1 are issued as `cp.async`
(zero-filled where the user's guard fails, by a source size of 0) while tile i is computed,
with a prologue that issues the first stages - 1 tiles; each iteration issues its copies, then
waits until at most stages - 1 groups are in flight (its own tile has landed) before the
compute. A 2-byte copy (one bf16 / fp16 element per thread and tile) is paired with the next
thread's where that is the next element in shared and in global memory and the launch's block
has an even x size: even threads copy 4 bytes (copying both elements themselves where the
source is not 4-byte aligned). A chunked staging (`if (whole) <one 4/8/16-byte copy> else
<element copies>`, as passes.cuda.stage_vector writes it) issues the whole chunk as one
cp.async and keeps the fallback's element copies as ordinary stores into the same ring slot
(complete at the barrier before their tile's compute). A source pointer the compute part moves
on by a loop-invariant step (`A += BK;`) is read `stages - 1` steps ahead by the copies in
flight. It refuses (with the reason) where a copy is not 4, 8 or 16 bytes and cannot be paired
or kept as a fallback, where a guarded copy's fill is not zero, where a source pointer is
written otherwise in the loop, where the staged arrays are used outside the loop, or where the
loop does anything but stage, synchronize and compute.
"""
from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._c import CSource, asm_operands, code_view, find_iter
from passes.cuda._tree import (
    block_items,
    callee,
    children,
    declared_names,
    loop_body,
    subtree,
    text,
)
from passes.cuda.annotations import CUDA
from passes.cuda.recognize import (
    Staging,
    Unit,
    element_bytes,
    expand_locals,
    for_parts,
    loop_init,
    loop_var,
    stagings,
    written_names,
)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

_ASM = re.compile(r"\basm\s*(?:volatile\s*|__volatile__\s*)?\(")
_COPY = re.compile(r"cp\.async\.(?:ca|cg)\.shared(?:::cta)?\.global(?:\.L2::\w+)?\s*\[\s*%(\d+)\s*\]\s*,"
                   r"\s*\[\s*%(\d+)\s*\]\s*,\s*(\d+)\s*(?:,\s*%(\d+))?\s*;")
_SYNC_ONLY = re.compile(r"cp\.async\.(?:commit_group|wait_group|wait_all)\b")
_PRIMS = re.compile(r"\b__pipeline_(memcpy_async|commit|wait_prior)\s*\(")
_BARRIER = 'asm volatile("" ::: "memory");'


def _byte_copy(dst_shared: str | None, dst_ptr: str | None, src: str, size: str, valid: str) -> str:
    """A synchronous copy of `size` bytes (bytes at or past `valid` are zero-filled)."""
    load = (f"const unsigned char* kl_src = reinterpret_cast<const unsigned char*>({src}); "
            f"for (int kl_i = 0; kl_i < ({size}); ++kl_i) {{ "
            f"unsigned int kl_b = kl_i < (int)({valid}) ? kl_src[kl_i] : 0u; ")
    if dst_shared is not None:
        store = (f'asm volatile("st.shared.u8 [%0], %1;" :: "r"((unsigned)({dst_shared}) + kl_i), '
                 f'"r"(kl_b) : "memory"); }}')
    else:
        store = f"reinterpret_cast<unsigned char*>({dst_ptr})[kl_i] = (unsigned char)kl_b; }}"
    return "{ " + load + store + " }"


@dataclass(frozen=True, slots=True)
class _Op:
    start: int
    end: int
    replacement: str | None  # None: a form the rule cannot make synchronous
    why: str = ""


@dataclass(frozen=True, slots=True)
class CpAsyncPipeline(Pass):
    """Asynchronous multi-stage `cp.async` staging <-> synchronous copies."""

    pairs: str = ""
    """JSON list of [original, replacement] texts in source order (recorded by a
    de-optimization); restoring them re-derives the pipeline."""
    stages: int = 3
    """Slots of the ring the rule builds on a synchronously staged K loop (2 to 4)."""

    name: ClassVar[str] = "cp-async-pipeline"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "cp.async multi-stage global->shared pipeline <-> synchronous staging"
    requires: ClassVar[tuple[str, ...]] = ("smem-staged",)
    provides: ClassVar[tuple[str, ...]] = ("pipelined",)
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_80",)

    def _ops(self, src: CSource) -> list[_Op]:
        ops = []
        for m in find_iter(_ASM, src):
            end = src.close(m.end() - 1)
            stmt_end = end + 1 if src.code[end:end + 1] == ";" else end
            body = src.text[m.end():end - 1]
            template = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', body.split(":")[0]))
            copy = _COPY.search(template)
            if copy:
                operands = asm_operands(src, m.end() - 1)
                dst, srcp, size, valid = copy.group(1), copy.group(2), copy.group(3), copy.group(4)
                try:
                    d, s = operands[int(dst)], operands[int(srcp)]
                    v = operands[int(valid)] if valid is not None else size
                except (IndexError, ValueError):
                    ops.append(_Op(m.start(), stmt_end, None, "cp.async operands not understood"))
                    continue
                ops.append(_Op(m.start(), stmt_end, _byte_copy(d, None, s, size, v)))
            elif _SYNC_ONLY.search(template):
                ops.append(_Op(m.start(), stmt_end, _BARRIER))
            elif "cp.async" in template and "bulk" not in template:
                ops.append(_Op(m.start(), stmt_end, None, "an unhandled cp.async form"))
        for m in find_iter(_PRIMS, src):
            end = src.close(m.end() - 1)
            stmt_end = end + 1 if src.code[end:end + 1] == ";" else end
            if m.group(1) == "memcpy_async":
                args = [src.text[a:b].strip() for a, b in src.args(m.end() - 1)]
                if len(args) < 3:
                    ops.append(_Op(m.start(), stmt_end, None, "__pipeline_memcpy_async arity"))
                    continue
                valid = f"({args[2]}) - ({args[3]})" if len(args) > 3 else args[2]
                ops.append(_Op(m.start(), stmt_end, _byte_copy(None, args[0], args[1], args[2], valid)))
            else:
                ops.append(_Op(m.start(), stmt_end, _BARRIER))
        return sorted(ops, key=lambda o: o.start)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        ops = self._ops(src)
        out = []
        if any(o.replacement != _BARRIER for o in ops):
            span = src.bspan(ops[0].start, ops[-1].end)
            out.append(make_site(self.name, ir, index, span, True,
                                 {"copies": sum(o.replacement != _BARRIER for o in ops),
                                  "ops": len(ops)}, src.bspan(ops[0].start, ops[0].end)))
        copies = [m.start() for m in re.finditer(r"const unsigned char\* kl_src = ", src.text)]
        if copies:
            out.append(make_site(self.name, ir, index, (0, len(ir.source)), False,
                                 {"copies": len(copies)}, src.bspan(copies[0], copies[0] + 10)))
        elif not any(o.replacement != _BARRIER for o in ops):
            for loop in staged_loops(ir):
                out.append(make_site(self.name, ir, index, loop.span, False,
                                     {"arrays": sorted({s.array for s in loop.stagings}),
                                      "copies": len(loop.stagings)}, loop.span))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        ops = self._ops(src)
        if not ops or src.bspan(ops[0].start, ops[-1].end) != tuple(site.span):
            return Skipped("no cp.async pipeline at the site", {"site": site.anchor})
        bad = [o for o in ops if o.replacement is None]
        if bad:
            return Skipped(bad[0].why, {"line": src.text.count("\n", 0, bad[0].start) + 1})
        edits = [src.edit(o.start, o.end, o.replacement) for o in ops]
        pairs = [[src.text[o.start:o.end], o.replacement] for o in ops]
        return finish(ir, site, edits, options={"pairs": json.dumps(pairs)})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        results, skip = self.check(ctx)
        if skip:
            return skip
        loop = next((lp for lp in staged_loops(ir) if lp.span == tuple(site.span)), None)
        if loop is not None and (not self.pairs or
                                 json.loads(self.pairs)[0][1].encode() not in ir.source):
            return pipeline_loop(ir, site, loop, self.stages, results)
        if not self.pairs:
            return Skipped("restoring a cp.async pipeline needs the recorded copies", {})
        pairs = json.loads(self.pairs)
        text = ir.source
        pos, edits = site.span[0], []
        for before, after in pairs:
            needle = after.encode("utf-8")
            at = text.find(needle, pos, site.span[1])
            if at < 0:
                return Skipped("the recorded synchronous copies are not in the kernel", {})
            edits.append(ByteEdit(at, at + len(needle), before))
            pos = at + len(needle)
        return finish(ir, site, edits, preconditions=results)


# ---------------------------------------------------------------------------------------------
# the forward rule on a K loop staged synchronously (by role)


@dataclass(frozen=True, slots=True)
class StagedLoop:
    """A loop whose body stages tiles (`stagings`) before its first top-level barrier and
    computes on them after it; `span` is the loop's."""

    node: int
    span: tuple[int, int]
    stagings: tuple[Staging, ...]


def staged_loops(ir: KernelIR) -> list[StagedLoop]:
    """Loops holding global -> shared stagings before the first barrier of their body."""

    found: dict[int, list[Staging]] = {}
    staged, _ = stagings(ir)
    for st in staged:
        node = _node_at(ir, st.store)
        for a in ir.ancestors(node) if node is not None else ():
            if ir.grammar_type_of(a) not in ("for_statement", "while_statement", "do_statement"):
                continue
            items = [it.node for it in block_items(ir, loop_body(ir, a))]
            if any(_barrier(ir, it) for it in items):
                found.setdefault(a, []).append(st)
                break
    return [StagedLoop(n, (ir.span_of(n).start, ir.span_of(n).end), tuple(v))
            for n, v in sorted(found.items())]


def _node_at(ir: KernelIR, span: tuple[int, int]) -> int | None:
    return next((n.id for n in ir.walk() if (n.span.start, n.span.end) == tuple(span)
                 and ir.grammar_type_of(n.id) == "expression_statement"), None)


def _barrier(ir: KernelIR, nid: int) -> bool:

    return ir.grammar_type_of(nid) == "expression_statement" and any(
        ir.grammar_type_of(c) == "call_expression" and callee(ir, c) == "__syncthreads"
        for c in subtree(ir, nid))


_ZERO = re.compile(r"^\(?\s*(?:\(\w+\)\s*)?(?:0+|0*\.0*|0+\.0*)[fFuUlL]*\s*\)?$|"
                   r"^\w*\(\s*0*\.?0*[fF]?\s*\)$|^\w+\s*\{\s*\}$")


def pipeline_loop(ir: KernelIR, site: Site, loop: StagedLoop, stages: int,
                  results: list) -> PassResult:  # type: ignore[type-arg]
    """`loop` (staged synchronously) as a `stages`-slot cp.async ring (see the module)."""

    if not 2 <= stages <= 4:
        return Skipped(f"a ring of {stages} stages (the rule builds 2 to 4)", {"stages": stages})
    node = loop.node
    if ir.grammar_type_of(node) != "for_statement":
        return Skipped("the staged loop is not a counted for loop", {})
    var = loop_var(ir, node)
    _init, cond, update = for_parts(ir, node)
    if var is None or cond is None or update is None:
        return Skipped("the staged loop's header does not count one variable", {})
    upd = re.sub(r"\s+", "", text(ir, update))
    m = re.fullmatch(rf"{re.escape(var)}\+=(.+)", upd)
    step = m.group(1) if m else "1" if upd in (f"++{var}", f"{var}++") else None
    if step is None:
        return Skipped(f"the staged loop's step {text(ir, update)} is not an increment", {})
    items = [it for it in block_items(ir, loop_body(ir, node))]
    first = next((i for i, it in enumerate(items) if _barrier(ir, it.node)), None)
    if first is None or not _barrier(ir, items[-1].node) or first == len(items) - 1:
        return Skipped("the loop is not: stage, synchronize, compute, synchronize", {})
    unit = Unit(ir)
    fn = next(a for a in ir.ancestors(node) if ir.grammar_type_of(a) == "function_definition")
    shared = unit.shared_arrays(fn)
    arrays = {st.array for st in loop.stagings}
    produce = (items[0].start, items[first - 1].end) if first else None
    if produce is None:
        return Skipped("no staging before the loop's first barrier", {})
    kept = _fallbacks(ir, loop.stagings)
    for st in loop.stagings:
        if not (produce[0] <= st.span[0] and st.span[1] <= produce[1]):
            return Skipped(f"a copy into {st.array} sits after the loop's first barrier", {})
        if st in kept:  # stays an ordinary store into the ring slot
            continue
        if st.converted:
            return Skipped(f"a copy into {st.array} converts what it reads (cp.async copies "
                           "bytes)", {"array": st.array})
        size = _copy_bytes(st)
        if size == 2 and st.width == 1:
            why = _pairing(unit, fn, node, st)
            if why:
                return Skipped(f"a copy into {st.array} moves 2 bytes (cp.async moves 4, 8 or "
                               f"16) and the pair with the next thread's is not told: {why}",
                               {"array": st.array, "bytes": size})
        elif size not in (4, 8, 16):
            return Skipped(f"a copy into {st.array} moves {size} bytes (cp.async moves 4, 8 "
                           "or 16)", {"array": st.array, "bytes": size})
        if st.guard is not None and not _ZERO.match(st.fill or ""):
            return Skipped(f"a guarded copy into {st.array} fills {st.fill}, not zero "
                           "(cp.async zero-fills)", {"array": st.array})
        if st.array not in shared or None in shared[st.array].extents or shared[st.array].dynamic:
            return Skipped(f"{st.array} is not a shared array of constant extents", {})
        if size in (8, 16) and _bytes(shared[st.array]) % size:
            return Skipped(f"a slot of {st.array} is not a multiple of the {size}-byte copy "
                           "into it (the next slot would not be aligned)", {"array": st.array})
    advances = _advances(ir, node, items, first, {st.source for st in loop.stagings})
    if isinstance(advances, str):
        return Skipped(advances, {})
    # the staged arrays are used only inside the loop; the producer part writes nothing else
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) == "identifier" and ir.name_of(nid) in arrays:
            span = ir.span_of(nid)
            decl = shared[ir.name_of(nid) or ""].decl
            inside = loop.span[0] <= span.start < loop.span[1]
            if not inside and not decl[0] <= span.start < decl[1]:
                return Skipped(f"{ir.name_of(nid)} is used outside the staged loop", {})
    copies = {st.span for st in loop.stagings}
    for nid in subtree(ir, node):
        span = ir.span_of(nid)
        if not produce[0] <= span.start < produce[1]:
            continue
        if ir.grammar_type_of(nid) == "assignment_expression" and \
                not any(a <= span.start < b for a, b in copies):
            target = children(ir, nid)[0]
            if ir.grammar_type_of(target) != "identifier":
                return Skipped("the staging part of the loop stores to memory besides its "
                               "copies", {})

    local = {name for it in items[:first] if ir.grammar_type_of(it.node) == "declaration"
             for name, _i, _v in declared_names(ir, it.node)}
    later = {ir.name_of(n) for n in subtree(ir, node) if ir.grammar_type_of(n) == "identifier"
             and ir.span_of(n).start >= items[first].start}
    if local & later:
        return Skipped(f"the compute reads {sorted(local & later)[0]}, declared where the "
                       "tiles are staged", {})
    total = sum(_bytes(shared[a]) for a in arrays) * stages
    if total > 48 * 1024:
        return Skipped(f"{stages} stages of the staged tiles take {total} bytes of static "
                       "shared memory (48 KiB at most)", {"bytes": total})
    src = ir.source.decode("utf-8")
    body = loop_body(ir, node)
    produce_text = _advanced(_ring_copies(ir, src, produce, loop.stagings, arrays, "kl_put",
                                          unit, fn, kept), advances, "kl_ahead")
    consume_start = items[first].start
    consume_text = _ring_reads(_at(ir, consume_start, items[-1].end), arrays, "kl_get")
    cond_text = text(ir, cond)
    start_expr = _loop_start_text(ir, node)
    if start_expr is None:
        return Skipped("the staged loop's start is not read", {})
    edits = []
    decls: dict[tuple[int, int], str] = {}  # one edit per declaration (it may declare several)
    for a in sorted(arrays):
        d = shared[a].decl
        decl = decls.get(d, _at(ir, d[0], d[1]))
        decls[d] = re.sub(rf"\b{a}\s*\[", f"{a}[{stages}][", decl, count=1)
        if "__align__" not in decls[d]:  # 4-byte pairs and 16-byte vectors land aligned
            decls[d] = decls[d].replace("__shared__", "__shared__ __align__(16)", 1)
    edits += [ByteEdit(d[0], d[1], text_) for d, text_ in sorted(decls.items())]
    ahead = f"({stages - 1}) * ({step})"
    loop_head = _at(ir, ir.span_of(node).start, ir.span_of(body).start)
    pro = (f"for (int kl_s = 0; kl_s < {stages - 1}; ++kl_s) {{\n"
           f"  const auto kl_at = ({start_expr}) + kl_s * ({step});\n"
           f"  {{ const auto {var} = kl_at; const int kl_put = kl_s, kl_ahead = kl_s;\n"
           f"    if ({cond_text}) {{\n{produce_text}\n    }}\n  }}\n"
           f"  asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n}}\n")
    main = (f"{loop_head}{{\n"
            f"  const int kl_get = kl_it % {stages}; ++kl_it;\n"
            f"  {{ const auto kl_at = {var} + {ahead}; const int kl_put = (kl_get + {stages - 1}) % {stages};\n"
            f"    {{ const auto {var} = kl_at; const int kl_ahead = {stages - 1};\n"
            f"      if ({cond_text}) {{\n{produce_text}\n      }}\n    }}\n  }}\n"
            f"  asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\");\n"
            f"  asm volatile(\"cp.async.wait_group {stages - 1};\\n\" ::: \"memory\");\n"
            f"  {consume_text}\n}}\n"
            f"asm volatile(\"cp.async.wait_all;\\n\" ::: \"memory\");")
    text_ = ("{ // the staged loop as a cp.async ring of " + f"{stages} stages\nint kl_it = 0;\n"
             + pro + main).replace("\n", "\n" + _indent(ir, loop.span[0]) + "  ") + "\n" + \
        _indent(ir, loop.span[0]) + "}"
    edits.append(ByteEdit(loop.span[0], loop.span[1], text_))
    wide = Site(site.pass_name, site.anchor, site.present, site.detail,
                (min(e.start for e in edits), max(e.end for e in edits)))
    return finish(ir, wide, edits, preconditions=results)


def _at(ir: KernelIR, start: int, end: int) -> str:
    """The source between byte offsets `start` and `end` (the IR's spans count bytes)."""
    return ir.source[start:end].decode("utf-8")


def _indent(ir: KernelIR, pos: int) -> str:
    line = ir.source.rfind(b"\n", 0, pos) + 1
    return _at(ir, line, pos) if not _at(ir, line, pos).strip() else ""


def _bytes(array) -> int:  # noqa: ANN001

    total = element_bytes(array.element) or 4
    for e in array.extents:
        total *= e or 1
    return total


def _loop_start_text(ir: KernelIR, node: int) -> str | None:

    found = loop_init(ir, node)
    return text(ir, found[1]) if found and found[1] is not None else None


def _ring_reads(text_: str, arrays: set[str], slot: str) -> str:
    """`text_` with each use of a staged array made a use of its ring slot `slot`: `a[i]`
    becomes `a[slot][i]`, and a bare `a` (passed on, cast to a pointer) `a[slot]`, which has
    the type the bare array had."""
    return _each_use(text_, arrays, lambda name: f"{name}[{slot}]")


def _each_use(text_: str, names: Collection[str], use: Callable[[str], str]) -> str:
    """`text_` with each use of a name of `names` in its code (not a member, not a call)
    replaced by `use(name)`."""
    if not names:
        return text_
    code = code_view(text_)
    out, last = [], 0
    for m in re.finditer(rf"(?<![\w.>])({'|'.join(map(re.escape, sorted(names)))})\b(?!\s*\()", code):
        out.append(text_[last:m.start()] + use(m.group(1)))
        last = m.end()
    return "".join(out) + text_[last:]


def _ring_copies(ir: KernelIR, src: str, produce: tuple[int, int], copies: Sequence[Staging],
                 arrays: set[str], slot: str, unit: Unit, fn: int,
                 kept: frozenset[Staging] = frozenset()) -> str:
    """The staging part of the loop with each copy issued as `cp.async` into ring slot
    `slot` (its guard as the source size: 0 zero-fills); a 2-byte copy pairs with the next
    thread's (`_paired_text`); a copy of `kept` stays an ordinary store into the slot."""
    data = src.encode("utf-8")
    edits = []
    for st in copies:
        if st in kept:
            continue
        size = _copy_bytes(st)
        if size == 2:
            parts = st.parts or (st.span,)
            edits += [(a, b, "") for a, b in parts[:-1]]
            edits.append((parts[-1][0], parts[-1][1], _paired_text(unit, fn, st, arrays, slot)))
            continue
        dst = _ring_reads(st.dst if st.width > 1 else f"&({st.dst})", arrays, slot)
        source = st.src if st.width > 1 else f"&({st.src})"
        valid = f"(({st.guard}) ? {size} : 0)" if st.guard else str(size)
        kind = "cg" if size == 16 else "ca"
        copy = (f'asm volatile("cp.async.{kind}.shared.global [%0], [%1], {size}, %2;\\n" :: '
                f'"r"((unsigned)__cvta_generic_to_shared({dst})), "l"({source}), "r"({valid}) '
                f': "memory");')
        parts = st.parts or (st.span,)
        edits += [(a, b, "") for a, b in parts[:-1]]  # the temporary's declaration and guard
        edits.append((parts[-1][0], parts[-1][1], copy))
    out, last = [], produce[0]
    for start, end, text_ in sorted(edits):
        out.append(_ring_reads(data[last:start].decode("utf-8"), arrays, slot) + text_)
        last = end
    out.append(_ring_reads(data[last:produce[1]].decode("utf-8"), arrays, slot))
    return "".join(out)


def _copy_bytes(st: Staging) -> int:
    """Bytes one copy moves: its vector type's, or its elements'."""
    if st.vector is not None and element_bytes(st.vector):
        return element_bytes(st.vector) or 0
    return (element_bytes(st.element) or 0) * st.width


def _fallbacks(ir: KernelIR, copies: Sequence[Staging]) -> frozenset[Staging]:
    """Copies that are the fallback of a chunked staging: they sit in the `else` branch of an
    `if` whose other branch holds a copy into the same array that cp.async moves whole (4, 8
    or 16 bytes, not converted). They stay ordinary stores into the ring slot: the slot's
    last reader finished at the barrier ending the previous iteration, and the barrier before
    the compute of their tile makes them visible."""
    out = set()
    for st in copies:
        node = _node_at(ir, st.store)
        for a in ir.ancestors(node) if node is not None else ():
            if ir.grammar_type_of(a) != "if_statement":
                continue
            alt = next((c for c in children(ir, a) if ir.grammar_type_of(c) == "else_clause"), None)
            if alt is None or not ir.span_of(alt).start <= st.store[0] < ir.span_of(alt).end:
                continue
            then = ir.span_of(a).start, ir.span_of(alt).start
            if any(o.array == st.array and then[0] <= o.span[0] and o.span[1] <= then[1]
                   and not o.converted and _copy_bytes(o) in (4, 8, 16) for o in copies):
                out.add(st)
            break
    return frozenset(out)


_ADVANCE = re.compile(r"^\s*([A-Za-z_]\w*)\s*(?:\+=\s*(.+?)|=\s*\1\s*\+\s*(.+?))\s*;\s*$", re.S)


def _advances(ir: KernelIR, node: int, items: Sequence, first: int,  # type: ignore[type-arg]
              sources: set[str]) -> dict[str, str] | str:
    """Pointers the copies read from that the loop's compute part moves on by a loop-invariant
    step each iteration (`A += BK;` at the top level of the body, after the first barrier):
    pointer -> step. A copy of tile i + n reads `pointer + n * step`. The reason (a string)
    where a source pointer is written otherwise in the loop."""
    out: dict[str, str] = {}
    moved: set[str] = set()
    for it in items[first:]:
        m = _ADVANCE.match(text(ir, it.node))
        if m and m.group(1) in sources and ir.grammar_type_of(it.node) == "expression_statement":
            if m.group(1) in out:
                return f"the loop moves {m.group(1)} more than once"
            out[m.group(1)] = (m.group(2) or m.group(3)).strip()
            moved.add(it.node)
    written = set()
    for it in items:
        if it.node not in moved:
            written |= written_names(ir, it.node)
    for name in sorted(sources & written):
        return f"the loop writes {name}, which the copies read from, besides moving it on"
    body_names = written | set(out)
    for name, step in out.items():
        used = set(re.findall(r"(?<![.\w])[A-Za-z_]\w*", step))
        if used & body_names:
            return f"the step {step} that {name} moves by changes in the loop"
    return out


def _advanced(text_: str, advances: dict[str, str], ahead: str) -> str:
    """`text_` with each moved pointer `p` read as `(p + ahead * (step))`."""
    return _each_use(text_, advances, lambda name: f"({name} + {ahead} * ({advances[name]}))")


# ---------------------------------------------------------------------------------------------
# 2-byte copies in pairs: an even thread copies its element and the next thread's

_PROBES = 24


def _neighbour(expr: str) -> str:
    return re.sub(r"\bthreadIdx\s*\.\s*x\b", "(threadIdx.x + 1)", expr)


def _pairing(unit: Unit, fn: int, loop: int, st: Staging) -> str:
    """Why a 2-byte copy cannot be paired with the next thread's ('' when it can): the copy
    runs once per thread per tile (not in a loop of its own), the launch's block has an even x
    size, and for even threadIdx.x the next thread's element is the next one in shared memory
    (the last subscript + 1, from an even one) and in global memory (the index + 1), checked
    by evaluating the expressions (locals expanded) at sample points."""
    if st.loop is not None and st.loop != (unit.ir.span_of(loop).start, unit.ir.span_of(loop).end):
        return "the copy runs in a loop of its own"
    block = unit.launch_block().dims
    if block is None or block[0] % 2:
        return "the launch's block x size is not known to be even"
    dst = _indices(st.dst)
    src = _indices(st.src)
    if dst is None or src is None or len(src[1]) != 1:
        return "the element expressions are not subscripts"
    env_names = set()
    exprs = [expand_locals(unit, fn, e) for e in (*dst[1], src[1][0])]
    for e in exprs:
        env_names |= {re.sub(r"\s+", "", n) for n in
                      re.findall(r"(?<![.\w])[A-Za-z_]\w*(?:\s*\.\s*[xyz])?", e)}
    env_names = {n for n in env_names if unit.value(n) is None}  # constants keep their value
    rng = random.Random(0)
    for _ in range(_PROBES):
        env = {n: rng.randrange(0, 64) for n in env_names}
        env["threadIdx.x"] = 2 * rng.randrange(0, block[0] // 2)
        own = [_c_eval(unit, e, env) for e in exprs]
        nxt = [_c_eval(unit, _neighbour(e), env) for e in exprs]
        if None in own or None in nxt:
            return "an index is not integer arithmetic"
        *d_own, s_own = own
        *d_nxt, s_nxt = nxt
        if d_nxt[:-1] != d_own[:-1] or d_nxt[-1] != d_own[-1] + 1 or d_own[-1] % 2 or \
                s_nxt != s_own + 1:
            return "the next thread's element is not the next one in memory"
    return ""


def _indices(expr: str) -> tuple[str, list[str]] | None:
    m = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*((?:\[[^\[\]]+\]\s*)+)", expr)
    if m is None:
        return None
    return m.group(1), re.findall(r"\[([^\[\]]+)\]", m.group(2))


def _c_eval(unit: Unit, expr: str, env: dict) -> int | None:
    """An integer C expression of `env`'s names and the unit's constants, or None."""
    text_ = re.sub(r"\(\s*(?:size_t|int|unsigned(?:\s+int)?|long(?:\s+long)?)\s*\)", "", expr)
    text_ = re.sub(r"static_cast\s*<[^<>]*>", "", text_)

    def name(m: re.Match[str]) -> str:
        key = re.sub(r"\s+", "", m.group(0))
        if key in env:
            return str(env[key])
        value = unit.value(key)
        return str(value) if value is not None else key

    text_ = re.sub(r"(?<![.\w])[A-Za-z_]\w*(?:\s*\.\s*[xyz])?", name, text_)
    if re.search(r"[A-Za-z_]", text_):
        return None
    return unit.value(text_)


def _paired_text(unit: Unit, fn: int, st: Staging, arrays: set[str], slot: str) -> str:
    """Even threads issue one 4-byte cp.async for their element and the next thread's (the
    source size 4, 2 or 0 by the two guards); where the source is not 4-byte aligned, or the
    first guard fails and the second holds, they copy the two elements themselves."""
    guard = st.guard or "true"
    fill = st.fill or "0"
    own_dst = _ring_reads(st.dst, arrays, slot)
    nxt_dst = _ring_reads(_neighbour(expand_locals(unit, fn, st.dst)), arrays, slot)
    nxt_src = _neighbour(expand_locals(unit, fn, st.src))
    nxt_guard = _neighbour(expand_locals(unit, fn, guard))
    return ("if ((threadIdx.x & 1) == 0) { "
            f"const bool kl_p0 = ({guard}), kl_p1 = ({nxt_guard}); "
            f"const void* kl_from = &({st.src}); "
            "if ((reinterpret_cast<unsigned long long>(kl_from) & 3ull) == 0 && (kl_p0 || !kl_p1)) "
            'asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\\n" :: '
            f'"r"((unsigned)__cvta_generic_to_shared(&({own_dst}))), "l"(kl_from), '
            '"r"(kl_p0 ? (kl_p1 ? 4 : 2) : 0) : "memory"); '
            f"else {{ {own_dst} = kl_p0 ? {st.src} : {fill}; "
            f"{nxt_dst} = kl_p1 ? {nxt_src} : {fill}; }} }}")
