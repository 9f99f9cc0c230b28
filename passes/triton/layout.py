"""A tf32 dot operand read along its non-K axis, copied once into a K-contiguous buffer.

Hopper's wgmma reads 32-bit (tf32) operands from shared memory only K-major: the transpose
bit of its shared-memory descriptors exists for 16-bit types alone. A `tl.dot` operand loaded
with its non-K axis contiguous (an A tile whose M axis has stride 1, a B tile whose N axis
has stride 1) is then staged into the K-major buffer by 4-byte asynchronous copies (Triton
3.6 at sm_90: 108 of them against 36 16-byte ones for a K-major read of a 128x256x32 tile;
`bench/tf32_ceiling.py` measured every such read at 0.18-0.40 of cuBLAS-TF32). The rule makes such an operand K-major: the host function that launches the dot
kernel copies the tensor once into a buffer of the same shape whose K axis is contiguous
(with a small transposition kernel the rule adds to the module: `_COPY`), passes the copy, and
the kernel reads it with the strides that say so.

Which axis of a loaded tile is K follows from the dot (axis 1 of the left operand, axis 0 of
the right, swapped by a `tl.trans` between load and dot). Which axis is contiguous follows,
in this order, from the strides the host passes (`x.stride(i)`, `*x.stride()`: the tensor's
later axis is the dense one), a stride of literally one (an index with no stride), and a block
pointer's `order`. The strides the kernel reads as the tensor's (passed from it by the host)
stay as they are and read the copy's; every other stride of the operand (a hard-coded row
pitch, the implicit unit stride, a block pointer's literal strides) becomes a new kernel
parameter the launch passes from the copy, and a pointer walked by the loop advances by the
new stride. A block pointer's `order` is written K first.

Refused with the reason: an operand already K-major, a 16-bit operand (cast to a 16-bit type
before the dot, or a case whose dtype fact is 16-bit: there the transpose is free), a dot in
full fp32 (`input_precision="ieee"`, `allow_tf32=False`: no tensor-core operand), a layout it
cannot tell, an operand the kernel also writes, an index expression shared with another
access, a launch that does not pass the operand where the rule can read it (inside `*args`),
or that other kernels share. An operand passed as an expression (`b.contiguous()`) is copied
from it, and every argument that reads the same expression reads the copy.

The de-optimization is the inverse on the host: the copy is dropped and the launch passes the
tensor itself (its strides as the kernel's stride parameters, the block pointer's order N
first again), which leaves a kernel that reads the operand N-contiguous through strides; the
copy helper goes when no launch uses it.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_end, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, dotted, fresh_name, normalized
from passes.triton.affine import Scope, broadcast_times_stride
from passes.triton.host_layout import HostArgs
from passes.triton.launch import TRITON
from passes.triton.roles import dot_loops

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

DOT = frozenset({"tl.dot", "triton.language.dot"})
LOAD = frozenset({"tl.load", "triton.language.load"})
STORE = frozenset({"tl.store", "triton.language.store", "tl.atomic_add", "tl.atomic_xchg"})
TRANS = frozenset({"tl.trans", "triton.language.trans"})
BLOCK_PTR = frozenset({"tl.make_block_ptr", "triton.language.make_block_ptr"})
SIXTEEN_BIT = frozenset({"float16", "bfloat16", "fp16", "bf16", "half", "float8e4nv", "float8e5",
                         "float8e4b15", "float8e4b8", "float8e5b16", "int8", "uint8"})
_BLOCK_ARGS = ("base", "shape", "strides", "offsets", "block_shape", "order")

# The copy the rule adds: {kernel} and {helper} are the module's fresh names for them. The
# host helper returns its argument itself where the K axis is already contiguous.
_COPY = '''

@triton.jit
def {kernel}(src, dst, R, C, B1, s0, s1, sr, sc, P, TILE_R: tl.constexpr, TILE_C: tl.constexpr):
    """dst[b0, b1, c, r] = src[b0, b1, r, c]: dst's rows hold P >= R elements, src strided."""
    b = tl.program_id(2).to(tl.int64)
    b0 = b // B1
    b1 = b % B1
    r = tl.program_id(0) * TILE_R + tl.arange(0, TILE_R)
    c = tl.program_id(1) * TILE_C + tl.arange(0, TILE_C)
    inside = (r[:, None] < R) & (c[None, :] < C)
    tile = tl.load(src + b0 * s0 + b1 * s1 + r[:, None] * sr + c[None, :] * sc, mask=inside)
    tl.store(dst + b * P * C + c[None, :] * P + r[:, None], tile, mask=inside)


