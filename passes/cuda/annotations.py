"""Compiler-annotation passes of CUDA kernels: `#pragma unroll` and `__launch_bounds__`."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.cuda._c import CSource, find_iter, functions
from passes.cuda.recognize import Unit, constant_trip, launch_block

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

CUDA: tuple[str, ...] = ("cuda",)

_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b[^\n]*\n", re.M)
_FOR = re.compile(r"\bfor\s*\(")
# a compile-time bound: literals, ALL_CAPS names (macros, constexprs, template parameters)
_CONST_BOUND = re.compile(r"^[\sA-Z0-9_+\-*/%()<>]*$")


def _next_code_line(src: CSource, pos: int) -> int:
    """Index of the first non-blank character at or after `pos`."""
    while pos < len(src.code) and src.code[pos].isspace():
        pos += 1
    return pos


@dataclass(frozen=True, slots=True)
class PragmaUnroll(Pass):
    """`#pragma unroll` before a loop with a compile-time trip count."""

    text: str = ""
    """The exact pragma line to restore (recorded by a de-optimization, without the newline);
    empty: `#pragma unroll` at the loop's indentation (loops with a constant trip count only)."""

    name: ClassVar[str] = "pragma-unroll"
    category: ClassVar[Category] = Category.EXPRESSION
    summary: ClassVar[str] = "#pragma unroll on constant-trip-count loops"
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("constant_trip_count",)

    def _loops(self, src: CSource) -> list[tuple[int, int, bool]]:
        """(for start, header end, constant trip count) of the `for` loops: constant when the
        condition's bound is a literal or an ALL_CAPS name (macro, constexpr, template), or
        when start, bound and step are compile-time constants by their definitions
        (`passes.cuda.recognize.constant_trip`: `constexpr int tile = 8;`, a template
        parameter)."""
        unit = Unit(src.ir) if src.ir is not None else None
        counted = {}
        if unit is not None:
            counted = {src.ir.span_of(n.id).start: constant_trip(unit, n.id)[0]
                       for n in src.ir.walk() if src.ir.grammar_type_of(n.id) == "for_statement"}
        out = []
        for m in find_iter(_FOR, src):
            paren = m.end() - 1
            end = src.close(paren)
            parts = src.code[paren + 1:end - 1].split(";")
            if len(parts) != 3:
                continue
            cond = re.match(r"\s*\w+\s*(<=|<|>=|>|!=)\s*(.+?)\s*$", parts[1], re.S)
            constant = bool(cond and _CONST_BOUND.match(cond.group(2))) or \
                counted.get(src.b(m.start()), False)
            out.append((m.start(), end, constant))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        out = []
        pragma_targets = set()
        for m in find_iter(_PRAGMA, src):
            target = _next_code_line(src, m.end())
            pragma_targets.add(target)
            if not src.code.startswith("for", target):
                continue
            header_end = src.close(src.code.index("(", target))
            out.append(make_site(self.name, ir, index, src.bspan(m.start(), m.end()), True,
                                 {"pragma": src.text[m.start():m.end()].strip()},
                                 src.bspan(target, header_end)))
        for start, end, constant in self._loops(src):
            if start in pragma_targets or src.function_at(start) is None:
                continue
            line = src.line_start(start)
            out.append(make_site(self.name, ir, index, src.bspan(line, end), False,
                                 {"loop": " ".join(src.text[start:end].split()),
                                  "constant_trip_count": constant}, src.bspan(start, end)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        for m in find_iter(_PRAGMA, src):
            if src.bspan(m.start(), m.end()) == tuple(site.span):
                return finish(ir, site, [src.edit(m.start(), m.end(), "")],
                              options={"text": src.text[m.start():m.end()].rstrip("\n")})
        return Skipped("no #pragma unroll at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        for start, end, constant in self._loops(src):
            line = src.line_start(start)
            if src.bspan(line, end) != tuple(site.span):
                continue
            # a recorded pragma (e.g. `#pragma unroll 4`) was valid on this loop as it is
            results, skip = self.check(ctx, {"constant_trip_count": constant or bool(self.text)})
            if skip:
                return skip
            text = self.text or f"{src.indent(start)}#pragma unroll"
            return finish(ir, site, [src.edit(line, line, text + "\n")], preconditions=results)
        return Skipped("no constant-trip-count loop at the site", {"site": site.anchor})


_BOUNDS = re.compile(r"__launch_bounds__\s*\(")
_THREADS = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w*THREADS\w*)[ \t]+(\S[^\n]*)$", re.M)


SM_THREADS, SM_BLOCKS = 2048, 32
"""Threads and blocks an sm_90 multiprocessor holds at once."""
SM_REGISTERS = 65536  # 32-bit registers of an SM (sm_70 and later)
_WORDS = {"double": 2, "long long": 2, "int64_t": 2, "uint64_t": 2, "size_t": 2, "long": 2,
          "half": 0.5, "__half": 0.5, "__nv_bfloat16": 0.5, "half2": 1, "__half2": 1,
          "__nv_bfloat162": 1, "float2": 2, "float4": 4, "int2": 2, "int4": 4, "uint4": 4,
          "double2": 4, "char": 0.25, "int8_t": 0.25, "uint8_t": 0.25, "bool": 0.25}


def register_tile_words(ir: KernelIR, kernel: str | None) -> tuple[float, list[str]]:
    """32-bit words a thread of `kernel` (every kernel where None) holds in its register
    tiles (per-thread local arrays of constant extents, `recognize.register_blocks`), and
    their declarations as `name[a][b]`."""
    from passes.cuda.recognize import register_blocks  # noqa: PLC0415

    words, names = 0.0, []
    for block in register_blocks(ir):
        if kernel is not None and block.kernel != kernel:
            continue
        count = 1
        for extent in block.extents:
            count *= extent
        element = re.sub(r"\b(?:const|volatile|unsigned|signed|register)\b", "", block.element).strip()
        words += count * _WORDS.get(element, 1)
        names.append(block.name + "".join(f"[{e}]" for e in block.extents))
    return words, names


def _budget_refusal(ir: KernelIR, kernel: str | None, threads: str, blocks: str,
                    code: str) -> Skipped | None:
    """A minimum of `blocks` blocks of `threads` leaves ptxas SM_REGISTERS / (threads x
    blocks) registers a thread: refused where the kernel's register tiles alone take more
    than half of them (the rest holds addresses, indices and temporaries), as they would
    spill to local memory."""
    n, b = _value(threads, code), _value(blocks, code)
    if not n or not b:
        return None
    budget = min(255, SM_REGISTERS // (n * b) // 8 * 8)
    words, names = register_tile_words(ir, kernel)
    if words > budget / 2:
        return Skipped(f"its thread holds {words:g} words in register tiles ({', '.join(names)}): "
                       f"at {b} blocks of {n} threads an SM leaves {budget} registers a thread, "
                       "and they would spill", {"kernel": kernel, "budget": budget,
                                                "tile_words": words})
    return None


def _value(expr: str, code: str) -> int | None:
    """The value of `expr`: a decimal literal, or a name `#define`d to one in `code`."""
    expr = expr.strip().strip("()").strip()
    if expr.isdigit():
        return int(expr)
    m = re.search(rf"^[ \t]*#[ \t]*define[ \t]+{re.escape(expr)}[ \t]+\(?(\d+)\)?[ \t]*$", code, re.M)
    return int(m.group(1)) if m and re.fullmatch(r"[A-Za-z_]\w*", expr) else None


def resident_blocks(threads: str, code: str) -> str:
    """The minimum blocks per multiprocessor at which a block of `threads` (an expression of
    `code`) fills the SM's threads: `2048 / threads`, at most 32; written as a literal where
    `threads` has a known value, else as an expression of it."""
    n = _value(threads, code)
    if n:
        return str(max(1, min(SM_BLOCKS, SM_THREADS // n)))
    return f"({SM_THREADS} / ({threads}) < {SM_BLOCKS} ? {SM_THREADS} / ({threads}) : {SM_BLOCKS})"


def _split_bounds(bounds: str) -> list[str]:
    """The arguments of `__launch_bounds__(bounds)` (commas inside parentheses kept)."""
    out, depth, cur = [], 0, ""
    for ch in bounds:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*out, cur.strip()] if cur.strip() else out


def _is_resident(args: list[str], code: str) -> bool:
    """Whether bounds `args` (max threads, min blocks) ask for the blocks that fill the SM's
    threads (`resident_blocks`)."""
    if len(args) != 2:
        return False
    threads, blocks = _value(args[0], code), _value(args[1], code)
    if threads and blocks is not None:
        return blocks == max(1, min(SM_BLOCKS, SM_THREADS // threads))
    return _norm_expr(args[1]) == _norm_expr(resident_blocks(args[0], code))


def _norm_expr(s: str) -> str:
    return re.sub(r"\s+", "", s)


def _foreign_names(bounds: str, code: str) -> list[str]:
    """The identifiers in recorded `bounds` (a macro or constant of the kernel the bounds were
    recorded on) that `code` never names: bounds written with them do not compile here and
    say nothing of this kernel's block."""
    return [n for n in re.findall(r"[A-Za-z_]\w*", bounds)
            if not re.search(rf"\b{re.escape(n)}\b", code)]


@dataclass(frozen=True, slots=True)
class LaunchBounds(Pass):
    """`__launch_bounds__(max threads[, min blocks])` on a `__global__` function."""

    bounds: str = ""
    """The bounds to set (recorded by a de-optimization, e.g. `256, 2`); empty: the block size
    from the facts (`block_threads`), else the block the kernel's launches use as the host
    sets it (`passes.cuda.recognize.launch_block`), else a `#define ...THREADS...` macro."""
    sep: str = " "
    """The whitespace between the annotation and what follows it."""
    follows: str = ""
    """The word the annotation stood in front of (recorded; e.g. `__global__` or the
    function's name); empty: in front of the function's name."""
    resident: bool = False
    """Also the minimum blocks per multiprocessor at which the block fills the SM's 2048
    threads (`2048 / threads`, at most 32): ptxas then budgets registers so that they never
    hold fewer blocks on an SM than its threads do (32 registers a thread on sm_90). A
    memory-bound kernel keeps as many rows or tiles in flight per SM as its threads allow; its
    bounds without a minimum (`__launch_bounds__(T)`) are a site of this form too."""

    name: ClassVar[str] = "launch-bounds"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "__launch_bounds__ register budget for the block size"
    languages: ClassVar[tuple[str, ...]] = CUDA
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("block_threads <= bound",)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        src = CSource(ir)
        out = []
        kernels = [f for f in functions(src) if f.is_kernel]
        for m in find_iter(_BOUNDS, src):
            end = src.close(m.end() - 1)
            fn = next((f for f in kernels if m.start() < f.name_start < m.start() + 400), None)
            locus = src.bspan(fn.start, fn.params_end) if fn else src.bspan(m.start(), end)
            bounds = src.text[m.end():end - 1]
            out.append(make_site(self.name, ir, index, src.bspan(m.start(), _skip_ws(src, end)),
                                 True, {"bounds": bounds, "kernel": fn.name if fn else None}, locus))
            if self.resident and len(_split_bounds(bounds)) == 1:  # a minimum to add
                out.append(make_site(self.name, ir, index, src.bspan(m.start(), end), False,
                                     {"bounds": bounds, "kernel": fn.name if fn else None,
                                      "widen": True}, src.bspan(m.start(), end)))
        for fn in kernels:
            head = src.code[fn.start - 200 if fn.start > 200 else 0:fn.name_start]
            if "__launch_bounds__" in re.split(r"[;}]", head)[-1]:
                continue
            out.append(make_site(self.name, ir, index, src.bspan(_head_start(src, fn.name_start),
                                                                 fn.name_start),
                                 False, {"kernel": fn.name}, src.bspan(fn.start, fn.params_end)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        for m in find_iter(_BOUNDS, src):
            end = src.close(m.end() - 1)
            stop = _skip_ws(src, end)
            if src.bspan(m.start(), stop) != tuple(site.span):
                continue
            follows = re.match(r"\w+", src.code[stop:])
            bounds = src.text[m.end():end - 1]
            args = _split_bounds(bounds)
            resident = _is_resident(args, src.code)
            return finish(ir, site, [src.edit(m.start(), stop, "")], options={
                "bounds": args[0] if resident else bounds, "sep": src.text[end:stop] or " ",
                "follows": follows.group(0) if follows else "", **({"resident": True} if resident else {})})
        return Skipped("no __launch_bounds__ at the site", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        src = CSource(ir)
        bounds = site.detail.get("bounds", "") if site.detail.get("widen") else self.bounds
        if bounds and _foreign_names(bounds, src.code):
            bounds = ""  # recorded on a kernel whose names this one lacks: its own block instead
        if not bounds:
            facts = dict(ctx.facts) if ctx is not None else {}
            launch = launch_block(ir, site.detail.get("kernel"))
            if "block_threads" in facts:
                bounds = str(facts["block_threads"])
            elif launch.threads is not None:
                bounds = str(launch.threads)
            else:
                macro = _THREADS.search(src.text)
                if macro is None:
                    return Skipped("the block size is unknown: record it or give the fact "
                                   f"block_threads ({launch.reason})",
                                   {"kernel": site.detail.get("kernel")})
                bounds = macro.group(1)
        first = _split_bounds(bounds)[0] if _split_bounds(bounds) else bounds
        facts = {"bound": int(first)} if first.isdigit() else {}
        results, skip = self.check(ctx, facts)
        if skip:
            return skip
        if self.resident and len(_split_bounds(bounds)) == 1:
            bounds = f"{first}, {resident_blocks(first, src.code)}"
        parts = _split_bounds(bounds)
        if len(parts) == 2:
            refused = _budget_refusal(ir, site.detail.get("kernel"), parts[0], parts[1], src.code)
            if refused is not None:
                return refused
        if site.detail.get("widen"):  # `__launch_bounds__(T)` as written, its minimum added
            if not self.resident:
                return Skipped("the kernel has its __launch_bounds__ already", {"site": site.anchor})
            return finish(ir, site, [ByteEdit(site.span[0], site.span[1],
                                              f"__launch_bounds__({bounds})")], preconditions=results)
        at = site.span[1]  # in front of the function's name
        if self.follows:  # or in front of the word it preceded (e.g. `__global__`)
            head = ir.source[site.span[0]:site.span[1]]
            hits = list(re.finditer(rb"\b" + re.escape(self.follows.encode()) + rb"\b", head))
            if hits:
                at = site.span[0] + hits[-1].start()
        text = f"__launch_bounds__({bounds}){self.sep}"
        return finish(ir, site, [ByteEdit(at, at, text)], preconditions=results)


def _head_start(src: CSource, name_start: int) -> int:
    """Start of a function declaration's head (after the previous `;`, `{`, `}` or
    preprocessor line), so the head's qualifiers are inside the site."""
    lo = max(0, name_start - 400)
    head = src.code[lo:name_start]
    cut = max(head.rfind(";"), head.rfind("{"), head.rfind("}"))
    pre = max((m.end() for m in re.finditer(r"^[ \t]*#[^\n]*\n", head, re.M)), default=-1)
    start = lo + max(cut + 1, pre, 0)
    while start < name_start and src.code[start].isspace():
        start += 1
    return start


def _skip_ws(src: CSource, pos: int) -> int:
    while pos < len(src.text) and src.text[pos] in " \t\n":
        pos += 1
    return pos
