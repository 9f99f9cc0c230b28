"""In-kernel tensor descriptors built once on the host instead, passed to the kernel.

A `d = tl.make_tensor_descriptor(P + OFF, shape=[...], strides=[...], block_shape=[...])`
inside a kernel costs every program a descriptor write to global memory and a fence before its
first load; a `triton.tools.tensor_descriptor.TensorDescriptor` built by the host is written
once per launch. Where OFF is a sum of `index * stride` terms, the host descriptor reads the
same memory as one of higher rank over P: those strides lead, each with the index's extent as
its size and a block of 1 there, and the kernel prepends the indices to every coordinate
(`d.load([i0, i1, r, c]).reshape(BR, BC)`; stores reshape their value to the block). A tile
that reaches past the in-kernel descriptor's shape reads zeros and is not written, as before:
the trailing sizes are the same values, and the leading blocks are 1.

Two leading axes whose indices are `x // n` and `x % n` become one, of their sizes' product,
indexed by x with the inner stride: a rank-3 `[B * H, S, D]` where `(bh // H) * s_b + (bh % H)
* s_h` would give a rank-4 `[B, H, S, D]` (Triton lowers the extra unit axis and its reshape
worse: on an H200's causal attention the rank-4 descriptors ran 0.1402 ms, slower than those
built in the kernel, 0.1299). It reads the same memory only where the outer stride is n inner
strides, which the host cannot know before the launch: merged only under a flag, and the
launch sets the flag only where the strides nest (elsewhere the pointer path runs).

The rule proves each leading index stays inside the size it gives it: the index is read
through names assigned once from program ids (the launch grid's axes, each a product of host
factors), `x // n` (one factor n of x's extent dropped) and `x % n` (extent n), and the sizes
are the grid's host factors. Strides, sizes and the pointer are the values the launch passes.
A block that an autotune configuration sets is written by a configuration `pre_hook` (the
kernel's configs all run it); without an autotuner, the launch's own values are the block.
A descriptor built under a kernel flag (`if TMA_OK:`, what `tma-descriptors` writes beside the
pointer loads it keeps) is built on the host only where the launch sets that flag; elsewhere
the kernel gets None and runs its pointer path, as before.

Refused, with the reason: a base that is not the pointer plus such terms, an index whose
extent the grid does not give, a stride or size the launch does not pass as a value the host
holds (a `t.stride(i)` or a literal for a stride), a descriptor used any other way than by its
own loads and stores, built inside a loop or branch, or a kernel not launched directly.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_end, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, fresh_name, is_cdiv, literal_int
from passes.triton.affine import Scope
from passes.triton.host_layout import stride_of
from passes.triton.launch import TRITON, comment_above
from passes.triton.roles import (Launch, SweepRefusal, _grid_rewrite, autotune_entries,
                                 constexpr_params, heuristic_entries, kernel_launches, launch_grid,
                                 program_axis)
from passes.triton.tma import MAKE, PROGRAM_ID, _summands, _wide

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

NUM_PROGRAMS = frozenset({"tl.num_programs", "triton.language.num_programs"})
IMPORT = "from triton.tools.tensor_descriptor import TensorDescriptor\n"


@dataclass(frozen=True, slots=True)
class _Lead:
    """One leading axis of a host descriptor: the kernel's index (source text), the host's
    stride and size for it."""

    index: str
    stride: str
    size: str
    node: ast.expr
    """The kernel's index itself (what a merge of two axes reads it as)."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """What the rewrite of one in-kernel descriptor needs."""

    assign: ast.Assign
    name: str
    pointer: str
    flag: str | None
    """The kernel flag the descriptor is built under (`if FLAG:`), None where it is built always."""
    leads: tuple[_Lead, ...]
    nests: tuple[str, ...]
    """Host conditions (strides that nest) under which the merged leading axes read what the
    unmerged ones would: the host folds them into the flag."""
    tensor: str
    """The host expression the launch passes for the pointer."""
    shape: tuple[str, ...]
    strides: tuple[str, ...]
    block: tuple[str, ...]
    """The block as kernel text (the reshape of loads and stores)."""
    uses: tuple[ast.Call, ...]


def descriptor_assigns(mod: PyModule, kernel: ast.FunctionDef) -> list[ast.Assign]:
    """Every `d = tl.make_tensor_descriptor(...)` of `kernel`, wherever it is."""
    return [n for n in ast.walk(kernel) if isinstance(n, ast.Assign) and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call)
            and callee(n.value) in MAKE]


