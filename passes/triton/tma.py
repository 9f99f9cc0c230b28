"""Tensor descriptors (TMA on Hopper) <-> pointer loads, for 2-D in-kernel descriptors.

De-optimization replaces every `desc.load([o0, o1])` / `desc.store([o0, o1], v)` of a
`desc = tl.make_tensor_descriptor(base, shape=[s0, s1], strides=[t0, t1],
block_shape=[b0, b1])` with a masked pointer access that reads the same box (out-of-bounds
elements read as zero and are not written, as with TMA), and removes the descriptor.
Optimization turns such pointer accesses (the de-optimization's canonical form) back into
descriptor accesses; given a recorded descriptor line it refuses accesses over another base.
Removing the last of a run of descriptor assignments also removes the comment above the run.
"""
from __future__ import annotations

import ast
import itertools
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_end, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, argument, callee, fresh_name, names_in
from passes.triton.affine import Box, Scope, box_of, broadcast
from passes.triton.launch import TRITON, comment_above
from passes.triton.host_layout import HostArgs, shape_rank, unit_axis
from passes.triton.roles import accumulators, assignments, dot_loops, launch_arguments, reached

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

MAKE = frozenset({"tl.make_tensor_descriptor", "triton.language.make_tensor_descriptor"})
STORE = frozenset({"tl.store", "triton.language.store"})


def _pair(node: ast.AST | None) -> list[ast.AST] | None:
    if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) == 2:
        return list(node.elts)
    return None


def _p(text: str, node: ast.AST) -> str:
    return text if isinstance(node, (ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Subscript)) \
        else f"({text})"


@dataclass(frozen=True, slots=True)
class _Descriptor:
    kernel: ast.FunctionDef
    assign: ast.Assign
    name: str
    base: str
    shape: list[str]
    strides: list[str]
    block: list[str]
    uses: list[ast.Call]  # desc.load / desc.store calls


