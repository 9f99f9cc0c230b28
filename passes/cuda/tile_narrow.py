"""What an fp32 shared tile of a GEMM micro-kernel holds, and keeping it as 16-bit.

Users often stage fp16 / bf16 global data into `float` shared tiles, converting on the way in
(`As[k][m] = __bfloat162float(x[i])`, `v = 0.f; if (ok) v = __half2float(x[i]); Bs[k][n] = v`).
Such a tile holds only values of the 16-bit type, so the tensor cores can read it as that type
and the tile can be stored as that type:

- `exact_kind` reads every value stored into the tile back to where it comes from (through
  the local variables it is assigned from, guards, ternaries, casts, negation, min / max): each
  must be a widened element of a 16-bit array or a constant the 16-bit type holds exactly; the
  tile's other uses must be element reads (a write through its address, an in-place update, an
  element passed by reference, a use through a macro or a pointer into a shared buffer that
  other names reach leaves what it holds untold). It answers the 16-bit type, or why the
  tile's values are not provably exact.
- `narrowing` plans keeping such a tile as 16-bit: its declaration's type becomes
  `kl_tc_half_of<T>` (16-bit storage; `T`, the user's spelling, is kept for the way back),
  every store converts (`kl_tc_narrow`, exact by the above), every element read outside the
  replaced inner product converts back (`kl_tc_widen`), so the user's other uses compute what
  they computed. Refused (the tile then stays fp32, read by packing each fragment) for an
  array of extents the host sets (`extern __shared__`) or one declared beside an array that is
  not narrowed.
- `widening_edits` undoes it on the rule's output (the de-optimization): the spelling, the
  stores and the reads come back byte for byte.

Positions are byte offsets of `KernelIR.source`. No GPU library is imported here.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from passes._source import ByteEdit
from passes.cuda._c import CSource
from passes.cuda._tree import Scope, children, declared_names, subtree, text
from passes.cuda.gemm_eval import variable_kind

if TYPE_CHECKING:
    from kir import KernelIR

# after the tensor-core helpers (it packs with kl_tc_pack)
NARROW_HELPERS = r"""// ---- fp32 shared tiles kept as 16-bit (every value stored is exact in the 16-bit type) ----
template <typename T>
using kl_tc_half_of = unsigned short;
template <bool BF16>
__device__ __forceinline__ unsigned short kl_tc_narrow(float v) {
  return static_cast<unsigned short>(kl_tc_pack<BF16>(v, 0.0f));
}
template <bool BF16>
__device__ __forceinline__ float kl_tc_widen(unsigned short v) {
  if (BF16) return __uint_as_float((unsigned)v << 16);
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(v));
  return r;
}
"""
HALF_OF = "kl_tc_half_of"
_NARROWED = re.compile(rf"\b{HALF_OF}<")
_CONVERSION = re.compile(r"\bkl_tc_(?:narrow|widen)<(?:true|false)>\(")

_WIDEN = re.compile(r"^(?:__bfloat162float|__half2float|float|static_cast|__ldg)$")
_FLOATING = re.compile(r"\b(?:float|double|__half|half|__nv_bfloat16|nv_bfloat16)\b")
_SELECT = re.compile(r"^(?:fminf|fmaxf|fmin|fmax|min|max)$")
_SIGN = re.compile(r"^(?:fabsf|fabs|abs)$")
_PAIRS = {"__half2": "fp16", "half2": "fp16", "__nv_bfloat162": "bf16", "nv_bfloat162": "bf16"}


@dataclass(frozen=True, slots=True)
class Uses:
    """The uses of a shared array in its kernel outside the replaced region: the plain
    stores into its elements (assignment nodes), the element reads (outermost subscript
    nodes) and its declaration."""

    stores: tuple[int, ...]
    reads: tuple[int, ...]
    decl: int


@dataclass(frozen=True, slots=True)
class Narrowing:
    """One fp32 tile kept as `kind` (bf16 | fp16): its uses and its storage bytes saved."""

    array: str
    kind: str
    uses: Uses
    saved: int


# ---------------------------------------------------------------------------------------------
# the uses of a tile


def _function(ir: KernelIR, kernel: str) -> tuple[Scope, int] | str:
    scope = Scope(ir)
    fn = scope.functions.get(kernel)
    if fn is None:
        return f"the kernel {kernel} is not found"
    scope.enter(fn)
    return scope, fn


def tile_uses(ir: KernelIR, kernel: str, array: str,
              region: tuple[tuple[int, int], ...] = (), view: bool = False) -> Uses | str:
    """Every use of the shared array `array` in `kernel` outside `region` (byte spans): each
    a plain store into an element or an element read; else why not. With `view`, `array`
    may be a pointer (one subscript selects an element) and the array may be declared at
    file scope (a dynamic shared buffer: `buffer_uses` asks so)."""
    found = _function(ir, kernel)
    if isinstance(found, str):
        return found
    scope, fn = found
    decls = [d for d in subtree(ir, fn) if ir.grammar_type_of(d) == "declaration"
             and any(n == array for n, _, _ in declared_names(ir, d))]
    if not decls and view:
        decls = [d for d in _file_declarations(ir) if any(n == array for n, _, _ in
                                                          declared_names(ir, d))]
    if len(decls) != 1:
        return f"the shared tile {array} is declared {len(decls)} times"
    decl = decls[0]
    if not view and not re.search(r"\b__shared__\b", text(ir, decl)):
        return (f"the tile {array} is a pointer into a shared buffer that other names may "
                "write")
    decl_span = ir.span_of(decl)
    idents = [n for n in subtree(ir, fn) if ir.grammar_type_of(n) == "identifier"
              and ir.name_of(n) == array]
    span = ir.span_of(fn)
    code = CSource.of_text(ir.source[span.start:span.end].decode("utf-8", "replace")).code
    named = rf"\b{re.escape(array)}\b"
    for macro, body in {**scope.macros, **scope.function_macros}.items():
        if re.search(named, body) and re.search(rf"\b{re.escape(macro)}\b", code):
            return f"the shared tile {array} is named inside the macro {macro}"
    if len(re.findall(named, code)) != len(idents):
        return f"the shared tile {array} is named where the rule cannot see its use"
    dims = _rank(ir, decl, array) or (1 if view else 0)
    stores, reads = [], []
    for ident in idents:
        at = ir.span_of(ident).start
        if decl_span.start <= at < decl_span.end or any(a <= at < b for a, b in region):
            continue
        node, depth = ident, 0
        while True:
            parent = ir.parent_of(node)
            if parent is None or ir.grammar_type_of(parent) != "subscript_expression" or \
                    children(ir, parent)[0] != node:
                break
            node, depth = parent, depth + 1
        use = text(ir, node)[:40]
        if depth != dims:
            return f"the shared tile {array} is used as `{use}`, not element by element"
        parent = ir.parent_of(node)
        ptype = ir.grammar_type_of(parent) if parent is not None else ""
        if ptype == "assignment_expression" and children(ir, parent)[0] == node:
            op = ir.attrs_of(parent).get("op", "=")
            if op != "=":
                return f"the shared tile {array} is updated in place (`{op}`)"
            stores.append(parent)
        elif ptype == "update_expression":
            return f"the shared tile {array} is updated in place (`{text(ir, parent)[:30]}`)"
        elif ptype == "pointer_expression":
            return f"the address of the shared tile {array} is taken (`{text(ir, parent)[:30]}`)"
        else:
            reads.append(node)
    for w in scope.writes.get(array, []):
        if ir.grammar_type_of(w) != "assignment_expression":
            return f"the shared tile {array} is written by `{text(ir, w)[:40]}`"
    return Uses(tuple(stores), tuple(reads), decl)


def buffer_uses(ir: KernelIR, kernel: str, array: str,
                region: tuple[tuple[int, int], ...] = ()) -> Uses | str:
    """The uses of every name of the memory `array` names: `tile_uses`, or where `array` is a
    dynamic shared buffer (`extern __shared__ T buf[];`) or a pointer set once into one
    (`T* P = buf;`, `buf + off`, `&buf[off]`: the buffer cut into tiles), the stores and
    reads through the buffer and through each such pointer of the kernel, each used element
    by element (the pointers' initializers aside). A pointer into the buffer of another
    element type, or a use of the buffer or a pointer otherwise, is refused as `tile_uses`
    refuses it. The declaration is the buffer's."""
    found = _function(ir, kernel)
    if isinstance(found, str):
        return found
    scope, fn = found
    carved = _carving(ir, fn, array)
    if carved is None:
        return tile_uses(ir, kernel, array, region)
    buffer, views = carved
    inits = tuple((ir.span_of(d).start, ir.span_of(d).end) for d in views.values())
    stores: list[int] = []
    reads: list[int] = []
    decl = None
    for name in (buffer, *views):
        got = tile_uses(ir, kernel, name, region + inits if name == buffer else region, view=True)
        if isinstance(got, str):
            return got
        stores += got.stores
        reads += got.reads
        decl = got.decl if name == buffer else decl
    return Uses(tuple(stores), tuple(reads), decl)  # type: ignore[arg-type]


def _file_declarations(ir: KernelIR) -> list[int]:
    return [d for d in range(len(ir)) if ir.grammar_type_of(d) == "declaration" and
            ir.grammar_type_of(ir.parent_of(d)) in ("translation_unit", "declaration_list")]


def _carving(ir: KernelIR, fn: int, array: str) -> tuple[str, dict[str, int]] | None:
    """(buffer, {pointer: its declaration}) where `array` is an `extern __shared__` buffer or
    a pointer of `fn` set to one at its declaration; the pointers are every pointer of `fn`
    so set, of the buffer's element type. None where `array` is neither."""
    def element(decl: int) -> str:
        return " ".join(text(ir, c) for c in children(ir, decl) if ir.grammar_type_of(c) in (
            "primitive_type", "type_identifier", "sized_type_specifier", "qualified_identifier"))

    def base_of(init: int) -> str | None:
        node = init
        while ir.grammar_type_of(node) == "parenthesized_expression":
            node = [c for c in children(ir, node) if ir.grammar_type_of(c) != "comment"][0]
        kids = [c for c in children(ir, node) if ir.grammar_type_of(c) != "comment"]
        if ir.grammar_type_of(node) == "binary_expression" and ir.name_of(node) == "+":
            node = kids[0]
        elif ir.grammar_type_of(node) == "pointer_expression" and ir.name_of(node) == "&" and \
                ir.grammar_type_of(kids[-1]) == "subscript_expression":
            node = children(ir, kids[-1])[0]
        return ir.name_of(node) if ir.grammar_type_of(node) == "identifier" else None

    buffers = {}
    for d in [*_file_declarations(ir), *subtree(ir, fn)]:
        if ir.grammar_type_of(d) == "declaration" and re.search(
                r"\bextern\b[^;=]*\b__shared__\b|\b__shared__\b[^;=]*\bextern\b", text(ir, d)):
            buffers.update({n: d for n, _, _ in declared_names(ir, d)})
    pointers: dict[str, tuple[str, int]] = {}
    for d in subtree(ir, fn):
        if ir.grammar_type_of(d) != "declaration" or "__shared__" in text(ir, d):
            continue
        for name, ident, init in declared_names(ir, d):
            if init is not None and ir.grammar_type_of(ir.parent_of(ident)) == "pointer_declarator":
                base = base_of(init)
                if base in buffers and element(d) == element(buffers[base]):
                    pointers[name] = (base, d)
    buffer = array if array in buffers else pointers.get(array, (None, 0))[0]
    if buffer is None:
        return None
    return buffer, {n: d for n, (b, d) in pointers.items() if b == buffer}


def _rank(ir: KernelIR, decl: int, array: str) -> int:
    """How many subscripts select one element of the array `array` declared by `decl`."""
    ident = next(i for n, i, _ in declared_names(ir, decl) if n == array)
    rank, node = 0, ir.parent_of(ident)
    while node is not None and ir.grammar_type_of(node) == "array_declarator":
        rank, node = rank + 1, ir.parent_of(node)
    return rank


# ---------------------------------------------------------------------------------------------
# what the tile holds


def exact_kind(ir: KernelIR, kernel: str, array: str,
               region: tuple[tuple[int, int], ...] = ()) -> str:
    """bf16 | fp16: the 16-bit type that holds every value stored into the fp32 shared
    `array` exactly (each is a widened element of an array of that type or a constant it
    holds, followed through locals, guards, selections, negation), else why there is none."""
    uses = buffer_uses(ir, kernel, array, region)
    if isinstance(uses, str):
        return f"{uses}: what it holds cannot be told"
    scope, fn = _function(ir, kernel)  # type: ignore[misc]
    kinds: set[str] = set()
    constants: set[float] = set()
    for store in uses.stores:
        found = _provenance(ir, fn, scope, children(ir, store)[-1], frozenset())
        if isinstance(found, str):
            return f"the fp32 shared tile {array} holds {found}"
        kinds |= found[0]
        constants |= found[1]
    if len(kinds) != 1:
        what = " and ".join(sorted(kinds)) or "no converted 16-bit element"
        return f"the fp32 shared tile {array} holds {what} (one fp16 / bf16 source expected)"
    kind = kinds.pop()
    inexact = sorted(c for c in constants if not holds(kind, c))
    if inexact:
        return f"the fp32 shared tile {array} holds the constant {inexact[0]:g}, not exact in {kind}"
    return kind


def holds(kind: str, value: float) -> bool:
    """Whether the 16-bit type `kind` holds `value` exactly."""
    if math.isnan(value) or math.isinf(value):
        return True
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    if struct.unpack("<f", struct.pack("<I", bits))[0] != value:
        return False  # not even an fp32
    if kind == "bf16":
        return bits & 0xFFFF == 0
    try:
        return struct.unpack("<e", struct.pack("<e", value))[0] == value
    except OverflowError:
        return False


_Found = tuple[set[str], set[float]]


def _provenance(ir: KernelIR, fn: int, scope: Scope, nid: int, seen: frozenset[str]) -> _Found | str:
    """(16-bit kinds the value `nid` is a widened element of, constants it may be), or what
    else it is."""
    gtype = ir.grammar_type_of(nid)
    kids = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in ("comment",)]
    if gtype == "number_literal":
        value = _literal(text(ir, nid))
        return (set(), {value}) if value is not None else f"the constant {text(ir, nid)}"
    if gtype == "parenthesized_expression":
        return _provenance(ir, fn, scope, kids[0], seen)
    if gtype == "unary_expression" and ir.name_of(nid) in ("-", "+"):
        got = _provenance(ir, fn, scope, kids[-1], seen)
        return got if isinstance(got, str) else (got[0], got[1] | {-c for c in got[1]})
    if gtype == "conditional_expression":
        return _union([_provenance(ir, fn, scope, b, seen) for b in kids[1:3]])
    if gtype == "cast_expression":
        if not _FLOATING.search(text(ir, kids[0])):
            return f"a value cast to {text(ir, kids[0]).strip('() ')}"
        return _provenance(ir, fn, scope, kids[-1], seen)
    if gtype == "call_expression":
        name = (ir.attrs_of(nid).get("callee") or "").split("::")[-1]
        args = [c for c in children(ir, kids[-1]) if ir.grammar_type_of(c) != "comment"]
        if _WIDEN.match(name) and len(args) == 1:
            if name == "static_cast" and not re.match(r"\s*static_cast\s*<[^>]*(?:float|double)",
                                                      text(ir, nid)):
                return f"a value cast as {text(ir, nid)[:30]}"
            return _provenance(ir, fn, scope, args[0], seen)
        if _SELECT.match(name) and len(args) == 2:  # the result is one of the arguments
            return _union([_provenance(ir, fn, scope, a, seen) for a in args])
        if _SIGN.match(name) and len(args) == 1:
            got = _provenance(ir, fn, scope, args[0], seen)
            return got if isinstance(got, str) else (got[0], {abs(c) for c in got[1]})
        rounded = re.match(r"^__float2(bfloat16|half)(?:_r[nzdu])?$", name)
        if rounded and len(args) == 1:  # a value of the 16-bit type, whatever it came from
            value = _literal(text(ir, args[0]))
            return (set(), {value}) if value is not None else \
                ({"bf16" if rounded.group(1) == "bfloat16" else "fp16"}, set())
        return f"a value computed by {name}"
    if gtype in ("subscript_expression", "pointer_expression"):
        base = _target_name(ir, nid)
        vector = re.match(r"\s*\*\s*\(?\s*(?:reinterpret_cast\s*<[^>]*>|\([^)]*\*\s*\))\s*\(?\s*&\s*"
                          r"([A-Za-z_]\w*)\s*\[", text(ir, nid))
        if vector is not None:  # a vector read through a cast address: the array it reads
            base = vector.group(1)
        kind = variable_kind(ir, fn, base) if base else None
        if kind in ("bf16", "fp16"):
            return {kind}, set()
        return f"elements of {base or text(ir, nid)[:30]} ({kind or 'unknown type'})"
    if gtype == "identifier":
        name = ir.name_of(nid) or ""
        kind = variable_kind(ir, fn, name) if _declarations(ir, fn, name) == 1 else None
        if kind in ("bf16", "fp16"):  # a variable of the 16-bit type holds only its values
            return {kind}, set()
        if name in seen or name in scope.params or name not in scope.decls:
            return f"the value of {name}"
        values = [init for _, init in scope.decls[name] if init is not None]
        for w in scope.writes.get(name, []):
            if ir.grammar_type_of(w) != "assignment_expression" or \
                    ir.attrs_of(w).get("op", "=") != "=":
                return f"{name}, which is updated in place"
            values.append(children(ir, w)[-1])
        return _union([_provenance(ir, fn, scope, v, seen | {name}) for v in values])
    if gtype == "field_expression" and re.fullmatch(r"\s*[A-Za-z_]\w*\s*\.\s*[xyzw]\s*", text(ir, nid)):
        return _lane(ir, fn, scope, kids[0], seen)
    return f"a value computed as {text(ir, nid)[:40]}"