def _list(call: ast.Call, position: int, key: str) -> list[ast.expr] | None:
    node = call.args[position] if len(call.args) > position else next(
        (k.value for k in call.keywords if k.arg == key), None)
    return list(node.elts) if isinstance(node, (ast.List, ast.Tuple)) else None


class _Host:
    """Kernel expressions read as the host values one launch gives them."""

    def __init__(self, mod: PyModule, kernel: ast.FunctionDef, launch: Launch) -> None:
        self.mod, self.kernel, self.launch = mod, kernel, launch
        self.values = launch.values()
        self.heuristics = heuristic_entries(mod, kernel)[1]
        """What a heuristic sets, the function computing it: it wins over the launch's value."""
        self.tuned = {str(k.value) for c in autotune_entries(mod, kernel)
                      if c.args and isinstance(c.args[0], ast.Dict)
                      for k in c.args[0].keys if isinstance(k, ast.Constant)}
        grid = launch_grid(mod, launch.site)
        self.meta: str | None = None
        if isinstance(grid, ast.Lambda):
            self.meta = grid.args.args[0].arg if grid.args.args else None
            grid = grid.body
        elif isinstance(grid, ast.FunctionDef):
            self.meta = grid.args.args[0].arg if grid.args.args else None
            rets = [n for n in ast.walk(grid) if isinstance(n, ast.Return)]
            grid = rets[0].value if len(rets) == 1 else None
        self.axes: list[list[str]] | None = None
        if isinstance(grid, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in grid.elts):
            self.axes = [[ast.unparse(f) for f in _factors(e)] for e in grid.elts]

    def text(self, node: ast.AST, meta: bool = False) -> str | None:
        """`node` as a host expression: each kernel parameter replaced by what the launch passes
        (`meta`: a configuration's value, as the grid reads it), `tl.cdiv` by `triton.cdiv`;
        None where it reads anything else."""
        params = {a.arg for a in self.kernel.args.args}
        bad = False
        outer = self

        class _Swap(ast.NodeTransformer):
            def visit_Name(self, n: ast.Name) -> ast.AST:  # noqa: N802 — ast API
                nonlocal bad
                if n.id in outer.values and n.id in params and n.id not in outer.heuristics:
                    return ast.parse(f"({ast.unparse(outer.values[n.id])})", mode="eval").body
                if meta and outer.meta and n.id in outer.tuned:
                    return ast.parse(f"{outer.meta}[{n.id!r}]", mode="eval").body
                bad = True
                return n

            def visit_Call(self, n: ast.Call) -> ast.AST:  # noqa: N802
                nonlocal bad
                axis = program_axis(n) if callee(n) in NUM_PROGRAMS else None
                if axis is not None and outer.axes is not None:
                    size = outer.axes[axis] if axis < len(outer.axes) else []
                    if outer.meta and any(outer.meta in f for f in size):
                        bad = True
                        return n
                    return ast.parse(f"({' * '.join(size) or '1'})", mode="eval").body
                if is_cdiv(n):
                    return ast.Call(ast.parse("triton.cdiv", mode="eval").body,
                                    [self.visit(a) for a in n.args], [])
                bad = True
                return n

            def visit_Attribute(self, n: ast.Attribute) -> ast.AST:  # noqa: N802
                nonlocal bad
                bad = True
                return n

        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return str(node.value)
        new = _Swap().visit(ast.parse(ast.unparse(node), mode="eval"))
        return None if bad else ast.unparse(new)


