"""What a recognized GEMM micro-kernel computes in global terms: which global matrices its shared
tiles are staged from, laid out how, bounded by which parameters, for which output block.

`passes.cuda.gemm_eval` reads the K loop's inner region: two shared tiles P (BM x BK) and Q
(BK x BN), and which output cell of the block tile each thread's accumulator holds. This module
reads the rest of the kernel up to the end of the K loop — the staging of the tiles in whatever
form the user wrote it (guarded temporaries, ternaries, pointer bumps, 2-D or flattened tiles,
fp32 tiles of converted 16-bit elements, loads spread over loops) — by running it, thread by
thread, on probe values: integer parameters get distinct odd values, pointer parameters become
symbolic bases, `blockIdx` a few probe blocks, and the region is replaced by a tick that counts
K steps. What the shared tiles hold at each tick must then be exactly

    P(m, k) = A[(m0 + m) * sm + (t * BK + k) * sk]   where m0 + m < M and t * BK + k < K, else 0
    Q(k, n) = B[(t * BK + k) * sk' + (n0 + n) * sn'] where n0 + n < N and t * BK + k < K, else 0

with one of each pair of strides 1 and the other the value of an integer parameter (the
leading dimension; an integer field of a struct passed by value, `s.k`, and an integer the kernel
reads from an `int` pointer at a constant index and uses for nothing else, `dims[2]`, count as
integer parameters, and so do, in a kernel with fewer than three, the template's integer values
that size no shared array and that the inner region does not read: `template_sizes`), (m0, n0) the block's output origin — m0 = blockIdx.{x|y} * BM and
n0 = blockIdx.{y|x} * BN, or blockIdx.x counting the blocks row- or column-major — and M, N, K
integer parameters whose values bound the zero fill; the K loop runs ceil(K / BK) times. The
hypothesis is fitted on a few elements and then checked on every element of every probe:
a kernel that does anything else is refused with the reason. A staging that checks no bound
along M or N (a kernel for whole tiles only) gets bound "" there (the launch's grid then gives
the output's extent); one that does not check K names K by the K loop's trip count. Vector copies (`reinterpret_cast`
to float4 / uint4 / ... pointers, `__half2` pairs built of two elements or of zeros) are
followed lane by lane; an address cast to an integer (an alignment test) reads the operands'
bases as 16-byte aligned. Operands addressed through blockIdx.z are a batch where z = 1 and 2
stage the same tiles moved by 1 and 2 times one offset per operand, a product of one or two
integer parameters on two probes (`Operand.batch`); anything else is refused. Tiles read from a
ring of buffers (`GemmTile.ring`) are checked at each step where that step's variables place
them (`gemm_eval.ring_shift`), and no thread may store an element of them between the barriers
where the step reads it. Asynchronous copies (`__pipeline_memcpy_async(dst, src, bytes[,
zfill])`) are read as the vector copies they land as, the pipeline's commits and waits as
nothing. A staging that copies whole chunks across a bound (16-byte copies: right only where M,
N or K are multiples of 8) is probed again with every integer a multiple of 8, the kernel's own
domain (the schedule is right for every size).

No GPU library is imported here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from passes.cuda._c import pointer_fields
from passes.cuda._tree import Scope, block_items, children, declared_names, text
from passes.cuda.gemm_eval import (GemmTile, Refusal, Tile, _cdiv, _cmod, _and, _or, _not, _sel,
                                   _min, _max, _k, _Kernel, _Local, _Translator, _is_sync,
                                   element_kind, ring_shift, ASYNC_COPY, ASYNC_FENCE, _TRIVIA)

if TYPE_CHECKING:
    from kir import KernelIR

_IDENTITY = re.compile(r"^(?:__float2bfloat16(?:_rn)?|__float2half(?:_rn)?|__bfloat162float|"
                       r"__half2float|__float2float|float|static_cast|__nv_bfloat16|__half|"
                       r"half|nv_bfloat16)$")
_PAIR = re.compile(r"^__floats?2(?:half2|bfloat162)_rn$")
_HALVES = re.compile(r"^(?:__halves2half2|__halves2bfloat162|make_half2|make_bfloat162)$")
_LOAD = re.compile(r"^__ld(?:g|ca|cg|cs|lu|cv)$")
_TICK_LIMIT = 2
"""K steps the wide probe follows (the narrow probe runs the K loop to its end)."""
_SCAN = 40
"""Output tiles probed along one axis at most (the wide probe's bounds fall within 2 x 128 + a
few elements)."""


@dataclass(frozen=True, slots=True)
class Operand:
    """One global operand: element (mn, k) at `ptr[mn * ld + k]` (k contiguous) or
    `ptr[k * ld + mn]` (mn contiguous); `ld` names an integer parameter."""

    ptr: str
    k_contiguous: bool
    ld: str
    bound: str
    """The integer parameter bounding mn (M for A, N for B)."""
    axis: str
    """The blockIdx component that steps the block's origin along mn (`x` or `y`)."""
    batch: tuple[str, ...] = ()
    """The integer parameters whose product is the operand's offset (in elements) from one
    blockIdx.z to the next (a batch of GEMMs, one per z); () where z does not move it."""


@dataclass(frozen=True, slots=True)
class GlobalGemm:
    """C[m][n] = sum_k A(m, k) B(k, n) as the kernel stages it, per output block BM x BN."""

    kernel: str
    a: Operand
    b: Operand
    k: str
    """The integer parameter bounding k (and the K loop's trip count)."""
    dtype: str
    """Element type of both global operands: bf16 | fp16."""
    tile: GemmTile
    order: str = "2d"
    """How blockIdx names the output block: `2d` (one component for rows, one for columns), or
    blockIdx.x alone counting blocks `row`-major (columns fastest) or `col`-major."""
    fixed: tuple[str, ...] = ()
    """The integers read as parameters that are the template's values fixed at compile time
    (`template_sizes`): no host argument holds them."""

    def to_json(self) -> dict[str, Any]:
        def op(o: Operand, mn: str) -> dict[str, Any]:
            return {"pointer": o.ptr, "layout": f"{mn}k" if o.k_contiguous else f"k{mn}",
                    "ld": o.ld, "bound": o.bound, "block_axis": o.axis,
                    **({"batch": list(o.batch)} if o.batch else {})}

        return {"kernel": self.kernel, "dtype": self.dtype, "A": op(self.a, "m"),
                "B": op(self.b, "n"), "K": self.k,
                "block_tile": [self.tile.bm, self.tile.bn, self.tile.bk],
                "block": list(self.tile.block), **({"grid": self.order} if self.order != "2d" else {})}


# ---------------------------------------------------------------------------------------------
# symbolic global memory