def {helper}(x, k, n):
    """`x` itself where its axis `k` is contiguous, else a copy of the same shape and values
    whose axis `k` is contiguous and axis `n` next (the other axes outermost, dense). A matrix's
    runs of `k` each start on a 128-byte boundary: a pitch that is no multiple of 16 elements (a
    ragged K) would leave the dot's loads unaligned. A batched copy stays dense: a kernel may
    index its batches by the dense size."""
    k, n = k % x.dim(), n % x.dim()
    if x.stride(k) == 1:
        return x
    outer = [d for d in range(x.dim()) if d not in (k, n)]
    if len(outer) > 2:
        raise ValueError("a K-major copy takes tensors of at most four dimensions")
    src = x.permute(*outer, k, n)
    while src.dim() < 4:
        src = src.unsqueeze(0)
    B0, B1, R, C = src.shape
    run = max(1, 128 // x.element_size()) if x.dim() == 2 else 1
    P = (R + run - 1) // run * run
    dst = torch.empty((B0, B1, C, P), device=x.device, dtype=x.dtype)
    grid = lambda meta: (triton.cdiv(R, meta["TILE_R"]), triton.cdiv(C, meta["TILE_C"]), B0 * B1)
    {kernel}[grid](src, dst, R, C, B1, src.stride(0), src.stride(1), src.stride(2), src.stride(3),
                   P, TILE_R=64, TILE_C=64)
    order = [*outer, k, n]
    made = dst[..., :R].reshape(*[x.shape[d] for d in outer], C, R).transpose(-1, -2)
    made = made.permute(*[order.index(d) for d in range(x.dim())])
    if made.stride(k) != 1:
        raise ValueError("the K-major copy's axis k is not contiguous")
    return made
'''


@dataclass(frozen=True, slots=True)
class _Axis:
    """One axis of an operand's tile: its stride node (None: no stride, one)."""

    stride: ast.AST | None


@dataclass(slots=True)
class _Operand:
    """A dot operand loaded from the pointer parameter `param`: its loads, which tile axis is
    K, per axis the strides, how its pointer is built ("pointer" | "block"), and the edits a
    K-major read needs in the kernel (new strides: (node to replace, axis)), or why not."""

    kernel: ast.FunctionDef
    param: str
    loads: list[ast.Call] = field(default_factory=list)
    k_axis: int = -1
    axes: tuple[_Axis, _Axis] | None = None
    style: str = "pointer"
    order: ast.AST | None = None
    strides: list[tuple[ast.AST, int, str]] = field(default_factory=list)
    """(node whose text becomes the new stride, axis, how: "replace" | "scale")."""
    advances: list[tuple[ast.AST, int]] = field(default_factory=list)
    why: str = ""


def _kw(call: ast.Call, name: str, pos: int) -> ast.AST | None:
    kw = next((k.value for k in call.keywords if k.arg == name), None)
    return kw if kw is not None else (call.args[pos] if pos < len(call.args) else None)


def _unwrap(scope: Scope, node: ast.AST, depth: int = 0) -> tuple[ast.Call | None, bool, str]:
    """(the load an operand expression reads, whether a transpose lies between, the type it is
    cast to ("" none)), following names assigned once."""
    if depth > 20:
        return None, False, ""
    if isinstance(node, ast.Name):
        value = scope.value(node)
        return _unwrap(scope, value, depth + 1) if value is not None else (None, False, "")
    if isinstance(node, ast.Attribute) and node.attr == "T":
        load, flip, cast = _unwrap(scope, node.value, depth + 1)
        return load, not flip, cast
    if isinstance(node, ast.Call):
        if callee(node) in LOAD:
            return node, False, ""
        if callee(node) in TRANS and node.args:
            load, flip, cast = _unwrap(scope, node.args[0], depth + 1)
            return load, not flip, cast
        if isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args:
            load, flip, cast = _unwrap(scope, node.func.value, depth + 1)
            return load, flip, cast or ast.unparse(node.args[0]).split(".")[-1]
    return None, False, ""


def _full_fp32(dot: ast.Call) -> bool:
    precision = next((k.value for k in dot.keywords if k.arg == "input_precision"), None)
    tf32 = next((k.value for k in dot.keywords if k.arg == "allow_tf32"), None)
    return (isinstance(precision, ast.Constant) and precision.value == "ieee") or \
        (isinstance(tf32, ast.Constant) and tf32.value is False)


def _pointer_param(scope: Scope, node: ast.AST, params: set[str], depth: int = 0) -> str | None:
    """The one pointer parameter a base expression adds to (`b`, `B + z * sbz`)."""
    if depth > 20:
        return None
    if isinstance(node, ast.Name) and node.id in params:
        return node.id
    if isinstance(node, ast.Name):
        value = scope.value(node)
        return _pointer_param(scope, value, params, depth + 1) if value is not None else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        found = [p for p in (_pointer_param(scope, node.left, params, depth + 1),
                             _pointer_param(scope, node.right, params, depth + 1)) if p]
        return found[0] if len(found) == 1 else None
    return None


def _terms(scope: Scope, node: ast.AST, expanded: list[str], depth: int = 0) -> list[ast.AST] | None:
    """The summands of a pointer expression with the names of block-shaped values (and a
    pointer the loop walks) expanded to their value (`affine._terms`), the names in `expanded`."""
    if depth > 40:
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _terms(scope, node.left, expanded, depth + 1), _terms(scope, node.right, expanded, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name) and not scope.scalar(node):
        value = scope.value(node)
        if value is None and node.id in scope.walked:
            value = scope.values[node.id]
        if value is None:
            return None
        expanded.append(node.id)
        return _terms(scope, value, expanded, depth + 1)
    return [node]


def _stores_to(scope: Scope, kernel: ast.FunctionDef, param: str) -> bool:
    """Whether a store (or atomic) of the kernel writes through `param`, by names assigned once."""
    for call in ast.walk(kernel):
        if isinstance(call, ast.Call) and callee(call) in STORE and call.args:
            target = call.args[0]
            names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
            for _ in range(20):  # through names assigned once
                more = set()
                for name in names:
                    value = scope.values.get(name)
                    if value is not None:
                        more |= {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
                if more <= names:
                    break
                names |= more
            if param in names:
                return True
    return False


def _later(a: int, b: int) -> bool | None:
    """Whether tensor axis `a` comes after axis `b` (None where their signs differ)."""
    if (a < 0) != (b < 0):
        return None
    return a > b


@dataclass(frozen=True, slots=True)
class KMajorOperands(Pass):
    """A tf32 dot operand read N- (or M-) contiguous <-> read from a K-contiguous copy."""

    name: ClassVar[str] = "k-major-operands"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = ("a tf32 tl.dot operand read along its non-K axis <-> read from a "
                              "K-contiguous copy the host makes once")
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("k-major",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    # The mechanism (an async operand pipeline regained) pays on any tf32 dot loop it takes;
    # a run's measurements correct the figure where it does not.
    prior: ClassVar[float] = 1.5

    # -- analysis ----------------------------------------------------------------------
    def _operands(self, mod: PyModule, kernel: ast.FunctionDef) -> list[_Operand]:
        """Every pointer parameter a dot loop's operand is loaded from, with its layout."""
        params = {a.arg for a in kernel.args.args}
        found: dict[str, _Operand] = {}
        for loop in dot_loops(kernel):
            scope = Scope(mod, kernel, region=loop)
            for dot in mod.calls(loop, DOT):
                for side, node in enumerate(dot.args[:2]):
                    load, flip, cast = _unwrap(scope, node)
                    if load is None or not load.args:
                        continue
                    k_axis = (1 if side == 0 else 0) ^ int(flip)
                    op = self._read(mod, kernel, scope, load, k_axis, params)
                    if op is None:
                        continue
                    if cast in SIXTEEN_BIT and not op.why:
                        op.why = f"the operand is cast to {cast} before the dot: a 16-bit operand is read transposed at no cost"
                    if _full_fp32(dot) and not op.why:
                        op.why = "the dot runs in full fp32 (no tf32): it takes no tensor-core operand"
                    prev = found.get(op.param)
                    if prev is None:
                        found[op.param] = op
                    elif prev.why or op.why or prev.k_axis != op.k_axis:
                        prev.why = prev.why or op.why or "the operand's loads disagree on its K axis"
                    else:
                        prev.loads += op.loads
                        prev.strides += [s for s in op.strides if all(s[0] is not t[0] for t in prev.strides)]
                        prev.advances += [a for a in op.advances if all(a[0] is not t[0] for t in prev.advances)]
        scope = Scope(mod, kernel)
        for op in found.values():
            if not op.why and _stores_to(scope, kernel, op.param):
                op.why = f"the kernel also writes through {op.param}"
        return list(found.values())

    def _read(self, mod: PyModule, kernel: ast.FunctionDef, scope: Scope, load: ast.Call,
              k_axis: int, params: set[str]) -> _Operand | None:
        """The operand `load` reads (its pointer parameter, strides, the names its pointer is
        built through), or None where its pointer adds to no one parameter."""
        ptr = load.args[0]
        bp = self._block_ptr(kernel, ptr)
        if bp is not None:
            return self._read_block(scope, kernel, load, bp, k_axis, params)
        expanded: list[str] = []
        terms = _terms(scope, ptr, expanded)
        base = [t for t in terms or () if scope.scalar(t)]
        param = None
        for t in base:
            got = _pointer_param(scope, t, params)
            if got is not None:
                param = got
        if param is None:
            return None
        op = _Operand(kernel, param, [load], k_axis)
        axes: dict[int, tuple[ast.AST, ast.AST | None]] = {}
        for t in terms:
            if t in base:
                continue
            found = broadcast_times_stride(t, scope)
            got, stride = found if found is not None else (None, None)
            if got is None or got[0] in axes:
                op.why = f"a term of the operand's pointer is not one axis's index times a stride: {mod.text(t)}"
                return op
            axes[got[0]] = (t, stride)
        if set(axes) != {0, 1}:
            op.why = "the operand's pointer does not index both axes of its tile"
            return op
        shared = self._shared(kernel, expanded, op)
        if shared:
            op.why = shared
            return op
        op.axes = (_Axis(axes[0][1]), _Axis(axes[1][1]))
        op.strides = [(axes[a][0] if axes[a][1] is None else axes[a][1], a,
                       "scale" if axes[a][1] is None else "replace") for a in (0, 1)]
        for name in expanded:
            for adv in scope.advances.get(name, ()):
                op.advances.append((adv.value, -1))
        return op

    @staticmethod
    def _shared(kernel: ast.FunctionDef, expanded: list[str], op: _Operand) -> str:
        """Why the names a pointer expands through are not the operand's alone ("" if they are):
        each is read only by the operand's loads, by another of them, or advances itself."""
        if not expanded:
            return ""
        owners = {id(n) for load in op.loads for n in ast.walk(load.args[0])}
        for name in expanded:
            for node in ast.walk(kernel):
                if isinstance(node, (ast.Assign, ast.AugAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if any(isinstance(t, ast.Name) and t.id in expanded for t in targets):
                        owners |= {id(n) for n in ast.walk(node.value)}
            uses = [n for n in ast.walk(kernel) if isinstance(n, ast.Name) and n.id == name
                    and isinstance(n.ctx, ast.Load)]
            if any(id(u) not in owners for u in uses):
                return f"the operand's index {name} is read by another access too"
        return ""

    @staticmethod
    def _block_ptr(kernel: ast.FunctionDef, ptr: ast.AST) -> ast.Call | None:
        if isinstance(ptr, ast.Call) and callee(ptr) in BLOCK_PTR:
            return ptr
        if not isinstance(ptr, ast.Name):
            return None
        made = [n.value for n in ast.walk(kernel) if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == ptr.id for t in n.targets)
                and isinstance(n.value, ast.Call) and callee(n.value) in BLOCK_PTR]
        return made[0] if len(made) == 1 else None

    @staticmethod
    def _read_block(scope: Scope, kernel: ast.FunctionDef, load: ast.Call, bp: ast.Call,
                    k_axis: int, params: set[str]) -> _Operand | None:
        """The operand a block pointer's load reads: its base parameter, strides and order."""
        base, strides, order = (_kw(bp, k, _BLOCK_ARGS.index(k)) for k in ("base", "strides", "order"))
        param = _pointer_param(scope, base, params) if base is not None else None
        if param is None:
            return None
        op = _Operand(kernel, param, [load], k_axis, style="block", order=order)
        if not (isinstance(strides, (ast.Tuple, ast.List)) and len(strides.elts) == 2):
            op.why = "the block pointer is not 2-D"
            return op
        op.axes = tuple(_Axis(None if isinstance(s, ast.Constant) and s.value == 1 else s)
                        for s in strides.elts)  # type: ignore[assignment]
        op.strides = [(s, a, "replace") for a, s in enumerate(strides.elts)]
        return op

    @staticmethod
    def _layout(op: _Operand, host: HostArgs) -> tuple[int, int] | str:
        """(tensor axis of K, tensor axis of the other) for the copy, or why the rule refuses."""
        if op.why:
            return op.why
        assert op.axes is not None
        passed = host.args.get(op.param)
        if passed is None:
            return f"the launch does not pass {op.param} where the rule can read it"
        tensor = ast.unparse(passed)
        k, n = op.k_axis, 1 - op.k_axis
        dims = []
        for axis in op.axes:
            s = axis.stride
            got = host.dims.get(s.id) if isinstance(s, ast.Name) else None
            dims.append(got[1] if got is not None and got[0] == tensor else None)
        if dims[k] is not None and dims[n] is not None:
            later = _later(dims[n], dims[k])
            if later is None:
                return "cannot tell which axis of the operand is contiguous"
            if not later:
                return "the operand is already K-major (its K axis is the tensor's last)"
            return dims[k], dims[n]
        if op.axes[k].stride is None:
            return "the operand is already K-major (its K axis has stride one)"
        if op.axes[n].stride is None:
            kd = dims[k] if dims[k] is not None else -2
            return (kd, -1) if kd != -1 else "cannot tell which axis of the operand is contiguous"
        order = op.order
        if isinstance(order, (ast.Tuple, ast.List)) and len(order.elts) == 2:
            try:
                fastest = ast.literal_eval(order.elts[0])
            except ValueError:
                fastest = None
            if fastest == k:
                return "the operand is already K-major (its block pointer's order is K first)"
            if fastest == n:
                return (-2, -1)
        return "cannot tell which axis of the operand is contiguous"

    # -- sites ---------------------------------------------------------------------------
    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        whole = (0, len(mod.source))
        out = []
        copies = _copy_helpers(mod)
        for kernel in mod.kernels():
            loads = {op.param: op.loads[0] for op in self._operands(mod, kernel)}
            copied = {param for launch in mod.launches(kernel.name)
                      for param, arg in HostArgs(mod, kernel, launch).args.items()
                      if isinstance(arg, ast.Name) and _copied(mod, launch, arg.id, copies)}
            # both kinds of site are anchored at the operand's load: a de-optimized site
            # is found again where it was
            for param, load in loads.items():
                out.append(make_site(self.name, ir, index, whole, param in copied,
                                     {"kernel": kernel.name, "operand": param}, mod.span(load)))
        return out

    # -- optimization --------------------------------------------------------------------
    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)
        op = next((o for o in self._operands(mod, kernel) if o.param == site.detail.get("operand")),
                  None) if kernel is not None else None
        if kernel is None or op is None:
            return Skipped("no dot operand at the site", {"site": site.anchor})
        dtype = str((ctx.facts if ctx is not None else {}).get("dtype", "")).split(".")[-1]
        if dtype in SIXTEEN_BIT:
            return Skipped(f"the case's operands are {dtype}: a 16-bit operand is read transposed "
                           "at no cost", {"dtype": dtype})
        launches = mod.launches(kernel.name)
        if not launches:
            return Skipped("the kernel is never launched in this module", {"kernel": kernel.name})
        if mod.sharing(kernel.name) or any(not isinstance(c.func, ast.Subscript) for c in launches):
            return Skipped("the kernel is launched through a helper other kernels share",
                           {"kernel": kernel.name})
        hosts = [HostArgs(mod, kernel, c) for c in launches]
        copies = _copy_helpers(mod)
        if any(isinstance(h.args.get(op.param), ast.Name)
               and _copied(mod, c, h.args[op.param].id, copies) for c, h in zip(launches, hosts)):
            return Skipped("the operand is read from its K-major copy already", {"operand": op.param})
        layouts = {self._layout(op, h) for h in hosts}
        why = next((x for x in layouts if isinstance(x, str)), None)
        if why:
            return Skipped(why, {"operand": op.param})
        if len(layouts) != 1:
            return Skipped("the launches pass the operand in different layouts", {"operand": op.param})
        kd, nd = next(iter(layouts))  # type: ignore[misc]
        taken = {n.id for n in ast.walk(mod.tree) if isinstance(n, ast.Name)} | \
            {f.name for f in mod.functions()} | {a.arg for f in mod.functions() for a in f.args.args}
        edits, new_params = self._kernel_edits(mod, op, hosts[0], kd, nd, taken)
        if isinstance(edits, str):
            return Skipped(edits, {"operand": op.param})
        if copies:
            helper = next(iter(copies))
        else:
            helper = fresh_name("_k_major", taken)
            copy_kernel = fresh_name("_k_major_copy", taken | {helper})
            at = _after_imports(mod)
            edits.append(ByteEdit(at, at, _imports(mod) + _COPY.format(kernel=copy_kernel, helper=helper)))
        for launch, host in zip(launches, hosts):
            edits += self._launch_edits(mod, launch, op.param, host.args[op.param], helper, kd, nd,
                                        new_params, taken)
        return finish(ir, site, sorted(edits, key=lambda e: e.start))

    def _kernel_edits(self, mod: PyModule, op: _Operand, host: HostArgs, kd: int, nd: int,
                      taken: set[str]) -> tuple[list[ByteEdit] | str, list[tuple[str, int]]]:
        """The kernel's edits (new stride parameters, advances, order) and the new parameters
        with the copy's axis each is passed as."""
        assert op.axes is not None
        passed = host.args[op.param]
        tensor = ast.unparse(passed)
        edits: list[ByteEdit] = []
        new: list[tuple[str, int]] = []
        renamed: dict[str, str] = {}  # old stride text -> new parameter
        for node, axis, how in op.strides:
            s = op.axes[axis].stride
            got = host.dims.get(s.id) if isinstance(s, ast.Name) else None
            if got is not None and got[0] == tensor:
                continue  # read from the tensor: it reads the copy's
            dim = kd if axis == op.k_axis else nd
            old = mod.text(s) if s is not None else "1"
            name = renamed.get(old) or fresh_name(f"stride_{op.param}_{'kn'[axis != op.k_axis]}", taken)
            taken.add(name)
            if old not in renamed:
                renamed[old] = name
                new.append((name, dim))
            edits.append(ByteEdit(*mod.span(node), f"({mod.text(node)}) * {name}" if how == "scale" else name))
        for value, _ in op.advances:
            moved = self._advance_edit(mod, value, renamed)
            if isinstance(moved, str):
                return moved, []
            edits += moved
        if op.style == "block" and isinstance(op.order, (ast.Tuple, ast.List)):
            want = f"({op.k_axis}, {1 - op.k_axis})"
            if normalized(mod.text(op.order)) != normalized(want):
                edits.append(ByteEdit(*mod.span(op.order), want))
        if new:
            edits.append(_new_params(mod, op.kernel, [n for n, _ in new]))
        return edits, new

    @staticmethod
    def _advance_edit(mod: PyModule, value: ast.AST, renamed: dict[str, str]) -> list[ByteEdit] | str:
        """A walked pointer's step with each renamed stride replaced by its parameter."""
        if not renamed:
            return []
        hits = [n for n in ast.walk(value) if isinstance(n, ast.expr) and mod.text(n) in renamed
                and isinstance(mod.parents.get(n), ast.BinOp)
                and isinstance(mod.parents[n].op, ast.Mult)]  # type: ignore[union-attr]
        if not hits and "1" in renamed:
            return [ByteEdit(*mod.span(value), f"({mod.text(value)}) * {renamed['1']}")]
        if not hits:
            return "a pointer the loop walks steps by a stride the rule cannot follow"
        return [ByteEdit(*mod.span(n), renamed[mod.text(n)]) for n in hits[:1]]

    @staticmethod
    def _launch_edits(mod: PyModule, launch: ast.Call, param: str, passed: ast.AST, helper: str,
                      kd: int, nd: int, new_params: list[tuple[str, int]], taken: set[str]) -> list[ByteEdit]:
        """The copy before the launch's statement, the launch reading it (every argument that
        names the tensor; the argument itself where it is an expression), and the new stride
        parameters passed from it."""
        stem = next((n.id for n in ast.walk(passed) if isinstance(n, ast.Name)), param)
        copy = fresh_name(f"{stem}_kmajor", taken)
        stmt: ast.AST = launch
        while not isinstance(mod.parents.get(stmt), (ast.FunctionDef, ast.For, ast.If, ast.While,
                                                      ast.With, ast.Module, ast.Try)):
            stmt = mod.parents[stmt]
        at = line_start(mod.source, mod.start(_copy_slot(mod, launch, stmt, param, helper)))
        indent = indent_of(mod.source, mod.start(stmt))
        edits = [ByteEdit(at, at, f"{indent}{copy} = {helper}({mod.text(passed)}, {kd}, {nd})\n")]
        edits += [ByteEdit(*mod.span(n), copy) for n in _reads(launch, ast.unparse(passed))]
        if new_params:
            close = mod.end(launch) - 1
            before = mod.source[:close].rstrip()
            lead = "" if before.endswith(b",") or before.endswith(b"(") else ", "
            edits.append(ByteEdit(close, close, lead + ", ".join(
                f"{name}={copy}.stride({dim})" for name, dim in new_params)))
        return edits

    # -- de-optimization -----------------------------------------------------------------
    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        copies = _copy_helpers(mod)
        edits: list[ByteEdit] = []
        removed: set[int] = set()
        for launch in mod.launches(kernel.name):
            arg = HostArgs(mod, kernel, launch).args.get(str(site.detail.get("operand")))
            assign = _copied(mod, launch, arg.id, copies) if isinstance(arg, ast.Name) else None
            if assign is None:
                continue
            tensor = mod.text(assign.value.args[0])  # type: ignore[attr-defined]
            removed.add(id(assign))
            edits.append(ByteEdit(*mod.stmt_span(assign), ""))
            edits += [ByteEdit(*mod.span(n), tensor) for n in _reads(launch, arg.id)]
            edits += self._order_back(mod, kernel, str(site.detail.get("operand")))
        if not edits:
            return Skipped("no K-major copy at the site", {"site": site.anchor})
        left = [c for c in ast.walk(mod.tree) if isinstance(c, ast.Call) and callee(c) in copies
                and id(mod.parents.get(c)) not in removed]
        if not left:
            for name, (helper, kernel_def) in copies.items():
                for node in (kernel_def, helper):
                    lo, hi = mod.stmt_span(node)
                    while lo > 0 and mod.source[lo - 2:lo] == b"\n\n":
                        lo -= 1
                    edits.append(ByteEdit(lo, hi, ""))
        return finish(ir, site, sorted(set(edits), key=lambda e: e.start))

    def _order_back(self, mod: PyModule, kernel: ast.FunctionDef, param: str) -> list[ByteEdit]:
        """A block pointer's order written N first again (the de-optimized operand's)."""
        op = next((o for o in self._operands(mod, kernel) if o.param == param), None)
        if op is None or op.style != "block" or not isinstance(op.order, (ast.Tuple, ast.List)):
            return []
        return [ByteEdit(*mod.span(op.order), f"({1 - op.k_axis}, {op.k_axis})")]


def _reads(launch: ast.Call, text: str) -> list[ast.expr]:
    """The outermost expressions among the launch's arguments that read as `text`."""
    out: list[ast.expr] = []
    todo: list[ast.AST] = [*launch.args, *(k.value for k in launch.keywords)]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.expr) and ast.unparse(node) == text:
            out.append(node)
        else:
            todo.extend(ast.iter_child_nodes(node))
    return out


def _copy_slot(mod: PyModule, launch: ast.Call, stmt: ast.AST, param: str, helper: str) -> ast.AST:
    """The statement a new copy goes before: the launch's, or the first of the copies just
    before it that feeds a later kernel parameter (the copies stand in parameter order, so
    that a copy dropped and made again stands where it stood)."""
    body = next((getattr(mod.parents[stmt], f) for f in ("body", "orelse")
                 if stmt in getattr(mod.parents[stmt], f, [])), [])
    kernel_params = [a.arg for k in mod.kernels() if k.name == dotted(launch.func.value)  # type: ignore[attr-defined]
                     for a in k.args.args]
    passed = {mod.text(v): p for p, v in zip(kernel_params, launch.args)}
    passed.update((mod.text(k.value), k.arg) for k in launch.keywords if k.arg)
    place = stmt
    for before in reversed(body[:body.index(stmt)] if stmt in body else []):
        if not (isinstance(before, ast.Assign) and isinstance(before.value, ast.Call)
                and callee(before.value) == helper and len(before.targets) == 1):
            break
        fed = passed.get(mod.text(before.targets[0]))
        if fed in kernel_params and param in kernel_params \
                and kernel_params.index(fed) > kernel_params.index(param):
            place = before
    return place


def _new_params(mod: PyModule, kernel: ast.FunctionDef, names: list[str]) -> ByteEdit:
    """The new parameters after the kernel's last one, with a default (a parameter before them
    may have one); the launches pass them by keyword."""
    args = kernel.args
    last = (args.kwonlyargs or args.args)[-1]
    defaults = args.kw_defaults if args.kwonlyargs else args.defaults
    at = max([mod.end(last)] + [mod.end(d) for d in defaults if d is not None and mod.end(d) >= mod.end(last)])
    return ByteEdit(at, at, "".join(f", {name}=1" for name in names))


def _after_imports(mod: PyModule) -> int:
    imports = [n for n in mod.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return line_end(mod.source, mod.end(imports[-1]) - 1) if imports else 0


def _imports(mod: PyModule) -> str:
    """The imports the copy needs that the module lacks."""
    have = {(a.name, a.asname) for n in mod.tree.body if isinstance(n, ast.Import) for a in n.names}
    need = [("torch", None, "import torch\n"), ("triton", None, "import triton\n"),
            ("triton.language", "tl", "import triton.language as tl\n")]
    return "".join(line for name, alias, line in need if (name, alias) not in have)


def _copy_helpers(mod: PyModule) -> dict[str, tuple[ast.FunctionDef, ast.FunctionDef]]:
    """Host function name -> (it, the kernel it launches) for each copy this rule writes that
    the module holds (its text up to formatting and the two names)."""
    out: dict[str, tuple[ast.FunctionDef, ast.FunctionDef]] = {}
    kernels = {k.name: k for k in mod.kernels()}
    for fn in mod.functions():
        if fn.name in kernels or len(fn.args.args) != 3:
            continue
        launched = {dotted(c.func.value) for c in ast.walk(fn) if isinstance(c, ast.Call)
                    and isinstance(c.func, ast.Subscript)} & set(kernels)
        if len(launched) != 1:
            continue
        kernel = kernels[next(iter(launched))]
        want = _COPY.format(kernel=kernel.name, helper=fn.name)
        if normalized(_def_text(mod, kernel) + "\n" + _def_text(mod, fn)) == normalized(want):
            out[fn.name] = (fn, kernel)
    return out


def _def_text(mod: PyModule, fn: ast.FunctionDef) -> str:
    lo, hi = mod.stmt_span(fn)
    return mod.source[lo:hi].decode("utf-8")


def _copied(mod: PyModule, launch: ast.Call, name: str,
            copies: dict[str, Any]) -> ast.Assign | None:
    """The host statement `name = copy(x, k, n)` the launch reads `name` from, or None."""
    host = mod.enclosing(launch, ast.FunctionDef)
    if host is None or not copies:
        return None
    found = [n for n in ast.walk(host) if isinstance(n, ast.Assign) and len(n.targets) == 1
             and isinstance(n.targets[0], ast.Name) and n.targets[0].id == name
             and isinstance(n.value, ast.Call) and callee(n.value) in copies
             and len(n.value.args) == 3]
    return found[0] if len(found) == 1 and mod.end(found[0]) <= mod.start(launch) else None
