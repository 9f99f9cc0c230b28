"""What a tiled GEMM's inner loop computes, found by running it symbolically for every thread.

A shared-memory tiled GEMM keeps, per thread, a register tile of accumulators and, once per
K step, adds to each accumulator the products of a row of one shared tile with a column of the
other. Which tile is which, how each is laid out, which thread owns which output and how the
user spelled all of that (flattened or 2-D arrays, transposed tiles, temporaries, `fmaf`,
strided or blocked thread mappings, 1-D or 2-D blocks) is read from what the code *does*: the
statements of the K loop that read the shared tiles (the "compute region", between two
barriers) are translated to a small Python function and run for each thread of the block with
the shared elements as symbols. The result must be, for every accumulator element of every
thread, its own value plus a sum of products `P[m][k] * Q[k][n]` over one row of P and one
column of Q, where

- P's element (m, k) lives at `base + m * s_mn + k * s_k` of the flattened shared array, and
  Q's element (k, n) likewise (an affine layout: row- or column-major, padded or not);
- the block's accumulators cover every (m, n) of the BM x BN tile exactly once;
- each thread's accumulator e holds (row(t) + dm_e, col(t) + dn_e), where row(t) and col(t)
  are sums of one weight per bit of the thread's coordinates (blocked, strided and warp-tiled
  mappings all have this form).

Where no barrier run holds the region alone, a run that also stores shared tiles may be the
region of a ring of buffers (the next step's tiles stored while these are read): the region then
reads the step's variables (the K loop's own, or variables only the K loop assigns, a buffer
index it toggles) as inputs, is read with all of them 0, and `ring_shift` gives how far the
tiles lie from there at other values (`gemm_global` asks it at each step it probes). A pointer
set once into a one-dimensional shared array at an offset that varies (the step's buffer of a
ring, a thread's row) is read through as a view of that array (`_Kernel.views`).

Anything else is refused with the reason. The block size is given (a launch's `block`, or
`__launch_bounds__`), or found as the largest block whose threads read inside the shared tiles
and cover the tile exactly once.

Positions are byte offsets of `KernelIR.source`. No GPU library is imported here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from passes.cuda._tree import Scope, _evaluate, block_items, children, declared_names, subtree, text

if TYPE_CHECKING:
    from kir import KernelIR

_TRIVIA = frozenset({"comment", "preproc_call", "preproc_include", "preproc_def"})
_SYNC = re.compile(r"^__syncthreads$")
_SIXTEEN_BIT = {"__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "__half": "fp16", "half": "fp16"}
# calls that only change how an element is represented (the element read stays the same)
_CONVERSION = re.compile(r"^(?:__bfloat162float|__half2float|__low2float|static_cast|float|"
                         r"__float2float|to_float|__ldg)$")
_FMA = re.compile(r"^(?:fmaf|fma|__fmaf_rn|__fmaf_rz|__fmaf_ru|__fmaf_rd|__fma_rn|__hfma)$")
_PRODUCT = re.compile(r"^(?:__fmul_rn|__hmul|__fmul_rz)$")
_STEP_LIMIT = 1 << 20
ASYNC_COPY = re.compile(r"^(?:__pipeline_memcpy_async)$")
"""Calls that copy bytes into their first argument's memory (landing by a later wait)."""
ASYNC_FENCE = re.compile(r"^(?:__pipeline_commit|__pipeline_wait_prior|__pipeline_arrive_on)$")
"""Calls that only order those copies."""


class Refusal(Exception):
    """The code is not a GEMM micro-kernel the rule can read; `args[0]` says why."""


class _OutOfBounds(Refusal):
    pass


# ---------------------------------------------------------------------------------------------
# symbolic values: a shared element, an accumulator's entry value, a sum of products


class _Load:
    __slots__ = ("arr", "idx")

    def __init__(self, arr: str, idx: int) -> None:
        self.arr, self.idx = arr, idx

    def __mul__(self, other: Any) -> _Sum:
        if type(other) is _Load:
            return _Sum(None, [(self, other)])
        raise Refusal("a shared element is scaled by something other than a shared element")

    __rmul__ = __mul__

    def __add__(self, other: Any) -> Any:
        raise Refusal("shared elements are added without a product")

    __radd__ = __sub__ = __rsub__ = __truediv__ = __add__

    def __bool__(self) -> bool:
        raise Refusal("a branch depends on a shared element")


class _Acc:
    __slots__ = ("key",)

    def __init__(self, key: tuple) -> None:
        self.key = key

    def __add__(self, other: Any) -> Any:
        if isinstance(other, _Sum) and other.base is None:
            return _Sum(self, other.terms)
        if isinstance(other, (int, float)) and other == 0:
            return self
        raise Refusal("an accumulator is updated by something other than products")

    __radd__ = __add__

    def __mul__(self, other: Any) -> Any:
        raise Refusal("an accumulator is scaled inside the K loop")

    __rmul__ = __sub__ = __rsub__ = __truediv__ = __mul__

    def __bool__(self) -> bool:
        raise Refusal("a branch depends on an accumulator")


class _Sum:
    __slots__ = ("base", "terms")

    def __init__(self, base: _Acc | None, terms: list) -> None:
        self.base, self.terms = base, terms

    def __add__(self, other: Any) -> Any:
        if type(other) is _Sum and (self.base is None or other.base is None):
            return _Sum(self.base if self.base is not None else other.base,
                        self.terms + other.terms)
        if isinstance(other, _Acc) and self.base is None:
            return _Sum(other, self.terms)
        if isinstance(other, (int, float)) and other == 0:
            return self
        raise Refusal("products are combined with something other than a sum")

    __radd__ = __add__

    def __mul__(self, other: Any) -> Any:
        raise Refusal("a product of more than two shared elements")

    __rmul__ = __sub__ = __rsub__ = __truediv__ = __mul__

    def __bool__(self) -> bool:
        raise Refusal("a branch depends on a product")


class _Divergent(Exception):
    """The threads take different paths here: run them one at a time."""


def _vector(*xs: Any) -> bool:
    return any(isinstance(x, np.ndarray) for x in xs)


def _integers(*xs: Any) -> bool:
    return all(isinstance(x, (int, np.integer)) or (isinstance(x, np.ndarray) and x.dtype.kind in "iub")
               for x in xs)


def _cdiv(a: Any, b: Any) -> Any:
    if not _integers(a, b):
        raise Refusal("a division of non-integers in the inner loop")
    if np.any(np.asarray(b) == 0):
        raise Refusal("a division by zero in the tile indexing")
    if _vector(a, b):
        q = np.abs(a) // np.abs(b)
        return np.where((np.asarray(a) >= 0) == (np.asarray(b) > 0), q, -q)
    q = abs(int(a)) // abs(int(b))
    return q if (a >= 0) == (b > 0) else -q


def _cmod(a: Any, b: Any) -> Any:
    if not _integers(a, b):
        raise Refusal("a remainder of non-integers in the inner loop")
    return a - _cdiv(a, b) * b


def _t(x: Any) -> bool:
    """A condition's truth, the same in every thread (else `_Divergent`)."""
    if isinstance(x, np.ndarray):
        if x.all():
            return True
        if not x.any():
            return False
        raise _Divergent()
    return bool(x)


def _and(a: Any, b: Any) -> Any:
    return np.logical_and(a, b) if _vector(a, b) else int(bool(a) and bool(b))


def _or(a: Any, b: Any) -> Any:
    return np.logical_or(a, b) if _vector(a, b) else int(bool(a) or bool(b))


def _not(a: Any) -> Any:
    return np.logical_not(a) if _vector(a) else int(not a)


def _sel(c: Any, a: Any, b: Any) -> Any:
    if isinstance(c, np.ndarray) and c.any() and not c.all():
        if _integers(a, b) or all(isinstance(x, (int, float, np.ndarray)) for x in (a, b)):
            return np.where(c, a, b)
        raise _Divergent()
    return a if _t(c) else b


def _min(a: Any, b: Any) -> Any:
    return np.minimum(a, b) if _vector(a, b) else min(a, b)


def _max(a: Any, b: Any) -> Any:
    return np.maximum(a, b) if _vector(a, b) else max(a, b)


def _k(*idx: Any) -> tuple:
    """A register array's index, the same in every thread (else `_Divergent`)."""
    out = []
    for i in idx:
        if isinstance(i, np.ndarray):
            if (i != i.flat[0]).any():
                raise _Divergent()
            i = i.flat[0]
        if not isinstance(i, (int, np.integer)):
            raise Refusal("a register array is indexed by a non-integer")
        out.append(int(i))
    return tuple(out)


