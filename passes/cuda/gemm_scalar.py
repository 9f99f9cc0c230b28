"""The de-optimization of `gemm-schedule`: its output back to a plain tiled GEMM kernel.

The rule's output keeps the user's body (with the K loop replaced by the fragment exchange and
blockIdx / gridDim by the virtual block's) inside a persistent main loop, and records what it
read (`// gemm-schedule: {facts}`: the operands' pointers, layouts, leading dimensions, bounds
and block axes, K, the element type, the block tile and block). `scalar_edits` puts that body
back as the kernel's body, with the exchange replaced by a synchronous tiled K loop over the
same block tile: shared tiles `kl_st_a` (BM x BK) and `kl_st_b` (BK x BN) filled element by
element with zero fill past M, N and K, then scalar multiply-adds into the same accumulators
the exchange filled (each at the output cell it held). Parameters the body moves (a pointer
bumped to the block's origin) are read through copies taken at entry. The rule reads the
result again and gives its output back (the copies and tiles are dead once the loop is gone).

Positions are byte offsets of `KernelIR.source`. No GPU library is imported here.
"""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from passes._source import ByteEdit
from passes.cuda._c import CSource, Function, functions
from passes.cuda._gemm_text import (BARRIER_HELPERS, DEEP_HELPERS, HELPERS, MARK, PERSIST_HOST,
                                    PREFIX, TMA_DEVICE_HELPERS, TMA_HELPERS, TMA_PARAMETER,
                                    written as _written)
from passes.cuda.gemm_launch import undo_edits
from passes.cuda.mma_tile import HELPERS as MMA_HELPERS

if TYPE_CHECKING:
    from kir import KernelIR

_BODY = "{  " + MARK + "the kernel's own body for this block\n"
_TAIL = "\n      }\n    }\n  }\n}"
_EXCHANGE = "{  " + MARK + "the tile's fragments into this thread's accumulators"
_MAP = re.compile(rf"const int {PREFIX}row = (.+?), {PREFIX}col = (.+?);\n")
_GROUP = re.compile(rf"if \(\(unsigned\)\({PREFIX}row(?: \+ (-?\d+))? - {PREFIX}c0\) < \d+u\) \{{\n"
                    r"[^\n]*\n((?:[ \t]*[^\n]+ \+= x\[-?\d+\];\n)+)")
_ADD = re.compile(r"[ \t]*(.+?) \+= x\[(-?\d+)\];")
_VIRTUAL = re.compile(rf"\b{PREFIX}(vb|vg|vd|vt)\b")
_VBODY = "{  " + MARK + "the kernel's own body for this block and thread\n"
_PRODUCTS = "{  " + MARK + "the tile's products into this thread's accumulators"
_READ = re.compile(rf"const float\* {PREFIX}y = {PREFIX}x \+ \({PREFIX}sm - {PREFIX}c0 \+ (.+?)\) "
                   rf"\* (\d+) \+ {PREFIX}sn \+ (.+?);\n")
_CELL = re.compile(rf"const float {PREFIX}y\[1\] = \{{{PREFIX}(?:acc|slab)\[[^\n]*\}};  "
                   r"// the cell at row (.+?), column (.+?) of its block\n")
_VADD = re.compile(rf"[ \t]*(.+?) \+= {PREFIX}y\[(-?\d+)\];")
_BUILTINS = {"vb": "blockIdx", "vg": "gridDim", "vd": "blockDim", "vt": "threadIdx"}
_TYPES = {"bf16": ("__nv_bfloat16", "__float2bfloat16(0.0f)", "__bfloat162float"),
          "fp16": ("__half", "__float2half(0.0f)", "__half2float")}
ST = "kl_st_"


def _facts(text: str, fn: Function) -> dict[str, Any] | None:
    at = text.find(MARK + "{", fn.body_start, fn.body_end)
    if at < 0:
        return None
    line = text[at + len(MARK):text.find("\n", at)]
    try:
        return json.loads(line)
    except ValueError:
        return None