@dataclass(frozen=True, slots=True)
class TmaDescriptors(Pass):
    """In-kernel tensor descriptors (TMA) <-> masked pointer loads/stores."""

    decl: str = ""
    """The exact descriptor assignment line(s) to restore (recorded by a de-optimization)."""
    decl_index: int = -1
    """The position of that assignment in the kernel body (-1: before the first use)."""
    desc_name: str = ""
    """The descriptor variable to restore (recorded); empty: `<base>_desc`."""

    name: ClassVar[str] = "tma-descriptors"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "tl.make_tensor_descriptor loads/stores (TMA) <-> masked pointer access"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("tma",)
    # descriptor loads have no masks: the even-K mask-free path no longer applies to them
    conflicts: ClassVar[tuple[str, ...]] = ("even-k",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_90", "allocator")

    def _descriptors(self, mod: PyModule) -> list[_Descriptor]:
        out = []
        for kernel in mod.kernels():
            for stmt in kernel.body:
                if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Name)
                        and isinstance(stmt.value, ast.Call) and callee(stmt.value) in MAKE):
                    continue
                call, name = stmt.value, stmt.targets[0].id
                base = call.args[0] if call.args else None
                parts = [_pair(argument(call, i, key)) for i, key in
                         ((1, "shape"), (2, "strides"), (3, "block_shape"))]
                if base is None or any(p is None for p in parts):
                    continue
                uses, other = [], False
                for node in ast.walk(kernel):
                    if isinstance(node, ast.Name) and node.id == name and node is not stmt.targets[0]:
                        parent = mod.parents.get(node)
                        call_node = mod.parents.get(parent)
                        if (isinstance(parent, ast.Attribute) and parent.attr in ("load", "store")
                                and isinstance(call_node, ast.Call) and call_node.func is parent
                                and call_node.args and _pair(call_node.args[0]) is not None):
                            uses.append(call_node)
                        else:
                            other = True
                if uses and not other:
                    out.append(_Descriptor(kernel, stmt, name, mod.text(base),
                                           *[[mod.text(e) for e in p] for p in parts],
                                           sorted(uses, key=mod.start)))
        return out

    def _pointer(self, d: _Descriptor, offsets: list[str], offset_nodes: list[ast.AST]) -> tuple[str, str]:
        rows = f"({_p(offsets[0], offset_nodes[0])} + tl.arange(0, {d.block[0]}))"
        cols = f"({_p(offsets[1], offset_nodes[1])} + tl.arange(0, {d.block[1]}))"
        ptrs = (f"{d.base} + {rows}[:, None] * {d.strides[0]} + {cols}[None, :] * {d.strides[1]}")
        mask = f"({rows}[:, None] < {d.shape[0]}) & ({cols}[None, :] < {d.shape[1]})"
        return ptrs, mask

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        every = self._descriptors(mod)
        for d in every:
            lo, hi = _decl_lines(mod, d, every)
            span = (lo, max(hi, mod.end(d.uses[-1])))
            out.append(make_site(self.name, ir, index, span, True,
                                 {"kernel": d.kernel.name, "descriptor": d.name, "uses": len(d.uses)},
                                 mod.span(d.assign)))
        for kernel in mod.kernels():
            found = self._pointer_accesses(mod, kernel)
            bases = sorted({base for base, *_ in found})
            for base in bases:
                calls = [c for b, c, *_ in found if b == base]
                out.append(make_site(self.name, ir, index, mod.span(kernel), False,
                                     {"kernel": kernel.name, "base": base, "uses": len(calls)},
                                     mod.span(calls[0])))
            guarded = [c for loop in dot_loops(kernel) for c in mod.calls(loop, frozenset({"tl.load"}))
                       if _guarded(mod, c)]
            if guarded:  # the descriptor loads this rule wrote beside the pointer loads
                out.append(make_site(self.name, ir, index, mod.span(kernel), True,
                                     {"kernel": kernel.name, "guarded": len(guarded)},
                                     mod.span(guarded[0])))
            boxes = [b for b in _operand_boxes(mod, kernel) if not isinstance(b[1], str)]
            if boxes:  # hand-written tile loads of a dot loop: all of them in one move
                ends = [mod.end(kernel)] + [mod.end(c) for c in mod.launches(kernel.name)]
                lo = min(_allocator_at(mod), mod.start(kernel))
                stores = [b for b in _output_boxes(mod, kernel) if not isinstance(b[1], str)]
                out.append(make_site(self.name, ir, index, (lo, max(ends)),
                                     False, {"kernel": kernel.name, "operands": len(boxes),
                                             "outputs": len(stores),
                                             "bases": sorted({b.base for _, b, _ in boxes})},
                                     mod.span(boxes[0][0])))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        d = next((d for d in self._descriptors(mod) if d.kernel.name == site.detail.get("kernel")
                  and d.name == site.detail.get("descriptor")), None)
        if d is None:
            return Skipped("no tensor descriptor at the site", {"site": site.anchor})
        start, end = _decl_lines(mod, d, self._descriptors(mod))
        edits = [ByteEdit(start, end, "")]
        for use in d.uses:
            offs = _pair(use.args[0])
            ptrs, mask = self._pointer(d, [mod.text(o) for o in offs], offs)
            if use.func.attr == "load":
                text = f"tl.load({ptrs}, mask={mask}, other=0.0)"
            else:
                if len(use.args) != 2:
                    return Skipped("a descriptor store without one value", {"descriptor": d.name})
                text = f"tl.store({ptrs}, {mod.text(use.args[1])}, mask={mask})"
            edits.append(ByteEdit(*mod.span(use), text))
        return finish(ir, site, edits, options={
            "decl": mod.source[start:end].decode("utf-8"),
            "decl_index": d.kernel.body.index(d.assign), "desc_name": d.name})

    # -- optimization: recognise the canonical pointer access ----------------------------
    def _pointer_accesses(self, mod: PyModule, kernel: ast.FunctionDef
                          ) -> list[tuple[str, ast.Call, list[ast.AST], list[str], list[str], list[str], ast.AST | None]]:
        """(base, call, offsets, strides, blocks, shape, stored value) of canonical accesses."""
        out = []
        for call in mod.calls(kernel, frozenset({"tl.load", "tl.store"})):
            ptr = call.args[0] if call.args else None
            mask = next((k.value for k in call.keywords if k.arg == "mask"), None)
            got = _match_ptrs(mod, ptr)
            shape = _match_mask(mod, mask)
            if got is None or shape is None:
                continue
            base, offsets, strides, blocks = got
            value = call.args[1] if callee(call) == "tl.store" and len(call.args) > 1 else None
            if callee(call) == "tl.store" and value is None:
                continue
            out.append((base, call, offsets, strides, blocks, shape, value))
        return out

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        if "operands" in site.detail:
            return self._optimize_boxes(ir, mod, kernel, site, ctx)
        results, skip = self.check(ctx, {"allocator": b"set_allocator" in mod.source})
        if skip:
            return skip
        found = [f for f in self._pointer_accesses(mod, kernel) if f[0] == site.detail.get("base")]
        if not found:
            return Skipped("no canonical pointer access at the site", {"site": site.anchor})
        base, _, _, strides, blocks, shape, _ = found[0]
        if self.decl:
            recorded = _decl_base(self.decl)
            if recorded != ast.unparse(ast.parse(base.strip(), mode="eval")):  # restoring it here would re-point another tensor's accesses
                return Skipped(f"the recorded descriptor is over {recorded or 'an unreadable base'}, "
                               f"the site's accesses are over {base}",
                               {"recorded_base": recorded, "base": base})
        name = self.desc_name or (base[:-4] if base.endswith("_ptr") else base) + "_desc"
        edits = []
        for _, call, offsets, _, _, _, value in found:
            offs = ", ".join(mod.text(o) for o in offsets)
            text = (f"{name}.load([{offs}])" if value is None
                    else f"{name}.store([{offs}], {mod.text(value)})")
            edits.append(ByteEdit(*mod.span(call), text))
        if self.decl:
            decl = self.decl
        else:
            indent = indent_of(mod.source, mod.start(kernel.body[0]))
            decl = (f"{indent}{name} = tl.make_tensor_descriptor({base}, shape=[{', '.join(shape)}], "
                    f"strides=[{', '.join(strides)}], block_shape=[{', '.join(blocks)}])\n")
        if 0 <= self.decl_index < len(kernel.body):
            anchor_stmt = kernel.body[self.decl_index]
        else:
            first_use = mod.start(found[0][1])
            anchor_stmt = next(s for s in kernel.body if mod.start(s) <= first_use < mod.end(s) + 1)
        at = line_start(mod.source, mod.start(anchor_stmt))
        edits.append(ByteEdit(at, at, decl))
        return finish(ir, site, sorted(edits, key=lambda e: e.start), preconditions=results)


    def _optimize_boxes(self, ir: KernelIR, mod: PyModule, kernel: ast.FunctionDef, site: Site,
                        ctx: PassContext | None) -> PassResult:
        """Every hand-written tile load of the kernel's dot loop gets a descriptor load beside
        it: one descriptor per box, declared before the loop. Descriptors need 16-byte aligned
        tensors with dense rows (and TMA hardware), which the original loads did not: the kernel
        takes a new constexpr flag that the host sets per launch from its tensor arguments
        (`_descriptors_fit`), and each load reads through the descriptor where the flag is on,
        as before where it is off. The host also installs the scratch allocator in-kernel
        descriptors need, where the module has none."""
        boxes = _operand_boxes(mod, kernel)
        refused = [why for _, why, _ in boxes if isinstance(why, str)]
        boxes = [b for b in boxes if not isinstance(b[1], str)]
        if not boxes:
            return Skipped("no tile load of the dot loop reads as a 2-D box"
                           + (f": {refused[0]}" if refused else ""), {"site": site.anchor})
        launches = mod.launches(kernel.name)
        if not launches:
            return Skipped("the kernel is never launched in this module: no host sets the "
                           "descriptors' alignment flag", {"kernel": kernel.name})
        if kernel.args.vararg or kernel.args.kwarg:
            return Skipped("the kernel takes *args / **kwargs", {"kernel": kernel.name})
        results, skip = self.check(ctx, {"allocator": True})
        if skip:
            return skip
        module_names = {n.id for n in ast.walk(mod.tree) if isinstance(n, ast.Name)} | \
            {f.name for f in mod.functions()} | {a.arg for f in mod.functions() for a in f.args.args}
        flag = fresh_name("TMA_OK", module_names)
        helper = fresh_name("_descriptors_fit", module_names | {flag})
        taken = module_names | {flag, helper}
        by_box: dict[tuple, str] = {}
        edits: list[ByteEdit] = []
        decls: dict[int, tuple[str, list[str]]] = {}
        stores = [b for b in _output_boxes(mod, kernel) if not isinstance(b[1], str)]
        scope = Scope(mod, kernel)
        unit_strides: set[str] = set()
        operands_at: int | None = None  # where the operands' descriptors are declared
        for call, box, loop in [*boxes, *stores]:
            is_store = callee(call) in STORE
            lift = _lift(scope, box.base)
            if lift is not None and is_store:
                # the output tile of a batched product stays a pointer store: a descriptor
                # store holds the tile in shared memory, which a deeper operand pipeline
                # wants (a 16x1024^3 bmm: 0.059 ms with the descriptor store at 3 stages, 0.057
                # with the pointer store at 4, where the descriptor store did not fit)
                continue
            blocks = (box.index[0].block, box.index[1].block)
            # descriptor coordinates are 32-bit: an index computed in 64 bits (written so, or
            # reading a name bound to a 64-bit value: `i = tl.program_id(0).to(tl.int64)`) is
            # cast back
            offsets = tuple(f"({o}).to(tl.int32)" if _wide(kernel, o) else o
                            for o in (box.index[0].offset, box.index[1].offset))
            shape, stride = box.shape, box.stride
            # The contiguous axis first (a transposed operand): the descriptor reads the
            # transposed view, whose contiguous axis is last, and the tile is transposed back.
            # Strides the host passes are told apart by what it passes (`_unit_axis`).
            flip = stride[0] == "1" and stride[1] != "1" or \
                "1" not in stride and _unit_axis(mod, kernel, launches, stride) == 0
            if flip:
                blocks, offsets, shape, stride = (blocks[::-1], offsets[::-1], shape[::-1],
                                                  stride[::-1])
            if stride[1] != "1":  # the host checks, per launch, that it is 1 (a descriptor's
                unit_strides.add(stride[1])  # last stride must be)
            key = (lift or box.base, shape, stride, blocks)
            name, inline = by_box.get(key), ""
            if name is None:
                stem = lift.ptr if lift is not None else box.base.split(" ")[0]
                name = fresh_name((stem[:-4] if stem.endswith("_ptr") else stem) + "_desc", taken)
                if lift is not None:
                    base_names = {n.id for n in ast.walk(ast.parse(box.base.strip(), mode="eval"))
                                  if isinstance(n, ast.Name)}
                    place = _hoisted(mod, kernel, loop, (box.names - base_names) | lift.names)
                    decl = (f"{name} = tl.make_tensor_descriptor({lift.ptr}, shape=[{lift.extent}, "
                            f"{shape[0]}, {shape[1]}], strides=[{lift.stride}, {stride[0]}, {stride[1]}], "
                            f"block_shape=[1, {blocks[0]}, {blocks[1]}])\n")
                else:
                    place = _hoisted(mod, kernel, loop, box.names)
                    decl = (f"{name} = tl.make_tensor_descriptor({box.base}, shape=[{shape[0]}, "
                            f"{shape[1]}], strides=[{stride[0]}, {stride[1]}], "
                            f"block_shape=[{blocks[0]}, {blocks[1]}])\n")
                at = comment_above(mod.source, line_start(mod.source, mod.start(place)))
                indent = indent_of(mod.source, mod.start(place))
                if place is loop and is_store:
                    # A store in no loop: its descriptor joins the operands' declarations where
                    # everything it reads is bound there (once per program once the kernel
                    # walks its tiles), else it is built where the store is, in its own branch.
                    if operands_at is None or \
                            box.names - scope.params - scope.bound_before(operands_at):
                        inline = decl
                    else:
                        at = operands_at
                        indent = decls[at][0]
                if not inline:
                    by_box[key] = name
                    decls.setdefault(at, (indent, []))[1].append(f"{indent}    {decl}")
                    if not is_store and operands_at is None:
                        operands_at = at
            if is_store:
                edits.append(_store_edit(mod, call, loop, flag, inline,
                                         f"{name}.store([{offsets[0]}, {offsets[1]}], "
                                         f"{_transposed(mod.text(call.args[1]), flip)})"))
                continue
            load = _transposed(f"{name}.load([{lift.index}, {offsets[0]}, {offsets[1]}])"
                               f".reshape({blocks[0]}, {blocks[1]})" if lift is not None else
                               f"{name}.load([{offsets[0]}, {offsets[1]}])", flip)
            edits.append(ByteEdit(*mod.span(call), f"({load} if {flag} else {mod.text(call)})"))
        for at, (indent, lines) in decls.items():
            head = f"{indent}if {flag}:  # tensor descriptors (TMA)\n"
            edits.append(ByteEdit(at, at, head + "".join(lines)))
        last = kernel.args.args[-1]
        after = mod.end(last.annotation) if last.annotation is not None else mod.end(last)
        default = next((d for d in kernel.args.defaults if mod.start(d) > mod.start(last)), None)
        if default is not None:
            after = mod.end(default)
        edits.append(ByteEdit(after, after, f", {flag}: tl.constexpr = False"))
        for launch in launches:
            constexprs = {a.arg for a in kernel.args.args if a.annotation is not None
                          and "constexpr" in mod.text(a.annotation)}
            # positional arguments up to the first `*args` are the parameters they stand at;
            # a parameter inside an expansion (`*a.stride()`) is read from the whole tuple
            plain = list(itertools.takewhile(lambda v: not isinstance(v, ast.Starred), launch.args))
            passed = [*((p.arg, v) for p, v in zip(kernel.args.args, plain)),
                      *((k.arg, k.value) for k in launch.keywords if k.arg)]
            values = [mod.text(v) for p, v in passed if p not in constexprs and _may_be_tensor(v)]
            given = dict(passed)
            spread = [i for i, a in enumerate(kernel.args.args) if a.arg in unit_strides
                      and a.arg not in given] if len(plain) < len(launch.args) else []
            whole = f"({', '.join(mod.text(v) for v in launch.args)},)"
            units = "".join(f" and {_p(mod.text(given[t]), given[t])} == 1"
                            for t in sorted(unit_strides) if t in given) + \
                "".join(f" and {whole}[{i}] == 1" for i in spread)
            sep = ", " if launch.args or launch.keywords else ""
            end = mod.end(launch) - 1  # the closing parenthesis
            edits.append(ByteEdit(end, end, f"{sep}{flag}={helper}({', '.join(values)}){units}"))
        at = _allocator_at(mod)
        edits.append(ByteEdit(at, at, _host_text(mod, helper, with_allocator=not _has_allocator(mod))))
        return finish(ir, site, sorted(edits, key=lambda e: e.start), preconditions=results)