class _Outer(dict):
    """A register array declared outside the region: an entry never written holds its entry
    value (an accumulator symbol)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def __missing__(self, key: tuple) -> _Acc:
        return _Acc((self.name, key))


class _Local(dict):
    def __init__(self, fill: Any = None) -> None:
        super().__init__()
        self.fill = fill

    def __missing__(self, key: tuple) -> Any:
        if self.fill is None:
            raise Refusal("a register array is read before it is written")
        return self.fill


# ---------------------------------------------------------------------------------------------
# what the rule needs to know


@dataclass(frozen=True, slots=True)
class Tile:
    """One operand's shared tile: element (mn, k) at `base + mn * s_mn + k * s_k` of the
    flattened array `array` (declared at `decl`, a byte span), `extent` elements along mn.
    `dtype` is what the array holds: bf16 | fp16 | f32 | the type's spelling."""

    array: str
    dtype: str
    base: int
    s_mn: int
    s_k: int
    extent: int
    decl: tuple[int, int]
    aligned: bool
    """Whether the declaration (of the array a pointer tile points into) already asks for
    16-byte alignment."""
    alignable: bool = True
    """Whether aligning that declaration to 16 bytes aligns the tile (a pointer tile at a byte
    offset that is not a multiple of 16 is not)."""


@dataclass(frozen=True, slots=True)
class Element:
    """One accumulator of the thread's register tile: its lvalue text and its output cell
    relative to the thread's base cell (row(t) + dm, col(t) + dn)."""

    lvalue: str
    dm: int
    dn: int


@dataclass(frozen=True, slots=True)
class BitSum:
    """A function of the thread coordinates: `const + sum(weights[axis][b] * bit b of axis)`."""

    const: int
    weights: tuple[tuple[int, ...], ...]


@dataclass(frozen=True, slots=True)
class GemmTile:
    """A recognized GEMM micro-kernel: P (BM x BK) times Q (BK x BN) per K step."""

    kernel: str
    a: Tile
    b: Tile
    bm: int
    bn: int
    bk: int
    block: tuple[int, int]
    loop: tuple[int, int]
    """The K loop statement (with its leading comments and pragmas)."""
    region: tuple[tuple[int, int], ...]
    """The statements of the K loop body the tensor-core step replaces."""
    elements: tuple[Element, ...]
    row: BitSum
    col: BitSum
    shared_bytes: int
    """Static shared memory the kernel declares."""
    dynamic: bool = False
    """Whether the kernel also uses dynamic shared memory (of a size the host sets)."""
    ring: tuple[str, ...] = ()
    """The step's variables that choose where in the shared arrays a K step's tiles lie (a
    ring of buffers: the K loop's variable, or a buffer index it toggles); `a.base` / `b.base`
    are the tiles' places with all of them 0, `ring_shift` gives the others."""

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "block_tile": [self.bm, self.bn, self.bk],
                "block": list(self.block), "dtype": self.a.dtype,
                "a": {"array": self.a.array, "s_m": self.a.s_mn, "s_k": self.a.s_k},
                "b": {"array": self.b.array, "s_n": self.b.s_mn, "s_k": self.b.s_k},
                "thread_tile": len(self.elements)}


@dataclass(frozen=True, slots=True)
class _Shared:
    name: str
    dtype: str
    dims: tuple[int, ...]
    decl: tuple[int, int]
    aligned: bool
    bytes: int
    alignable: bool = True
    extern: bool = False


# ---------------------------------------------------------------------------------------------
# finding the region


class _Kernel:
    """One kernel function: its shared arrays, names and the translation unit's constants."""

    def __init__(self, ir: KernelIR, scope: Scope, fn: int) -> None:
        self.ir, self.scope, self.fn = ir, scope, fn
        scope.enter(fn)
        self.name = ir.name_of(fn) or ""
        values, types = template_bindings(ir, fn)
        self.types = {**_type_aliases(ir), **types}
        self.constants = {**_file_constants(ir), **values}
        self.shared: dict[str, _Shared] = {}
        for nid in subtree(ir, fn):
            if ir.grammar_type_of(nid) == "declaration" and "__shared__" in _qualifiers(ir, nid):
                for name, ident, _ in declared_names(ir, nid):
                    self.shared[name] = self._shared(nid, name, ident)
        # pointers into a shared array (a dynamic shared buffer cut into tiles) are tiles too
        for nid in subtree(ir, fn):
            if ir.grammar_type_of(nid) != "declaration" or "__shared__" in _qualifiers(ir, nid):
                continue
            for name, ident, init in declared_names(ir, nid):
                if init is not None and not self._repointed(name) and \
                        ir.grammar_type_of(ir.parent_of(ident)) == "pointer_declarator":
                    part = self._partition(nid, name, init)
                    if part is not None:
                        self.shared[name] = part
        # pointers set once into a shared array at an offset that varies (a ring's buffer)
        self.views = {name for nid in subtree(ir, fn) if ir.grammar_type_of(nid) == "declaration"
                      for name, ident, init in declared_names(ir, nid)
                      if init is not None and name not in self.shared
                      and ir.grammar_type_of(ir.parent_of(ident)) == "pointer_declarator"
                      and not self._repointed(name)
                      and any(ir.grammar_type_of(c) == "identifier" and ir.name_of(c) in self.shared
                              for c in subtree(ir, init))}

    def _repointed(self, name: str) -> bool:
        """Whether the pointer `name` itself is assigned or stepped (not what it points to)."""
        ir = self.ir
        for w in self.scope.writes.get(name, []):
            target = children(ir, w)[0] if children(ir, w) else w
            while ir.grammar_type_of(target) == "parenthesized_expression":
                target = children(ir, target)[0]
            if ir.grammar_type_of(w) == "update_expression" or \
                    ir.grammar_type_of(target) == "identifier":
                return True
        return False

    def _partition(self, decl: int, name: str, init: int) -> _Shared | None:
        """A pointer `name` set once to a constant offset into a shared array, as a tile of
        unknown extent (alignable when its byte offset is a multiple of 16)."""
        ir = self.ir
        node, offset = init, 0
        while True:
            gtype = ir.grammar_type_of(node)
            kids = [c for c in children(ir, node) if ir.grammar_type_of(c) not in _TRIVIA]
            if gtype in ("parenthesized_expression", "cast_expression"):
                node = kids[-1]
            elif gtype == "call_expression" and re.match(
                    r"^(?:reinterpret_cast|static_cast)$", ir.attrs_of(node).get("callee") or ""):
                node = children(ir, kids[-1])[0]
            elif gtype == "pointer_expression" and ir.name_of(node) == "&" and \
                    ir.grammar_type_of(kids[-1]) == "subscript_expression":
                sub = children(ir, kids[-1])
                value = self.constant(text(ir, children(ir, sub[-1])[0]))
                if value is None:
                    return None
                offset += value
                node = sub[0]
            elif gtype == "binary_expression" and ir.name_of(node) == "+":
                value = self.constant(text(ir, kids[-1]))
                if value is None:
                    return None
                offset += value
                node = kids[0]
            else:
                break
        base = self.shared.get(ir.name_of(node) or "") if ir.grammar_type_of(node) == "identifier" \
            else None
        if base is None or len(base.dims) != 1:
            return None
        tname = next((text(ir, c) for c in children(ir, decl)
                      if ir.grammar_type_of(c) in ("type_identifier", "primitive_type",
                                                   "qualified_identifier")), "")
        kind = element_kind(self.types.get(tname, tname))
        unit = {"bf16": 2, "fp16": 2, "f32": 4}.get(base.dtype, 1 if base.dtype in (
            "char", "unsigned char", "uint8_t") else 0)
        if unit == 0:
            return None
        byte_offset = offset * unit
        return _Shared(name, kind, (-1,), base.decl, base.aligned, 0,
                       alignable=byte_offset % 16 == 0)

    def constant(self, expr: str) -> int | None:
        macros = {**self.constants, **self.scope.macros}
        return _evaluate(expr, macros, 0)

    def _shared(self, decl: int, name: str, ident: int) -> _Shared:
        ir = self.ir
        dims: list[int] = []
        node = ir.parent_of(ident)
        while node is not None and ir.grammar_type_of(node) == "array_declarator":
            kids = [c for c in children(ir, node) if ir.grammar_type_of(c) not in _TRIVIA]
            size = self.constant(text(ir, kids[-1])) if len(kids) > 1 else None
            dims.insert(0, size if size is not None else -1)
            node = ir.parent_of(node)
        dims.reverse()
        tname = next((text(ir, c) for c in children(ir, decl)
                      if ir.grammar_type_of(c) in ("type_identifier", "primitive_type",
                                                   "qualified_identifier")), "")
        tname = self.types.get(tname, tname)
        dtype = element_kind(tname)
        size = {"bf16": 2, "fp16": 2, "f32": 4}.get(dtype, 4 if tname == "int" else 8)
        count = 1
        for d in dims:
            count *= max(d, 0)
        span = ir.span_of(decl)
        aligned = bool(re.search(r"__align__|alignas", text(ir, decl)))
        extern = bool(ir.attrs_of(decl).get("extern"))
        return _Shared(name, dtype, tuple(dims), (span.start, span.end), aligned, size * count,
                       extern=extern)


