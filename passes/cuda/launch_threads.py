"""A kernel launched with a smaller block <-> the block its host launches it with.

A kernel that runs one row per block (softmax, norms, row sums) holds as many rows on an SM as
its blocks fit there: 2048 threads make 8 blocks of 256, 16 of 128. With fewer threads per row,
each thread carries more of its row (`row-registers`' vectors), more rows are in flight per SM
and the SM keeps more bytes in flight. This rule launches the kernel with `threads` threads
instead of the host's block (a tunable a search sweeps).

Preconditions, each refusal naming the one that failed:
- the kernel's launches use one block, known (`recognize.launch_block`), one-dimensional, of
  more than `threads` threads; `threads` is a multiple of 32;
- a block-stride loop stepping by `blockDim.x` spreads the kernel's work over its threads, the
  kernel is no GEMM micro-kernel (`recognize.micro_kernels`: its tiles are sized by its block),
  and the kernel (and the `__device__` functions it calls) reads its thread count only through
  `blockDim.x`: the block's size does not appear as a constant (a literal or a named constant
  of that value) anywhere but as an array's extent or in `__launch_bounds__` (both stay valid
  for a smaller block: an array sized for the larger block holds the smaller one's slots);
  or the kernel names its block's size as one constant (`#define`, `constexpr` / `const`
  integer at file or kernel scope, defined once by a literal equal to the launch's block) used
  only where a different value stays consistent once the launch changes with it: the step of
  a block-stride loop (or a local bound once to it that is one), the header of a shared-memory
  reduction tree, an array's extent, `__launch_bounds__` and the block of a `<<<...>>>` launch
  of the kernel; the constant's value changes with the launch (a comment line before its
  definition records the value as written); any other use refuses, naming it;
- no shared slot is addressed at a constant offset from the thread's own, or at a constant
  slot, that a block of `threads` leaves unwritten (`assumed_threads`: an unrolled tree's
  `s[tid + 64]`, a warp tail's `v[t + 32]`), and no thread's count or last-seen value is
  computed with before the block combines it (`recognize.repartition_refusal`: a smaller
  block hands each thread other elements);
- the launch can be edited: a `<<<grid, block, ...>>>` launch in the unit (a `load_inline`
  wrapper) gets `threads` as its block, after a comment line recording the block as written;
  a launch in the Python host module beside the source (CuPy, `experts.cudahost.launch`,
  `cuLaunchKernel`) is asked for the block by the source's host-launch line
  (`kir.hostlaunch.Directive`, applied by the gate, the optimize loop's output and the CPU
  emulator's `run_host`); a source whose host-launch line asks something else of the kernel
  is left alone. A kernel with dynamic shared memory (`extern __shared__`) launched from the
  host module keeps the bytes the host sizes at its launch (the line's `keep_shared`) where a
  smaller block needs less of them (`dynamic_refusal`: the buffer used only at the thread's own
  slot, at constant slots and by trees over the block, through pointers set into it at
  multiples of blockDim.x); any other use of it is refused, named.

A row the kernel holds in registers (`row-registers`' form) is re-fitted to the smaller block:
its vectors per thread (a constant of the form: its arrays' extents, the loops over them, the
guard's elements per thread) become what row-registers chooses at `threads` for the case's row
(`row_registers.vectors_for`) where the row's bound can be told from the case's shape facts,
else the count scaled by the host's block / `threads`; never fewer than the form's own. A comment
line before the row's array records its count as written. Where the new count passes
row-registers' `MAX_VECTORS` the rule refuses, the count named (the form would only take its
fallback). Warp shuffles' warp count and slot fold read the block (`blockDim.x` or the constant)
and a row in shared memory (`row-cache`) is sized by the row, not the block: both stay valid.

The de-optimization takes the comment lines, the block, the constant's value and the rows'
vectors back (or the host-launch line out) and records `threads`; it refuses while the kernel's
`__launch_bounds__` admit no more than the smaller block and do not name the constant it
restores (the host's block would not launch: `launch-bounds` is undone first).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from types import MappingProxyType
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kir import hostlaunch
from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._c import code_view
from passes.cuda._tree import children, declared_names, subtree, text
from passes.cuda.annotations import CUDA
from passes.cuda.recognize import (Unit, _parameter_names, _split_args, _thread_names,
                                   block_group_terms, expand_locals, for_parts, launch_block, micro_kernels,
                                   reduction_trees, repartition_refusal, shuffle_reductions,
                                   stride_loops, subscript)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

TAG = "// launch-threads: "
"""How the comment line recording a `<<<...>>>` launch's block as written starts."""


def _callees(unit: Unit, kernel: str) -> list[int]:
    """The kernel's function and the unit's functions it calls (transitively)."""
    ir = unit.ir
    funcs = {**unit.functions, **unit.kernels}
    todo, seen = [unit.kernels[kernel]], []
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.append(fn)
        for c in subtree(ir, fn):
            if ir.grammar_type_of(c) == "call_expression":
                name = re.split(r"[<(]", text(ir, c), maxsplit=1)[0].strip()
                if name in funcs and funcs[name] not in seen:
                    todo.append(funcs[name])
    return seen