def _declarations(ir: KernelIR, fn: int, name: str) -> int:
    """How many declarations (parameters included) of function `fn` declare `name`."""
    return sum(1 for d in subtree(ir, fn)
               if ir.grammar_type_of(d) in ("declaration", "parameter_declaration")
               and any(n == name for n, _, _ in declared_names(ir, d)))


def _union(parts: list[_Found | str]) -> _Found | str:
    kinds: set[str] = set()
    constants: set[float] = set()
    for got in parts:
        if isinstance(got, str):
            return got
        kinds |= got[0]
        constants |= got[1]
    return kinds, constants


def _lane(ir: KernelIR, fn: int, scope: Scope, vec: int, seen: frozenset[str]) -> _Found | str:
    """What a lane of the local vector `vec` (`v.x`) holds: a 16-bit element where `v` is a
    pair of them read from an array of that type; the vector's source otherwise (a float lane
    is not a widened 16-bit element, and integer lanes hold packed bits)."""
    name = text(ir, vec).strip()
    decl = next((d for d in subtree(ir, fn) if ir.grammar_type_of(d) == "declaration"
                 and any(n == name for n, _, _ in declared_names(ir, d))), None)
    spelled = text(ir, decl).split("=")[0] if decl is not None else ""
    pair = next((k for t, k in _PAIRS.items() if re.search(rf"\b{t}\b", spelled)), None)
    got = _provenance(ir, fn, scope, vec, seen)
    if isinstance(got, str) or (pair is not None and got[0] <= {pair} and not got[1]):
        return got
    return f"lanes of {name}, a vector of {' and '.join(sorted(got[0])) or 'constant'} elements read whole"