class _GElem:
    """The element `ptr[off]` of a global operand, as staged (conversions do not change it)."""

    __slots__ = ("ptr", "off")

    def __init__(self, ptr: str, off: int) -> None:
        self.ptr, self.off = ptr, off

    def _refuse(self, *_: Any) -> Any:
        raise Refusal("the staging computes with a loaded element (it must copy it)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __neg__ = _refuse

    def __bool__(self) -> bool:
        raise Refusal("a branch of the staging depends on a loaded element")


class _GPtr:
    """A pointer parameter (or a pointer derived from one) at element offset `off`, elements of
    `esize` bytes."""

    __slots__ = ("ptr", "off", "esize")

    def __init__(self, ptr: str, off: int = 0, esize: int = 2) -> None:
        self.ptr, self.off, self.esize = ptr, off, esize

    def __add__(self, other: Any) -> _GPtr:
        if isinstance(other, bool) or not isinstance(other, int):
            raise Refusal(f"the pointer {self.ptr} is moved by a non-integer")
        return _GPtr(self.ptr, self.off + int(other), self.esize)

    __radd__ = __add__

    def __sub__(self, other: Any) -> _GPtr:
        return self.__add__(-other)

    def _refuse(self, *_: Any) -> Any:
        raise Refusal(f"the pointer {self.ptr} is used other than to index it")

    __mul__ = __rmul__ = __truediv__ = __lt__ = __gt__ = __le__ = __ge__ = _refuse

    def __bool__(self) -> bool:
        raise Refusal(f"a branch depends on the pointer {self.ptr}")


class _Stop(Exception):
    """The probe followed the K steps it needs."""


_SIZES = {"bf16": 2, "fp16": 2, "f32": 4}
_VECTOR_BYTES = {"float4": 16, "int4": 16, "uint4": 16, "double2": 16, "longlong2": 16,
                 "float2": 8, "int2": 8, "uint2": 8, "double": 8, "long long": 8,
                 "unsigned long long": 8, "__nv_bfloat162": 4, "nv_bfloat162": 4, "__half2": 4,
                 "half2": 4, "float": 4, "int": 4, "unsigned": 4, "unsigned int": 4,
                 "uint32_t": 4, "__nv_bfloat16": 2, "__half": 2, "half": 2,
                 "unsigned short": 2, "short": 2}


class _SAddr:
    """The address of element `flat` of the shared array `arr` (elements of `size` bytes)."""

    __slots__ = ("arr", "flat", "size")

    def __init__(self, arr: str, flat: int, size: int) -> None:
        self.arr, self.flat, self.size = arr, flat, size


class _VPtr:
    """A pointer cast to a vector of `vbytes` bytes over `base` (a `_GPtr` or `_SAddr`)."""

    __slots__ = ("base", "esize", "vbytes")

    def __init__(self, base: Any, esize: int, vbytes: int) -> None:
        if vbytes % esize:
            raise Refusal("a vector copy that splits an element")
        self.base, self.esize, self.vbytes = base, esize, vbytes

    def at(self, i: Any) -> _VPtr:
        if isinstance(i, bool) or not isinstance(i, int):
            raise Refusal("a vector pointer indexed by a non-integer")
        lanes = self.vbytes // self.esize
        b = self.base
        moved = _GPtr(b.ptr, b.off + i * lanes) if isinstance(b, _GPtr) else \
            _SAddr(b.arr, b.flat + i * lanes, b.size)
        return _VPtr(moved, self.esize, self.vbytes)


class _Vec:
    """A loaded vector: its lanes (global elements or zeros) of `esize` bytes each; `lanes`
    None for a zero vector of `vbytes` bytes."""

    __slots__ = ("lanes", "esize", "vbytes")

    def __init__(self, lanes: list | None, esize: int, vbytes: int) -> None:
        self.lanes, self.esize, self.vbytes = lanes, esize, vbytes


def _deref(p: Any) -> Any:
    if isinstance(p, _VPtr) and isinstance(p.base, _GPtr):
        n = p.vbytes // p.esize
        return _Vec([_GElem(p.base.ptr, p.base.off + i) for i in range(n)], p.esize, p.vbytes)
    if isinstance(p, _GPtr):
        return _GElem(p.ptr, p.off)
    raise Refusal("a value read through a pointer the rule does not follow")


def _addr(p: Any) -> int:
    """An address as an integer: operands' bases are taken as 16-byte aligned (the copies a
    staging picks by alignment then take their aligned branch where the offset allows)."""
    if isinstance(p, _VPtr):
        p = p.base
    if isinstance(p, _GPtr):
        return (1 << 20) + p.off * p.esize
    if isinstance(p, _SAddr):
        return p.flat * p.size
    raise Refusal("an address taken of something other than an operand or a shared tile")


def _read(obj: Any, idx: tuple) -> Any:
    if isinstance(obj, _VPtr):
        return _deref(obj.at(idx[0]))
    if isinstance(obj, _GPtr):
        if len(idx) != 1:
            raise Refusal(f"the pointer {obj.ptr} is indexed twice")
        i = idx[0]
        if isinstance(i, bool) or not isinstance(i, int):
            raise Refusal(f"the pointer {obj.ptr} is indexed by a non-integer")
        return _GElem(obj.ptr, obj.off + i)
    if isinstance(obj, _Local):
        return obj[_k(*idx)]
    raise Refusal("an element read through something other than a pointer or register array")


# ---------------------------------------------------------------------------------------------
# translating the kernel up to the end of the K loop


class _StagingTranslator(_Translator):
    """The kernel's statements up to the end of the K loop -> Python; the GEMM region becomes a
    tick, barriers vanish, shared stores are recorded and global reads are symbolic."""

    def __init__(self, k: _Kernel, region: set[int], ints: list[str], pointers: list[str],
                 ring: tuple[str, ...] = ()) -> None:
        super().__init__(k, [], set())
        self.region = region
        self.ints, self.pointers = ints, pointers
        self.ticked = False
        self.ring = list(ring)
        self.batched = False
        """Whether blockIdx.z is read (as the probe's `_cz`) rather than refused."""
        self.reads_z = False

    def name(self, name: str) -> str:
        if name in self.declared or name in self.outer_written:
            return f"v_{name}"
        if name in self.k.shared:
            raise Refusal(f"the shared array {name} is used other than by element")
        if name in self.ints or name in self.pointers:
            return f"v_{name}"
        value = self.k.constant(name)
        if value is not None:
            return str(value)
        if name in self.k.scope.params:
            raise Refusal(f"the staging depends on the parameter {name} (neither an integer nor "
                          "a 16-bit pointer)")
        raise Refusal(f"{name} is used before the staging declares it")

    def outer(self, name: str, array: bool) -> None:
        if name in self.pointers or name in self.ints:
            return
        super().outer(name, array)

    def stmt(self, nid: int, pad: str, body: int | None = None) -> list[str]:
        ir = self.k.ir
        if nid in self.region:
            if self.ticked:
                return []
            self.ticked = True
            step = ", ".join(f"{n!r}: {self.name(n)}" for n in self.ring)
            return [f"{pad}_tick({{{step}}})"]
        if _is_sync(ir, nid):
            return [f"{pad}_bar()"]
        gtype = ir.grammar_type_of(nid)
        if gtype in ("break_statement", "continue_statement", "return_statement", "goto_statement",
                     "do_statement", "switch_statement"):
            raise Refusal(f"a {gtype.replace('_', ' ')} in the staging")
        return super().stmt(nid, pad, body)

    def declaration(self, nid: int, pad: str) -> list[str]:
        ir = self.k.ir
        if "__shared__" in text(ir, nid):
            return []
        names = [n for n, _, _ in declared_names(ir, nid)]
        if names and all(n in self.k.shared or n in self.k.views for n in names):
            return []  # pointers into a shared buffer cut into tiles: stores name the buffer
        return super().declaration(nid, pad)

    def _plain(self, nid: int) -> bool:
        """Whether the subscript chain `nid` ends at a name (not at a cast or a call)."""
        ir = self.k.ir
        node = nid
        while ir.grammar_type_of(node) == "subscript_expression":
            node = children(ir, node)[0]
        return ir.grammar_type_of(node) == "identifier"

    def effect(self, nid: int) -> list[str]:
        ir = self.k.ir
        if ir.grammar_type_of(nid) == "assignment_expression":
            kids = children(ir, nid)
            target = kids[0]
            while ir.grammar_type_of(target) == "parenthesized_expression":
                target = children(ir, target)[0]
            vector = ir.grammar_type_of(target) == "pointer_expression" or (
                ir.grammar_type_of(target) == "subscript_expression" and not self._plain(target))
            if vector:
                if ir.attrs_of(nid).get("op", "=") != "=":
                    raise Refusal("the staging updates a vector in place")
                if ir.grammar_type_of(target) == "pointer_expression":
                    inner = [c for c in children(ir, target) if ir.grammar_type_of(c) not in _TRIVIA]
                    where = self.expr(inner[-1])
                else:
                    sub = children(ir, target)
                    args = [c for c in children(ir, sub[-1]) if ir.grammar_type_of(c) not in _TRIVIA]
                    where = f"_vat({self.expr(sub[0])}, {self.expr(args[0])})"
                return [f"_vst({where}, {self.expr(kids[-1])})"]
            if ir.grammar_type_of(target) == "subscript_expression":
                base, idx = self.subscripts(target)
                view = self.view(base) if base in self.k.views and len(idx) == 1 else None
                if base in self.k.shared or view is not None:
                    if ir.attrs_of(nid).get("op", "=") != "=":
                        raise Refusal(f"the staging updates {base} in place")
                    if view is not None:  # a pointer set once into a shared buffer
                        return [f"_st({view[0]!r}, (({view[1]}) + ({idx[0]}),), "
                                f"{self.expr(kids[-1])})"]
                    return [f"_st({base!r}, ({', '.join(idx)},), {self.expr(kids[-1])})"]
        if ir.grammar_type_of(nid) == "call_expression":
            callee = ir.attrs_of(nid).get("callee") or "?"
            args = [c for c in children(ir, children(ir, nid, "argument_list")[0])
                    if ir.grammar_type_of(c) not in _TRIVIA] \
                if children(ir, nid, "argument_list") else []
            if ASYNC_FENCE.match(callee):  # the copies are read as landed where they are made
                return []
            if ASYNC_COPY.match(callee) and len(args) in (3, 4):
                dst, src, size = (self.expr(a) for a in args[:3])
                zfill = self.expr(args[3]) if len(args) == 4 else "0"
                return [f"_vst(_vcast({dst}, {size}), _acopied(_vcast({dst}, {size}), {src}, "
                        f"{size}, {zfill}))"]
            raise Refusal(f"a call of {callee} in the staging")
        return super().effect(nid)

    def expr(self, nid: int) -> str:
        ir = self.k.ir
        if ir.grammar_type_of(nid) == "pointer_expression":
            return self.pointer(nid)
        if ir.grammar_type_of(nid) == "subscript_expression" and not self._plain(nid):
            kids = children(ir, nid)
            args = [c for c in children(ir, kids[-1]) if ir.grammar_type_of(c) not in _TRIVIA]
            return f"_rd({self.expr(kids[0])}, ({', '.join(self.expr(a) for a in args)},))"
        if ir.grammar_type_of(nid) == "subscript_expression":
            kids = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA]
            args = [c for c in children(ir, kids[-1]) if ir.grammar_type_of(c) not in _TRIVIA]
            at = self.k.constant(text(ir, args[0])) if len(args) == 1 else None
            cell = f"{text(ir, kids[0]).strip()}[{at}]"
            if at is not None and cell in self.ints:  # an integer read from memory (`dims[2]`)
                return py_name(cell)
            base, idx = self.subscripts(nid)
            if base in self.k.shared:
                raise Refusal(f"the staging reads the shared array {base}")
            return f"_rd({self.name(base)}, ({', '.join(idx)},))"
        if ir.grammar_type_of(nid) == "sizeof_expression":
            raise Refusal("a sizeof in the staging")
        return super().expr(nid)

    def pointer(self, nid: int) -> str:
        """`&x[i]` (an address in a shared tile or an operand) or `*p`."""
        ir = self.k.ir
        kids = [c for c in children(ir, nid) if ir.grammar_type_of(c) not in _TRIVIA]
        target = kids[-1]
        while ir.grammar_type_of(target) == "parenthesized_expression":
            target = children(ir, target)[0]
        if ir.name_of(nid) == "*" or text(ir, nid).lstrip().startswith("*"):
            return f"_deref({self.expr(target)})"
        if ir.grammar_type_of(target) != "subscript_expression":
            raise Refusal(f"an address taken of {text(ir, target)[:40]}")
        base, idx = self.subscripts(target)
        if base in self.k.shared:
            return f"_saddr({base!r}, ({', '.join(idx)},))"
        return f"_gaddr({self.name(base)}, ({', '.join(idx)},))"

    def cast(self, nid: int, arg: int) -> str:
        """`reinterpret_cast<T>(x)`: a vector pointer, or an address as an integer."""
        spelled = text(self.k.ir, nid)
        m = re.match(r"\s*reinterpret_cast\s*<\s*(?:const\s+)?(?:volatile\s+)?([\w: ]+?)\s*"
                     r"(\*?)\s*(?:const\s*)?>", spelled)
        if m is None:
            raise Refusal(f"a cast the rule does not read ({spelled[:40]})")
        tname = m.group(1).split("::")[-1].strip()
        if not m.group(2):
            if re.search(r"long|size_t|uintptr_t|intptr_t", tname):
                return f"_addr({self.expr(arg)})"
            raise Refusal(f"a pointer cast to {tname}")
        size = _VECTOR_BYTES.get(tname)
        if size is None:
            raise Refusal(f"a pointer cast to {tname}*")
        return f"_vcast({self.expr(arg)}, {size})"

    def builtin(self, spelled: str) -> str:
        m = re.fullmatch(r"\s*(threadIdx|blockDim|blockIdx|gridDim)\s*\.\s*([xyz])\s*", spelled)
        field = re.sub(r"\s+", "", spelled)
        if m is None and (field in self.ints or field in self.pointers):  # a struct's field
            return py_name(field)
        lane = re.fullmatch(r"\s*([A-Za-z_]\w*)\s*\.\s*([xyzw])\s*", spelled)
        if m is None and lane is not None:  # a lane of a vector the staging loaded
            return f"_lane({self.name(lane.group(1))}, {'xyzw'.index(lane.group(2))})"
        if m is None:
            raise Refusal(f"a member access {spelled.strip()[:40]} in the staging")
        what, axis = m.groups()
        if what == "gridDim":
            raise Refusal("the staging depends on gridDim")
        if axis == "z" and what == "blockIdx":
            if not self.batched:
                raise Refusal("the operands depend on blockIdx.z (a batch or split along the "
                              "grid's third axis, which the schedule's tiles do not step)")
            self.reads_z = True
            return "_cz"  # a batch: `_batch` reads how far z moves each operand
        if axis == "z":  # the rule takes blocks of one or two dimensions
            return "0" if what == "threadIdx" else "1"
        return {"threadIdx": "_t", "blockDim": "_b", "blockIdx": "_c"}[what] + axis

    def call(self, nid: int, kids: list[int]) -> str:
        ir = self.k.ir
        name = (ir.attrs_of(nid).get("callee") or "").split("::")[-1].split("<")[0]
        args = [c for c in children(ir, kids[-1]) if ir.grammar_type_of(c) not in _TRIVIA] \
            if kids else []
        if name == "reinterpret_cast" and len(args) == 1:
            return self.cast(nid, args[0])
        m = re.fullmatch(r"make_(\w+?)(\d)", name)
        if m and f"{m.group(1)}{m.group(2)}" in _VECTOR_BYTES:
            return f"_vzero({_VECTOR_BYTES[m.group(1) + m.group(2)]}, {', '.join(self.expr(a) for a in args)})"
        if _PAIR.match(name):  # a 16-bit pair built from floats: a zero fill where they are 0
            return f"_vzero(4, {', '.join(self.expr(a) for a in args)})"
        if _HALVES.match(name) and len(args) == 2:  # a pair of two 16-bit values
            return f"_vpair({self.expr(args[0])}, {self.expr(args[1])})"
        if _IDENTITY.match(name):
            args = [c for c in children(ir, kids[-1]) if ir.grammar_type_of(c) not in _TRIVIA]
            if len(args) == 1:
                return self.expr(args[0])
        if _LOAD.match(name) and len(args) == 1:  # `__ldg(p)`: the element at the address
            return f"_deref({self.expr(args[0])})"
        return super().call(nid, kids)