def _in_kernel(unit: Unit, kernel: str) -> set[str]:
    """The kernel and the block helpers (`Unit.block_helpers`) it calls, by name."""
    fns = set(_callees(unit, kernel))
    return {name for name, fn in unit.block_helpers().items() if fn in fns}


def aliases(unit: Unit, name: str) -> list[str]:
    """`name` and the constants it is bound to in turn (`const int step = nt;` -> step, nt)."""
    out = [name]
    while len(out) < 6 and out[-1] in unit.constants:
        nxt = re.sub(r"[\s()]", "", unit.constants[out[-1]])
        if not re.fullmatch(r"[A-Za-z_]\w*", nxt) or nxt in out:
            break
        out.append(nxt)
    return out


def counted_threads(unit: Unit, kernel: str, threads: int, besides: str | None = None,
                    skip: tuple[int, int] = (0, 0)) -> str | None:
    """Where the kernel names its block's size `threads` as a constant (other than `besides`
    and its aliases, and outside bytes `skip`) other than as an array's extent or in
    `__launch_bounds__` (the text), or None."""
    ir = unit.ir
    for fn in _callees(unit, kernel):
        for c in subtree(ir, fn):
            gtype = ir.grammar_type_of(c)
            if gtype not in ("number_literal", "identifier"):
                continue
            word = text(ir, c)
            if gtype == "identifier" and (word not in unit.constants or
                                          (besides is not None and besides in aliases(unit, word))):
                continue
            if unit.value(word) != threads or skip[0] <= ir.span_of(c).start < skip[1]:
                continue
            parent = ir.parent_of(c)
            if parent is not None and ir.grammar_type_of(parent) == "array_declarator":
                continue
            line_start = ir.source.rfind(b"\n", 0, ir.span_of(c).start) + 1
            before = ir.source[line_start:ir.span_of(c).start].decode("utf-8", "replace")
            if "__launch_bounds__" in before and before.count("(") > before.count(")"):
                continue
            return word
    return None


_INT_TYPE = r"(?:unsigned\s+int|unsigned|signed\s+int|int|long\s+long|long|size_t|u?int(?:32|64)_t)"


@dataclass(frozen=True, slots=True)
class _Constant:
    """A named constant's one definition: its name, the byte span of its literal value and of
    the definition's line."""

    name: str
    value: tuple[int, int]
    line: tuple[int, int]


def _definition(ir: KernelIR, name: str) -> _Constant | str:
    """The one definition of constant `name` by an integer literal, or why there is none."""
    src, code = ir.text, code_view(ir.text)
    word = re.escape(name)
    forms = (rf"^[ \t]*#[ \t]*define[ \t]+{word}[ \t]+\(?[ \t]*(\d+)[uUlL]*[ \t]*\)?[ \t]*$",
             rf"\b(?:static\s+)?(?:constexpr|const)\s+(?:static\s+)?{_INT_TYPE}\s+{word}\s*"
             r"(?:=\s*|\{\s*)(\d+)[uUlL]*\s*\}?\s*;")
    found = [m for f in forms for m in re.finditer(f, code, re.M)]
    if len(found) != 1:
        return (f"`{name}` is defined {len(found)} times" if found else
                f"`{name}` is not defined once by an integer literal")
    m = found[0]
    at = lambda i: len(src[:i].encode())  # noqa: E731
    start = src.rfind("\n", 0, m.start(1)) + 1
    end = src.find("\n", m.end())
    return _Constant(name, (at(m.start(1)), at(m.end(1))), (at(start), at(end if end >= 0 else len(src))))


def _for_at(ir: KernelIR, span: tuple[int, int]) -> int | None:
    return next((n.id for n in ir.walk() if (n.span.start, n.span.end) == span and
                 ir.grammar_type_of(n.id) == "for_statement"), None)


