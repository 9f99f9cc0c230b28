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
import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_end, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee
from passes.triton.launch import TRITON, comment_above

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

MAKE = frozenset({"tl.make_tensor_descriptor", "triton.language.make_tensor_descriptor"})


def _arg(call: ast.Call, name: str, pos: int) -> ast.AST | None:
    kw = next((k.value for k in call.keywords if k.arg == name), None)
    return kw if kw is not None else (call.args[pos] if pos < len(call.args) else None)


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
                parts = [_pair(_arg(call, key, i)) for i, key in
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
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and len(node.slice.elts) == 2:
        a, b = node.slice.elts
        none_a = isinstance(a, ast.Constant) and a.value is None
        none_b = isinstance(b, ast.Constant) and b.value is None
        if isinstance(a, ast.Slice) and none_b:
            return "row"
        if none_a and isinstance(b, ast.Slice):
            return "col"
    return ""


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