def _wide(kernel: ast.FunctionDef, text: str, depth: int = 0) -> bool:
    """Whether the expression `text` of `kernel` is computed in 64 bits: it names `int64`
    itself, or reads a name some assignment of the kernel binds to such a value (a few
    bindings deep)."""
    if "int64" in text:
        return True
    if depth >= 4:
        return False
    try:
        read = {n.id for n in ast.walk(ast.parse(text, mode="eval")) if isinstance(n, ast.Name)}
    except SyntaxError:
        return False
    for node in ast.walk(kernel):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in read for t in targets) \
                    and _wide(kernel, ast.unparse(node.value), depth + 1):
                return True
    return False


def _hoisted(mod: PyModule, kernel: ast.FunctionDef, loop: ast.stmt, names: frozenset[str]) -> ast.stmt:
    """The outermost loop around `loop` (itself included) that binds none of `names`: a
    descriptor declared before it is built once, not once per iteration of the loops around
    the K loop (a persistent program's tile loop)."""
    place, node = loop, mod.parents.get(loop)
    while node is not None and node is not kernel:
        if isinstance(node, (ast.For, ast.While)):
            bound = {t.id for n in ast.walk(node) for t in (
                n.targets if isinstance(n, ast.Assign) else
                [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For)) else [])
                for t in ast.walk(t) if isinstance(t, ast.Name)}
            if bound & names:
                break
            place = node
        node = mod.parents.get(node)
    return place