def _vouched(unit: Unit, kernel: str, chevrons: list[tuple[int, int, str, int]]) -> list[tuple[int, int]]:
    """Byte spans where a constant equal to the block stays consistent when it and the launch
    change together: block-stride loops' steps and the declarations of locals bound once to a
    step, loops from the thread's index stepping by a multiple (`k * (c)`: a vectorized
    block-stride loop; its unrolled steps' `var + j * (c)` too), reduction trees' loop headers, a warp-shuffle reduction's warp count and slot fold
    (`(c) >> 5`, `(c) >> 6`), a `row-registers` form's guard and chunk, the kernel's
    `<<<...>>>` blocks."""
    ir = unit.ir
    inside = _in_kernel(unit, kernel)
    spans = [(s, e) for s, e, _b, _l in chevrons]
    steps = set()
    for lp in stride_loops(unit):
        node = _for_at(ir, lp.span) if lp.kernel in inside and lp.kind == "block" else None
        update = for_parts(ir, node)[2] if node is not None else None
        if update is not None:
            spans.append((ir.span_of(update).start, ir.span_of(update).end))
            steps.add(re.sub(r"[\s()]", "", lp.step))
    for fn in _callees(unit, kernel):  # loops from the thread's index by a multiple of the block
        for c in subtree(ir, fn):
            if ir.grammar_type_of(c) != "for_statement":
                continue
            init, _cond, update = for_parts(ir, c)
            step = re.fullmatch(r"\s*(\w+)\s*\+=\s*\d+\s*\*\s*\(?\s*\w+\s*\)?\s*",
                                text(ir, update)) if update is not None else None
            if init is None or step is None or "threadIdx.x" not in text(ir, init):
                continue
            spans.append((ir.span_of(update).start, ir.span_of(update).end))
            lo = ir.span_of(c).start  # and its unrolled steps' offsets: `var + k * (c)`
            body = ir.source[lo:ir.span_of(c).end].decode("utf-8", "replace")
            for m in re.finditer(rf"(?<![\w.]){step.group(1)}\s*\+\s*\d+\s*\*\s*\(\s*\w+\s*\)", body):
                spans.append((lo + len(body[:m.start()].encode()), lo + len(body[:m.end()].encode())))
    helpers = unit.block_helpers()
    for fname in inside:
        for c in subtree(ir, helpers[fname]):
            m = re.fullmatch(r"(?:const\s+)?\w+\s+(\w+)\s*=\s*[^;,]+;", text(ir, c).strip())
            if ir.grammar_type_of(c) == "declaration" and m and m.group(1) in steps:
                spans.append((ir.span_of(c).start, ir.span_of(c).end))
    from passes.cuda.row_registers import register_rows  # noqa: PLC0415

    for held in register_rows(ir):  # a row in registers: its guard and its vectors' block stride
        for n in ir.walk():
            if ir.grammar_type_of(n.id) == "declaration" and held.span[0] <= n.span.start < held.span[1] \
                    and re.match(rf"\s*const\s+(?:bool\s+{held.guard}\s*=|long\s+long\s+\w+\s*="
                                 r"\s*\(long long\)\(.*?\)\s*\+\s*\(long long\)\w+\s*\*\s*\(\s*\w+\s*\)\s*;)",
                                 text(ir, n.id), re.S):
                spans.append((n.span.start, n.span.end))
    called = set(_callees(unit, kernel))
    funcs = {**unit.functions, **unit.kernels}
    for red in shuffle_reductions(unit):  # warp shuffles: the block's warps and their slots' fold
        if funcs.get(red.kernel) in called:
            lo = len(ir.source[:red.span[0]].decode("utf-8", "replace"))
            part = ir.text[lo:lo + len(ir.source[red.span[0]:red.span[1]].decode("utf-8", "replace"))]
            for m in re.finditer(r"\(\s*\w+\s*\)\s*>>\s*[56]\b", part):
                spans.append((red.span[0] + len(part[:m.start()].encode()),
                              red.span[0] + len(part[:m.end()].encode())))
    for tree in reduction_trees(unit)[0]:
        fn = {**unit.functions, **unit.kernels}.get(tree.kernel)
        loop = next((n.id for n in ir.walk() if fn in called and
                     tree.span[0] <= n.span.start < tree.span[1] and
                     ir.grammar_type_of(n.id) == "for_statement"), None)
        parts = [p for p in for_parts(ir, loop) if p is not None] if loop is not None else []
        if parts:
            spans.append((ir.span_of(loop).start, max(ir.span_of(p).end for p in parts)))
    return spans


def _in_extent(ir: KernelIR, at: int) -> bool:
    """Whether the identifier at byte `at` is (in) an array declarator's extent."""
    node = next((n.id for n in ir.walk() if n.span.start == at and
                 ir.grammar_type_of(n.id) == "identifier"), None)
    if node is None:
        return False
    for a in ir.ancestors(node):
        if ir.grammar_type_of(a) == "array_declarator":
            return ir.span_of(children(ir, a)[0]).end <= at
    return False


