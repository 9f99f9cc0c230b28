"""Warp-shuffle exchange (`__shfl_down_sync` & co.) <-> the same exchange through shared memory.

De-optimization rewrites one shuffle: every lane publishes its value to a shared array, the
warp synchronizes, the lane reads its partner's slot, and the warp synchronizes again before the
slot can be overwritten. Partner lanes follow the shuffle's definition (down: lane + delta when
it stays in the warp, else the lane itself; up: lane - delta when >= 0; xor: lane ^ mask;
indexed: the source lane), so a tree reduction or scan built from shuffles keeps its result.
Warps are formed from the linear thread index, which the shared slot is indexed by.

The forward rule also acts on a shared-memory reduction tree a user wrote, found by its role
(`passes.cuda.recognize.reduction_trees`: a stride halved or doubled around a barrier, or
unrolled constant strides (down to 1, or to 64 and a last warp's steps), combining slots by sum, max or min, one or several arrays at once;
the combine may call a function of the unit whose one `return` is such a sum, max or min; a
last warp's steps may run under `if (EXTENT >= K)`, the guards of a tree sized by a template):
the tree becomes a reduction of each warp with `__shfl_down_sync`, one shared slot per warp,
and the first warp reducing those slots; slot 0 of each array then holds the result as it did
after the tree (the combine is the user's own statement, applied to registers). It needs the
tree to cover the whole block, a power of two and a multiple of 32 threads in one dimension:
proven from the launch's block size where the host sets it (refused where that block does not
fit), otherwise checked at run time, the original tree kept as the fallback. A tree over the
block's count written as a product of its dimensions (`blockDim.x * blockDim.y`) with the
thread's linear index as its slot (`threadIdx.y * blockDim.x + threadIdx.x`) is one over
`blockDim.x` in a one-dimensional block, which the run-time check requires. A tree per row of
threads (`sh[threadIdx.y][threadIdx.x]`, one row of the array per row of the block) becomes the
same per row: where blockDim.x is a power of two multiple of 32 each row's threads are whole
warps, the warps' slots are numbered row by row, and the first warp of each row folds its row's
slots into that row's slot 0 (blockDim.y free, blockDim.z 1: proven from the launch or checked
at run time). A step merging a (max, rescaled sum) pair (`ReductionTree.merge`) is applied to
the registers as one statement, each partner value shuffled first; its terms take E(0) where a
side's max is the merged one, so two threads that saw nothing (-inf, 0) merge to (-inf, 0).

A block reduction through atomics (`atomic_fold.atomic_folds`: `atomicAdd` / `atomicMax` /
`atomicMin` as a statement, at an address the threads of a warp name alike, reached by whole
warps together) becomes one atomic per warp: the warp's values folded with `__shfl_xor_sync`
first, its first lane making the atomic (blockDim.x a multiple of 32: proven from the launch,
else checked at run time with the statement as written kept for other blocks).

Its inverse acts on the same roles: a block reduction through warp shuffles
(`recognize.shuffle_reductions`: a fold over strides 16..1 per warp, a shared slot per warp,
the first warp folding the slots, thread 0 using the value) is de-optimized into one
shared-memory tree over the block (a slot per thread, strides halved from blockDim.x / 2),
thread 0 using slot 0; the recorded text restores it exactly, and without a record the tree
rule above turns the tree back into shuffles.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._c import CSource, find_iter
from passes.cuda._merge import PLACEHOLDER
from passes.cuda.annotations import CUDA
from passes.cuda.atomic_fold import AtomicFold, atomic_folds
from passes.cuda.recognize import (
    ReductionTree,
    ShuffleReduction,
    reduction_trees,
    shuffle_reductions,
    tree_combine_text,
)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

_SHFL = re.compile(r"\b__shfl_(up_|down_|xor_|)sync\s*\(")
_LINEAR = "(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z))"
_PARTNER = {
    "down_": "((({t}) & 31u) + ({d}) < 32u ? ({t}) + ({d}) : ({t}))",
    "up_": "((({t}) & 31u) >= (unsigned)({d}) ? ({t}) - ({d}) : ({t}))",
    "xor_": "(({t}) ^ ({d}))",
    "": "((({t}) & ~31u) | (({d}) & 31u))",
}


@dataclass(frozen=True, slots=True)
class _Shuffle:
    call_start: int
    call_end: int
    kind: str
    mask: str
    value: str
    delta: str
    stmt_start: int
    stmt_end: int
    braced: bool  # the statement is the unbraced body of a loop/branch


@dataclass(frozen=True, slots=True)
class WarpShuffleReduce(Pass):
    """Warp shuffles (register exchange) <-> a shared-memory exchange per step."""

    before: str = ""
    """The exact statement to restore (recorded by a de-optimization)."""
    after: str = ""
    """What the de-optimization wrote in its place."""

    name: ClassVar[str] = "warp-shuffle-reduce"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "warp-shuffle reductions/scans <-> shared-memory exchange"
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_30",)

    def _shuffles(self, src: CSource) -> list[_Shuffle | tuple[int, int, str]]:
        out: list = []
        for m in find_iter(_SHFL, src):
            paren = m.end() - 1
            end = src.close(paren)
            args = [src.text[a:b].strip() for a, b in src.args(paren)]
            stmt_start = src.statement_start(m.start())
            stmt_end = src.statement_end(stmt_start)
            head = src.code[stmt_start:stmt_start + 8]
            if len(args) not in (3, 4) or (len(args) == 4 and args[3] not in ("32", "warpSize")):
                out.append((m.start(), end, "a shuffle over a sub-warp width"))
                continue
            if not re.fullmatch(r"[A-Za-z_][\w.]*(\[[^\]]+\])?", args[1]):
                out.append((m.start(), end, "the shuffled value is not a variable"))
                continue
            if re.match(r"(for|if|while|switch|return|do)\b", head):
                out.append((m.start(), end, "the shuffle sits in a condition or return"))
                continue
            before = src.code[:stmt_start].rstrip()
            braced = before.endswith(")") or re.search(r"\b(else|do)$", before) is not None
            out.append(_Shuffle(m.start(), end, m.group(1), args[0], args[1], args[2],
                                stmt_start, stmt_end, braced))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        out = []
        for s in self._shuffles(src):
            if isinstance(s, _Shuffle):
                out.append(make_site(self.name, ir, index, src.bspan(s.stmt_start, s.stmt_end),
                                     True, {"kind": s.kind.rstrip("_") or "idx", "value": s.value},
                                     src.bspan(s.call_start, s.call_end)))
        for m in re.finditer(r"__shared__ decltype\([^)]*\) (kl_shfl\d+)\[1024\];", src.text):
            start = m.start() - 2 if src.text[m.start() - 2:m.start()] == "{ " else m.start()
            fn = src.function_at(m.start())
            end = fn.body_end if fn is not None else len(src.text)
            out.append(make_site(self.name, ir, index, src.bspan(start, end), False,
                                 {"buffer": m.group(1)}, src.bspan(m.start(), m.end())))
        for red in shuffle_reductions(ir):
            out.append(make_site(self.name, ir, index, red.span, True, {
                "block_reduction": list(red.values)}))
        for tree in reduction_trees(ir)[0]:
            if _shuffle_path_beside(ir, tree.span):
                continue
            out.append(make_site(self.name, ir, index, tree.span, False, {
                "tree": tree.form, "arrays": [c.array for c in tree.combines],
                "ops": [c.op for c in tree.combines], "extent": tree.extent}))
        for fold in atomic_folds(ir)[0]:
            if _shuffle_path_beside(ir, fold.span):
                continue
            out.append(make_site(self.name, ir, index, fold.span, False, {
                "atomic": fold.call, "op": fold.op, "address": fold.address}))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        red = next((r for r in shuffle_reductions(ir) if r.span == tuple(site.span)), None)
        if red is not None:
            text = _tree_text(ir, red)
            return finish(ir, site, [ByteEdit(red.span[0], red.span[1], text)], options={
                "before": ir.source[red.span[0]:red.span[1]].decode("utf-8"), "after": text})
        src = CSource(ir)
        for s in self._shuffles(src):
            if isinstance(s, tuple) or src.bspan(s.stmt_start, s.stmt_end) != tuple(site.span):
                continue
            n = len(set(re.findall(r"kl_shfl(\d+)", src.text)))
            buf = f"kl_shfl{n}"
            t = f"kl_t{n}"
            partner = _PARTNER[s.kind].format(t=t, d=s.delta)
            stmt = (src.text[s.stmt_start:s.call_start] + f"{buf}[{partner}]"
                    + src.text[s.call_end:s.stmt_end])
            text = (f"__shared__ decltype({s.value}) {buf}[1024]; "
                    f"const unsigned {t} = {_LINEAR}; "
                    f"{buf}[{t}] = {s.value}; __syncwarp({s.mask}); {stmt} __syncwarp({s.mask});")
            if s.braced:
                text = "{ " + text + " }"
            return finish(ir, site, [src.edit(s.stmt_start, s.stmt_end, text)], options={
                "before": src.text[s.stmt_start:s.stmt_end], "after": text})
        for s in self._shuffles(src):
            if isinstance(s, tuple) and src.bspan(s[0], s[1])[0] >= site.span[0] \
                    and src.bspan(s[0], s[1])[1] <= site.span[1]:
                return Skipped(s[2], {"site": site.anchor})
        return Skipped("no warp shuffle at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        results, skip = self.check(ctx)
        if skip:
            return skip
        region = ir.source[site.span[0]:site.span[1]]
        needle = self.after.encode("utf-8")
        if self.before and needle and region.startswith(needle):
            start = site.span[0]
            return finish(ir, site, [ByteEdit(start, start + len(needle), self.before)],
                          preconditions=results)
        around = _recorded_around(ir, site, needle) if self.before and needle else None
        if around is not None:  # the tree a block reduction was de-optimized into
            return finish(ir, around, [ByteEdit(around.span[0], around.span[1], self.before)],
                          preconditions=results)
        tree = next((t for t in reduction_trees(ir)[0] if t.span == tuple(site.span)), None)
        if tree is not None:
            return _tree_to_shuffles(ir, site, tree, ctx, results)
        fold = next((f for f in atomic_folds(ir)[0] if f.span == tuple(site.span)), None)
        if fold is not None:
            return _atomic_per_warp(ir, site, fold, results)
        if not self.before:
            return Skipped("restoring a shuffle needs the recorded statement (and no "
                           "shared-memory reduction tree is at the site)", {})
        return Skipped("the recorded shared-memory exchange is not at the site", {})


def _recorded_around(ir: KernelIR, site: Site, needle: bytes) -> Site | None:
    """The site widened to the one occurrence of `needle` that holds it, if there is one."""
    hits = []
    at = ir.source.find(needle)
    while at >= 0:
        if at <= site.span[0] and site.span[1] <= at + len(needle):
            hits.append(at)
        at = ir.source.find(needle, at + 1)
    if len(hits) != 1:
        return None
    return Site(site.pass_name, site.anchor, site.present, site.detail,
                (hits[0], hits[0] + len(needle)))


def _tree_text(ir: KernelIR, red: ShuffleReduction) -> str:
    """A block reduction through shuffles as one shared-memory tree (see the module)."""
    src = CSource(ir)
    start = len(ir.source[:red.span[0]].decode("utf-8", "replace"))
    indent = src.indent(start)
    taken = set(re.findall(r"\bkl_tree\d+\b", src.text))
    slots = []
    n = 0
    for _ in red.values:
        while f"kl_tree{n}" in taken:
            n += 1
        taken.add(f"kl_tree{n}")
        slots.append(f"kl_tree{n}")
    t = red.tid
    lines = ["// the block's values reduced by one shared-memory tree"]
    for value, element, slot in zip(red.values, red.elements, slots):
        lines.append(f"__shared__ {element} {slot}[1024];")
        lines.append(f"{slot}[{t}] = {value};")
    lines.append("__syncthreads();")
    lines.append("for (int kl_s = blockDim.x / 2; kl_s > 0; kl_s >>= 1) {")
    folds = " ".join(c.format(own=f"{slot}[{t}]", other=f"{slot}[{t} + kl_s]")
                     for c, slot in zip(red.combines, slots))
    lines.append(f"  if ({t} < kl_s) {{ {folds} }}")
    lines.append("  __syncthreads();")
    lines.append("}")
    reads = " ".join(f"{v} = {slot}[0];" for v, slot in zip(red.values, slots))
    lines.append(f"if ({t} == 0) {{ {reads} {red.result} }}")
    if red.closing_barrier:
        lines.append("__syncthreads();")
    return "{\n" + "".join(f"{indent}  {ln}\n" for ln in lines) + f"{indent}}}"


def _shuffle_path_beside(ir: KernelIR, span: tuple[int, int]) -> bool:
    """Whether the code at `span` (a tree, an atomic) is the fallback (else branch) of a branch
    whose other path already reduces with warp shuffles: the rule applied there before."""
    from passes.cuda._tree import callee, if_parts, subtree  # noqa: PLC0415

    for nid in range(len(ir)):
        at = ir.span_of(nid)
        if ir.grammar_type_of(nid) != "else_clause" or not (at.start <= span[0]
                                                             and span[1] <= at.end):
            continue
        branch = ir.parent_of(nid)
        if branch is None or ir.grammar_type_of(branch) != "if_statement":
            continue
        then = if_parts(ir, branch)[1]
        if any(ir.grammar_type_of(c) == "call_expression" and
               callee(ir, c) in ("__shfl_down_sync", "__shfl_xor_sync") for c in subtree(ir, then)):
            return True
    return False


_FOLD_TEXT = {"sum": "{v} += {w};", "max": "{v} = max({v}, {w});", "min": "{v} = min({v}, {w});"}


def _atomic_per_warp(ir: KernelIR, site: Site, fold: AtomicFold, results: list  # type: ignore[type-arg]
                     ) -> PassResult:
    """The atomic made once per warp: the warp's values folded with xor shuffles first (every
    lane holds the fold), the warp's first lane adding it. Whole warps that keep to one row of
    the block (where a value constant on 32 threads of threadIdx.x is one per warp) need
    blockDim.x a multiple of 32: proven from the launch, else checked at run time (the
    statement as written kept for other blocks)."""
    dims = fold.block
    if dims is not None and dims[0] % 32:
        return Skipped(f"the launch's block {dims} does not cut into warps along x",
                       {"block": list(dims)})
    src = CSource(ir)
    taken = set(re.findall(r"\bkl_\w+", src.text))
    v = next(f"kl_a{n}" for n in range(len(taken) + 1) if f"kl_a{n}" not in taken)
    o = next(f"kl_ao{n}" for n in range(len(taken) + 1) if f"kl_ao{n}" not in taken)
    fold_text = _FOLD_TEXT[fold.op].format(v=v, w=f"__shfl_xor_sync(0xffffffffu, {v}, {o})")
    lane = f"({_LINEAR} & 31u)"
    text = ("{ // one atomic per warp: the warp's values folded with shuffles first\n"
            f"  {fold.element} {v} = ({fold.value});\n"
            f"  for (int {o} = 16; {o} > 0; {o} >>= 1) {fold_text}\n"
            f"  if ({lane} == 0) {fold.call}({fold.address}, {v});\n}}")
    if dims is None:
        original = ir.source[fold.span[0]:fold.span[1]].decode("utf-8")
        text = (f"if ((blockDim.x & 31u) == 0) {text} else {{ "
                f"{original} }}")
    start = len(ir.source[:fold.span[0]].decode("utf-8", "replace"))
    indent = src.indent(start)
    text = text.replace("\n", "\n" + indent)
    return finish(ir, site, [ByteEdit(fold.span[0], fold.span[1], text)], preconditions=results)


def tree_guard(tree: ReductionTree, ctx: PassContext | None) -> tuple[str | None, Skipped | None]:
    """The run-time condition under which the block fits the shuffle form of `tree` (None:
    proven from the launch's block size or the fact `block_threads`), or why it never does."""
    dims = tree.block
    facts = dict(ctx.facts) if ctx is not None else {}
    if dims is None and isinstance(facts.get("block_threads"), int) and not tree.rows:
        dims = (int(facts["block_threads"]), 1, 1)
    # a tree per row of threads: each row's threads are whole warps where blockDim.x is a
    # multiple of 32 (warps are cut from the linear index), and rows are threadIdx.y's alone
    others = "blockDim.z == 1" if tree.rows else "blockDim.y == 1 && blockDim.z == 1"
    if tree.extent_value is None and tree.extent != "blockDim.x":  # a template parameter
        e = f"({tree.extent})"
        return (f"blockDim.x == {e} && ({e} & 31) == 0 && ({e} & ({e} - 1)) == 0 && "
                f"{others}"), None
    if dims is not None:
        x = dims[0]
        wanted = tree.extent_value if tree.extent_value is not None else x
        if (dims[2] if tree.rows else dims[1] * dims[2]) != 1:
            return None, Skipped("the launch's block is not one-dimensional" if not tree.rows
                                 else "the launch's block has a z dimension",
                                 {"block": list(dims)})
        if x != wanted:
            return None, Skipped(f"the tree covers {wanted} slots and the block has {x} threads",
                                 {"block": list(dims), "extent": wanted})
        if x % 32 or x & (x - 1) or x > 1024:
            return None, Skipped("the block size is not a power of two multiple of 32",
                                 {"block": list(dims)})
        return None, None
    if tree.extent_value is not None:
        e = tree.extent_value
        if e % 32 or e & (e - 1) or e > 1024:
            return None, Skipped(f"the tree covers {e} slots, not a power of two multiple of 32",
                                 {"extent": e})
        return f"blockDim.x == {e} && {others}", None
    return ("(blockDim.x & 31) == 0 && (blockDim.x & (blockDim.x - 1)) == 0 && "
            f"{others}"), None


def _tree_to_shuffles(ir: KernelIR, site: Site, tree: ReductionTree, ctx: PassContext | None,
                      results: list) -> PassResult:  # type: ignore[type-arg]
    guard, skip = tree_guard(tree, ctx)
    if skip is not None:
        return skip
    src = CSource(ir)
    start = src.text.encode("utf-8")[:tree.span[0]].decode("utf-8", "replace")
    char_start = len(start)
    indent = src.indent(char_start)
    inner = indent + "  "
    t = tree.tid
    # the extent as the kernel names it where that is one name (a constant the block's size
    # may change with: `launch-threads`), else its value
    named = re.fullmatch(r"[A-Za-z_]\w*", tree.extent.strip())
    extent = tree.extent if tree.extent_value is None or named else str(tree.extent_value)
    taken = set(re.findall(r"\bkl_\w+", src.text))
    def fresh(stem: str) -> str:
        n = 0
        while f"{stem}{n}" in taken:
            n += 1
        taken.add(f"{stem}{n}")
        return f"{stem}{n}"
    names = [(c, fresh("kl_v"), fresh("kl_w"), fresh("kl_warp")) for c in tree.combines]
    off = fresh("kl_o")
    # a tree per row of threads: the row's warps own the slots from row * (warps per row)
    first = f"({tree.rows[0]}) * (({extent}) >> 5) + " if tree.rows else ""
    lines = ["// the tree as warp shuffles: each warp reduces its threads' values, one shared "
             "slot per warp, then the first warp " + ("of each row reduces its row's slots"
                                                      if tree.rows else "reduces the slots")]
    for c, v, _w, slots in names:
        lines.append(f"__shared__ {c.element} {slots}[32];")
        lines.append(f"{c.element} {v} = {tree.slot(c.array, t)};")
    if not tree.merge:
        body = "{ " + " ".join(f"{{ const {c.element} {w} = __shfl_down_sync(0xffffffffu, {v}, "
                               f"{off}); {tree_combine_text(c, v, w)} }}"
                               for c, v, w, _s in names) + " }"
    else:  # the arrays folded jointly: every partner value first, then the step
        regs = {c.array: (v, w) for c, v, w, _s in names}
        merged = fresh("kl_mx")
        step = PLACEHOLDER.sub(lambda m: regs[m.group(2)][m.group(1) == "P"],
                               re.sub(r"\bkl_mx\b", merged, tree.merge))
        body = "{ " + " ".join(f"const {c.element} {w} = __shfl_down_sync(0xffffffffu, {v}, "
                               f"{off});" for c, v, w, _s in names) + f" {step} }}"
    lines.append("#pragma unroll")
    lines.append(f"for (int {off} = 16; {off} > 0; {off} >>= 1) {body}")
    lines.append(f"if (({t} & 31) == 0) {{ " + " ".join(f"{s}[{first}({t} >> 5)] = {v};"
                                                        for _c, v, _w, s in names) + " }")
    lines.append("__syncthreads();")
    lines.append(f"if ({t} < 32) {{")
    for _c, v, _w, slots in names:  # lanes past the warp count read slot 0: lane 0 never sees them
        lines.append(f"  {v} = {slots}[{first}({t} < (({extent}) >> 5) ? {t} : 0)];")
    lines.append(f"  for (int {off} = ({extent}) >> 6; {off} > 0; {off} >>= 1) {body}")
    lines.append(f"  if ({t} == 0) {{ " + " ".join(f"{tree.slot(c.array, '0')} = {v};"
                                                   for c, v, _w, _s in names) + " }")
    lines.append("}")
    lines.append("__syncthreads();")
    original = ir.source[tree.span[0]:tree.span[1]].decode("utf-8")
    if guard:
        text = (f"if ({guard}) {{\n" + "".join(f"{inner}{ln}\n" for ln in lines)
                + f"{indent}}} else {{\n{indent}  " + original.replace("\n", "\n  ")
                + f"\n{indent}}}")
    else:
        text = "{\n" + "".join(f"{inner}{ln}\n" for ln in lines) + f"{indent}}}"
    return finish(ir, site, [ByteEdit(tree.span[0], tree.span[1], text)], preconditions=results)