def scalar_edits(ir: KernelIR, kernel: str | None = None) -> list[ByteEdit] | str:
    """Edits that turn the rule's output in `kernel` (the unit's only such kernel where None)
    back into a plain tiled kernel (see the module docstring), or why it is not in the rule's
    form."""
    text = ir.text
    src = CSource(ir)
    mine = [f for f in functions(src) if f.is_kernel and _facts(text, f) is not None]
    target = [f for f in mine if kernel in (None, f.name)]
    if len(target) != 1:
        return "the kernel is not in the form gemm-schedule writes"
    fn = target[0]
    facts = _facts(text, fn)
    if facts.get("virtual") or facts.get("cells"):
        restored = _virtual_body(text, fn, facts)
        if isinstance(restored, str):
            return restored
        return _finish(ir, src, fn, mine, restored[0], facts)
    start = text.find(_BODY, fn.body_start, fn.body_end)
    if start < 0 or text[fn.body_end - len(_TAIL):fn.body_end] != _TAIL:
        return "the kernel's body is not where gemm-schedule puts it"
    body = text[start + len(_BODY):fn.body_end - len(_TAIL)]
    view = CSource.of_text(body)
    x0 = body.find(_EXCHANGE)
    if x0 < 0:
        return "the kernel has no gemm-schedule exchange"
    x1 = view.close(x0)
    swap = body[x0:x1]
    where = _MAP.search(swap)
    groups = list(_GROUP.finditer(swap))
    if where is None or not groups:
        return "the exchange is not one gemm-schedule wrote"
    pad = view.indent(x0)
    cells = [(int(g.group(1) or 0), [(a.group(1), int(a.group(2))) for a in _ADD.finditer(g.group(2))])
             for g in groups]
    try:
        loop = _scalar_loop(facts, where.group(1), where.group(2), cells, pad,
                            _entry_copies(body, facts))
    except (KeyError, TypeError, ValueError) as exc:
        return f"the recorded facts are incomplete ({exc})"
    restored = body[:x0] + loop + body[x1:]
    restored = _real_builtins(restored)
    copies = _entry_copies(body, facts)
    if copies:
        nl = restored.find("\n") + 1
        restored = restored[:nl] + "".join(f"  const auto {ST}in_{n} = {n};\n" for n in copies) + \
            restored[nl:]
    return _finish(ir, src, fn, mine, restored, facts)


def _real_builtins(text: str) -> str:
    """`text` with the virtual block's names (outside comments and strings) the builtins."""
    code = CSource.of_text(text).code
    out, pos = [], 0
    for m in _VIRTUAL.finditer(code):
        out.append(text[pos:m.start()])
        out.append(_BUILTINS[m.group(1)])
        pos = m.end()
    return "".join(out) + text[pos:]


def _finish(ir: KernelIR, src: CSource, fn: Function, mine: list[Function], restored: str,
            facts: dict[str, Any]) -> list[ByteEdit]:
    """The edits putting `restored` back as the kernel's body, the TMA parameter, the launch
    edits and the helpers taken out, and (a form with its own block) the kernel's own
    `__launch_bounds__` as they were."""
    text = ir.text
    edits = [ByteEdit(*src.bspan(fn.body_start, fn.body_end), "{" + restored + "}")]
    if "bounds" in facts:
        bounds = re.search(r"__launch_bounds__\s*\([^)]*\)\s*", text[fn.start:fn.body_start])
        if bounds is not None:
            kept = facts["bounds"] + (" " if facts["bounds"] else "")
            edits.append(ByteEdit(*src.bspan(fn.start + bounds.start(), fn.start + bounds.end()),
                                  kept))
    head = text.find(TMA_PARAMETER, fn.name_start, fn.body_start)
    if head >= 0:  # the TMA form's tensor maps leave the parameters
        before = text.rfind(",", fn.name_start, head)
        cut = before if before >= 0 and not text[before + 1:head].strip() else head
        edits.append(ByteEdit(*src.bspan(cut, head + len(TMA_PARAMETER)), ""))
    others = [f for f in mine if f is not fn]
    rest = text[:fn.body_start] + text[fn.body_end:]
    edits += undo_edits(ir, fn.name)
    for helpers, name in ((HELPERS, "kl_gs_"), (DEEP_HELPERS, "kl_gs_"), (BARRIER_HELPERS, "kl_gs_"),
                          (TMA_HELPERS, "kl_gs_"), (TMA_DEVICE_HELPERS, "kl_gs_"),
                          (PERSIST_HOST, "kl_gs_"),
                          (MMA_HELPERS, "kl_tc_")):
        at = text.find(helpers)
        if at < 0 or others:
            continue
        outside = rest.replace(helpers, "")
        if name == "kl_tc_" and "kl_tc_" in CSource.of_text(outside).code:
            continue  # another kernel's mma-micro-kernel step reads them
        edits.append(ByteEdit(*src.bspan(at, at + len(helpers)), ""))
    return sorted(edits, key=lambda e: e.start)