def _target_name(ir: KernelIR, nid: int) -> str | None:
    while ir.grammar_type_of(nid) in ("subscript_expression", "parenthesized_expression",
                                      "pointer_expression", "binary_expression"):
        nid = children(ir, nid)[0]
    if ir.grammar_type_of(nid) == "field_expression":  # `p.f[i]`: a structure's pointer field
        return re.sub(r"\s", "", text(ir, nid))
    return ir.name_of(nid) if ir.grammar_type_of(nid) == "identifier" else None


def _literal(spelled: str) -> float | None:
    bare = re.sub(r"^(?:__float2bfloat16|__float2half|__float2half_rn|__float2bfloat16_rn|"
                  r"static_cast<[^>]*>|\([^)]*\))?\s*\(?\s*", "", spelled.strip()).rstrip(") ")
    bare = re.sub(r"(?<=\d)[uUlL]+$", "", bare.rstrip("fF") if not bare.lower().startswith("0x")
                  else bare)
    try:
        return float(int(bare, 0)) if re.fullmatch(r"[+-]?(?:0[xX][0-9a-fA-F]+|\d+)", bare) \
            else float(bare)
    except ValueError:
        return None


# ---------------------------------------------------------------------------------------------
# keeping a tile as 16-bit, and back


def narrowing(ir: KernelIR, kernel: str, array: str, kind: str,
              region: tuple[tuple[int, int], ...]) -> Narrowing | str:
    """The plan that keeps the fp32 shared `array` (whose values `exact_kind` proved to be
    `kind`'s) as `kind`, or why it stays fp32."""
    from passes.cuda.gemm_eval import shared_dims  # noqa: PLC0415

    dims = shared_dims(ir, kernel).get(array)
    if dims is None or not dims[1] or any(d <= 0 for d in dims[1]):
        return f"the tile {array} is not a shared array of known extents"
    uses = tile_uses(ir, kernel, array, region)
    if isinstance(uses, str):
        return uses
    if ir.attrs_of(uses.decl).get("extern"):
        return f"the tile {array} is a dynamic shared buffer"
    count = 1
    for d in dims[1]:
        count *= d
    return Narrowing(array, kind, uses, 2 * count)