@dataclass(frozen=True, slots=True)
class _Lift:
    """A box whose base is `ptr + index * stride` over a tensor of `extent` such blocks (a
    batch, a head): read through one rank-3 descriptor over `ptr` at `[index, o0, o1]`."""

    ptr: str
    index: str
    stride: str
    extent: str
    names: frozenset[str]
    """The names the descriptor's declaration reads of the lift (the pointer, the stride and
    the extent; not the index, which only its loads read)."""


PROGRAM_ID = frozenset({"tl.program_id", "triton.language.program_id"})


def _summands(scope: Scope, node: ast.AST, depth: int = 0) -> list[ast.AST] | None:
    """The terms of a sum, names assigned once to a sum expanded."""
    if depth > 20:
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _summands(scope, node.left, depth + 1), _summands(scope, node.right, depth + 1)
        return None if left is None or right is None else left + right
    value = scope.value(node) if isinstance(node, ast.Name) and node.id not in scope.params else None
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        return _summands(scope, value, depth + 1)
    return [node]


def _extent(scope: Scope, node: ast.AST, depth: int = 0) -> str | None:
    """How many values an index takes, where the kernel says so: `tl.num_programs(a)` for
    `tl.program_id(a)`, `E` for `x % E` (E a parameter or a literal); through names assigned
    once. None otherwise."""
    if depth > 20:
        return None
    if isinstance(node, ast.Name) and node.id not in scope.params:
        value = scope.value(node)
        return _extent(scope, value, depth + 1) if value is not None else None
    if isinstance(node, ast.Call) and callee(node) in PROGRAM_ID:
        axis = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "axis"), None)
        if isinstance(axis, ast.Constant) and isinstance(axis.value, int):
            return f"tl.num_programs({axis.value})"
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and (
            isinstance(node.right, ast.Constant) and isinstance(node.right.value, int)
            or isinstance(node.right, ast.Name) and node.right.id in scope.params):
        return ast.unparse(node.right)
    return None