def _factors(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _extent(scope: Scope, host: _Host, node: ast.AST, depth: int = 0) -> list[str] | None:
    """The number of values index `node` takes as a product of host factors of the launch
    grid, or None where it cannot be told: a program id is as many as its grid axis,
    `num_programs(a) - 1 - program_id(a)` too, `x // n` one factor n fewer than x, `x % n` n
    (x an index of this kind: not negative); through names assigned once."""
    if depth > 20 or host.axes is None:
        return None
    if isinstance(node, ast.Name):
        value = scope.value(node)
        return _extent(scope, host, value, depth + 1) if value is not None else None
    if isinstance(node, ast.Call) and callee(node) in PROGRAM_ID:
        axis = program_axis(node)
        if axis is None:
            return None
        return list(host.axes[axis]) if axis < len(host.axes) else []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and isinstance(node.left, ast.BinOp) \
            and isinstance(node.left.op, ast.Sub) and literal_int(node.left.right) == 1 \
            and isinstance(node.left.left, ast.Call) and callee(node.left.left) in NUM_PROGRAMS:
        inner = node.right
        while isinstance(inner, ast.Name) and scope.value(inner) is not None:
            inner = scope.value(inner)
        if isinstance(inner, ast.Call) and callee(inner) in PROGRAM_ID \
                and program_axis(inner) == program_axis(node.left.left) is not None:
            return _extent(scope, host, inner, depth + 1)
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
        return _extent(scope, host, node.func.value, depth + 1)  # a cast: the same values
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod)):
        whole = _extent(scope, host, node.left, depth + 1)
        by = host.text(_expanded(scope, node.right), meta=True)
        if whole is None or by is None:
            return None
        if isinstance(node.op, ast.Mod):
            return [by]
        if by not in whole:
            return None
        rest = list(whole)
        rest.remove(by)
        return rest
    return None


def _expanded(scope: Scope, node: ast.AST, depth: int = 0) -> ast.AST:
    """`node` with each name assigned once replaced by its value (kernel parameters stay)."""
    if depth > 20:
        return node

    class _Inline(ast.NodeTransformer):
        def visit_Name(self, n: ast.Name) -> ast.AST:  # noqa: N802 — ast API
            value = scope.value(n)
            return _expanded(scope, value, depth + 1) if value is not None else n

    return _Inline().visit(ast.parse(ast.unparse(node), mode="eval")).body