def py_name(param: str) -> str:
    """The probe program's variable of an integer parameter (`s.m`, a struct's field: `v_s_m`;
    `d[1]`, an integer read from memory: `v_d_1_`)."""
    return "v_" + re.sub(r"\W", "_", param)


_INTEGER = re.compile(r"\b(?:int|long|unsigned|size_t|int64_t|int32_t|uint32_t|short)\b")


def struct_fields(ir: KernelIR) -> dict[str, list[str]]:
    """The integer fields of each struct the unit defines (`struct S {...};`, `typedef struct
    {...} S;`), in declared order: struct name -> field names."""
    from passes.cuda._c import CSource  # noqa: PLC0415

    code = CSource(ir).code
    out: dict[str, list[str]] = {}
    for m in re.finditer(r"\b(?:typedef\s+)?struct\s+(\w*)\s*\{([^{}]*)\}\s*(\w*)", code):
        fields = []
        for decl in m.group(2).split(";"):
            d = re.fullmatch(r"\s*((?:const\s+)?[\w ]+?)\s+(\w+(?:\s*,\s*\w+)*)\s*", decl)
            if d and _INTEGER.search(d.group(1)) and "*" not in decl:
                fields += [f.strip() for f in d.group(2).split(",")]
        for name in (m.group(1), m.group(3)):
            if name:
                out[name] = fields
    return out