def _lift(scope: Scope, base: str) -> _Lift | None:
    """The box base as `ptr + index * stride`, the index of a known extent (`_extent`), or
    None: a base offset by a program's batch (or head) reads a block of a higher-rank tensor.
    A rank-2 descriptor over that base is built again for every batch a program visits (once
    per tile of a persistent program); a rank-3 descriptor over the tensor is the same for
    all of them and is built once per program."""
    try:
        node = ast.parse(base.strip(), mode="eval").body
    except SyntaxError:
        return None
    terms = _summands(scope, node)
    if terms is None or len(terms) != 2:
        return None
    ptrs = [t for t in terms if isinstance(t, ast.Name) and t.id in scope.params]
    prods = [t for t in terms if isinstance(t, ast.BinOp) and isinstance(t.op, ast.Mult)]
    if len(ptrs) != 1 or len(prods) != 1:
        return None
    prod = prods[0]
    for index, stride in ((prod.left, prod.right), (prod.right, prod.left)):
        if isinstance(stride, ast.Name) and stride.id in scope.params \
                and not (isinstance(index, ast.Name) and index.id in scope.params):
            extent = _extent(scope, index)
            if extent is not None:
                names = {ptrs[0].id, stride.id} | {n.id for n in ast.walk(ast.parse(extent, mode="eval"))
                                                   if isinstance(n, ast.Name) and n.id != "tl"}
                return _Lift(ptrs[0].id, ast.unparse(index), stride.id, extent, frozenset(names))
    return None


def _unit_axis(mod: PyModule, kernel: ast.FunctionDef, launches: list[ast.Call],
               stride: tuple[str, str]) -> int | None:
    """Which of a box's two strides, both kernel parameters, is the tensor's unit stride, read
    from what the first launch passes for them (`x.stride(i)`, `x.stride()[i]`, `*x.stride()`):
    the stride of the axis the host source makes contiguous where it says which
    (`host_layout.unit_axis`: a K-major copy, a transposed view, a fresh tensor), else of the
    tensor's later axis (`x.stride(-1)`, `x.stride(3)` beside `x.stride(2)`: the one a dense
    tensor has as 1). Where the descriptor's last axis goes; None where the launch does not
    say (other expressions, other tensors). A wrong answer costs speed only: the launch
    checks the descriptor's last stride is 1 before it takes the descriptor path."""
    if not launches:
        return None
    host = HostArgs(mod, kernel, launches[0])
    dims = [host.dims.get(name) for name in stride]
    if dims[0] is None or dims[1] is None or dims[0][0] != dims[1][0] or dims[0][1] == dims[1][1]:
        return None
    tensor, (i0, i1) = dims[0][0], (dims[0][1], dims[1][1])
    fn = mod.enclosing(launches[0], ast.FunctionDef)
    unit = unit_axis(mod, fn, ast.parse(tensor, mode="eval").body, mod.start(launches[0])) \
        if isinstance(fn, ast.FunctionDef) else None
    rank = unit.rank if unit is not None and unit.rank is not None else \
        host.ranks.get(tensor) or shape_rank(fn, tensor)
    made = unit.at(rank).axis if unit is not None else None
    if rank is not None and made is not None:
        i0, i1 = i0 % rank, i1 % rank
    if made is not None and made in (i0, i1):
        return 0 if made == i0 else 1
    if (i0 < 0) != (i1 < 0):
        return 0 if i0 == -1 else 1 if i1 == -1 else None
    return 0 if i0 > i1 else 1