@dataclass(frozen=True, slots=True)
class HostDescriptors(Pass):
    """In-kernel `tl.make_tensor_descriptor` over `ptr + index * stride...` -> a host-built
    `TensorDescriptor` kernel argument of higher rank. Optimization only."""

    name: ClassVar[str] = "host-descriptors"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = ("in-kernel tensor descriptors built once per launch on the host "
                              "(TensorDescriptor arguments, blocks set per configuration)")
    requires: ClassVar[tuple[str, ...]] = ("tma",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("arch >= sm_90",)
    # Offered without a card wherever a kernel builds descriptors. Measured on an H200 (causal
    # attention, B=4 H=16 S=2048 D=64 fp16): the K/V descriptors built on the host ran 0.1175
    # ms against 0.1277 built in the kernel. A small kernel gains less (the descriptor write is
    # once per program), so a modest prior, a sweep's own.
    prior: ClassVar[float] = 1.05

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for kernel in mod.kernels():
            assigns = descriptor_assigns(mod, kernel)
            if assigns:
                out.append(make_site(self.name, ir, index, (0, len(mod.source)), False,
                                     {"kernel": kernel.name,
                                      "descriptors": [a.targets[0].id for a in assigns]},
                                     mod.span(assigns[0])))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return Skipped("host-descriptors only moves in-kernel descriptors to the host; it writes "
                       "none back", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        results, skip = self.check(ctx, {})
        if skip:
            return skip
        launches = kernel_launches(mod, kernel)
        if len(launches) != 1 or launches[0].partial is not None \
                or launches[0].call.func is not launches[0].site or launches[0].opaque:
            return Skipped("the kernel is not launched exactly once, directly, with every "
                           "argument readable: no one host builds its descriptors",
                           {"kernel": kernel.name, "launches": len(launches)})
        if kernel.args.vararg or kernel.args.kwarg:
            return Skipped("the kernel takes *args / **kwargs", {"kernel": kernel.name})
        launch = launches[0]
        host = _Host(mod, kernel, launch)
        plans, refused = [], []
        for assign in descriptor_assigns(mod, kernel):
            got = _plan(mod, kernel, host, assign)
            (refused if isinstance(got, str) else plans).append(got)
        if not plans:
            return Skipped(f"no descriptor of {kernel.name} can be built on the host: {refused[0]}",
                           {"kernel": kernel.name, "refused": refused})
        configs = autotune_entries(mod, kernel)
        tuned = bool(configs)
        if mod.decorator(kernel, "autotune") is not None and not configs:
            return Skipped("the kernel's autotune list is not a literal list: no pre_hook can be "
                           "given to its configurations", {"kernel": kernel.name})
        if any(k.arg == "pre_hook" for c in configs for k in c.keywords):
            return Skipped("a configuration already runs a pre_hook", {"kernel": kernel.name})
        blocks = {}
        for p in plans:
            block = [host.text(_expanded(Scope(mod, kernel), ast.parse(b, mode="eval").body))
                     if not tuned else _hook_text(mod, kernel, host, b) for b in p.block]
            if any(b is None for b in block):
                return Skipped(f"the block of {p.name} is not a value the launch or a "
                               f"configuration gives", {"descriptor": p.name, "block": list(p.block)})
            blocks[p.name] = ["1"] * len(p.leads) + block
            unnamed = [b for b in p.block if not tuned and literal_int(host.values.get(b)) is not None
                       and not _nameable(launch, b)]
            if unnamed:  # a sweep would tune the tile and leave the host's block behind
                return Skipped(f"the launch passes {', '.join(unnamed)} (a block of {p.name}) in a "
                               f"form the host cannot name", {"descriptor": p.name})
        return finish(ir, site, _edits(mod, kernel, launch, plans, blocks, tuned, configs),
                      preconditions=results)


def _hook_text(mod: PyModule, kernel: ast.FunctionDef, host: _Host, text: str) -> str | None:
    """A block entry as a configuration's pre_hook reads it from `nargs` (the launch's
    arguments and the configuration's values): a value a heuristic sets is its function called
    on `nargs` (the autotuner runs the pre_hook before the heuristics), where that function
    reads no other heuristic's value. None where the entry reads anything else."""
    node = ast.parse(text, mode="eval").body
    if any(isinstance(n, (ast.Call, ast.Attribute)) for n in ast.walk(node)):
        return None
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    swap: dict[str, str] = {}
    for name in names:
        fn = host.heuristics.get(name)
        if fn is not None:
            read = {n.slice.value for n in ast.walk(fn) if isinstance(n, ast.Subscript)
                    and isinstance(n.slice, ast.Constant)}
            if not isinstance(fn, ast.Lambda) or read & set(host.heuristics) or any(
                    isinstance(n, ast.Subscript) and not isinstance(n.slice, ast.Constant)
                    for n in ast.walk(fn)):
                return None
            swap[name] = f"({mod.text(fn)})(nargs)"
        elif name in host.tuned or name in host.values:
            swap[name] = f'nargs["{name}"]'
        else:
            return None

    out = text
    for n in sorted((n for n in ast.walk(node) if isinstance(n, ast.Name)),
                    key=lambda n: n.col_offset, reverse=True):
        out = out[:n.col_offset] + swap[n.id] + out[n.end_col_offset:]
    return out


def _flag_of(mod: PyModule, kernel: ast.FunctionDef, assign: ast.Assign) -> str | None | bool:
    """The flag of `if FLAG:` (a constexpr parameter) the assignment stands in, directly in the
    kernel's body; None where it stands in the body itself; False anywhere else."""
    parent = mod.parents.get(assign)
    if parent is kernel:
        return None
    if isinstance(parent, ast.If) and mod.parents.get(parent) is kernel and assign in parent.body \
            and isinstance(parent.test, ast.Name) and parent.test.id in constexpr_params(kernel):
        return parent.test.id
    return False


def _plan(mod: PyModule, kernel: ast.FunctionDef, host: _Host, assign: ast.Assign) -> _Plan | str:
    """The rewrite of one descriptor, or why not."""
    name, call = assign.targets[0].id, assign.value
    flag = _flag_of(mod, kernel, assign)
    if flag is False:
        return f"{name} is built inside a loop or branch"
    if flag is not None and flag not in host.values:
        return f"{name} is built under {flag}, which the launch never sets"
    parts = [_list(call, i, key) for i, key in ((1, "shape"), (2, "strides"), (3, "block_shape"))]
    if not call.args or any(p is None for p in parts) or len({len(p) for p in parts}) != 1:
        return f"{name}'s shape, strides and block are not lists of one length"
    shape, strides, block = parts
    uses = []
    for node in ast.walk(kernel):
        if isinstance(node, ast.Name) and node.id == name and node is not assign.targets[0]:
            attr = mod.parents.get(node)
            use = mod.parents.get(attr)
            if not (isinstance(attr, ast.Attribute) and attr.attr in ("load", "store")
                    and isinstance(use, ast.Call) and use.func is attr and use.args
                    and isinstance(use.args[0], (ast.List, ast.Tuple))
                    and len(use.args) == (1 if attr.attr == "load" else 2) and not use.keywords):
                return f"{name} is used other than by its own loads and stores (line {node.lineno})"
            uses.append(use)
    if sum(1 for a in descriptor_assigns(mod, kernel) if a.targets[0].id == name) != 1:
        return f"{name} is assigned more than once"
    scope = Scope(mod, kernel)
    terms = _summands(scope, call.args[0])
    pointers = [t for t in terms or [] if isinstance(t, ast.Name) and t.id in scope.params]
    if terms is None or len(pointers) != 1:
        return f"the base of {name} is not one pointer parameter plus offsets"
    pointer = pointers[0].id
    moves = _rebinds(kernel, pointer)
    if moves:  # `p += index * stride` once, before the descriptor: a term of its base
        move = moves[0]
        if len(moves) != 1 or not isinstance(move, ast.AugAssign) or not isinstance(move.op, ast.Add) \
                or move not in kernel.body or mod.end(move) > mod.start(assign):
            return f"{pointer} is rebound other than once by `+=` before {name}"
        more = _summands(scope, move.value)
        if more is None:
            return f"what {pointer} is moved by is not a sum"
        terms = [*terms, *more]
    fixed = [n.id for part in parts for e in part for n in ast.walk(e)
             if isinstance(n, ast.Name) and n.id in scope.params and _rebinds(kernel, n.id)]
    if fixed:
        return f"{name} reads {', '.join(sorted(set(fixed)))}, which the kernel rebinds"
    values = host.values
    if pointer not in values:
        return f"the launch does not pass {pointer}"
    if not isinstance(values[pointer], (ast.Name, ast.Attribute)):
        # evaluated twice, an expression may make two tensors (`x.contiguous()` copies)
        return f"the launch passes {pointer} as an expression, not a tensor it holds"
    leads = []
    for term in terms:
        if term is pointers[0]:
            continue
        lead = _lead(scope, host, term)
        if isinstance(lead, str):
            return f"the base of {name}: {lead}"
        leads.append(lead)
    nests: list[str] = []
    if flag is not None:  # a layout the merged axes cannot read takes the pointer path
        leads, nests = _merged(scope, leads)
    host_shape = [host.text(_expanded(scope, s)) for s in shape]
    if any(s is None for s in host_shape):
        return f"the shape of {name} is not made of values the launch passes"
    host_strides = []
    for s in strides:
        literal = literal_int(s)
        value = values.get(s.id) if isinstance(s, ast.Name) and s.id in scope.params else None
        if literal is not None:
            host_strides.append(str(literal))
        elif value is not None and stride_of(value) is not None:
            host_strides.append(ast.unparse(value))
        else:
            return f"a stride of {name} is not a tensor's stride the launch passes"
    return _Plan(assign, name, pointer, flag, tuple(leads), tuple(nests), ast.unparse(values[pointer]),
                 tuple(host_shape), tuple(host_strides), tuple(mod.text(b) for b in block),
                 tuple(sorted(uses, key=mod.start)))


def _rebinds(kernel: ast.FunctionDef, name: str) -> list[ast.stmt]:
    """The statements of `kernel` that bind `name` (a loop's target included)."""
    out = []
    for node in ast.walk(kernel):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)) else []
        if any(isinstance(t, ast.Name) and t.id == name for tg in targets for t in ast.walk(tg)):
            out.append(node)
    return out