def narrow_edits(ir: KernelIR, plans: list[Narrowing]) -> list[ByteEdit] | str:
    """The edits that keep each planned tile as 16-bit (the helpers are the caller's), or why
    they cannot (a declaration that also declares an array left fp32)."""
    edits: list[ByteEdit] = []
    arrays = {p.array for p in plans}
    done: set[int] = set()
    for p in plans:
        decl = p.uses.decl
        if decl not in done:
            done.add(decl)
            others = {n for n, _, _ in declared_names(ir, decl)} - arrays
            if others:
                return (f"the tile {p.array} is declared together with "
                        f"{', '.join(sorted(others))}, which is not narrowed")
            spelled = next((c for c in children(ir, decl) if ir.grammar_type_of(c) in
                            ("primitive_type", "type_identifier", "qualified_identifier",
                             "sized_type_specifier")), None)
            if spelled is None:
                return f"the type of the tile {p.array} is not spelled out"
            s = ir.span_of(spelled)
            edits.append(ByteEdit(s.start, s.end, f"{HALF_OF}<{text(ir, spelled)}>"))
        flag = "true" if p.kind == "bf16" else "false"
        for store in p.uses.stores:
            s = ir.span_of(children(ir, store)[-1])
            edits += [ByteEdit(s.start, s.start, f"kl_tc_narrow<{flag}>("), ByteEdit(s.end, s.end, ")")]
        for read in p.uses.reads:
            s = ir.span_of(read)
            edits += [ByteEdit(s.start, s.start, f"kl_tc_widen<{flag}>("), ByteEdit(s.end, s.end, ")")]
    return edits