def constant_use(unit: Unit, kernel: str, const: _Constant,
                 chevrons: list[tuple[int, int, str, int]]) -> str | None:
    """The first use of the constant or an alias of it (outside its definition) that the rule
    cannot vouch for staying consistent at another value (where it is), or None. A use in
    another macro's body, or an array extent or `__launch_bounds__` outside the kernel and
    the functions it calls, counts."""
    ir, src = unit.ir, unit.ir.text
    vouched = _vouched(unit, kernel, chevrons)
    own = [ir.span_of(fn) for fn in _callees(unit, kernel)]
    own_spans = [(sp.start, sp.end) for sp in own]
    bounds = re.search(rf"__launch_bounds__\s*\([^()]*\)\s*{re.escape(kernel)}\s*\(", src)
    if bounds is not None:
        vouched.append((len(src[:bounds.start()].encode()), len(src[:bounds.end()].encode())))
    code = code_view(src)
    names = [n for n in unit.constants if const.name in aliases(unit, n)]  # it and its aliases
    uses = sorted(len(src[:m.start()].encode()) for n in names
                  for m in re.finditer(rf"(?<![\w.]){re.escape(n)}(?!\w)", code))
    for at in uses:
        if const.line[0] <= at < const.line[1] or any(s <= at < e for s, e in vouched) or \
                (_in_extent(ir, at) and any(s <= at < e for s, e in own_spans)):
            continue
        start = ir.source.rfind(b"\n", 0, at) + 1
        end = ir.source.find(b"\n", at)
        line = ir.source[start:end if end >= 0 else len(ir.source)].decode("utf-8", "replace")
        number = ir.source.count(b"\n", 0, at) + 1
        return f"line {number}: `{line.strip()}`"
    return None


@dataclass(frozen=True, slots=True)
class _Launch:
    kernel: str
    block: int
    chevrons: tuple[tuple[int, int, str, int], ...]
    """(start, end, block text, line start) of the block argument of each `<<<...>>>` launch."""
    constant: _Constant | None = None
    """The constant naming the block that changes with the launch (None: none)."""
    rows: tuple[tuple[Any, int], ...] = ()
    """Rows held in registers (`row_registers.RegisterRow`) and the vectors they hold at the
    smaller block."""
    keep_shared: bool = False
    """The host's launch passes dynamic shared memory, which the smaller block needs less of
    (`dynamic_refusal`): the host-launch line keeps the launch's bytes."""


def _chevrons(ir: KernelIR, kernel: str) -> list[tuple[int, int, str, int]]:
    out = []
    data = ir.source
    for node in ir.walk():
        if node.kind != "launch" or str(node.attrs.get("callee") or node.name or "") != kernel:
            continue
        at = data.find(b"<<<", node.span.start, node.span.end)
        end = data.find(b">>>", at + 3, node.span.end)
        if at < 0 or end < 0:
            continue
        config = data[at + 3:end].decode("utf-8")
        args = _split_args(config)
        if len(args) < 2:
            continue
        first = config.index(args[0]) + len(args[0])
        comma = config.index(",", first)
        rest = config[comma + 1:]
        lead = len(rest) - len(rest.lstrip())
        start = at + 3 + comma + 1 + lead
        block = args[1].strip()
        out.append((start, start + len(block.encode()), block, data.rfind(b"\n", 0, node.span.start) + 1))
    return out