def _lead(scope: Scope, host: _Host, term: ast.AST) -> _Lead | str:
    """One `index * stride` term of a base as a leading axis, or why not."""
    while isinstance(term, ast.Name) and scope.value(term) is not None \
            and scope.assigned_at[term.id] in scope.kernel.body:
        term = scope.value(term)
    if not (isinstance(term, ast.BinOp) and isinstance(term.op, ast.Mult)):
        return f"{ast.unparse(term)} is not an index times a stride"
    for index, stride in ((term.left, term.right), (term.right, term.left)):
        if not (isinstance(stride, ast.Name) and stride.id in scope.params):
            continue
        value = host.values.get(stride.id)
        if value is None or stride_of(value) is None:
            return f"{stride.id} is not a tensor's stride the launch passes"
        size = _extent(scope, host, index)
        if size is None:
            return (f"how many values {ast.unparse(index)} takes is not read from the launch "
                    f"grid")
        if host.meta and host.meta in {n.id for f in size for n in ast.walk(ast.parse(f, mode="eval"))
                                       if isinstance(n, ast.Name)}:
            return f"how many values {ast.unparse(index)} takes depends on the configuration"
        text = _index_text(scope, index)
        if text is None:
            return f"{ast.unparse(index)} reads a name not bound once before its loads"
        return _Lead(text, ast.unparse(value), _product(size), index)
    return f"{ast.unparse(term)} is not an index times a stride parameter"