def element_kind(type_name: str) -> str:
    """bf16 | fp16 | f32 for those element types (by any of their spellings), else the name."""
    bare = type_name.replace("const", "").strip().split("::")[-1]
    if bare == "float":
        return "f32"
    return _SIXTEEN_BIT.get(bare, bare)


def shared_dims(ir: KernelIR, kernel: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The `__shared__` arrays of function `kernel`: name -> (element kind, extents)."""
    scope = Scope(ir)
    fn = scope.functions.get(kernel)
    if fn is None:
        return {}
    return {n: (s.dtype, s.dims) for n, s in _Kernel(ir, scope, fn).shared.items()}


def template_bindings(ir: KernelIR, fn: int) -> tuple[dict[str, str], dict[str, str]]:
    """(value parameters, type parameters) of the function template `fn` as the unit
    instantiates it: the one argument list its calls / launches (`k<128, 64><<<...>>>`) or an
    explicit instantiation give, else the parameters' defaults. Raises `Refusal` when the unit
    instantiates it with different arguments (the rewrite would fix one of them)."""
    parent = ir.parent_of(fn)
    if parent is None or ir.grammar_type_of(parent) != "template_declaration":
        return {}, {}
    plist = children(ir, parent, "template_parameter_list")
    params = []
    for c in children(ir, plist[0]) if plist else []:
        gtype = ir.grammar_type_of(c)
        kids = children(ir, c)
        name = ir.name_of(c) or ""
        default = text(ir, kids[-1]) if gtype.startswith("optional") and len(kids) > 2 else None
        params.append((name, "type" in gtype, default))
    name = ir.name_of(fn) or ""
    uses = set()
    for node in ir.find():
        if ir.grammar_type_of(node.id) != "template_function":
            continue
        kids = children(ir, node.id)
        inside = ir.span_of(fn).start <= ir.span_of(node.id).start < ir.span_of(fn).end
        if kids and not inside and text(ir, kids[0]).split("::")[-1] == name:
            uses.add(tuple(_local_constant(ir, node.id, text(ir, a).strip())
                           for a in children(ir, kids[-1])))
    if len(uses) > 1:
        raise Refusal(f"the template {name} is instantiated with {len(uses)} argument lists")
    given = list(uses.pop()) if uses else []
    values, types = {}, {}
    for i, (pname, is_type, default) in enumerate(params):
        arg = given[i] if i < len(given) else default
        if arg is not None:
            (types if is_type else values)[pname] = arg
    return values, types


def _local_constant(ir: KernelIR, use: int, arg: str) -> str:
    """`arg` of a template argument list at node `use`, or, where it names a `const` /
    `constexpr` local of the function holding `use` declared once with an initializer, that
    initializer (parenthesized): the launch `k<BM, BN><<<...>>>` after `constexpr int BM = 64`."""
    if not re.fullmatch(r"[A-Za-z_]\w*", arg):
        return arg
    fn = ir.parent_of(use)
    while fn is not None and ir.grammar_type_of(fn) != "function_definition":
        fn = ir.parent_of(fn)
    if fn is None:
        return arg
    found = [(decl, init) for decl in subtree(ir, fn)
             if ir.grammar_type_of(decl) == "declaration"
             for name, _, init in declared_names(ir, decl) if name == arg]
    if len(found) != 1 or found[0][1] is None or \
            not {"const", "constexpr"} & _qualifiers(ir, found[0][0]):
        return arg
    return f"({text(ir, found[0][1]).strip()})"


def variable_kind(ir: KernelIR, fn: int, name: str) -> str | None:
    """`element_kind` of what the parameter or local `name` of function `fn` points to (or
    is), typedefs, aliases and template arguments of the unit resolved; None where it is not
    declared there. `name` may be `p.f`, a pointer field of a structure `p` passed by value
    (`_c.pointer_fields`)."""
    try:
        aliases = {**_type_aliases(ir), **template_bindings(ir, fn)[1]}
    except Refusal:
        aliases = _type_aliases(ir)
    owner, dot, field_ = name.partition(".")
    if dot:
        from passes.cuda._c import pointer_fields  # noqa: PLC0415

        for nid in subtree(ir, fn):
            if ir.grammar_type_of(nid) == "parameter_declaration" and \
                    any(n == owner for n, _, _ in declared_names(ir, nid)):
                tname = next((text(ir, c) for c in children(ir, nid)
                              if ir.grammar_type_of(c) == "type_identifier"), "")
                pointee = pointer_fields(ir.text).get(tname, {}).get(field_)
                return element_kind(aliases.get(pointee, pointee)) if pointee else None
        return None
    for nid in subtree(ir, fn):
        if ir.grammar_type_of(nid) not in ("parameter_declaration", "declaration"):
            continue
        if any(n == name for n, _, _ in declared_names(ir, nid)):
            tname = next((text(ir, c) for c in children(ir, nid)
                          if ir.grammar_type_of(c) in ("type_identifier", "primitive_type",
                                                       "qualified_identifier")), "")
            return element_kind(aliases.get(tname, tname))
    return None


def _qualifiers(ir: KernelIR, decl: int) -> set[str]:
    return {text(ir, c) for c in children(ir, decl)
            if ir.grammar_type_of(c) in ("type_qualifier", "storage_class_specifier")}


def _type_aliases(ir: KernelIR) -> dict[str, str]:
    out: dict[str, str] = {}
    for node in ir.find():
        gtype = ir.grammar_type_of(node.id)
        if gtype == "type_definition":
            kids = [c for c in children(ir, node.id) if ir.grammar_type_of(c) == "type_identifier"]
            if len(kids) == 2:
                out[text(ir, kids[1])] = text(ir, kids[0])
        elif gtype == "alias_declaration":
            kids = children(ir, node.id)
            if len(kids) >= 2:
                out[text(ir, kids[0])] = text(ir, kids[-1]).strip()
    return {k: out.get(v, v) for k, v in out.items()}


def _file_constants(ir: KernelIR) -> dict[str, str]:
    """`constexpr` / `const` integer constants at file (or namespace) scope, and enumerators
    (each its value, or one past the one before), as texts."""
    out: dict[str, str] = {}
    for node in ir.find():
        if ir.grammar_type_of(node.id) == "enumerator_list":
            last = "-1"
            for item in children(ir, node.id):
                if ir.grammar_type_of(item) != "enumerator":
                    continue
                kids = [c for c in children(ir, item) if ir.grammar_type_of(c) not in _TRIVIA]
                name = ir.name_of(kids[0]) or text(ir, kids[0])
                last = out[name] = text(ir, kids[-1]) if len(kids) > 1 else f"({last}) + 1"
            continue
        if ir.grammar_type_of(node.id) != "declaration":
            continue
        parent = ir.parent_of(node.id)
        if parent is None or ir.grammar_type_of(parent) not in ("translation_unit",
                                                                 "declaration_list"):
            continue
        if not _qualifiers(ir, node.id) & {"const", "constexpr"}:
            continue
        for name, _, init in declared_names(ir, node.id):
            if init is not None:
                out[name] = text(ir, init)
    return out


def _is_sync(ir: KernelIR, nid: int) -> bool:
    if ir.grammar_type_of(nid) != "expression_statement":
        return False
    kids = children(ir, nid)
    return bool(kids) and ir.grammar_type_of(kids[0]) == "call_expression" and \
        bool(_SYNC.match(ir.attrs_of(kids[0]).get("callee") or ""))


def _reads_shared(k: _Kernel, nid: int) -> bool:
    ir = k.ir
    return any(ir.grammar_type_of(c) == "identifier" and (ir.name_of(c) in k.shared
                                                         or ir.name_of(c) in k.views)
               for c in subtree(ir, nid))


def _writes_shared(k: _Kernel, nid: int) -> bool:
    ir = k.ir
    for c in subtree(ir, nid):
        if ir.grammar_type_of(c) == "call_expression" and \
                ASYNC_COPY.match(ir.attrs_of(c).get("callee") or ""):
            args = children(ir, c, "argument_list")
            first = [a for a in children(ir, args[0]) if ir.grammar_type_of(a) not in _TRIVIA][:1] \
                if args else []
            if first and _reads_shared(k, first[0]):
                return True
        if ir.grammar_type_of(c) in ("assignment_expression", "update_expression"):
            target = children(ir, c)[0]
            while ir.grammar_type_of(target) in ("subscript_expression", "parenthesized_expression"):
                target = children(ir, target)[0]
            if ir.grammar_type_of(target) == "identifier":
                if ir.name_of(target) in k.shared or ir.name_of(target) in k.views:
                    return True
            elif _reads_shared(k, target):  # through a pointer: *reinterpret_cast<T*>(&tile[..])
                return True
    return False


def _multiplies(ir: KernelIR, nid: int) -> bool:
    return any((ir.grammar_type_of(c) == "binary_expression" and ir.name_of(c) == "*")
               or (ir.grammar_type_of(c) == "call_expression"
                   and _FMA.match(ir.attrs_of(c).get("callee") or ""))
               for c in subtree(ir, nid))


def _barrier_runs(k: _Kernel) -> Iterator[tuple[int, list, list]]:
    """(loop, statements between two of its barriers, loop body items) for each loop of the
    kernel whose body holds a barrier."""
    ir = k.ir
    for nid in subtree(ir, k.fn):
        if ir.grammar_type_of(nid) not in ("for_statement", "while_statement"):
            continue
        body = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA][-1]
        if ir.grammar_type_of(body) != "compound_statement":
            continue
        items = block_items(ir, body)
        syncs = [i for i, it in enumerate(items) if _is_sync(ir, it.node)]
        if not syncs:
            continue
        bounds = [-1, *syncs, len(items)]
        for lo, hi in zip(bounds, bounds[1:]):
            yield nid, items[lo + 1:hi], items


def _candidate_regions(k: _Kernel, beside: bool = False) -> list[tuple[int, list[int], list]]:
    """(K loop, compute statements, loop body items) of each loop whose body holds a barrier
    and, between barriers, statements that read the shared tiles without writing them (with
    `beside`: between barriers where other statements store shared tiles, a ring's next
    buffers)."""
    out = []
    for nid, run, items in _barrier_runs(k):
        compute = [it for it in run if _reads_shared(k, it.node)
                   and not _writes_shared(k, it.node)]
        writes = any(_writes_shared(k, it.node) for it in run)
        if compute and writes == beside and any(_multiplies(k.ir, it.node) for it in compute):
            out.append((nid, compute, items))
    return out


# ---------------------------------------------------------------------------------------------
# translating the region to Python


class _Translator:
    """C statements and expressions of the region -> Python source over the symbols above."""

    def __init__(self, k: _Kernel, region: list[int], loop_vars: set[str],
                 loop: tuple[int, int] | None = None) -> None:
        self.k = k
        self.home = k.ir
        self.region = region
        self.loop_vars = loop_vars
        self.loop = loop
        """The K loop's byte span where the region may select its tiles by the step (a ring)."""
        self.ring: list[str] = []
        """The step's variables the region reads (`_R[name]`): the K loop's own, or variables
        the K loop assigns (a buffer index toggled each step)."""
        self.declared: set[str] = set()
        self.outer_written: dict[str, bool] = {}   # name -> is an array
        self.needed: list[str] = []                # outer values read, in first-use order
        self.uses_y = False
        self.prelude: list[str] = []
        self._resolving: set[str] = set()

    # ---- names ------------------------------------------------------------------------------
    def name(self, name: str) -> str:
        k = self.k
        if name in self.declared or name in self.outer_written:
            return f"v_{name}"
        if name in self.loop_vars or self._carried(name):
            if self.loop is None:
                raise Refusal(f"the inner loop depends on the K loop's variable {name}")
            if name not in self.ring:
                self.ring.append(name)
            return f"_R[{name!r}]"
        if name in k.shared:
            raise Refusal(f"the shared array {name} is used other than by element")
        value = k.constant(name)
        if value is not None:
            return str(value)
        self.resolve(name)
        return f"v_{name}"

    def _carried(self, name: str) -> bool:
        """Whether `name` is a variable declared before the K loop and assigned only inside it
        (a value carried from step to step: a ring's buffer index)."""
        k = self.k
        writes = k.scope.writes.get(name)
        if self.loop is None or not writes or name in k.scope.params:
            return False
        decls = k.scope.decls.get(name, [])
        a, b = self.loop
        spans = [self.home.span_of(w) for w in writes]
        region = [self.home.span_of(n) for n in self.region]
        return len(decls) == 1 and self.home.span_of(decls[0][0]).start < a and \
            all(a <= s.start and s.end <= b for s in spans) and \
            not any(r.start <= s.start < r.end for s in spans for r in region)

    def resolve(self, name: str) -> None:
        """Emit `v_name = <its one definition>` into the prelude (once)."""
        k = self.k
        if f"v_{name} =" in "\n".join(self.prelude) or name in self._resolving:
            return
        if name in k.scope.params:
            raise Refusal(f"the tile indexing depends on the kernel parameter {name}")
        decls = k.scope.decls.get(name, [])
        if len(decls) != 1 or decls[0][1] is None:
            raise Refusal(f"{name} has no single definition the rule can evaluate")
        if k.scope.writes.get(name):
            raise Refusal(f"{name} is assigned after its definition")
        self._resolving.add(name)
        inside, self.k.ir = self.k.ir, self.home  # the definition is in the kernel's own text
        try:
            expr = self.expr(decls[0][1])
        finally:
            self.k.ir = inside
        self._resolving.discard(name)
        self.prelude.append(f"v_{name} = {expr}")

    # ---- statements -------------------------------------------------------------------------
    def block(self, nids: list[int], pad: str) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(nids):
            if _loses_body(self.k.ir, nids[i]) and i + 1 < len(nids):
                # `for (...)` then a pragma line then its body: the grammar ends the loop at
                # the pragma (an empty statement) and makes the body the next statement
                out += self.stmt(nids[i], pad, nids[i + 1])
                i += 2
                continue
            out += self.stmt(nids[i], pad)
            i += 1
        return out or [pad + "pass"]

    def stmt(self, nid: int, pad: str, body: int | None = None) -> list[str]:
        ir = self.k.ir
        gtype = ir.grammar_type_of(nid)
        kids = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA]
        if gtype in _TRIVIA or gtype == "empty_statement" or (gtype == "expression_statement"
                                                               and not kids):
            return []
        if gtype == "compound_statement":
            return self.block(kids, pad)
        if gtype == "declaration":
            return self.declaration(nid, pad)
        if gtype == "expression_statement":
            return [pad + line for line in self.effect(kids[0])]
        if gtype == "if_statement":
            cond = self.expr(children(ir, kids[0])[-1])
            out = [f"{pad}if _t({cond}):", *self.block([kids[1]], pad + "    ")]
            alt = next((c for c in kids[2:] if ir.grammar_type_of(c) == "else_clause"), None)
            if alt is not None:
                inner = [c for c in children(ir, alt) if ir.grammar_type_of(c) not in _TRIVIA]
                out += [f"{pad}else:", *self.block(inner, pad + "    ")]
            return out
        if gtype == "for_statement":
            return self.for_loop(nid, pad, body)
        if gtype == "while_statement":
            cond = self.expr(children(ir, kids[0])[-1])
            inner = self.block([kids[-1] if body is None else body], pad + "    ")
            return [f"{pad}while _t({cond}):", *_STEP(pad), *inner]
        raise Refusal(f"a {gtype.replace('_', ' ')} in the inner loop")

    def for_loop(self, nid: int, pad: str, body: int | None = None) -> list[str]:
        ir = self.k.ir
        kids = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA]
        heads = kids[:-1]
        body = kids[-1] if body is None else body
        init = [h for h in heads if ir.grammar_type_of(h) == "declaration"]
        rest = [h for h in heads if ir.grammar_type_of(h) != "declaration"]
        src = text(ir, nid)
        header = src[:_closing(src, src.find("(")) + 1] if "(" in src else src
        # the header's parts in order: init; cond; update (each may be missing)
        parts = _header_parts(header)
        out: list[str] = []
        if init:
            out += self.declaration(init[0], pad)
        elif parts[0] and rest:
            out += [pad + line for line in self.effect(rest.pop(0))]
        cond = "1"
        if parts[1] and rest:
            cond = self.expr(rest.pop(0))
        update = [self.effect(rest.pop(0))] if parts[2] and rest else []
        out.append(f"{pad}while _t({cond}):")
        out += _STEP(pad)
        out += self.block([body], pad + "    ")
        for lines in update:
            out += [pad + "    " + line for line in lines]
        return out

    def declaration(self, nid: int, pad: str) -> list[str]:
        ir = self.k.ir
        out = []
        for name, ident, init in declared_names(ir, nid):
            if ir is self.home and name not in self.k.shared and self.view(name) is not None:
                continue  # a pointer into a shared array: its reads go through `view`
            self.declared.add(name)
            is_array = ir.grammar_type_of(ir.parent_of(ident)) == "array_declarator"
            if is_array:
                fill = "0.0" if init is not None else "None"
                out.append(f"{pad}v_{name} = _Local({fill})")
            elif init is not None:
                out.append(f"{pad}v_{name} = {self.expr(init)}")
            else:
                out.append(f"{pad}v_{name} = 0")
        return out

    def effect(self, nid: int) -> list[str]:
        ir = self.k.ir
        gtype = ir.grammar_type_of(nid)
        if gtype == "assignment_expression":
            kids = children(ir, nid)
            op = ir.attrs_of(nid).get("op", "=")
            target = self.lvalue(kids[0])
            value = self.expr(kids[-1])
            if op == "=":
                return [f"{target} = {value}"]
            if op in ("+=", "-=", "*=", "<<=", ">>=", "|=", "&=", "^="):
                return [f"{target} = {target} {op[:-1]} ({value})"]
            if op in ("/=", "%="):
                fn = "_cdiv" if op == "/=" else "_cmod"
                return [f"{target} = {fn}({target}, {value})"]
            raise Refusal(f"an assignment {op} in the inner loop")
        if gtype == "update_expression":
            target = self.lvalue(children(ir, nid)[0])
            sign = "+" if "++" in text(ir, nid) else "-"
            return [f"{target} = {target} {sign} 1"]
        if gtype == "comma_expression":
            return [line for c in children(ir, nid) for line in self.effect(c)]
        if gtype == "parenthesized_expression":
            return self.effect(children(ir, nid)[0])
        raise Refusal(f"a statement with no effect the rule reads ({text(ir, nid)[:40]})")

    def lvalue(self, nid: int) -> str:
        ir = self.k.ir
        gtype = ir.grammar_type_of(nid)
        if gtype == "identifier":
            name = ir.name_of(nid) or ""
            if name not in self.declared:
                self.outer(name, False)
            return f"v_{name}"
        if gtype == "subscript_expression":
            base, idx = self.subscripts(nid)
            if base in self.k.shared:
                raise Refusal("the inner loop writes shared memory")
            if base not in self.declared:
                self.outer(base, True)
            return f"v_{base}[_k({', '.join(idx)})]"
        if gtype == "parenthesized_expression":
            return self.lvalue(children(ir, nid)[0])
        raise Refusal(f"an assignment to {text(ir, nid)[:40]}")

    def outer(self, name: str, array: bool) -> None:
        if name in self.k.scope.params:
            raise Refusal(f"the inner loop writes the parameter {name}")
        if name not in self.k.scope.decls:
            raise Refusal(f"the inner loop writes {name}, declared nowhere in the kernel")
        self.outer_written[name] = array

    def view(self, name: str) -> tuple[str, str] | None:
        """(shared array, offset) where `name` is a pointer set once to `array + offset` or
        `&array[offset]` of a one-dimensional shared array (a buffer of a ring, say), the
        offset translated; else None."""
        k, ir = self.k, self.home
        decls = k.scope.decls.get(name, [])
        if len(decls) != 1 or decls[0][1] is None or k._repointed(name) or \
                ir.grammar_type_of(ir.parent_of(decls[0][0])) != "pointer_declarator":
            return None
        node = decls[0][1]
        while ir.grammar_type_of(node) in ("parenthesized_expression", "cast_expression"):
            node = [c for c in children(ir, node) if ir.grammar_type_of(c) not in _TRIVIA][-1]
        kids = [c for c in children(ir, node) if ir.grammar_type_of(c) not in _TRIVIA]
        if ir.grammar_type_of(node) == "binary_expression" and ir.name_of(node) == "+":
            arr, off = kids[0], kids[-1]
        elif ir.grammar_type_of(node) == "pointer_expression" and ir.name_of(node) == "&" and \
                ir.grammar_type_of(kids[-1]) == "subscript_expression":
            sub = children(ir, kids[-1])
            arr, off = sub[0], [c for c in children(ir, sub[-1])
                                if ir.grammar_type_of(c) not in _TRIVIA][0]
        else:
            return None
        shared = k.shared.get(ir.name_of(arr) or "") if ir.grammar_type_of(arr) == "identifier" \
            else None
        if shared is None or len(shared.dims) != 1:
            return None
        inside, self.k.ir = self.k.ir, ir  # the definition is in the kernel's own text
        try:
            return shared.name, self.expr(off)
        finally:
            self.k.ir = inside

    def subscripts(self, nid: int) -> tuple[str, list[str]]:
        ir = self.k.ir
        idx: list[str] = []
        node = nid
        while ir.grammar_type_of(node) == "subscript_expression":
            kids = children(ir, node)
            args = [c for c in children(ir, kids[-1]) if ir.grammar_type_of(c) not in _TRIVIA]
            if len(args) != 1:
                raise Refusal("a subscript the rule does not read")
            idx.insert(0, self.expr(args[0]))
            node = kids[0]
        if ir.grammar_type_of(node) != "identifier":
            raise Refusal(f"an element read through {text(ir, node)[:40]}")
        return ir.name_of(node) or "", idx

    # ---- expressions ------------------------------------------------------------------------
    def expr(self, nid: int) -> str:
        ir = self.k.ir
        gtype = ir.grammar_type_of(nid)
        kids = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA]
        if gtype == "number_literal":
            return _number(text(ir, nid))
        if gtype in ("true", "false"):
            return "1" if gtype == "true" else "0"
        if gtype == "identifier":
            return self.name(ir.name_of(nid) or "")
        if gtype == "parenthesized_expression":
            return f"({self.expr(kids[0])})"
        if gtype == "field_expression":
            return self.builtin(text(ir, nid))
        if gtype == "subscript_expression":
            base, idx = self.subscripts(nid)
            if base in self.k.shared:
                return f"_L({base!r}, ({', '.join(idx)},))"
            if base not in self.declared and base not in self.outer_written:
                view = self.view(base)
                if view is not None and len(idx) == 1:
                    return f"_L({view[0]!r}, (({view[1]}) + ({idx[0]}),))"
                if base in self.k.scope.arrays:  # a register array filled before the region
                    raise Refusal(f"the inner loop reads the register array {base} it does not fill")
                raise Refusal(f"the inner loop reads memory through {base}")
            return f"v_{base}[_k({', '.join(idx)})]"
        if gtype == "binary_expression":
            op = ir.name_of(nid) or ""
            a, b = self.expr(kids[0]), self.expr(kids[-1])
            if op == "/":
                return f"_cdiv({a}, {b})"
            if op == "%":
                return f"_cmod({a}, {b})"
            if op in ("+", "-", "*", "<<", ">>", "&", "|", "^"):
                return f"({a} {op} {b})"
            if op in ("<", "<=", ">", ">=", "==", "!="):
                return f"({a} {op} {b})"
            if op in ("&&", "||"):
                return f"{'_and' if op == '&&' else '_or'}({a}, {b})"
            raise Refusal(f"the operator {op} in the inner loop")
        if gtype == "unary_expression":
            op = ir.name_of(nid) or text(ir, nid)[:1]
            a = self.expr(kids[-1])
            if op == "!":
                return f"_not({a})"
            if op in ("-", "+", "~"):
                return f"({op}{a})"
            raise Refusal(f"the operator {op} in the inner loop")
        if gtype == "conditional_expression":
            c, a, b = (self.expr(x) for x in kids[:3])
            return f"_sel({c}, {a}, {b})"
        if gtype == "cast_expression":
            return self.expr(kids[-1])
        if gtype == "call_expression":
            return self.call(nid, kids)
        raise Refusal(f"a {gtype.replace('_', ' ')} in the inner loop ({text(ir, nid)[:40]})")

    def builtin(self, spelled: str) -> str:
        m = re.fullmatch(r"\s*(threadIdx|blockDim|blockIdx|gridDim)\s*\.\s*([xyz])\s*", spelled)
        if m is None:
            raise Refusal(f"a member access {spelled.strip()[:40]} in the inner loop")
        what, axis = m.groups()
        if what in ("blockIdx", "gridDim"):
            raise Refusal(f"the shared-tile indexing depends on {what}")
        if axis == "z":
            raise Refusal("a three-dimensional block")
        if axis == "y":
            self.uses_y = True
        return ("_t" if what == "threadIdx" else "_b") + axis

    def call(self, nid: int, kids: list[int]) -> str:
        ir = self.k.ir
        name = (ir.attrs_of(nid).get("callee") or "").split("::")[-1]
        args = [c for c in children(ir, kids[-1]) if ir.grammar_type_of(c) not in _TRIVIA] \
            if kids else []
        if name in self.k.scope.function_macros:
            return self.macro(name, [text(ir, a) for a in args])
        helper = self.k.scope.returned(name)
        if helper is not None:  # an index helper of one `return`: its expression, inlined
            return self.expand(name, helper[0], helper[1], [text(ir, a) for a in args])
        values = [self.expr(a) for a in args]
        if _CONVERSION.match(name) and len(values) == 1:
            return values[0]
        if _FMA.match(name) and len(values) == 3:
            return f"({values[0]} * {values[1]} + {values[2]})"
        if _PRODUCT.match(name) and len(values) == 2:
            return f"({values[0]} * {values[1]})"
        if name in ("min", "max") and len(values) == 2:
            return f"_{name}({values[0]}, {values[1]})"
        raise Refusal(f"a call of {name or text(ir, nid)[:30]} in the inner loop")

    def macro(self, name: str, args: list[str]) -> str:
        scope = self.k.scope
        return self.expand(name, scope.macro_params.get(name, []), scope.function_macros[name],
                           args)

    def expand(self, name: str, params: list[str], body: str, args: list[str]) -> str:
        """The translation of `body` with each parameter replaced by its argument."""
        import kir  # noqa: PLC0415 — parsing the expansion

        if len(params) != len(args):
            raise Refusal(f"{name} is called with {len(args)} arguments")
        for p, a in zip(params, args):
            body = re.sub(rf"\b{re.escape(p)}\b", f"({a})", body)
        sub = kir.parse(f"void kl_expansion() {{ long kl_value = ({body}); }}", "cuda")
        init = next(n.id for n in sub.find() if sub.grammar_type_of(n.id) == "init_declarator")
        saved = self.k.ir
        self.k.ir = sub
        try:
            return self.expr(children(sub, init)[-1])
        finally:
            self.k.ir = saved