def _transposed(text: str, flip: bool) -> str:
    return f"tl.trans({text})" if flip else text


def _store_edit(mod: PyModule, call: ast.Call, stmt: ast.stmt, flag: str, decl: str,
                store: str) -> ByteEdit:
    """The store statement on two paths: `store` (after `decl`, where the descriptor is built
    right there) where `flag` is on, the pointer store as written where it is off."""
    src = mod.source
    start, end = line_start(src, mod.start(stmt)), line_end(src, mod.end(stmt) - 1)
    indent = indent_of(src, mod.start(stmt))
    before = src[start:end].decode("utf-8")
    kept = "".join("    " + line if line.strip() else line for line in before.splitlines(keepends=True))
    return ByteEdit(start, end, f"{indent}if {flag}:  # the output tile through a tensor descriptor (TMA)\n"
                    + (f"{indent}    {decl}" if decl else "")
                    + f"{indent}    {store}\n{indent}else:\n{kept}")


def _output_boxes(mod: PyModule, kernel: ast.FunctionDef) -> list[tuple[ast.Call, Box | str, ast.stmt]]:
    """(store, box or why not, its statement) of every store after a dot loop of a value
    computed from the loop's accumulator (through casts and epilogue arithmetic: a bias, an
    activation): the output tile, read as a 2-D box like the operands' loads."""
    loops = dot_loops(kernel)
    accs = set().union(*(accumulators(loop) for loop in loops)) if loops else set()
    if not accs:
        return []
    scope = Scope(mod, kernel)
    assigns = assignments(kernel)
    canonical = {id(c) for _, c, *_ in TmaDescriptors()._pointer_accesses(mod, kernel)}
    out: list[tuple[ast.Call, Box | str, ast.stmt]] = []
    for call in mod.calls(kernel, STORE):
        stmt = mod.parents.get(call)
        if id(call) in canonical or len(call.args) != 2 or not isinstance(stmt, ast.Expr) \
                or _guarded(mod, call) or any(mod.start(lp) <= mod.start(call) < mod.end(lp) for lp in loops):
            continue
        if not reached(names_in(call.args[1]), assigns) & accs:
            continue
        src = mod.source
        if src[line_start(src, mod.start(stmt)):mod.start(stmt)].strip() or \
                src[mod.end(stmt):line_end(src, mod.end(stmt) - 1)].strip(b" \t\r\n#"):
            out.append((call, "the store shares its line with another statement", stmt))
            continue
        kw = {k.arg: k.value for k in call.keywords}
        if set(kw) - {"mask"}:
            out.append((call, "the store sets options a descriptor store does not take", stmt))
            continue
        box = box_of(scope, call.args[0], kw.get("mask"))
        if not isinstance(box, str):
            late = sorted(box.names - scope.params - scope.bound_before(mod.start(stmt)))
            if late:
                box = f"the box of {box.base} reads {', '.join(late)}, bound after the store"
        out.append((call, box, stmt))
    return out


def _operand_boxes(mod: PyModule, kernel: ast.FunctionDef) -> list[tuple[ast.Call, Box | str, ast.stmt]]:
    """(load, box or why not, its loop) of every masked tile load in a dot loop that is not
    already in the canonical form; a box whose base, strides or bounds read a name bound
    inside the loop (or after it) is refused: its descriptor must be built before the loop."""
    canonical = {id(c) for _, c, *_ in TmaDescriptors()._pointer_accesses(mod, kernel)}
    out: list[tuple[ast.Call, Box | str, ast.stmt]] = []
    for loop in dot_loops(kernel):
        scope = Scope(mod, kernel, region=loop)  # a name each of two loops binds: its own here
        before = scope.bound_before(mod.start(loop))
        for call in mod.calls(loop, frozenset({"tl.load", "triton.language.load"})):
            if id(call) in canonical or not call.args or _guarded(mod, call):
                continue
            kw = {k.arg: k.value for k in call.keywords}
            if set(kw) - {"mask", "other"}:
                out.append((call, "the load sets options a descriptor load does not take", loop))
                continue
            other = kw.get("other")
            if other is not None and not (isinstance(other, ast.Constant) and other.value == 0):
                out.append((call, "masked-off elements read a value other than zero", loop))
                continue
            box = box_of(scope, call.args[0], kw.get("mask"), loop, call)
            if not isinstance(box, str):
                late = sorted(box.names - scope.params - before)  # rebound parameters are late
                if late:
                    box = f"the box of {box.base} reads {', '.join(late)}, bound in or after the loop"
            out.append((call, box, loop))
    return _bounds_from_siblings(mod, kernel, out)