def _index_text(scope: Scope, index: ast.expr) -> str | None:
    """`index` as the kernel's loads read it (an int32 coordinate), or None where it reads a
    name the kernel binds other than once, in its body."""
    names = {n.id for n in ast.walk(index) if isinstance(n, ast.Name)}
    if any(_rebinds(scope.kernel, n)
           and not (n in scope.single and scope.assigned_at[n] in scope.kernel.body) for n in names):
        return None
    text = ast.unparse(index)
    return f"({text}).to(tl.int32)" if _wide(scope.kernel, text) else text


def _product(factors: list[str]) -> str:
    """The host text of a product of host expressions (`1` for none)."""
    atoms = (ast.Name, ast.Constant, ast.Call, ast.Attribute, ast.Subscript)
    out = []
    for f in factors:
        node = ast.parse(f, mode="eval").body
        plain = isinstance(node, atoms) or (isinstance(node, ast.BinOp)
                                            and isinstance(node.op, ast.Mult))
        out.append(f if plain else f"({f})")
    return " * ".join(out) or "1"


def _split(scope: Scope, index: ast.expr) -> ast.BinOp | None:
    """`index` as `x // n` or `x % n` (through names assigned once), None otherwise."""
    for _ in range(20):
        if not isinstance(index, ast.Name) or scope.value(index) is None:
            break
        index = scope.value(index)
    split = isinstance(index, ast.BinOp) and isinstance(index.op, (ast.FloorDiv, ast.Mod))
    return index if split else None


def _merged(scope: Scope, leads: list[_Lead]) -> tuple[list[_Lead], list[str]]:
    """`leads` with each pair `x // n` (outer), `x % n` (inner) made one axis indexed by x, of
    their sizes' product and the inner stride, again until no pair is left (three axes can
    become one); with the host conditions each merge holds under: the outer stride is n inner
    strides. The pair's indices are read where both are assigned once, so `x` and `n` are the
    same values in both; n is the inner axis's size, as `_extent` gives `x % n`."""
    leads, nests = list(leads), []
    while True:
        for outer in leads:
            whole = _split(scope, outer.node)
            if whole is None or not isinstance(whole.op, ast.FloorDiv):
                continue
            key = (ast.unparse(_expanded(scope, whole.left)),
                   ast.unparse(_expanded(scope, whole.right)))
            inner = next((ld for ld in leads if (part := _split(scope, ld.node)) is not None
                          and isinstance(part.op, ast.Mod)
                          and (ast.unparse(_expanded(scope, part.left)),
                               ast.unparse(_expanded(scope, part.right))) == key), None)
            text = _index_text(scope, whole.left) if inner is not None else None
            if inner is None or text is None:
                continue
            leads[leads.index(outer)] = _Lead(text, inner.stride, _product([outer.size, inner.size]),
                                              whole.left)
            leads.remove(inner)
            nests.append(f"{outer.stride} == {_product([inner.size, inner.stride])}")
            break
        else:
            return leads, nests