def _loses_body(ir: KernelIR, nid: int) -> bool:
    """Whether the loop `nid` ends in an empty statement the grammar made up (its body was
    cut off by a preprocessor line)."""
    if ir.grammar_type_of(nid) not in ("for_statement", "while_statement"):
        return False
    last = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA][-1]
    return ir.grammar_type_of(last) == "expression_statement" and not text(ir, last).strip()


def _STEP(pad: str) -> list[str]:
    """The step count a generated loop keeps (a loop that does not end is refused)."""
    return [f"{pad}    _n += 1", f"{pad}    if _n > {_STEP_LIMIT}: _step()"]


def _closing(src: str, open_at: int) -> int:
    """The position of the `)` that closes the `(` at `open_at` (the end when none does)."""
    depth = 0
    for i in range(max(open_at, 0), len(src)):
        if src[i] == "(":
            depth += 1
        elif src[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return len(src) - 1


def _header_parts(header: str) -> tuple[bool, bool, bool]:
    """Which of init / condition / update a `for (...)` header has."""
    inside = header[header.index("(") + 1:header.rindex(")")] if "(" in header else ""
    depth, parts, cur = 0, [], []
    for ch in inside:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == ";" and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    parts += [""] * (3 - len(parts))
    return bool(parts[0].strip()), bool(parts[1].strip()), bool(parts[2].strip())


def _number(spelled: str) -> str:
    s = spelled.replace("'", "").rstrip("uUlL")
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", s):
        return str(int(s, 16))
    if re.fullmatch(r"\d+", s):
        return str(int(s))
    s = s.rstrip("fF")
    try:
        return repr(float(s))
    except ValueError:
        raise Refusal(f"the number {spelled}") from None


# ---------------------------------------------------------------------------------------------
# running the region


class _Program:
    """The region compiled to a Python function of the thread coordinates."""

    def __init__(self, k: _Kernel, region: list[int], loop_vars: set[str],
                 loop: tuple[int, int] | None = None) -> None:
        tr = _Translator(k, region, loop_vars, loop)
        body = tr.block(region, "    ")
        self.outer = dict(tr.outer_written)
        self.uses_y = tr.uses_y
        self.ring = tuple(tr.ring)
        self.step: dict[str, int] = {n: 0 for n in self.ring}
        """The values of the step's variables (`ring`) the runs see."""
        init = [f"    v_{n} = _Outer({n!r})" if arr else f"    v_{n} = _Acc(({n!r}, ()))"
                for n, arr in self.outer.items()]
        result = ", ".join(f"{n!r}: v_{n}" for n in self.outer)
        source = "\n".join(["def _run(_tx, _ty, _bx, _by, _L, _step, _R):", "    _n = 0",
                            *("    " + line for line in tr.prelude), *init, *body,
                            f"    return {{{result}}}"])
        self.source = source
        namespace: dict[str, Any] = {"_cdiv": _cdiv, "_cmod": _cmod, "_Outer": _Outer,
                                     "_Local": _Local, "_Acc": _Acc, "_t": _t, "_and": _and,
                                     "_or": _or, "_not": _not, "_sel": _sel, "_min": _min,
                                     "_max": _max, "_k": _k}
        exec(compile(source, "<gemm-region>", "exec"), namespace)  # noqa: S102 — our own translation
        self.fn = namespace["_run"]
        self.shared = k.shared

    def _load(self, where: str) -> Any:
        shared = self.shared

        def load(arr: str, idx: tuple) -> _Load:
            dims = shared[arr].dims
            if len(idx) != len(dims):
                raise Refusal(f"the shared array {arr} is read through a partial subscript")
            if not _integers(*idx):
                raise Refusal(f"a shared index of {arr} is not an integer")
            flat: Any = 0
            for i, d in zip(idx, dims):
                if np.any(np.asarray(i) < 0) or (d >= 0 and np.any(np.asarray(i) >= d)):
                    raise _OutOfBounds(f"{where} reads {arr} out of bounds")
                flat = flat * max(d, 1) + i
            return _Load(arr, flat)
        return load

    def _call(self, tx: Any, ty: Any, bx: int, by: int, where: str) -> dict[str, Any]:
        def step() -> None:
            raise Refusal("the inner loop does not end within the step limit")

        try:
            return self.fn(tx, ty, bx, by, self._load(where), step, self.step)
        except (TypeError, ValueError, ZeroDivisionError, RecursionError) as exc:
            raise Refusal(f"the inner loop computes something other than products ({exc})") from None

    def run(self, tx: int, ty: int, bx: int, by: int) -> dict[str, Any]:
        """The region's outcome in thread (tx, ty) of a (bx, by) block."""
        return self._call(tx, ty, bx, by, f"thread ({tx}, {ty})")

    def run_block(self, bx: int, by: int) -> dict[str, Any]:
        """The region's outcome in every thread at once: integers become arrays over the
        threads (x fastest); raises `_Divergent` where the threads take different paths."""
        ty, tx = np.divmod(np.arange(bx * by, dtype=np.int64), bx)
        return self._call(tx, ty, bx, by, "a thread")


# ---------------------------------------------------------------------------------------------
# the analysis


_CACHE: dict[tuple[bytes, tuple[int, int] | None, frozenset[str] | None],
             tuple[list[GemmTile], list[str]]] = {}


def find_gemm_tiles(ir: KernelIR, block: tuple[int, int] | None = None,
                    kernels: frozenset[str] | None = None) -> tuple[list[GemmTile], list[str]]:
    """Every GEMM micro-kernel of the kernels of `ir` (of those named in `kernels`, where
    given), and a one-line reason for each candidate region that is not one. `block` is the
    launch's (x, y) block size where known. Results are kept per source text, block and kernels
    (the evaluation runs every thread of the block)."""
    return memo(_CACHE, (ir.source, block, kernels), lambda: _find(ir, block, kernels))


def memo(cache: dict, key: Any, make: Any) -> tuple[list, list]:
    """`make()`'s (found, reasons), kept in `cache` under `key` (at most 64 kept), as copies."""
    hit = cache.get(key)
    if hit is None:
        if len(cache) > 64:
            cache.clear()
        hit = cache[key] = make()
    return list(hit[0]), list(hit[1])


def kernel_functions(ir: KernelIR, scope: Scope, kernels: frozenset[str] | None) -> list[int]:
    """The `__global__` functions of `ir` (those named in `kernels`, where given), in order."""
    return [fn for fn in sorted(scope.functions.values())
            if "__global__" in (ir.attrs_of(fn).get("qualifiers") or ())
            and (kernels is None or ir.name_of(fn) in kernels)]


def _find(ir: KernelIR, block: tuple[int, int] | None, kernels: frozenset[str] | None
          ) -> tuple[list[GemmTile], list[str]]:
    scope = Scope(ir)
    found: list[GemmTile] = []
    reasons: list[str] = []
    for fn in kernel_functions(ir, scope, kernels):
        try:
            k = _Kernel(ir, scope, fn)
        except Refusal as exc:  # said only of a kernel with tiles to multiply: a GEMM candidate
            tiles = sum(len(declared_names(ir, d)) for d in subtree(ir, fn)
                        if ir.grammar_type_of(d) == "declaration" and "__shared__" in _qualifiers(ir, d))
            if tiles >= 2:
                reasons.append(f"{ir.name_of(fn)}: {exc.args[0]}")
            continue
        if len(k.shared) < 2:
            continue
        regions = _candidate_regions(k)
        ring = not regions
        if ring:
            regions = _candidate_regions(k, beside=True)
        if not regions:
            continue
        if len(regions) > 1:
            reasons.append(f"{k.name}: {len(regions)} regions read shared tiles (one K loop expected)")
            continue
        try:
            found.append(_analyse(k, *regions[0], block, ring))
        except Refusal as exc:
            reasons.append(f"{k.name}: {exc.args[0]}")
    return found, reasons


def _loop_vars(ir: KernelIR, loop: int) -> set[str]:
    out = set()
    for c in children(ir, loop):
        if ir.grammar_type_of(c) == "declaration":
            out |= {n for n, _, _ in declared_names(ir, c)}
    return out


_NOT_F32 = ("fp16", "bf16", "double")
"""Floating-point kinds an accumulator may have that the tensor cores' fp32 accumulation does
not reproduce: 16-bit sums round every partial sum, double ones keep bits fp32 drops."""


def accumulator_refusal(name: str, kind: str) -> str:
    """Why an accumulator of `kind` (one of `_NOT_F32`) keeps the kernel off the tensor cores."""
    if kind == "double":
        return (f"the accumulator {name} is double: an fp32 accumulation would drop precision "
                "the kernel keeps")
    return (f"the accumulator {name} is {kind}: the kernel rounds every partial sum to 16 bits, "
            "which an fp32 accumulation would not reproduce")


def _accumulator_kinds(k: _Kernel, names: list[str]) -> None:
    """Refuses an accumulator declared other than `float` (an fp32 register or array)."""
    for name in names:
        kind = variable_kind(k.ir, k.fn, name)
        if kind in _NOT_F32:
            raise Refusal(accumulator_refusal(name, kind))


def _launch_bounds(k: _Kernel) -> int | None:
    """The kernel's `__launch_bounds__` thread count (a constant, macro or template value)."""
    head = text(k.ir, k.fn)
    m = re.search(r"__launch_bounds__\s*\(\s*([^,)]+)", head[:head.find("{")])
    return k.constant(m.group(1)) if m else None


def _analyse(k: _Kernel, loop: int, compute: list, items: list,
             block: tuple[int, int] | None, beside: bool = False) -> GemmTile:
    ir = k.ir
    span = ir.span_of(loop)
    program = _Program(k, [it.node for it in compute], _loop_vars(ir, loop),
                       (span.start, span.end))
    if beside and not program.ring:
        raise Refusal("the K loop stores shared tiles between the barriers where it multiplies "
                      "others, and which buffer a step reads depends on nothing the step changes")
    _accumulator_kinds(k, list(program.outer))
    uses_y = program.uses_y or "threadIdx.y" in text(ir, k.fn)
    if block is None:
        bounds = _launch_bounds(k)
        if bounds is not None and not uses_y:
            block = (bounds, 1)
    region_text = " ".join(text(ir, it.node) for it in compute)
    if block is None and any(-1 in s.dims and re.search(rf"\b{s.name}\b", region_text)
                             for s in k.shared.values()):
        raise Refusal("the block size cannot be told for shared tiles of unknown extent "
                      "(give the launch's block)")
    blk, cells = _run_block(program, block, uses_y)
    tile = _fit(k, loop, compute, blk, cells)
    if program.ring:
        tile = replace(tile, ring=program.ring)
        if len(_RINGS) > 64:
            _RINGS.clear()
        _RINGS[(ir.source, tile)] = (program, cells)
    return tile


_RINGS: dict[tuple[bytes, GemmTile], tuple[_Program, _Cells]] = {}
"""The region's program and its cells at step 0 of each tile read from a ring."""


def ring_shift(ir: KernelIR, tile: GemmTile, step: dict[str, int]) -> tuple[int, int]:
    """How far from `tile.a.base` / `tile.b.base` the tiles lie at the K step whose variables
    (`tile.ring`) hold `step`: the region run there must read the same products from tiles
    moved by one offset each, else `Refusal`."""
    if not tile.ring:
        return 0, 0
    hit = _RINGS.get((ir.source, tile))
    if hit is None:
        _find(ir, tile.block, frozenset({tile.kernel}))
        hit = _RINGS.get((ir.source, tile))
        if hit is None:
            raise Refusal("the ring's tiles are no longer found")
    program, ref = hit
    program.step = {n: step[n] for n in tile.ring}
    try:
        cells = _run_all(program, tile.block)
    except _OutOfBounds:
        raise Refusal(f"a K step with {step} reads its tiles out of bounds") from None
    finally:
        program.step = {n: 0 for n in tile.ring}
    if cells.keys != ref.keys or (cells.p, cells.q) != (ref.p, ref.q) or \
            cells.idx_p.shape != ref.idx_p.shape:
        raise Refusal(f"a K step with {step} accumulates other products than the first")
    dp, dq = cells.idx_p - ref.idx_p, cells.idx_q - ref.idx_q
    if (dp != dp.flat[0]).any() or (dq != dq.flat[0]).any():
        raise Refusal(f"a K step with {step} reads tiles laid out otherwise than the first")
    return int(dp.flat[0]), int(dq.flat[0])


def _candidates(uses_y: bool) -> list[tuple[int, int]]:
    if not uses_y:
        return [(t, 1) for t in range(1024, 31, -32)]
    pows = [1 << i for i in range(11)]
    shapes = [(x, y) for x in pows for y in pows if x * y <= 1024 and (x * y) % 32 == 0 and y > 1]
    return sorted(shapes, key=lambda s: (-s[0] * s[1], -s[0]))


def _run_block(program: _Program, block: tuple[int, int] | None, uses_y: bool
               ) -> tuple[tuple[int, int], _Cells]:
    if block is not None:
        return block, _run_all(program, block)
    tried: list[str] = []
    best: tuple[tuple[int, int], _Cells] | None = None
    for shape in _candidates(uses_y):
        if best is not None and shape[0] * shape[1] < best[0][0] * best[0][1]:
            break
        try:
            program.run(shape[0] - 1, shape[1] - 1, *shape)
            cells = _run_all(program, shape)
        except _OutOfBounds:
            continue
        except Refusal as exc:
            tried.append(str(exc.args[0]))
            continue
        if best is not None:
            raise Refusal(f"the block shape cannot be told ({best[0]} and {shape} both fit); "
                          "give the launch's block")
        best = (shape, cells)
    if best is None:
        why = f": {tried[0]}" if tried else ""
        raise Refusal(f"no block size makes the threads cover the tile{why}")
    return best


@dataclass(frozen=True, slots=True)
class _Cells:
    """The products every thread adds to each accumulator: for element e (of `keys`), product j
    in thread t is `p[idx_p[e, j, t]] * q[idx_q[e, j, t]]`."""

    keys: list[tuple[str, tuple]]
    p: str
    q: str
    idx_p: np.ndarray
    idx_q: np.ndarray
    temps: set[str]


def _run_all(program: _Program, block: tuple[int, int]) -> _Cells:
    """Each thread's accumulators and their products (the threads run together, or one at a
    time where their paths differ)."""
    bx, by = block
    count = bx * by
    temps: set[str] = set()
    try:
        outcomes = [_accumulated(program.run_block(bx, by), temps)]
    except _Divergent:
        outcomes = [_accumulated(program.run(tx, ty, bx, by), temps)
                    for ty in range(by) for tx in range(bx)]
    keys = sorted(outcomes[0])
    if not keys:
        raise Refusal("the inner loop accumulates no products")
    if any(sorted(o) != keys for o in outcomes):
        raise Refusal("the threads accumulate into different register elements")
    if temps & {name for name, _ in keys}:
        raise Refusal("a register array both accumulates and holds operands")
    first = outcomes[0][keys[0]]
    if not first:
        raise Refusal("an accumulator receives no product")
    p, q = first[0][0].arr, first[0][1].arr
    if p == q:
        raise Refusal("both factors come from the same shared array")
    declared = list(program.shared)
    if declared.index(q) < declared.index(p):  # P (the rows' tile) is the one declared first
        p, q = q, p
    depth = len(first)
    if any(len(o[key]) != depth for o in outcomes for key in keys):
        raise Refusal("the accumulators receive different numbers of products")
    idx_p = np.empty((len(keys), depth, count), dtype=np.int64)
    idx_q = np.empty_like(idx_p)
    for t, outcome in enumerate(outcomes):
        cols = slice(None) if len(outcomes) == 1 else slice(t, t + 1)
        for e, key in enumerate(keys):
            for j, (x, y) in enumerate(outcome[key]):
                if x.arr == q and y.arr == p:
                    x, y = y, x
                if x.arr != p or y.arr != q:
                    raise Refusal("the products do not pair the same two shared tiles")
                idx_p[e, j, cols] = x.idx
                idx_q[e, j, cols] = y.idx
    return _Cells(keys, p, q, idx_p, idx_q, temps)


def _accumulated(res: dict[str, Any], temps: set[str]) -> dict[tuple[str, tuple], list]:
    mine: dict[tuple[str, tuple], list] = {}
    for name, value in res.items():
        entries = value.items() if isinstance(value, _Outer) else [((), value)]
        for key, v in entries:
            if isinstance(v, _Sum):
                if v.base is None or v.base.key != (name, key):
                    raise Refusal(f"{name} is overwritten in the K loop, not accumulated")
                mine[(name, key)] = v.terms
            elif not (isinstance(v, _Acc) and v.key == (name, key)):
                temps.add(name)
    return mine


def _fit(k: _Kernel, loop: int, compute: list, block: tuple[int, int], cells: _Cells) -> GemmTile:
    ir = k.ir
    # k is numbered by P's addresses (the order the sum was written in does not count)
    order = np.argsort(cells.idx_p, axis=1, kind="stable")
    idx_p = np.take_along_axis(cells.idx_p, order, axis=1)
    idx_q = np.take_along_axis(cells.idx_q, order, axis=1)
    bk = idx_p.shape[1]
    base_a, s_am, s_ak, m = _layout(idx_p, "the first")
    base_b, s_bn, s_bk, n = _layout(idx_q, "the second")
    bm, bn = int(m.max()) + 1, int(n.max()) + 1
    cells_mn = np.unique(m * bn + n, return_counts=True)
    if len(cells_mn[0]) != bm * bn or (cells_mn[1] != 1).any():
        raise Refusal("the threads' accumulators do not cover the block tile exactly once")
    _check_temps(k, cells.temps, list(compute))
    _check_accumulators(k, {name for name, _ in cells.keys}, loop, list(compute))
    row, col, elements = _thread_map(block, m, n, cells.keys)
    shared_bytes = sum(s.bytes for s in k.shared.values())
    dynamic = any(s.extern for s in k.shared.values())
    sa, sb = k.shared[cells.p], k.shared[cells.q]
    a = Tile(cells.p, sa.dtype, base_a, s_am, s_ak, bm, sa.decl, sa.aligned, sa.alignable)
    b = Tile(cells.q, sb.dtype, base_b, s_bn, s_bk, bn, sb.decl, sb.aligned, sb.alignable)
    loop_item = next(it for it in _items_of(ir, loop))
    return GemmTile(k.name, a, b, bm, bn, bk, block, (loop_item.start, loop_item.end),
                    tuple((it.start, it.end) for it in compute), elements, row, col, shared_bytes,
                    dynamic)


def _items_of(ir: KernelIR, loop: int) -> list:
    parent = ir.parent_of(loop)
    return [it for it in block_items(ir, parent) if it.node == loop] if parent is not None else []


def _layout(idx: np.ndarray, which: str) -> tuple[int, int, int, np.ndarray]:
    """(base, s_mn, s_k, row of each (element, thread)) of one operand whose product j of
    element e in thread t reads `idx[e, j, t]`: element (mn, k) must lie at
    `base + mn * s_mn + k * s_k`, rows evenly spaced, no two elements at one place."""
    bk = idx.shape[1]
    s_k = int(idx[0, 1, 0] - idx[0, 0, 0]) if bk > 1 else 1
    steps = np.arange(bk, dtype=np.int64)[None, :, None] * s_k
    if s_k == 0 or ((idx - idx[:, :1, :]) != steps).any():
        raise Refusal(f"{which} tile's k steps are not evenly spaced in shared memory")
    starts = np.unique(idx[:, 0, :])
    if len(starts) < 2:
        raise Refusal(f"{which} tile has a single row")
    s_mn = int(starts[1] - starts[0])
    if (starts != starts[0] + np.arange(len(starts)) * s_mn).any():
        raise Refusal(f"{which} tile's rows are not evenly spaced in shared memory")
    grid = starts[:, None] + np.arange(bk)[None, :] * s_k
    if len(np.unique(grid)) != grid.size:
        raise Refusal(f"{which} tile's elements overlap in shared memory")
    return int(starts[0]), s_mn, s_k, (idx[:, 0, :] - starts[0]) // s_mn


def _check_temps(k: _Kernel, temps: set[str], compute: list) -> None:
    """Registers the region writes besides the accumulators must not be read elsewhere."""
    ir = k.ir
    inside = [(it.start, it.end) for it in compute]
    for name in temps:
        decl_spans = []
        for ident, _ in k.scope.decls.get(name, []):
            decl = ir.parent_of(ident)
            while decl is not None and ir.grammar_type_of(decl) != "declaration":
                decl = ir.parent_of(decl)
            if decl is not None:
                s = ir.span_of(decl)
                decl_spans.append((s.start, s.end))
        for nid in subtree(ir, k.fn):
            if ir.grammar_type_of(nid) == "identifier" and ir.name_of(nid) == name:
                at = ir.span_of(nid).start
                if not any(a <= at < b for a, b in inside + decl_spans):
                    raise Refusal(f"the register {name} the inner loop writes is read after it")


def _check_accumulators(k: _Kernel, names: set[str], loop: int, compute: list) -> None:
    """The accumulators are touched in the K loop only by the region (the rewrite fills them
    after the loop: a read or write elsewhere in the loop would see them too early)."""
    ir = k.ir
    inside = [(it.start, it.end) for it in compute]
    span = ir.span_of(loop)
    for nid in subtree(ir, loop):
        if ir.grammar_type_of(nid) == "identifier" and ir.name_of(nid) in names:
            at = ir.span_of(nid).start
            if span.start <= at < span.end and not any(a <= at < b for a, b in inside):
                raise Refusal(f"the accumulator {ir.name_of(nid)} is used in the K loop outside "
                              "the inner loop")


def _thread_map(block: tuple[int, int], m: np.ndarray, n: np.ndarray,
                keys: list[tuple[str, tuple]]) -> tuple[BitSum, BitSum, tuple[Element, ...]]:
    """Thread t's element e holds cell (m[e, t], n[e, t]) = (row(t) + dm_e, col(t) + dn_e)."""
    dm, dn = m - m[:1, :], n - n[:1, :]
    if (dm != dm[:, :1]).any() or (dn != dn[:, :1]).any():
        raise Refusal("an accumulator's offset from the thread's first one differs by thread")
    elements = tuple(Element(_lvalue(key), int(dm[e, 0]), int(dn[e, 0]))
                     for e, key in enumerate(keys))
    return _bit_sum(m[0], block, "rows"), _bit_sum(n[0], block, "columns"), elements


def _bit_sum(values: np.ndarray, block: tuple[int, int], what: str) -> BitSum:
    """`values[t]` (thread t = x + bx * y) as a constant plus one weight per bit of x and y."""
    bx, by = block
    t = np.arange(bx * by)
    x, y = t % bx, t // bx
    const = int(values[0])
    weights = []
    guess = np.full(t.shape, const, dtype=np.int64)
    for coord, size, unit in ((x, bx, 1), (y, by, bx)):
        ws = []
        bit = 1
        while bit < size:
            w = int(values[bit * unit]) - const
            ws.append(w)
            guess += ((coord // bit) & 1) * w
            bit <<= 1
        weights.append(tuple(ws))
    if (guess != values).any():
        raise Refusal(f"the thread-to-output map of {what} is not a sum over the bits of the "
                      "thread index")
    return BitSum(const, tuple(weights))


def _lvalue(key: tuple[str, tuple]) -> str:
    name, idx = key
    return name + "".join(f"[{i}]" for i in idx)