def _bounds_from_siblings(mod: PyModule, kernel: ast.FunctionDef,
                          found: list[tuple[ast.Call, Box | str, ast.stmt]]
                          ) -> list[tuple[ast.Call, Box | str, ast.stmt]]:
    """`found` with each unmasked load that reads the same pointer expression as a masked load
    of another dot loop given that load's bounds: an unmasked load reads in bounds, so the
    descriptor the masked load bounds reads the same tile (a key loop split at the diagonal:
    the blocks below it read unmasked, the diagonal block masked)."""
    masks = {mod.text(call.args[0]): (mask, loop) for call, box, loop in found
             if not isinstance(box, str)
             for mask in [next((k.value for k in call.keywords if k.arg == "mask"), None)] if mask}
    out = []
    for call, box, loop in found:
        sibling = masks.get(mod.text(call.args[0]))
        if isinstance(box, str) and sibling is not None and sibling[1] is not loop \
                and not any(k.arg == "mask" for k in call.keywords):
            scope = Scope(mod, kernel, region=loop)
            again = box_of(scope, call.args[0], sibling[0], loop, call)
            late = set() if isinstance(again, str) else \
                again.names - scope.params - scope.bound_before(mod.start(loop))
            box = box if isinstance(again, str) or late else again
        out.append((call, box, loop))
    return out


def _guarded(mod: PyModule, call: ast.Call) -> bool:
    """The load is the pointer path of `(desc.load([...]) if FLAG else tl.load(...))` (the
    descriptor load maybe transposed back), the store the `else` branch of `if FLAG:` whose
    branch stores through a descriptor: the rewrite already gave it a descriptor access."""
    parent = mod.parents.get(call)
    branch = mod.parents.get(parent) if isinstance(parent, ast.Expr) else None
    if isinstance(branch, ast.If) and parent in branch.orelse:
        return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                   and c.func.attr == "store" for s in branch.body for c in ast.walk(s))
    if not (isinstance(parent, ast.IfExp) and parent.orelse is call):
        return False
    body = _unviewed(parent.body)
    return isinstance(body, ast.Call) and isinstance(body.func, ast.Attribute) \
        and body.func.attr == "load"


VIEWS = frozenset({"tl.trans", "triton.language.trans", "tl.reshape", "triton.language.reshape",
                   "tl.permute", "triton.language.permute"})


def _unviewed(node: ast.AST) -> ast.AST:
    """`node` without the views around it: `tl.trans(x)`, `tl.reshape(x, ...)`,
    `tl.permute(x, ...)` and the method forms `x.reshape(...)`, `x.trans(...)`,
    `x.permute(...)` (a rank-3 descriptor's box read as a 2-D tile)."""
    while isinstance(node, ast.Call):
        if callee(node) in VIEWS and node.args:
            node = node.args[0]
        elif isinstance(node.func, ast.Attribute) and node.func.attr in ("reshape", "trans", "permute") \
                and isinstance(node.func.value, ast.Call):
            node = node.func.value
        else:
            break
    return node


def _has_allocator(mod: PyModule) -> bool:
    return b"set_allocator" in mod.source


def _allocator_at(mod: PyModule) -> int:
    """Where the host's allocator goes: after the module's last top-level import."""
    last = None
    for node in mod.tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            last = node
    if last is None:
        return 0
    return line_end(mod.source, mod.end(last) - 1)