def _refits(ir: KernelIR, kernel: str, block: int, threads: int,
            ctx: PassContext | None) -> list[tuple[Any, int]] | str:
    """Each row the kernel holds in registers (`row-registers`) with the vectors per thread
    that hold it at `threads` threads: the fit of the case's row (`row_registers.vectors_for`,
    the count row-registers chooses) where the row's bound can be told, else the count scaled
    by `block / threads`; never fewer than the form's own. Why not, where one passes
    row-registers' limit."""
    from passes.cuda.row_registers import MAX_VECTORS, register_rows, row_length, vectors_for  # noqa: PLC0415

    fns = set(_callees(Unit(ir), kernel))
    out = []
    for held in register_rows(ir):
        fn = next((a for a in ir.ancestors(_node_starting(ir, held.span[0]))
                   if ir.grammar_type_of(a) == "function_definition"), None)
        if fn not in fns or not held.per or held.per % held.vectors:
            continue
        name = next((n for n, f in Unit(ir).functions.items() if f == fn), kernel)
        row = row_length(ir, name, held.bound, ctx.facts if ctx is not None else {})
        lanes = held.per // held.vectors
        fit = vectors_for(row, lanes, threads) if row is not None else -(-held.vectors * block // threads)
        if fit > MAX_VECTORS:
            told = (f"the case's row of {row} elements" if row is not None else
                    f"a row of {held.vectors} vectors a thread at {block} threads")
            return (f"its row held in registers ({held.array}, {held.vectors} vectors) would need "
                    f"{fit} vectors of 16 bytes per thread to hold {told} at {threads} threads, "
                    f"more than row-registers' {MAX_VECTORS}")
        if fit > held.vectors:
            out.append((held, fit))
    return out


def _node_starting(ir: KernelIR, at: int) -> int:
    return next(n.id for n in ir.walk() if n.span.start >= at)


def _thread_params(unit: Unit, fn: int, threads_of: Mapping[int, list[str]]) -> list[str]:
    """The parameters of helper `fn` that every call in the unit passes the caller's thread
    index for (`warp_reduce(buf, tid)`)."""
    ir = unit.ir
    calls = unit.calls_to(next((n for n, f in unit.functions.items() if f == fn), ""))
    out = []
    for i, param in enumerate(_parameter_names(ir, fn)):
        passed = []
        for c in calls:
            caller = next((a for a in ir.ancestors(c) if ir.grammar_type_of(a) == "function_definition"),
                          None)
            args = _split_args(text(ir, children(ir, c)[-1]).strip()[1:-1])
            passed.append(caller is not None and i < len(args) and
                          re.sub(r"\s", "", args[i]) in threads_of.get(caller, ["threadIdx.x"]))
        if passed and all(passed):
            out.append(param)
    return out


def assumed_threads(unit: Unit, kernel: str) -> tuple[int, str] | None:
    """The most threads a block of `kernel` is assumed to have by a slot of shared memory it
    addresses at a constant offset from the thread's own (`s[tid + 64]` under `tid < 64`
    reads the slots threads 64..127 wrote: 128 threads) or at a constant slot (`s[C]`: C + 1),
    with the access's text; None where it addresses none such. A kernel launched with fewer
    threads would read slots no thread of its block wrote."""
    ir = unit.ir
    fns = _callees(unit, kernel)
    threads_of: dict[int, list[str]] = {}
    for fn in fns:  # callers first: a helper's thread parameters come from its callers' names
        threads_of[fn] = [re.sub(r"\s", "", n) for n in _thread_names(unit, fn)]
        if fn not in unit.kernels.values():
            threads_of[fn] += _thread_params(unit, fn, threads_of)
    best: tuple[int, str] | None = None
    for fn in fns:
        views = unit.shared_views(fn, aliases=True)
        names = "|".join(re.escape(n) for n in threads_of[fn])
        for c in subtree(ir, fn):
            if ir.grammar_type_of(c) != "subscript_expression":
                continue
            parent = ir.parent_of(c)
            if parent is not None and ir.grammar_type_of(parent) == "subscript_expression":
                continue
            base, index = subscript(ir, c)
            if base not in views or len(index) != 1:
                continue
            e = re.sub(r"\s", "", text(ir, index[0]))
            m = re.fullmatch(rf"\(?(?:{names})\)?\+(.+)", e) or \
                re.fullmatch(rf"(.+?)\+\(?(?:{names})\)?", e)
            offset = unit.value(m.group(1)) if m else None
            need = 2 * offset if offset is not None else (
                unit.value(e) + 1 if unit.value(e) is not None else None)
            if need is not None and (best is None or need > best[0]):
                best = (need, text(ir, c))
    return best


def dynamic_refusal(unit: Unit, kernel: str) -> str | None:
    """Why the dynamic shared memory of `kernel` (and of the functions it calls) might need more
    than the host's launch passes once the block is smaller, or None where it needs less: each
    `extern __shared__` buffer is read and written only through itself and pointers set once
    to it at `k * blockDim.x` (k a constant), at the thread's own slot (`threadIdx.x`), at a
    constant slot (`assumed_threads` bounds those), or by a reduction tree over the block
    (`reduction_trees`: its partner slots lie within blockDim.x): it needs at most (K + 1) *
    blockDim.x elements, K the largest k, which a smaller block makes fewer."""
    ir = unit.ir
    trees = [t for t in reduction_trees(unit)[0] if t.extent == "blockDim.x" and not t.rows]
    for fn in _callees(unit, kernel):
        buffers = {n for n, a in (unit.shared_arrays() | unit.shared_arrays(fn)).items()
                   if a.dynamic}
        if not buffers:
            continue
        views: dict[str, int] = {}
        decls: list[tuple[int, int]] = []
        for d in subtree(ir, fn):
            if ir.grammar_type_of(d) != "declaration" or "__shared__" in text(ir, d):
                continue
            for name, ident, init in declared_names(ir, d):
                if init is None or ir.grammar_type_of(ir.parent_of(ident)) != "pointer_declarator" \
                        or not set(re.findall(r"[A-Za-z_]\w*", text(ir, init))) & buffers:
                    continue  # a value read from the buffer: its subscript is checked below
                flat = re.sub(r"[\s()]", "", block_group_terms(
                    unit, expand_locals(unit, fn, code_view(text(ir, init)))))
                m = re.fullmatch(r"&?([A-Za-z_]\w*)(?:\+(.+)|\[(.+)\])?", flat)
                k = _block_multiple(unit, (m.group(2) or m.group(3) or "0")) if m else None
                if m is None or m.group(1) not in buffers or k is None:
                    return (f"the pointer `{name}` is set to `{text(ir, init)[:40]}`, not into the "
                            "dynamic buffer at a multiple of blockDim.x")
                views[name] = k
                decls.append((ir.span_of(d).start, ir.span_of(d).end))
        names = buffers | set(views)
        for c in subtree(ir, fn):
            if ir.grammar_type_of(c) != "identifier" or ir.name_of(c) not in names:
                continue
            at = ir.span_of(c).start
            parent = ir.parent_of(c)
            if any(a <= at < b for a, b in decls) or ir.grammar_type_of(parent) in (
                    "declaration", "array_declarator", "init_declarator"):
                continue  # a view's own declaration, the buffer's
            base, index = subscript(ir, parent) if parent is not None else (None, [])
            if base != ir.name_of(c) or len(index) != 1 or children(ir, parent)[0] != c:
                return f"the dynamic buffer is used as `{text(ir, parent)[:40]}`"
            slot = re.sub(r"[\s()]", "", block_group_terms(
                unit, expand_locals(unit, fn, code_view(text(ir, index[0])))))
            in_tree = any(t.span[0] <= at < t.span[1] and base in {cb.array for cb in t.combines}
                          for t in trees)
            if slot != "threadIdx.x" and unit.value(slot) is None and not in_tree:
                return f"`{text(ir, parent)[:40]}` addresses the dynamic buffer at a slot not told within blockDim.x"
    return None


def _block_multiple(unit: Unit, expr: str) -> int | None:
    """k where `expr` is `k * blockDim.x`, `blockDim.x * k`, `blockDim.x` or 0 (k a constant)."""
    if unit.value(expr) == 0:
        return 0
    if expr == "blockDim.x":
        return 1
    m = re.fullmatch(r"(.+)\*blockDim\.x|blockDim\.x\*(.+)", expr)
    value = unit.value(m.group(1) or m.group(2)) if m else None
    return value if value is not None and value >= 0 else None


def _plan(ir: KernelIR, kernel: str, threads: int, ctx: PassContext | None = None) -> _Launch | Skipped:
    unit = Unit(ir)
    facts = {"kernel": kernel, "threads": threads}
    if threads % 32 or threads < 32:
        return Skipped(f"threads={threads}: a block of whole warps (a multiple of 32)", facts)
    launch = launch_block(ir, kernel=kernel)
    if launch.dims is None:
        return Skipped(f"the launch's block is not known ({launch.reason})", facts)
    if launch.dims[1:] != (1, 1):
        return Skipped(f"the launch's block {launch.dims} is not one-dimensional", facts)
    block = launch.dims[0]
    if block <= threads:
        return Skipped(f"the launch's block of {block} threads is not larger than {threads}", facts)
    why = repartition_refusal(unit, kernel, [lp.span for lp in stride_loops(unit)
                                             if lp.kernel in _in_kernel(unit, kernel)])
    if why is not None:
        return Skipped(why, facts)
    assumed = assumed_threads(unit, kernel)
    if assumed is not None and assumed[0] > threads:
        return Skipped(f"`{assumed[1]}` addresses a shared slot that a block of fewer than "
                       f"{assumed[0]} threads leaves unwritten", facts)
    named = counted_threads(unit, kernel, block)
    constant = _definition(ir, named) if named is not None and named in unit.constants else None
    if isinstance(constant, str):
        return Skipped(f"the kernel counts its threads as `{named}` ({block}) and {constant}", facts)
    if not any(lp.kernel in _in_kernel(unit, kernel) and lp.kind == "block" and (
               re.sub(r"[\s()]", "", expand_locals(unit, unit.block_helpers()[lp.kernel], lp.step))
               == "blockDim.x" or isinstance(constant, _Constant) and
               named in aliases(unit, re.sub(r"[\s()]", "", lp.step))) for lp in stride_loops(unit)):
        return Skipped("no loop spreads the kernel's work over its blockDim.x threads", facts)
    if any(m.kernel == kernel for m in micro_kernels(unit)[0]):
        return Skipped("the kernel is a GEMM micro-kernel: its tiles are sized by its block", facts)
    if named is not None and constant is None:
        return Skipped(f"the kernel counts its threads as `{named}` ({block}), not through "
                       "blockDim.x", facts)
    rows = _refits(ir, kernel, block, threads, ctx)
    if isinstance(rows, str):
        return Skipped(rows, facts)
    if constant is not None:
        other = counted_threads(unit, kernel, block, besides=named, skip=constant.line)
        if other is not None:
            return Skipped(f"the kernel counts its threads as `{other}` ({block}) besides "
                           f"`{named}`", facts)
        use = constant_use(unit, kernel, constant, _chevrons(ir, kernel))
        if use is not None:
            return Skipped(f"the kernel counts its threads as `{named}` ({block}), also used "
                           f"where a smaller value is not vouched for ({use})", facts)
    chevrons = _chevrons(ir, kernel)
    dynamic = None
    if not chevrons:
        if any(d.kernel == kernel for d in hostlaunch.directives(ir.text)):
            return Skipped(f"the source already asks its host's launches of {kernel} for "
                           "something", facts)
        host = Path(ir.path).with_suffix(".py") if ir.path else None
        if host is None or not host.is_file():
            return Skipped(f"{kernel} is not launched in this source and no Python host module "
                           "is beside it", facts)
        dynamic = next((a.name for fn in _callees(unit, kernel)
                        for a in (unit.shared_arrays(fn) | unit.shared_arrays()).values()
                        if a.dynamic), None)
        why_dynamic = dynamic_refusal(unit, kernel) if dynamic is not None else None
        if why_dynamic is not None:
            return Skipped(f"the host sizes {dynamic}, dynamic shared memory, at its launch, and "
                           f"a smaller block may need more of it: {why_dynamic}", facts)
        why = hostlaunch.refusal(hostlaunch.strip(host.read_text(encoding="utf-8")), kernel,
                                 len(unit.kernels) == 1, host.name)
        if why:
            return Skipped(why, facts)
    keep = not chevrons and dynamic is not None
    return _Launch(kernel, block, tuple(chevrons), constant or None, tuple(rows), keep)


def _edits(ir: KernelIR, plan: _Launch, threads: int) -> list[ByteEdit]:
    data = ir.source
    if not plan.chevrons:
        d = hostlaunch.Directive(plan.kernel, 0, (plan.block, 1, 1), (threads, 1, 1),
                                 keep_shared=plan.keep_shared)
        lead = "" if not data or data.endswith(b"\n") else "\n"
        return [*_constant_edits(ir, plan, threads), *_row_edits(ir, plan),
                ByteEdit(len(data), len(data), lead + d.line() + "\n")]
    edits = [*_constant_edits(ir, plan, threads), *_row_edits(ir, plan)]
    for start, end, block, line in plan.chevrons:
        if plan.constant is not None and block == plan.constant.name:
            continue  # the launch's block is the constant: it changes with it
        indent = re.match(rb"[ \t]*", data[line:]).group(0).decode()
        record = json.dumps({"kernel": plan.kernel, "block": block})
        edits.append(ByteEdit(line, line, f"{indent}{TAG}{record}\n"))
        edits.append(ByteEdit(start, end, str(threads)))
    return edits


def _constant_edits(ir: KernelIR, plan: _Launch, threads: int) -> list[ByteEdit]:
    """The constant's value set to `threads`, after a comment line recording it as written."""
    const = plan.constant
    if const is None:
        return []
    data = ir.source
    indent = re.match(rb"[ \t]*", data[const.line[0]:]).group(0).decode()
    record = json.dumps({"kernel": plan.kernel, "constant": const.name,
                         "value": data[const.value[0]:const.value[1]].decode()})
    return [ByteEdit(const.line[0], const.line[0], f"{indent}{TAG}{record}\n"),
            ByteEdit(*const.value, str(threads))]


def _row_edits(ir: KernelIR, plan: _Launch) -> list[ByteEdit]:
    """Each row held in registers re-fitted to its vectors at the smaller block, after a comment
    line (before its array) recording its count as written."""
    from passes.cuda.row_registers import count_edits  # noqa: PLC0415

    data, edits = ir.source, []
    for held, vectors in plan.rows:
        line = data.rfind(b"\n", 0, held.span[0]) + 1
        indent = re.match(rb"[ \t]*", data[line:]).group(0).decode()
        record = json.dumps({"kernel": plan.kernel, "vectors": held.vectors})  # names no array:
        # row-registers picks its arrays' names by what the text does not hold yet
        edits.append(ByteEdit(line, line, f"{indent}{TAG}{record}\n"))
        edits += count_edits(ir, held, vectors)
    return edits


def _row_back(ir: KernelIR, rec: dict, start: int, length: int) -> list[ByteEdit]:
    """The recorded row's count back (where a row held in registers follows the line) and the
    comment line (at `start`) out."""
    from passes.cuda.row_registers import count_edits, register_rows  # noqa: PLC0415

    edits = [ByteEdit(start, start + length, "")]
    held = next((r for r in register_rows(ir)
                 if ir.source.rfind(b"\n", 0, r.span[0]) + 1 == start + length), None)
    if held is not None and isinstance(rec.get("vectors"), int) and 0 < rec["vectors"] <= held.vectors:
        edits += count_edits(ir, held, rec["vectors"])
    return edits


def _present(ir: KernelIR) -> list[tuple[str, int, list[ByteEdit]]]:
    """(kernel, threads, the edits that undo it) of each launch this rule made."""
    data, src = ir.source, ir.text
    out: dict[str, tuple[int, list[ByteEdit]]] = {}
    rows: dict[str, list[ByteEdit]] = {}  # rows held in registers, re-fitted with the launch
    for d in hostlaunch.directives(src):
        if d.block is not None and d.block_from is not None and not d.shared_bytes and \
                not d.arch and not d.tma and d.block[1:] == (1, 1):
            spans = hostlaunch.directive_lines(src, d.kernel)
            edits = [ByteEdit(len(src[:s].encode()), len(src[:e].encode()), "") for s, e in spans]
            out[d.kernel] = (d.block[0], edits)
    pos = 0
    for line in src.splitlines(keepends=True):
        at = line.find(TAG)
        if at >= 0 and not line[:at].strip():
            try:
                rec = json.loads(line[at + len(TAG):])
                if "constant" in rec:
                    _constant_back(ir, rec, len(src[:pos].encode()), len(line.encode()), out)
                    pos += len(line)
                    continue
                if "vectors" in rec:
                    rows.setdefault(str(rec["kernel"]), []).extend(
                        _row_back(ir, rec, len(src[:pos].encode()), len(line.encode())))
                    pos += len(line)
                    continue
                kernel, block = str(rec["kernel"]), str(rec["block"])
            except (ValueError, KeyError, TypeError):
                pos += len(line)
                continue
            start = len(src[:pos].encode())
            after = [c for c in _chevrons(ir, kernel) if c[3] >= start + len(line.encode())]
            if after and re.fullmatch(r"\d+", after[0][2]):
                first = after[0]
                threads = int(first[2])
                prev = out.get(kernel, (threads, []))[1]
                out[kernel] = (threads, [*prev, ByteEdit(start, start + len(line.encode()), ""),
                                         ByteEdit(first[0], first[1], block)])
        pos += len(line)
    return [(k, t, [*e, *rows.get(k, [])]) for k, (t, e) in out.items()]


def _constant_back(ir: KernelIR, rec: dict, start: int, length: int,
                   out: dict[str, tuple[int, list[ByteEdit]]]) -> None:
    """Into `out`: the recorded constant's value back and its comment line (at `start`) out,
    where the constant's one definition follows the line and holds a literal."""
    const = _definition(ir, str(rec["constant"]))
    if not isinstance(const, _Constant) or const.line[0] != start + length or \
            not re.fullmatch(r"\d+", str(rec.get("value"))):
        return
    kernel = str(rec["kernel"])
    threads = int(ir.source[const.value[0]:const.value[1]])
    prev = out.get(kernel, (threads, []))[1]
    out[kernel] = (threads, [*prev, ByteEdit(start, start + length, ""),
                             ByteEdit(*const.value, str(rec["value"]))])


def _restored(ir: KernelIR) -> set[str]:
    """The constants whose recorded values the de-optimization restores."""
    out = set()
    for line in ir.text.splitlines():
        at = line.find(TAG)
        if at >= 0 and not line[:at].strip():
            try:
                rec = json.loads(line[at + len(TAG):])
            except ValueError:
                continue
            if isinstance(rec, dict) and "constant" in rec:
                out.add(str(rec["constant"]))
    return out


def _launch_bound(ir: KernelIR, kernel: str) -> int | None:
    """The maximum block `kernel`'s `__launch_bounds__` admits, or None (none, or not a
    constant)."""
    named = _bound_text(ir, kernel)
    return Unit(ir).value(named) if named else None


def _bound_text(ir: KernelIR, kernel: str) -> str | None:
    """The text of the maximum block in `kernel`'s `__launch_bounds__` (None: none)."""
    m = re.search(rf"__launch_bounds__\s*\(\s*([^,()]+)[^()]*\)\s*{re.escape(kernel)}\s*\(", ir.text)
    return m.group(1) if m else None


@dataclass(frozen=True, slots=True)
class LaunchThreads(Pass):
    """A kernel launched with fewer threads per block <-> the host's block."""

    threads: int = 128
    """The block's threads (a multiple of 32, fewer than the host's block)."""

    name: ClassVar[str] = "launch-threads"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "the kernel launched with a smaller block <-> the host's block"
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    tunables: ClassVar[Mapping[str, tuple[Any, ...]]] = MappingProxyType({"threads": (64, 128, 256)})

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        span = (0, len(ir.source))
        out = [make_site(self.name, ir, index, span, True, {"kernel": k, "threads": t})
               for k, t, _e in _present(ir)]
        done = {k for k, _t, _e in _present(ir)}
        for kernel in sorted(Unit(ir).kernels):
            if kernel in done:
                continue
            launch = launch_block(ir, kernel=kernel)
            if launch.dims is not None and launch.dims[1:] == (1, 1) and launch.dims[0] > 32:
                out.append(make_site(self.name, ir, index, span, False,
                                     {"kernel": kernel, "block": launch.dims[0]}))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        for kernel, threads, edits in _present(ir):
            if kernel != site.detail.get("kernel"):
                continue
            bound = _launch_bound(ir, kernel)
            named = _bound_text(ir, kernel)
            if bound is not None and bound <= threads and \
                    not set(re.findall(r"\w+", named or "")) & _restored(ir):
                # the host's block would exceed the kernel's bounds: launch-bounds goes first
                return Skipped(f"{kernel}'s __launch_bounds__({bound}) does not admit the block "
                               "its host launches", {"kernel": kernel, "bound": bound})
            return finish(ir, site, sorted(edits, key=lambda e: e.start), options={"threads": threads})
        return Skipped("no launch of a smaller block at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        kernel = site.detail.get("kernel")
        if kernel not in Unit(ir).kernels:
            return Skipped("no kernel at the site", {"site": site.anchor})
        plan = _plan(ir, str(kernel), self.threads, ctx)
        if isinstance(plan, Skipped):
            return plan
        return finish(ir, site, _edits(ir, plan, self.threads))