def _kernel_params(k: _Kernel) -> tuple[list[str], list[str], dict[str, str]]:
    """(integer parameters, pointer parameters, pointer -> element kind) in declared order; a
    struct passed by value gives its integer fields as integer parameters (`s.m`) and its
    pointer fields as pointer parameters (`s.a`)."""
    ir = k.ir
    ints, ptrs, kinds = [], [], {}
    structs = struct_fields(ir)
    for nid in children(ir, next(c for c in _subtree_first(ir, k.fn, "parameter_list"))):
        if ir.grammar_type_of(nid) != "parameter_declaration":
            continue
        spelled = text(ir, nid)
        for name, ident, _ in declared_names(ir, nid):
            tname = next((text(ir, c) for c in children(ir, nid)
                          if ir.grammar_type_of(c) in ("type_identifier", "primitive_type",
                                                       "sized_type_specifier",
                                                       "qualified_identifier")), "")
            tname = k.types.get(tname, tname)
            if "*" in spelled:
                ptrs.append(name)
                kinds[name] = element_kind(tname)
            elif _INTEGER.search(tname):
                ints.append(name)
            elif "&" not in spelled and tname.split("::")[-1] in structs:
                ints += [f"{name}.{f}" for f in structs[tname.split("::")[-1]]]
                for f, pointee in pointer_fields(ir.text).get(tname.split("::")[-1], {}).items():
                    ptrs.append(f"{name}.{f}")
                    kinds[f"{name}.{f}"] = element_kind(k.types.get(pointee, pointee))
    for name in [p for p in ptrs if kinds[p] == "int"]:
        cells = _read_cells(k, name)
        if cells:  # sizes the kernel reads from memory, `dims[0]`...: integer parameters too
            ptrs.remove(name)
            ints += [f"{name}[{i}]" for i in cells]
    return ints, ptrs, kinds


def template_sizes(k: _Kernel, spans: tuple[tuple[int, int], ...] = ()) -> list[str]:
    """The kernel template's integer value parameters that size nothing it declares (no shared
    array's extent) and that the byte spans `spans` (the inner region) do not read: sizes fixed
    at compile time, which the probes may vary as they vary integer parameters (the code is the
    same for every value)."""
    from passes.cuda.gemm_eval import template_bindings  # noqa: PLC0415

    ir = k.ir
    values, _ = template_bindings(ir, k.fn)
    used = " ".join(ir.source[a:b].decode("utf-8", errors="replace") for a, b in
                    [sh.decl for sh in k.shared.values()] + list(spans))
    return [n for n, v in values.items() if k.constant(v) is not None
            and not re.search(rf"\b{re.escape(n)}\b", used)]


def _read_cells(k: _Kernel, name: str) -> list[int]:
    """The constant indices at which the kernel reads the integer pointer `name`, where it does
    nothing else with it (no write, no other index, no other use), else []."""
    from passes.cuda._tree import subtree  # noqa: PLC0415

    ir = k.ir
    cells: set[int] = set()
    for nid in subtree(ir, k.fn):
        if ir.grammar_type_of(nid) != "identifier" or ir.name_of(nid) != name:
            continue
        parent = ir.parent_of(nid)
        if parent is None or ir.grammar_type_of(parent) == "parameter_declaration" or \
                ir.grammar_type_of(ir.parent_of(parent) or parent) in ("parameter_declaration",
                                                                      "pointer_declarator"):
            continue
        if ir.grammar_type_of(parent) != "subscript_expression" or children(ir, parent)[0] != nid:
            return []
        holder = ir.parent_of(parent)
        if holder is not None and ir.grammar_type_of(holder) in ("assignment_expression",
                                                                 "update_expression") \
                and children(ir, holder)[0] == parent:
            return []
        args = [c for c in children(ir, children(ir, parent)[-1])
                if ir.grammar_type_of(c) not in _TRIVIA]
        value = k.constant(text(ir, args[0])) if len(args) == 1 else None
        if value is None or value < 0:
            return []
        cells.add(value)
    return sorted(cells)


def _subtree_first(ir: KernelIR, fn: int, gtype: str) -> list[int]:
    from passes.cuda._tree import subtree  # noqa: PLC0415

    return [n for n in subtree(ir, fn) if ir.grammar_type_of(n) == gtype][:1]