def narrowed(text_: str, start: int = 0, end: int | None = None) -> bool:
    """Whether the text (between `start` and `end`) keeps a tile narrowed by this module."""
    return _NARROWED.search(text_, start, len(text_) if end is None else end) is not None


def widening_edits(src: CSource, start: int, end: int) -> list[ByteEdit]:
    """The edits that undo `narrow_edits` between the characters `start` and `end` of `src`:
    `kl_tc_half_of<T>` back to `T`, each conversion call back to its argument."""
    edits: list[ByteEdit] = []
    for m in _NARROWED.finditer(src.code, start, end):
        close = _angle_close(src.code, m.end() - 1)
        edits.append(ByteEdit(*src.bspan(m.start(), m.end()), ""))
        edits.append(ByteEdit(*src.bspan(close - 1, close), ""))
    for m in _CONVERSION.finditer(src.code, start, end):
        close = src.close(m.end() - 1)
        edits.append(ByteEdit(*src.bspan(m.start(), m.end()), ""))
        edits.append(ByteEdit(*src.bspan(close - 1, close), ""))
    return edits


def _angle_close(code: str, open_at: int) -> int:
    """Index just past the `>` matching the `<` at `open_at`."""
    depth = 0
    for i in range(open_at, len(code)):
        depth += {"<": 1, ">": -1}.get(code[i], 0)
        if depth == 0:
            return i + 1
    return len(code)