def form_options(ir: KernelIR, kernel: str | None = None) -> dict[str, Any]:
    """The rule's options that give the output in `kernel` again (`wgmma`, `wide` for its
    128x256 tile, `bk`, `overlap`, `deep` with its `stages`, `specialize`, `producer`, `tma`,
    `consumers`, `pingpong`, `exchange` where the products of one-cell threads went through the
    exchange, `registers` where a producer form ran their body from the fragment registers, not
    a slab)."""
    src = CSource(ir)
    for f in functions(src):
        facts = _facts(ir.text, f) if f.is_kernel and kernel in (None, f.name) else None
        if facts is not None:
            return {"wgmma": bool(facts.get("wgmma")),
                    **({"wide": True} if facts.get("wide") else {}),
                    **({"bk": int(facts["bk"])} if facts.get("bk") else {}),
                    **({"overlap": True} if facts.get("overlap") else {}),
                    **({"deep": True, "stages": int(facts["schedule"][3])}
                       if facts.get("deep") else {}),
                    **({"specialize": True} if facts.get("specialize") else {}),
                    **({"producer": True} if facts.get("producer") else {}),
                    **({"pingpong": True} if facts.get("pingpong") else {}),
                    **({"tma": True} if facts.get("tma") else {}),
                    **({"consumers": int(facts["consumers"])} if facts.get("consumers") else {}),
                    **({"exchange": True} if facts.get("exchange") else {}),
                    **({"registers": True} if facts.get("cells") and facts.get("producer")
                       and not facts.get("staged") else {})}
    return {"wgmma": False}


def _entry_copies(body: str, facts: dict[str, Any]) -> list[str]:
    """The parameters the loop reads that the body moves (read through entry copies)."""
    used = {facts["A"]["pointer"], facts["B"]["pointer"], facts["A"]["ld"], facts["B"]["ld"],
            facts["A"]["bound"], facts["B"]["bound"], facts["K"],
            *facts["A"].get("batch", ()), *facts["B"].get("batch", ())} - {""}
    return _written(CSource.of_text(body).code, used)


def _batch(op: dict[str, Any], name: Any) -> str:
    """The operand's offset for the block's GEMM of a batch (blockIdx.z times its stride)."""
    if not op.get("batch"):
        return ""
    return " + (size_t)blockIdx.z * " + " * ".join(f"(size_t){name(n)}" for n in op["batch"])


def _origins(facts: dict[str, Any], m_: str, n_: str) -> tuple[str, str]:
    """The block's first output row and column as the kernel's grid names its blocks."""
    bm, bn = (int(v) for v in facts["block_tile"][:2])
    a, b = facts["A"], facts["B"]
    order = facts.get("grid", "2d")
    if order == "2d":
        return f"(int)blockIdx.{a['block_axis']} * {bm}", f"(int)blockIdx.{b['block_axis']} * {bn}"
    rows_u, cols_u = f"(({m_} + {bm - 1}) / {bm})", f"(({n_} + {bn - 1}) / {bn})"
    row0 = (f"(int)blockIdx.x / {cols_u} * {bm}" if order == "row"
            else f"(int)blockIdx.x % {rows_u} * {bm}")
    col0 = (f"(int)blockIdx.x % {cols_u} * {bn}" if order == "row"
            else f"(int)blockIdx.x / {rows_u} * {bn}")
    return row0, col0