class _StagingProgram:
    """The kernel up to the end of its K loop as a Python function of one thread."""

    def __init__(self, k: _Kernel, tile: GemmTile, ints: list[str], pointers: list[str]) -> None:
        ir = k.ir
        body = children(ir, k.fn, "compound_statement")
        if not body:
            raise Refusal("the kernel has no body")
        items = block_items(ir, body[0])
        loop_at = next((i for i, it in enumerate(items) if (it.start, it.end) == tile.loop), None)
        if loop_at is None:
            raise Refusal("the K loop is not a statement of the kernel's body")
        region = {n for n in _nodes_in(ir, body[0], tile.region)}
        tr = _StagingTranslator(k, region, ints, pointers, tile.ring)
        tr.batched = True
        lines = tr.block([it.node for it in items[:loop_at + 1]], "    ")
        if not tr.ticked:
            raise Refusal("the K loop's inner region is not a statement of the K loop")
        head = ["def _run(_tx, _ty, _bx, _by, _cx, _cy, _P, _st, _rd, _tick, _step, _bar, _cz):",
                "    _n = 0"]
        head += [f"    {py_name(n)} = _P[{n!r}]" for n in ints + pointers]
        source = "\n".join(head + ["    " + line for line in tr.prelude] + lines)
        namespace: dict[str, Any] = {"_cdiv": _cdiv, "_cmod": _cmod, "_Local": _Local, "_t": _truth,
                                     "_and": _and, "_or": _or, "_not": _not, "_sel": _sel,
                                     "_min": _min, "_max": _max, "_k": _k}
        namespace.update({"_deref": _deref, "_addr": _addr, "_vzero": _vzero, "_vcast": _vcast,
                          "_acopied": _acopied,
                          "_vat": _vat, "_gaddr": _gaddr, "_lane": _lane,
                          "_vpair": _vpair})
        exec(compile(source, "<gemm-staging>", "exec"), namespace)  # noqa: S102 — our translation
        self.namespace = namespace
        self.fn = namespace["_run"]
        self.source = source
        self.shared = k.shared
        self.ir, self.tile = ir, tile
        self.reads_z = tr.reads_z

    def run(self, block: tuple[int, int], cta: tuple[int, int], params: dict[str, Any],
            ticks: int | None, z: int = 0) -> tuple[_Stores, int]:
        """Every thread of block `cta` run on `params`: the stores of each shared element as
        (tick, value, barriers passed) in order, and the number of ticks (K steps) the K loop
        made."""
        bx, by = block
        stores = _Stores(self.ir, self.tile)
        count, epoch = [0], [0]
        steps: list[tuple[dict[str, int], int]] = []

        def flat_of(arr: str, idx: tuple) -> int:
            dims = self.shared[arr].dims
            if len(idx) != len(dims):
                raise Refusal(f"the shared array {arr} is addressed through a partial subscript")
            flat = 0
            for i, d in zip(idx, dims):
                if isinstance(i, bool) or not isinstance(i, int) or i < 0 or (d >= 0 and i >= d):
                    raise Refusal(f"the staging writes {arr} out of its bounds")
                flat = flat * max(d, 1) + i
            return flat

        def put(arr: str, flat: int, value: Any) -> None:
            if not (isinstance(value, _GElem) or (isinstance(value, (int, float))
                                                  and not isinstance(value, bool) and value == 0)):
                raise Refusal(f"the staging stores into {arr} something other than a global "
                              "element or zero")
            if flat >= _extent(self.shared[arr].dims):
                raise Refusal(f"the staging writes {arr} out of its bounds")
            stores.setdefault((arr, flat), []).append((count[0], value, epoch[0]))

        def st(arr: str, idx: tuple, value: Any) -> None:
            put(arr, flat_of(arr, idx), value)

        def saddr(arr: str, idx: tuple) -> _SAddr:
            return _SAddr(arr, flat_of(arr, idx), _SIZES.get(self.shared[arr].dtype, 4))

        def vst(p: Any, value: Any) -> None:
            if not (isinstance(p, _VPtr) and isinstance(p.base, _SAddr)):
                raise Refusal("the staging stores a vector somewhere other than a shared tile")
            lanes = p.vbytes // p.esize
            if not isinstance(value, _Vec) or value.vbytes != p.vbytes or \
                    (value.lanes is not None and value.esize != p.esize):
                raise Refusal("a vector copy into a shared tile changes the element size")
            for i in range(lanes):
                put(p.base.arr, p.base.flat + i, 0 if value.lanes is None else value.lanes[i])

        self.namespace.update({"_saddr": saddr, "_vst": vst})

        def tick(step: dict[str, int]) -> None:
            steps.append((dict(step), epoch[0]))
            count[0] += 1
            if ticks is not None and count[0] >= ticks:
                raise _Stop()

        def bar() -> None:
            epoch[0] += 1

        def step() -> None:
            raise Refusal("the staging does not end within the step limit")

        trips = []
        for ty in range(by):
            for tx in range(bx):
                count[0], epoch[0] = 0, 0
                steps.clear()
                try:
                    self.fn(tx, ty, bx, by, cta[0], cta[1], params, st, _read, tick, step, bar, z)
                except _Stop:
                    pass
                except (TypeError, ValueError, ZeroDivisionError, RecursionError, IndexError,
                        KeyError) as exc:
                    raise Refusal(f"the staging does something the rule does not read ({exc})") \
                        from None
                trips.append(count[0])
                if tx == ty == 0:
                    stores.steps = list(steps)
                elif self.tile.ring and steps != stores.steps:
                    raise Refusal("the threads' K steps differ in their variables or barriers")
        if len(set(trips)) != 1:
            raise Refusal("the threads run the K loop different numbers of times")
        return stores, trips[0]


class _Stores(dict):
    """(array, flat element) -> [(tick, value, barriers passed)] of one probe, with each K
    step's variables and barriers passed (`steps`); where the tiles are a ring, `offset` says
    how far from its first place a tile lies at a step."""

    def __init__(self, ir: KernelIR, tile: GemmTile) -> None:
        super().__init__()
        self.ir, self.tile = ir, tile
        self.steps: list[tuple[dict[str, int], int]] = []

    def offset(self, arr: str, tick: int) -> int:
        if not self.tile.ring:
            return 0
        if tick >= len(self.steps):
            raise Refusal("a K step past the probe's last is read")
        step = self.steps[tick][0]
        key = tuple(sorted(step.items()))
        if len(_SHIFTS) > 64:
            _SHIFTS.clear()
        shifts = _SHIFTS.setdefault((self.ir.source, self.tile), {})
        if key not in shifts:
            shifts[key] = ring_shift(self.ir, self.tile, step)
        da, db = shifts[key]
        return da if arr == self.tile.a.array else db if arr == self.tile.b.array else 0


_SHIFTS: dict[tuple[bytes, GemmTile], dict[tuple, tuple[int, int]]] = {}
"""The ring's tile offsets by step, per source and tile."""