def _edits(mod: PyModule, kernel: ast.FunctionDef, launch: Launch, plans: list[_Plan],
           blocks: dict[str, list[str]], tuned: bool, configs: list[ast.Call]) -> list[ByteEdit]:
    src = mod.source
    edits: list[ByteEdit] = []
    # the kernel: declarations out, coordinates and tiles of higher rank
    removed = {id(p.assign) for p in plans}
    for p in plans:
        parent = mod.parents.get(p.assign)
        if isinstance(parent, ast.If) and all(id(s) in removed for s in parent.body) \
                and not parent.orelse:
            if p.assign is parent.body[0]:
                start = comment_above(src, line_start(src, mod.start(parent)))
                edits.append(ByteEdit(start, line_end(src, mod.end(parent) - 1), ""))
            continue
        start = line_start(src, mod.start(p.assign))
        edits.append(ByteEdit(start, line_end(src, mod.end(p.assign) - 1), ""))
    for p in plans:
        if not p.leads:
            continue
        lead = ", ".join(ld.index for ld in p.leads)
        ones = ", ".join("1" for _ in p.leads)
        for use in p.uses:
            coords = use.args[0]
            inner = ", ".join(mod.text(e) for e in coords.elts)
            if use.func.attr == "load":
                text = f"{p.name}.load([{lead}, {inner}]).reshape({', '.join(p.block)})"
            else:
                value = use.args[1]
                text = (f"{p.name}.store([{lead}, {inner}], "
                        f"({mod.text(value)}).reshape({ones}, {', '.join(p.block)}))")
            edits.append(ByteEdit(*mod.span(use), text))
    # the signature: each descriptor after its pointer (the pointer dropped where nothing
    # else reads it)
    by_pointer: dict[str, list[_Plan]] = {}
    for p in plans:
        by_pointer.setdefault(p.pointer, []).append(p)
    removed_spans = [(mod.start(p.assign), mod.end(p.assign)) for p in plans]
    kept: dict[str, bool] = {}
    for pointer in by_pointer:
        kept[pointer] = any(isinstance(n, ast.Name) and n.id == pointer
                            and not any(a <= mod.start(n) < b for a, b in removed_spans)
                            for stmt in kernel.body for n in ast.walk(stmt))
    args = {a.arg: a for a in kernel.args.args}
    for pointer, ps in by_pointer.items():
        names = ", ".join(p.name for p in ps)
        arg = args[pointer]
        if kept[pointer]:
            edits.append(ByteEdit(mod.end(arg), mod.end(arg), f", {names}"))
        else:
            edits.append(ByteEdit(*mod.span(arg), names))
        place = launch.passed[pointer][-1]
        if isinstance(place.item, ast.keyword):
            given = ", ".join(f"{p.name}={p.name}" for p in ps)
            if kept[pointer]:
                edits.append(ByteEdit(mod.end(place.item), mod.end(place.item), f", {given}"))
            else:
                edits.append(ByteEdit(*mod.span(place.item), given))
        elif kept[pointer]:
            edits.append(ByteEdit(mod.end(place.value), mod.end(place.value), f", {names}"))
        else:
            edits.append(ByteEdit(*mod.span(place.value), names))
    # the host: a flag computed once, the descriptors built before the launch
    stmt = launch.call
    while not isinstance(stmt, ast.stmt):
        stmt = mod.parents[stmt]
    at = line_start(src, mod.start(stmt))
    indent = indent_of(src, mod.start(stmt))
    taken = {n.id for n in ast.walk(mod.tree) if isinstance(n, ast.Name)} | \
        {f.name for f in mod.functions()}
    lines, fits = [], {}
    for flag in sorted({p.flag for p in plans if p.flag is not None}):
        fit = fresh_name(flag.lower(), taken)
        taken.add(fit)
        fits[flag] = fit
        value = launch.values()[flag]
        nests = list(dict.fromkeys(c for p in plans if p.flag == flag for c in p.nests))
        text = mod.text(value)
        if nests and not isinstance(value, (ast.Name, ast.Constant, ast.Call, ast.Compare)) and not (
                isinstance(value, ast.BoolOp) and isinstance(value.op, ast.And)):
            text = f"({text})"
        lines.append(f"{indent}{fit} = {' and '.join([text, *nests])}\n")
        edits.append(ByteEdit(*mod.span(value), fit))
    if tuned:
        lines.append(f"{indent}# the configuration's pre_hook sets each descriptor's block\n")
    named: dict[str, str] = {}  # a tile the launch gives as a literal -> the host name it gets
    tiles: list[str] = []  # their bindings
    for p in plans:
        shape = [ld.size for ld in p.leads] + list(p.shape)
        strides = [ld.stride for ld in p.leads] + list(p.strides)
        block = ["1"] * len(blocks[p.name]) if tuned else blocks[p.name]
        if not tuned:  # a tile the launch passes as a literal is named, so a sweep can set it
            block = ["1"] * len(p.leads) + [_named_tile(mod, launch, b, named, taken, tiles, edits,
                                                        indent) or h
                                            for b, h in zip(p.block, block[len(p.leads):])]
        made = (f"TensorDescriptor({p.tensor}, [{', '.join(shape)}], [{', '.join(strides)}], "
                f"[{', '.join(block)}])")
        if p.flag is not None:
            made = f"{made} if {fits[p.flag]} else None"
        lines.append(f"{indent}{p.name} = {made}\n")
    if tiles:
        grid_at, grid_edits = _named_grid(mod, kernel, launch, named, stmt)
        edits += grid_edits
        if grid_at == at:
            lines = tiles + lines
        else:
            edits.append(ByteEdit(grid_at, grid_at, "".join(
                indent_of(src, grid_at) + t.lstrip(" \t") for t in tiles)))
    edits.append(ByteEdit(at, at, "".join(lines)))
    # the configurations: a pre_hook that sizes the blocks
    top = _import_at(mod)
    head = "" if b"import TensorDescriptor" in src else IMPORT
    if tuned:
        hook = fresh_name(f"_{kernel.name.strip('_')}_descriptor_blocks", taken)
        body = "".join(f'    if nargs["{p.name}"] is not None:\n'
                       f'        nargs["{p.name}"].block_shape = [{", ".join(blocks[p.name])}]\n'
                       for p in plans)
        first = min(mod.start(d) for d in kernel.decorator_list)
        where = comment_above(src, line_start(src, first))
        edits.append(ByteEdit(where, where,
                              f"def {hook}(nargs):\n    \"\"\"The host-built tensor descriptors "
                              f"take the configuration's tiles as their blocks.\"\"\"\n{body}\n\n"))
        for c in configs:
            end = mod.end(c) - 1
            sep = "" if src[:end].rstrip().endswith(b",") else ", "
            edits.append(ByteEdit(end, end, f"{sep}pre_hook={hook}"))
    if head:
        edits.append(ByteEdit(top, top, head))
    return sorted(edits, key=lambda e: (e.start, e.end))