def _direct_loop(facts: dict[str, Any], row: str, col: str,
                 cells: list[tuple[int, list[tuple[str, int]]]], pad: str, copies: list[str]) -> str:
    """A K loop of scalar multiply-adds of the operands' elements read from global memory, into
    the same accumulators (each at the output cell it held), elements past M or N not read."""
    _, _, to_float = _TYPES[facts["dtype"]]
    a, b = facts["A"], facts["B"]

    def name(n: str) -> str:
        return f"{ST}in_{n}" if n in copies else n

    kk, m_, n_ = name(facts["K"]), name(a["bound"]), name(b["bound"])
    row0, col0 = _origins(facts, m_, n_)
    i1 = pad + "  "
    lines = [f"for (int {ST}k = 0; {ST}k < {kk}; ++{ST}k) {{",
             f"{i1}const int {ST}row = {row0} + {row}, {ST}col = {col0} + {col};"]
    for dm, adds in cells:
        gm = f"{ST}row + {dm}" if dm else f"{ST}row"
        for lvalue, dn in adds:
            gn = f"{ST}col + {dn}" if dn else f"{ST}col"
            a_at = (f"(size_t)({gm}) * {name(a['ld'])} + {ST}k" if a["layout"] == "mk"
                    else f"(size_t){ST}k * {name(a['ld'])} + {gm}") + _batch(a, name)
            b_at = (f"(size_t){ST}k * {name(b['ld'])} + {gn}" if b["layout"] == "kn"
                    else f"(size_t)({gn}) * {name(b['ld'])} + {ST}k") + _batch(b, name)
            guard = " && ".join([f"{gm} < {m_}"] * bool(a["bound"]) + [f"{gn} < {n_}"] * bool(b["bound"]))
            add = (f"{lvalue} += {to_float}({name(a['pointer'])}[{a_at}]) * "
                   f"{to_float}({name(b['pointer'])}[{b_at}]);")
            lines.append(f"{i1}{'if (' + guard + ') ' if guard else ''}{add}")
    lines.append(f"{pad}}}")
    return "\n".join(lines)