def _extent(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d if d > 0 else 1 << 30
    return n


def _vpair(low: Any, high: Any) -> _Vec:
    """A pair of 16-bit lanes, each a global element or zero."""
    lanes = []
    for x in (low, high):
        if not isinstance(x, _GElem):
            _vzero(2, x)  # refuses a lane other than zero
            x = 0
        lanes.append(x)
    return _Vec(lanes, 2, 4)


def _vzero(vbytes: int, *lanes: Any) -> _Vec:
    if any(not isinstance(x, (int, float)) or x != 0 for x in lanes):
        raise Refusal("a vector built of values other than zeros in the staging")
    return _Vec(None, 0, vbytes)


def _lane(v: Any, i: int) -> Any:
    """Lane `i` of a loaded vector (`v.x`, `v.y` ...)."""
    if not isinstance(v, _Vec):
        raise Refusal("a member of something other than a loaded vector in the staging")
    if v.lanes is None:
        return 0
    if i >= len(v.lanes):
        raise Refusal("a member past the vector's lanes in the staging")
    return v.lanes[i]


def _acopied(dst: _VPtr, src: Any, size: Any, zfill: Any) -> _Vec:
    """What an asynchronous copy of `size` bytes from `src` lands at `dst`: its first
    `size - zfill` bytes from `src` (not read where none are), zeros after them."""
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (size, zfill)) or \
            not 0 <= zfill <= size or (size - zfill) % dst.esize:
        raise Refusal("an asynchronous copy of a size the rule does not read")
    kept = (size - zfill) // dst.esize
    lanes = _deref(_vcast(src, size - zfill)).lanes if kept else []
    return _Vec(lanes + [0] * (size // dst.esize - kept), dst.esize, size)


def _vcast(x: Any, vbytes: int) -> _VPtr:
    if isinstance(x, _VPtr):
        x = x.base
    if isinstance(x, _GPtr):
        return _VPtr(x, x.esize, vbytes)
    if isinstance(x, _SAddr):
        return _VPtr(x, x.size, vbytes)
    raise Refusal("a vector pointer to something other than an operand or a shared tile")


def _vat(p: Any, i: Any) -> _VPtr:
    if not isinstance(p, _VPtr):
        raise Refusal("an element of something other than a vector pointer is written")
    return p.at(i)


def _gaddr(p: Any, idx: tuple) -> _GPtr:
    if not isinstance(p, _GPtr) or len(idx) != 1:
        raise Refusal("an address taken in something other than an operand")
    return p + idx[0]


def _truth(x: Any) -> bool:
    return bool(x)


def _nodes_in(ir: KernelIR, root: int, spans: tuple[tuple[int, int], ...]) -> list[int]:
    from passes.cuda._tree import subtree  # noqa: PLC0415

    out = []
    for nid in subtree(ir, root):
        s = ir.span_of(nid)
        if any(s.start >= a and s.end <= b for a, b in spans) and \
                (ir.parent_of(nid) is None or not any(
                    ir.span_of(ir.parent_of(nid)).start >= a and ir.span_of(ir.parent_of(nid)).end <= b
                    for a, b in spans)):
            out.append(nid)
    return out


# ---------------------------------------------------------------------------------------------
# fitting the global meaning


def _state(stores: dict[tuple[str, int], list[tuple[int, Any]]], arr: str, flat: int,
           tick: int) -> Any:
    """What element `flat` of `arr` holds when K step `tick` reads it (None: never written);
    `flat` counts from the tile's place at step 0 (a ring's tile lies elsewhere at others)."""
    if isinstance(stores, _Stores):
        flat += stores.offset(arr, tick)
    got = None
    for t, v, _ in stores.get((arr, flat), []):
        if t <= tick:
            got = v
    return got


def _unraced(stores: _Stores, arr: str, flat: int, tick: int) -> bool:
    """Whether no thread stores element `flat` (from the tile's step-0 place) of `arr` between
    the barriers where K step `tick` reads it."""
    at = stores.steps[tick][1] if tick < len(stores.steps) else -1
    flat += stores.offset(arr, tick)
    return all(e != at for _, _, e in stores.get((arr, flat), []))


def _probe_values(ints: list[str], big: int, small: int) -> list[dict[str, int]]:
    """Two assignments of distinct odd values: every integer large; then every integer small
    except those `big` must stay large (filled in by the caller)."""
    return [{n: big + 2 * i for i, n in enumerate(ints)},
            {n: small + 2 * i for i, n in enumerate(ints)}]


_CACHE: dict[tuple[bytes, GemmTile], GlobalGemm | str] = {}


def trace(ir: KernelIR, tile: GemmTile) -> GlobalGemm:
    """The global meaning of `tile`'s kernel (see the module docstring), or `Refusal`. Results
    are kept per source text and tile (the probes run every thread of several blocks)."""
    key = (ir.source, tile)
    hit = _CACHE.get(key)
    if hit is None:
        if len(_CACHE) > 64:
            _CACHE.clear()
        try:
            hit = _CACHE[key] = _trace(ir, tile)
        except Refusal as exc:
            hit = _CACHE[key] = str(exc.args[0])
    if isinstance(hit, str):
        raise Refusal(hit)
    return hit


class _Unaligned(Refusal):
    """The staging copies whole chunks across a bound (right only where the bound is a multiple
    of them): the probes are tried again at multiples of `_CHUNK`."""


_CHUNK = 8
"""Elements of the widest copy a staging makes (16 bytes of 16-bit elements): where it reads
past K on the odd probes, the probes are made multiples of it (the kernel's own domain; the
schedule is right for every K)."""


def _trace(ir: KernelIR, tile: GemmTile) -> GlobalGemm:
    try:
        return _traced(ir, tile, 1)
    except _Unaligned as exc:
        try:
            return _traced(ir, tile, _CHUNK)
        except Refusal:
            raise exc from None


def _traced(ir: KernelIR, tile: GemmTile, unit: int) -> GlobalGemm:
    """`_trace` with every integer probed at a multiple of `unit`."""
    scope = Scope(ir)
    fn = scope.functions.get(tile.kernel)
    if fn is None:
        raise Refusal(f"the kernel {tile.kernel} is not defined in the unit")
    k = _Kernel(ir, scope, fn)
    ints, ptrs, kinds = _kernel_params(k)
    fixed = template_sizes(k, tile.region) if len(ints) < 3 else []
    ints += fixed
    if len(ints) < 3:
        raise Refusal("the kernel has fewer than three integer parameters (M, N, K)")
    program = _StagingProgram(k, tile, ints, ptrs)
    bases = {p: _GPtr(p, 0, _SIZES.get(kinds.get(p, ""), 1)) for p in ptrs}
    bm, bn, bk = tile.bm, tile.bn, tile.bk
    big = 2 * max(bm, bn) + 1
    wide = {n: big + 2 * i for i, n in enumerate(ints)} if unit == 1 else \
        {n: (-(-big // unit) + i) * unit for i, n in enumerate(ints)}
    runs = []

    def probe(cta: tuple[int, int]) -> Any:
        stores, _ = program.run(tile.block, cta, {**wide, **bases}, _TICK_LIMIT)
        runs.append((wide, cta, stores, _TICK_LIMIT))
        return stores

    first = probe((0, 0))
    lay_a = _layout(tile.a, first, wide, "the first", "rows")
    lay_b = _layout(tile.b, first, wide, "the second", "columns")
    order, axes, period = _order(probe, tile, lay_a, lay_b)

    def block_of(i: int, j: int) -> tuple[int, int]:
        return block_at(order, axes, period, i, j)

    a, ia = _fit(tile.a, bm, lay_a, lambda i: probe(block_of(i, 0)), axes[0], wide, True)
    b, ib = _fit(tile.b, bn, lay_b, lambda j: probe(block_of(0, j)), axes[1], wide, False)
    corner = block_of(ia, ib)
    if order != "2d" and "" in (a.bound, b.bound):
        raise Refusal("a staging without bounds checks under a 1-D grid: the output's extent "
                      "cannot be told (a bounds-checked staging is needed)")
    if order != "2d":  # the count of blocks per row (or column) is the bound's tile count
        bound, extent = (b.bound, bn) if order == "row" else (a.bound, bm)
        if period != -(-wide[bound] // extent):
            raise Refusal(f"blockIdx.x counts {period} blocks a {'row' if order == 'row' else 'column'}"
                          f" where ceil({bound} / {extent}) = {-(-wide[bound] // extent)}")
    # the narrow probe: K (and every other integer but the two bounds) small, the K loop to its
    # end; those integers make K loops of distinct trip counts (K told by its trip count where
    # the staging does not zero-fill past it)
    narrow, trips_seen = {}, {-(-wide[n] // bk) for n in (a.bound, b.bound) if n}
    count = 3
    for n in ints:
        if n in (a.bound, b.bound):
            narrow[n] = wide[n]
            continue
        while count in trips_seen:
            count += 1
        narrow[n] = bk * (count - 1) + (unit if unit > 1 else 3 if bk > 3 else 1)
        trips_seen.add(count)
    if len(set(narrow.values())) != len(narrow):
        raise Refusal("the probe values of the integer parameters collide")
    for cta in ((0, 0), corner):
        stores, trips = program.run(tile.block, cta, {**narrow, **bases}, None)
        runs.append((narrow, cta, stores, trips))
    kb = _k_bound(tile.a, bk, runs[-2:], a, narrow, "the first", rows=True)
    kb_b = _k_bound(tile.b, bk, runs[-2:], b, narrow, "the second", rows=False)
    if kb.lstrip("~") != kb_b.lstrip("~"):
        raise Refusal("the two tiles' k are bounded by different parameters")
    whole_k = kb.startswith("~") and kb_b.startswith("~")
    kb = kb.lstrip("~")
    if "" in (a.bound, b.bound) and kb in (a.bound, b.bound):
        raise Refusal("K is the bound of an output dimension")
    for values, cta, stores, trips in runs[-2:]:
        want = -(-values[kb] // bk)
        if trips != want:
            raise Refusal(f"the K loop makes {trips} steps where ceil({kb} / {bk}) = {want}")
    origins = _origins(order, a, b, bm, bn)
    for t, op, rows in ((tile.a, a, True), (tile.b, b, False)):
        _check(t, bm if rows else bn, bk, runs, op, "" if whole_k else kb, rows, origins)
    if kinds.get(a.ptr) != kinds.get(b.ptr) or kinds.get(a.ptr) not in ("bf16", "fp16"):
        raise Refusal(f"the global operands are {kinds.get(a.ptr)} and {kinds.get(b.ptr)} "
                      "(bf16 or fp16 both expected)")
    if program.reads_z:
        a, b = _batch(program, tile, a, b, ints, bases, wide, unit)
    return GlobalGemm(tile.kernel, a, b, kb, kinds[a.ptr], tile, order, tuple(fixed))


def _batch(program: _StagingProgram, tile: GemmTile, a: Operand, b: Operand, ints: list[str],
           bases: dict[str, Any], wide: dict[str, int], unit: int = 1) -> tuple[Operand, Operand]:
    """`a` and `b` with their batch strides: blockIdx.z = z must stage, at every element of the
    first block's first steps, what z = 0 stages with each operand moved by z times one offset,
    and that offset must be a product of one or two integer parameters on two probes."""
    other = {n: v + max(unit, 2) * (len(ints) + 1) for n, v in wide.items()}
    found: list[list[tuple[str, ...]]] = [[], []]
    for values in (wide, other):
        ref = program.run(tile.block, (0, 0), {**values, **bases}, _TICK_LIMIT)[0]
        moved = []
        for z in (1, 2):
            stores = program.run(tile.block, (0, 0), {**values, **bases}, _TICK_LIMIT, z)[0]
            moved.append([_moved(t, ref, stores, ext, tile.bk)
                          for t, ext in ((tile.a, tile.bm), (tile.b, tile.bn))])
        for i in (0, 1):
            one, two = moved[0][i], moved[1][i]
            if two != 2 * one:
                raise Refusal("blockIdx.z moves an operand by other than a multiple of one "
                              "offset (a batch stride)")
            found[i].append(_product(one, values, ints))
    strides = batch_strides(found)
    return replace(a, batch=strides[0]), replace(b, batch=strides[1])


def _moved(t: Tile, ref: Any, stores: Any, extent: int, bk: int) -> int:
    """How far (in elements) every staged element of tile `t` lies from the one `ref` stages."""
    shifts = set()
    for tick in range(_TICK_LIMIT):
        for _, _, flat in _cells(t, extent, bk):
            v0 = _state(ref, t.array, flat, tick)
            v1 = _state(stores, t.array, flat, tick)
            if isinstance(v0, _GElem) != isinstance(v1, _GElem) or (
                    isinstance(v0, _GElem) and v0.ptr != v1.ptr):
                raise Refusal("blockIdx.z changes which elements an operand's tile holds")
            if isinstance(v0, _GElem):
                shifts.add(v1.off - v0.off)
    if len(shifts) != 1:
        raise Refusal("blockIdx.z moves an operand's elements by different offsets")
    return shifts.pop()


def batch_strides(found: list[list[list[tuple[str, ...]]]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Each operand's batch stride: the one product of integer parameters (`_product`) that
    both of its probed moves (blockIdx.z = 1 and 2) name, or a Refusal saying why there is none
    (or that neither operand moves)."""
    strides = []
    for i, which in ((0, "first"), (1, "second")):
        common = set(found[i][0]) & set(found[i][1])
        if len(common) != 1:
            raise Refusal(f"the {which} operand's batch stride is no product of one or two "
                          "integer parameters")
        strides.append(next(iter(common)))
    if strides == [(), ()]:
        raise Refusal("blockIdx.z moves neither operand (a split of K or a grid the rule does "
                      "not read)")
    return strides[0], strides[1]


def _product(offset: int, values: dict[str, int], ints: list[str]) -> list[tuple[str, ...]]:
    """The products of at most two integer parameters (names in declared order) equal to
    `offset` on `values`; [()] for 0."""
    if offset == 0:
        return [()]
    out = [(n,) for n in ints if values[n] == offset]
    out += [(x, y) for i, x in enumerate(ints) for y in ints[i:] if values[x] * values[y] == offset]
    return out


def _cells(t: Tile, extent: int, bk: int) -> list[tuple[int, int, int]]:
    return [(mn, kk, t.base + mn * t.s_mn + kk * t.s_k) for mn in range(extent) for kk in range(bk)]


def _layout(t: Tile, stores: Any, values: dict[str, int], which: str, name: str
            ) -> tuple[str, bool, str, int]:
    """(pointer, k contiguous, leading-dimension parameter, its value) of tile `t`'s operand
    from the first block's first K step."""

    def elem(mn: int, kk: int) -> _GElem:
        v = _state(stores, t.array, t.base + mn * t.s_mn + kk * t.s_k, 0)
        if not isinstance(v, _GElem):
            raise Refusal(f"{which} tile's first element is not staged from global memory")
        return v

    e00, e10, e01 = elem(0, 0), elem(1, 0), elem(0, 1)
    if len({e00.ptr, e10.ptr, e01.ptr}) != 1 or e00.off != 0:
        raise Refusal(f"{which} tile's first block does not start at its matrix's origin")
    d_mn, d_k = e10.off, e01.off
    if d_k == 1:
        k_contiguous, ld = True, d_mn
    elif d_mn == 1:
        k_contiguous, ld = False, d_k
    else:
        raise Refusal(f"neither the k nor the {name} of {which} tile are contiguous in memory")
    lds = [n for n, v in values.items() if v == ld]
    if len(lds) != 1:
        raise Refusal(f"the leading dimension of {which} tile's matrix is not an integer "
                      "parameter")
    return e00.ptr, k_contiguous, lds[0], ld


def _origin(t: Tile, stores: Any, lay: tuple[str, bool, str, int]) -> int | None:
    """The first mn a block's tile holds (None where its first element is not staged)."""
    v = _state(stores, t.array, t.base, 0)
    ptr, kc, _, ld = lay
    if not isinstance(v, _GElem) or v.ptr != ptr or (kc and v.off % ld):
        return None
    return v.off // ld if kc else v.off


def _order(probe: Any, tile: GemmTile, lay_a: tuple, lay_b: tuple
           ) -> tuple[str, tuple[str, str], int]:
    """How blockIdx names output blocks (`block_order`), from the tiles each block stages."""

    def at(cta: tuple[int, int]) -> tuple[int | None, int | None]:
        stores = probe(cta)
        return _origin(tile.a, stores, lay_a), _origin(tile.b, stores, lay_b)
    return block_order(at, tile.bm, tile.bn)


def block_at(order: str, axes: tuple[str, str], period: int, i: int, j: int) -> tuple[int, int]:
    """The block (x, y) of output tile (i, j) in a `block_order` order."""
    if order == "row":
        return (i * period + j, 0)
    if order == "col":
        return (j * period + i, 0)
    cta = [0, 0]
    cta["xy".index(axes[0])], cta["xy".index(axes[1])] = i, j
    return (cta[0], cta[1])


def block_order(at: Any, bm: int, bn: int) -> tuple[str, tuple[str, str], int]:
    """How blockIdx names BM x BN output blocks, given `at(cta)`: the first output row and
    column of block `cta` (x, y), or None where it has none: (order, the blockIdx components
    stepping rows and columns, blocks per row / column of a linear order)."""
    x, y = at((1, 0)), at((0, 1))
    if x == (0, bn) and y == (bm, 0):
        return "2d", ("y", "x"), 0
    if x == (bm, 0) and y == (0, bn):
        return "2d", ("x", "y"), 0
    if y in ((0, 0), None, (None, None)) and x in ((0, bn), (bm, 0)):
        row = x == (0, bn)
        for count in range(2, _SCAN):
            got = at((count, 0))
            if got == ((bm, 0) if row else (0, bn)):
                return ("row" if row else "col"), ("x", "x"), count
            if got != ((0, count * bn) if row else (count * bm, 0)):
                break
    raise Refusal("the blocks' tiles follow no blockIdx order the rule reads (2-D, or "
                  "blockIdx.x counting row- or column-major)")


def _origins(order: str, a: Operand, b: Operand, bm: int, bn: int) -> Any:
    """(values, block) -> (first row, first column) of that block's output tile."""

    def origins(values: dict[str, int], cta: tuple[int, int]) -> tuple[int, int]:
        if order == "2d":
            return cta["xy".index(a.axis)] * bm, cta["xy".index(b.axis)] * bn
        if order == "row":
            per = -(-values[b.bound] // bn)
            return cta[0] // per * bm, cta[0] % per * bn
        per = -(-values[a.bound] // bm)
        return cta[0] % per * bm, cta[0] // per * bn
    return origins


def _fit(t: Tile, extent: int, lay: tuple, stores_at: Any, axis: str, values: dict[str, int],
         rows: bool) -> tuple[Operand, int]:
    """The operand of tile `t` (its layout and the parameter bounding its mn: the first
    zero-filled mn, at k in bounds, of the output tiles stepped along mn from the third on) and
    the index of the tile where the bound falls. `stores_at(i)` probes the i-th tile along mn."""
    which, name = ("the first", "rows") if rows else ("the second", "columns")
    for i in range(2, min(_SCAN, max(values.values()) // extent + 3)):
        stores = stores_at(i)
        for mn in range(extent):
            v = _state(stores, t.array, t.base + mn * t.s_mn, 0)
            if not isinstance(v, _GElem):
                bounds = [n for n, val in values.items() if val == i * extent + mn]
                if len(bounds) != 1:
                    raise _Unaligned(f"{which} tile's {name} are bounded by no integer parameter")
                return Operand(lay[0], lay[1], lay[2], bounds[0], axis), i
            if v.ptr != lay[0]:
                raise Refusal(f"{which} tile's {name} are staged from two operands")
    # no bounds check: the kernel covers whole tiles, as many as the launch's grid has
    return Operand(lay[0], lay[1], lay[2], "", axis), 2


def _k_bound(t: Tile, bk: int, runs: list, op: Operand, values: dict[str, int], which: str,
             rows: bool) -> str:
    """The parameter bounding k: the first zero-filled k of the narrow probe's last K step."""
    _, _, stores, trips = runs[0]
    last = trips - 1
    for kk in range(bk):
        v = _state(stores, t.array, t.base + kk * t.s_k, last)
        if not isinstance(v, _GElem):
            names = [n for n, val in values.items() if val == last * bk + kk]
            if len(names) != 1:
                past = [n for n, val in values.items() if last * bk <= val < last * bk + kk]
                if len(past) == 1:  # e.g. 16-byte chunks copied whole across K
                    raise _Unaligned(f"the staging of {which} tile reads past {past[0]} (k = "
                                  f"{values[past[0]]} to {last * bk + kk - 1} are copied, the "
                                  "zero fill starts after them)")
                break
            return names[0]
    # no zero fill past K: the kernel reads whole K steps; K is the integer whose steps the
    # loop made (the probe's integers give distinct step counts)
    names = [n for n, val in values.items() if -(-val // bk) == trips]
    if len(names) == 1:
        return "~" + names[0]  # "~": read in whole steps, not bounded element by element
    raise Refusal(f"the staging of {which} tile does not zero-fill past K and its K loop's trip "
                  "count names no single integer parameter")


def _check(t: Tile, extent: int, bk: int, runs: list, op: Operand, kb: str, rows: bool,
           origins: Any) -> None:
    """Every element of every probe is what the hypothesis says (`kb` empty: k is read in
    whole steps, never zero-filled; an operand without a bound: mn likewise)."""
    which = "the first" if rows else "the second"
    t_ring = bool(runs) and isinstance(runs[0][2], _Stores) and bool(runs[0][2].tile.ring)
    for values, cta, stores, trips in runs:
        origin = origins(values, cta)[0 if rows else 1]
        ld = values[op.ld]
        for tick in range(trips):
            for mn, kk, flat in _cells(t, extent, bk):
                g_mn, g_k = origin + mn, tick * bk + kk
                v = _state(stores, t.array, flat, tick)
                if t_ring and not _unraced(stores, t.array, flat, tick):
                    raise Refusal(f"element ({mn}, {kk}) of {which} tile is stored between the "
                                  f"barriers where step {tick} reads it")
                if v is None:
                    raise Refusal(f"the staging leaves element ({mn}, {kk}) of {which} tile "
                                  "unwritten")
                inside = (not op.bound or g_mn < values[op.bound]) and (not kb or g_k < values[kb])
                if not inside:
                    if isinstance(v, _GElem):
                        raise Refusal(f"the staging of {which} tile reads past its bounds")
                    continue
                want = g_mn * ld + g_k if op.k_contiguous else g_k * ld + g_mn
                if not isinstance(v, _GElem) or v.ptr != op.ptr or v.off != want:
                    raise Refusal(f"element ({mn}, {kk}) of {which} tile is not its matrix's "
                                  f"element at step {tick}")