def _named_tile(mod: PyModule, launch: Launch, entry: str, named: dict[str, str], taken: set[str],
                lines: list[str], edits: list[ByteEdit], indent: str) -> str | None:
    """The host name of block entry `entry` where it is a parameter the launch passes as a
    literal int: bound to that literal before the launch (`lines`), which then passes the name
    (`edits`), so that the descriptor's block and the launch read one host value (the form a
    configuration sweep rewrites: it sets the block per configuration). None otherwise."""
    if entry in named:
        return named[entry]
    value = launch.values().get(entry)
    if literal_int(value) is None or not _nameable(launch, entry):
        return None
    name = fresh_name(entry.lower(), taken)
    taken.add(name)
    named[entry] = name
    lines.append(f"{indent}{name} = {mod.text(value)}\n")
    edits.append(ByteEdit(*mod.span(value), name))
    return name


def _named_grid(mod: PyModule, kernel: ast.FunctionDef, launch: Launch, named: dict[str, str],
                stmt: ast.stmt) -> tuple[int, list[ByteEdit]]:
    """Where the named tiles are bound (before the statement that binds the launch's grid,
    where one of the launching function's does, else before the launch) and the edits that make
    the grid read them: each literal a configuration sweep reads as that tile's copy
    (`roles._grid_rewrite`)."""
    src = mod.source
    host = mod.enclosing(launch.site, ast.FunctionDef)
    grid = launch_grid(mod, launch.site)
    at = line_start(src, mod.start(stmt))
    if grid is None:
        return at, []
    holder = grid if isinstance(grid, ast.FunctionDef) else mod.parents.get(grid)
    if isinstance(holder, ast.stmt) and holder is not stmt and host is not None \
            and holder in host.body and mod.start(holder) < mod.start(stmt):
        at = line_start(src, mod.start(holder))
    if isinstance(grid, (ast.Lambda, ast.FunctionDef)):
        return at, []  # it reads the tiles from the launch's meta-parameters
    # the sweep's own reading of which literal of the grid is which tile: it rewrites them to
    # `meta["P"]`; here they become the host names instead
    made = _grid_rewrite(mod, kernel, launch, list(named), launch.values())
    edits = []
    if not isinstance(made, SweepRefusal):
        for e in made:
            text = e.text.removeprefix("lambda meta: ")
            for param, name in named.items():
                text = text.replace(f'meta["{param}"]', name)
            edits.append(ByteEdit(e.start, e.end, text))
    return at, edits


def _nameable(launch: Launch, param: str) -> bool:
    """The launch passes `param` itself, as an argument or keyword of its own call."""
    place = launch.passed.get(param, ())
    return bool(place) and place[-1].spread is None and place[-1].holder is launch.call


def _import_at(mod: PyModule) -> int:
    """After the module's last top-level import."""
    last = None
    for node in mod.tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            last = node
    return 0 if last is None else line_end(mod.source, mod.end(last) - 1)