def _virtual_body(text: str, fn: Function, facts: dict[str, Any]) -> str | Any:
    """The kernel's own body from the virtual form (run by each virtual thread): its accumulators
    filled by a K loop again (scalar multiply-adds over the staged tiles where the kernel was
    read with shared tiles, else over global memory) and the virtual builtins the real ones;
    a str where the form is not one the rule wrote. Returned as `[body]` (a list) on success."""
    start = text.find(_VBODY, fn.body_start, fn.body_end)
    if start < 0:
        return "the kernel's body is not where gemm-schedule puts it"
    view = CSource.of_text(text)
    end = view.close(start) - 1
    body = text[start + len(_VBODY):end].rstrip(" \t")
    lam = re.fullmatch(r"\s*\[&\]\(\) \{(.*)\}\(\);\s*", body, re.S)
    if lam is not None:
        body = lam.group(1)
    elif body.endswith("\n\n"):  # (the form's own line break before the block's closing brace)
        body = body[:-1]
    x0 = body.find(_PRODUCTS)
    if x0 < 0:
        return "the kernel has no gemm-schedule exchange"
    x1 = CSource.of_text(body).close(x0)
    swap = body[x0:x1]
    where = _READ.search(swap)
    cell = _CELL.search(swap) if where is None else None
    if where is None and cell is None:
        return "the exchange is not one gemm-schedule wrote"
    # (a cell read from its fragment register: one accumulator, at the thread's base cell)
    ldx = int(where.group(2)) if where is not None else 1
    row, col = (where.group(1), where.group(3)) if where is not None else cell.groups()
    cells: dict[int, list[tuple[str, int]]] = {}
    for m in _VADD.finditer(swap):
        off = int(m.group(2))
        cells.setdefault(off // ldx, []).append((m.group(1), off % ldx))
    pad = CSource.of_text(body).indent(x0)
    copies = _entry_copies(body, facts)
    try:
        make = _direct_loop if int(facts["block_tile"][2]) == 1 else _scalar_loop
        loop = make(facts, row, col, sorted(cells.items()), pad, copies)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        return f"the recorded facts are incomplete ({exc})"
    restored = body[:x0] + loop + body[x1:]
    restored = _real_builtins(restored)
    if copies:
        restored = "".join(f"\n  const auto {ST}in_{n} = {n};" for n in copies) + restored
    return [restored]


def _scalar_loop(facts: dict[str, Any], row: str, col: str,
                 cells: list[tuple[int, list[tuple[str, int]]]], pad: str, copies: list[str]) -> str:
    bm, bn, bk = (int(v) for v in facts["block_tile"])
    bx, by = (int(v) for v in facts["block"])
    elem, zero, to_float = _TYPES[facts["dtype"]]
    a, b = facts["A"], facts["B"]

    def name(n: str) -> str:
        return f"{ST}in_{n}" if n in copies else n

    tid = "(int)threadIdx.x" if by == 1 else f"((int)threadIdx.x + {bx} * (int)threadIdx.y)"
    kk, m_, n_ = name(facts["K"]), name(a["bound"]), name(b["bound"])
    a_at = (f"(size_t){ST}gm * {name(a['ld'])} + {ST}gk" if a["layout"] == "mk"
            else f"(size_t){ST}gk * {name(a['ld'])} + {ST}gm") + _batch(a, name)
    b_at = (f"(size_t){ST}gk * {name(b['ld'])} + {ST}gn" if b["layout"] == "kn"
            else f"(size_t){ST}gn * {name(b['ld'])} + {ST}gk") + _batch(b, name)
    order = facts.get("grid", "2d")
    if order == "2d":
        row0 = f"(int)blockIdx.{a['block_axis']} * {bm}"
        col0 = f"(int)blockIdx.{b['block_axis']} * {bn}"
    else:  # blockIdx.x counting the blocks row- or column-major
        rows_u, cols_u = f"(({m_} + {bm - 1}) / {bm})", f"(({n_} + {bn - 1}) / {bn})"
        row0 = (f"(int)blockIdx.x / {cols_u} * {bm}" if order == "row"
                else f"(int)blockIdx.x % {rows_u} * {bm}")
        col0 = (f"(int)blockIdx.x % {cols_u} * {bn}" if order == "row"
                else f"(int)blockIdx.x / {rows_u} * {bn}")
    # a staging the rule found without bounds checks along M or N is restored without them
    guard_a = f"{ST}gm < {m_} && " if a["bound"] else ""
    guard_b = f" && {ST}gn < {n_}" if b["bound"] else ""
    i1, i2, i3 = pad + "  ", pad + "    ", pad + "      "
    lines = [f"__shared__ {elem} {ST}a[{bm * bk}];",
             f"{pad}__shared__ {elem} {ST}b[{bk * bn}];",
             f"{pad}for (int {ST}k0 = 0; {ST}k0 < {kk}; {ST}k0 += {bk}) {{",
             f"{i1}for (int {ST}e = {tid}; {ST}e < {bm * bk}; {ST}e += {bx * by}) {{",
             f"{i2}const int {ST}m = {ST}e / {bk}, {ST}k = {ST}e % {bk};",
             f"{i2}const int {ST}gm = {row0} + {ST}m, "
             f"{ST}gk = {ST}k0 + {ST}k;",
             f"{i2}{ST}a[{ST}e] = ({guard_a}{ST}gk < {kk}) ? {name(a['pointer'])}[{a_at}] "
             f": {zero};",
             f"{i1}}}",
             f"{i1}for (int {ST}e = {tid}; {ST}e < {bk * bn}; {ST}e += {bx * by}) {{",
             f"{i2}const int {ST}k = {ST}e / {bn}, {ST}n = {ST}e % {bn};",
             f"{i2}const int {ST}gk = {ST}k0 + {ST}k, "
             f"{ST}gn = {col0} + {ST}n;",
             f"{i2}{ST}b[{ST}e] = ({ST}gk < {kk}{guard_b}) ? {name(b['pointer'])}[{b_at}] "
             f": {zero};",
             f"{i1}}}",
             f"{i1}__syncthreads();",
             f"{i1}{{",
             f"{i2}const int {ST}row = {row}, {ST}col = {col};",
             f"{i2}for (int {ST}k = 0; {ST}k < {bk}; ++{ST}k) {{"]
    for dm, adds in cells:
        r = f"({ST}row + {dm})" if dm else f"{ST}row"
        for lvalue, dn in adds:
            c = f"{ST}col + {dn}" if dn else f"{ST}col"
            lines.append(f"{i3}{lvalue} += {to_float}({ST}a[{r} * {bk} + {ST}k]) * "
                         f"{to_float}({ST}b[{ST}k * {bn} + {c}]);")
    lines += [f"{i2}}}", f"{i1}}}", f"{i1}__syncthreads();", f"{pad}}}"]
    return "\n".join(lines)