def _host_text(mod: PyModule, helper: str, with_allocator: bool) -> str:
    """The host's side of in-kernel descriptors: the check a launch's tensors pass before its
    loads go through descriptors, and (`with_allocator`) the scratch allocator they need."""
    imported = {a.asname or a.name for n in mod.tree.body if isinstance(n, ast.Import) for a in n.names}
    lines = [f"import {m}\n" for m in ("functools", "torch", "triton") if m not in imported]
    # The device's capability is read once per device and each tensor's strides once: the
    # check runs on every launch, on the timed path.
    taken = {n.name for n in ast.walk(mod.tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    taken |= {n.id for n in ast.walk(mod.tree) if isinstance(n, ast.Name)} | {helper}
    has_tma = fresh_name(f"{helper}_on", taken)
    lines.append(
        f"\n\n@functools.lru_cache(maxsize=None)\n"
        f"def {has_tma}(index: int) -> bool:\n"
        '    """CUDA device `index` has TMA (sm_90 or later)."""\n'
        "    return torch.cuda.get_device_capability(index)[0] >= 9\n"
        f"\n\ndef {helper}(*args) -> bool:\n"
        '    """Tensor descriptors (TMA) can read every tensor argument: 16-byte aligned, one of\n'
        '    its last two axes dense (the launch checks it is the one each descriptor reads last),\n'
        '    other strides multiples of 16 bytes, on a GPU with TMA (sm_90+) or the CPU."""\n'
        "    for t in args:\n"
        "        if not isinstance(t, torch.Tensor):\n"
        "            continue\n"
        "        strides = t.stride()\n"
        "        if t.data_ptr() % 16 or (strides and 1 not in strides[-2:]):\n"
        "            return False\n"
        "        size = t.element_size()\n"
        "        if any(s * size % 16 for s in strides if s != 1):\n"
        "            return False\n"
        f"        if t.is_cuda and not {has_tma}(t.get_device()):\n"
        "            return False\n"
        "    return True\n")
    if with_allocator:
        lines.append(
            "\n\ndef _descriptor_scratch(size: int, alignment: int, stream):\n"
            '    """Scratch memory for in-kernel tensor descriptors."""\n'
            '    device = "cuda" if torch.cuda.is_available() else "cpu"\n'
            "    return torch.empty(size, dtype=torch.int8, device=device)\n"
            "\n\ntriton.set_allocator(_descriptor_scratch)\n")
    return "".join(lines)


def _may_be_tensor(node: ast.AST) -> bool:
    """A launch argument that can be a tensor: not a literal, a `.stride(i)` / `.size(i)` /
    `.numel()` / `.shape[i]` / `.dtype` reading, or arithmetic."""
    if isinstance(node, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare)):
        return False
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("stride", "size", "numel", "dim", "element_size"):
        return False
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
            and node.value.attr in ("shape", "stride"):
        return False
    return not (isinstance(node, ast.Attribute) and node.attr in ("dtype", "device", "shape"))


def _decl_lines(mod: PyModule, d: _Descriptor, every: list[_Descriptor]) -> tuple[int, int]:
    """The bytes a de-optimization removes for `d`'s assignment: its lines; for the last of a
    run of descriptor assignments also the comment above the run (it speaks of descriptors
    that are then all gone) and, where the run stood apart (first in the body or after a blank
    line), the blank lines after it, so that the rest of the kernel reads as before and the
    recorded text restores byte for byte at the next statement."""
    src = mod.source
    start = line_start(src, mod.start(d.assign))
    end = line_end(src, mod.end(d.assign) - 1)
    assigns = {line_start(src, mod.start(o.assign)) for o in every if o.kernel is d.kernel}
    if end in assigns:  # more descriptors follow: the comment still speaks of them
        return start, end
    start = comment_above(src, start)
    before = src[line_start(src, start - 1):start].strip() if start else b""
    if not before or before.endswith(b":"):
        while end < len(src) and not src[end:line_end(src, end)].strip():
            end = line_end(src, end)
    return start, end


def _decl_base(decl: str) -> str | None:
    """The base pointer (source text) of a recorded `d = tl.make_tensor_descriptor(base, ...)`
    line, or None when the text is not such an assignment."""
    try:
        tree = ast.parse(textwrap.dedent(decl))
    except SyntaxError:
        return None
    stmt = tree.body[0] if len(tree.body) == 1 else None
    if not (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
            and callee(stmt.value) in MAKE and stmt.value.args):
        return None
    return ast.unparse(stmt.value.args[0])


def _index_kind(node: ast.AST) -> str:
    """"row" for `x[:, None]`, "col" for `x[None, :]`."""
    got = broadcast(node)
    return ("row", "col")[got[0]] if got is not None else ""


def _arange_offset(node: ast.AST) -> tuple[ast.AST, ast.AST] | None:
    """(offset, block) of `(offset + tl.arange(0, block))`."""
    if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
            and isinstance(node.right, ast.Call) and callee(node.right) == "tl.arange"
            and len(node.right.args) == 2):
        return node.left, node.right.args[1]
    return None


def _match_ptrs(mod: PyModule, node: ast.AST | None):  # noqa: ANN202 — internal tuple
    """`base + (o0 + tl.arange(0, b0))[:, None] * t0 + (o1 + tl.arange(0, b1))[None, :] * t1`."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
            and isinstance(node.left, ast.BinOp) and isinstance(node.left.op, ast.Add)):
        return None
    base, row_term, col_term = node.left.left, node.left.right, node.right
    parts = []
    for term, kind in ((row_term, "row"), (col_term, "col")):
        if not (isinstance(term, ast.BinOp) and isinstance(term.op, ast.Mult)
                and _index_kind(term.left) == kind):
            return None
        got = _arange_offset(term.left.value)
        if got is None:
            return None
        parts.append((got[0], got[1], term.right))
    return (mod.text(base), [p[0] for p in parts], [mod.text(p[2]) for p in parts],
            [mod.text(p[1]) for p in parts])


def _match_mask(mod: PyModule, node: ast.AST | None) -> list[str] | None:
    """The shape `[s0, s1]` of `(rows[:, None] < s0) & (cols[None, :] < s1)`."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitAnd)):
        return None
    shape = []
    for side, kind in ((node.left, "row"), (node.right, "col")):
        if not (isinstance(side, ast.Compare) and len(side.ops) == 1 and isinstance(side.ops[0], ast.Lt)
                and _index_kind(side.left) == kind):
            return None
        shape.append(mod.text(side.comparators[0]))
    return shape
