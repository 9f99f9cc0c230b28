"""A dot kernel's reduction split over a new grid axis (split-K), for outputs of few tiles.

A GEMM whose output has few tiles for the GPU's SMs (a skinny product: 8 rows by 8192 columns
in 64-column strips is 128 programs on an H200's 132 SMs, each walking all of K) leaves SMs idle
however its tiles are sized: there are too few programs, and each is long. Split-K gives each
output tile SPLIT_K programs on a new grid axis, each walking every SPLIT_K-th step of the K loop
(`range(lo + pid_k * step, hi, step * SPLIT_K)`: the trips are the original loop's, so the
loads' masks, written against the true k offsets, stay right), and adds the partial sums into
the output with `tl.atomic_add`. SPLIT_K is a constexpr (default 1, so a launch that does not
pass it runs as before); at 1 a constexpr branch keeps the plain store.

The partial sums go to a zeroed fp32 workspace, which a small Triton kernel then casts into the
output: an fp32 sum loses nothing to the order of the additions beyond fp32 rounding, and
`tl.atomic_add` of bf16 is not run by Triton 3.9's interpreter ("Unsupported data type"), where
fp32 is. Who picks SPLIT_K:
- a launch with literal meta-parameters: the host, at the launch, the smallest power of two (at
  most 16) that brings the grid's program count to the SM count
  (`torch.cuda.get_device_properties(...).multi_processor_count`, 4 off the GPU). A launch
  whose tiles already fill the GPU runs unsplit, on its own output, with no workspace; one that
  splits passes a zeroed workspace in the output's place and casts it after.
- an autotuned kernel: its autotuner. Each configuration is kept at SPLIT_K 1 and copies at 2
  and 4 of those with the fewest output tiles follow (no more copies than configurations). The
  host cannot know the pick before the launch, so the kernel takes the workspace as a parameter
  of its own (`partial_ptr`, the store's address written on it), every configuration runs a
  `pre_hook` that zeroes it where its SPLIT_K is above 1 (the autotuner's timing counts that),
  and the host casts after the launch where the autotuner's `best_config` split. An allocation
  from PyTorch's caching allocator costs no kernel; the unsplit configurations write the output
  as before. (A sweep that rewrites the list keeps the hook, and SPLIT_K at its first
  configuration's value, 1: `roles._decorator_text`.)

The site is read by role, never by name: a `@triton.jit` kernel with one loop (a direct
statement of its body) that accumulates `tl.dot` into one accumulator started at zero, whose
trips depend on nothing earlier trips carry but pointers each advanced by one `p += X` of a
fixed amount (the slice starts them `pid_k` steps on and advances them SPLIT_K steps a trip),
stored once after the loop as itself or its `.to(...)`; launched as a statement of its own over
a tuple grid (or, autotuned, a lambda of one) of at most two axes, with an output the host
allocates with `torch.empty` / `torch.empty_like` in the launching function. Everything else is
refused with the reason: an epilogue that is not linear in the accumulator (an activation, a
bias added: each slice would add it), several stores, a loop whose bounds the program derives
from its own tile (already split, or a triangle), a grid over the meta-parameters without
an autotuner, configurations with a `pre_hook` of their own.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from passes._source import ByteEdit, finish, indent_of, line_end, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, fresh_name, names_in
from passes.triton.roles import (DOT, NUM_PROGRAMS, PID_CALLS, SHAPED, _ptr_like, accumulators,
                                 autotune_entries, constexpr_params, dot_loops, kernel_launches,
                                 launch_grid, pid_names, program_axis)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

RANGES = frozenset({"range", "tl.range", "triton.language.range"})
STORE = frozenset({"tl.store", "triton.language.store"})
ALLOCATIONS = frozenset({"empty", "empty_like"})
SPLIT = "SPLIT_K"
MAX_SPLIT = 16

# The host half, put after the module's imports (`str.format` fields: the names); a later
# split of another kernel of the module finds it by its text.
_COUNT = '''def {count}(programs: int, device) -> int:
    """SPLIT_K for a launch of `programs` output tiles: the smallest power of two that brings
    them to the SM count (4 off the GPU), at most {most}."""
    sms = torch.cuda.get_device_properties(device).multi_processor_count \\
        if device.type == "cuda" else 4
    split = 1
    while programs * split < sms and split < {most}:
        split *= 2
    return split
'''
_CAST = '''def {cast}(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=keep).to(dst_ptr.dtype.element_ty),
             mask=keep)
'''
_HOOK = '''def {hook}(nargs):
    """A configuration that splits K adds its partial sums into the fp32 workspace: zero it."""
    if nargs.get("{split}", 1) > 1:
        nargs["{workspace}"].zero_()
'''


@dataclass(frozen=True, slots=True)
class _Kernel:
    """What the rewrite needs of one kernel: its dot loop, accumulator, store and output."""

    loop: ast.For
    acc: str
    store: ast.Expr
    ptr: ast.AST
    mask: ast.AST | None
    output: str
    axis: int
    advanced: tuple[tuple[str, ast.AST], ...]
    """(p, X) of each `p += X` of a name the loop carries (a pointer it advances a trip)."""
    tiles: frozenset[str]
    """The constexpr parameters the store's address reads (the output tile's sizes)."""


def _advance(loop: ast.For, name: str) -> ast.AST | None:
    """X of the loop's one update of `name`, `name += X` or `name = name + X`, a statement of
    the loop body itself, X free of what the loop assigns; None for anything else."""
    writes = [s for s in ast.walk(loop) if isinstance(s, (ast.Assign, ast.AugAssign))
              and name in _assigned([s])]
    if len(writes) != 1 or writes[0] not in loop.body:
        return None
    w = writes[0]
    if isinstance(w, ast.AugAssign) and isinstance(w.op, ast.Add) and isinstance(w.target, ast.Name):
        amount = w.value
    elif isinstance(w, ast.Assign) and len(w.targets) == 1 and isinstance(w.value, ast.BinOp) \
            and isinstance(w.value.op, ast.Add) and isinstance(w.value.left, ast.Name) \
            and w.value.left.id == name:
        amount = w.value.right
    else:
        return None
    if names_in(amount) & (_assigned(loop.body) | {loop.target.id}):
        return None
    return amount


def _is_range(loop: ast.stmt) -> bool:
    return isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call) \
        and callee(loop.iter) in RANGES and 1 <= len(loop.iter.args) <= 3 \
        and isinstance(loop.target, ast.Name)


def _linear_update(node: ast.stmt, acc: str) -> bool:
    """`acc += X`, `acc = acc + X` or `acc = tl.dot(a, b, acc)` with X, a, b free of acc."""
    if isinstance(node, ast.AugAssign):
        return isinstance(node.op, ast.Add) and acc not in names_in(node.value)
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return False
    value = node.value
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        sides = [value.left, value.right]
        plain = [s for s in sides if isinstance(s, ast.Name) and s.id == acc]
        rest = [s for s in sides if s not in plain]
        return len(plain) == 1 and all(acc not in names_in(s) for s in rest)
    if isinstance(value, ast.Call) and callee(value) in DOT and len(value.args) == 3 \
            and not value.keywords:
        return isinstance(value.args[2], ast.Name) and value.args[2].id == acc \
            and all(acc not in names_in(a) for a in value.args[:2])
    return False


def _stored(node: ast.AST, acc: str, aliases: set[str]) -> bool:
    """Whether `node` is the accumulator as it is: `acc`, an alias of it, or `acc.to(...)`."""
    if isinstance(node, ast.Name):
        return node.id == acc or node.id in aliases
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
        and node.func.attr == "to" and isinstance(node.func.value, ast.Name) \
        and node.func.value.id == acc


def _assigned(stmts: list[ast.stmt]) -> set[str]:
    return {n.id for s in stmts for n in ast.walk(s)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def read_kernel(kernel: ast.FunctionDef) -> _Kernel | str:
    """The split-K reading of `kernel`, or why it has none (module docstring)."""
    loops = dot_loops(kernel)
    if len(loops) != 1:
        return f"`{kernel.name}` has {len(loops)} loops that reduce with tl.dot, not one"
    loop = loops[0]
    if loop not in kernel.body:
        return (f"`{kernel.name}`'s dot loop is inside another statement (a walk over tiles or "
                "groups): its programs already share out the work")
    if not _is_range(loop):
        return f"`{kernel.name}`'s dot loop is not a `range` / `tl.range` loop over one name"
    at = kernel.body.index(loop)
    before, after = kernel.body[:at], kernel.body[at + 1:]
    bounds = loop.iter.args[:2] if len(loop.iter.args) > 1 else loop.iter.args[:1]
    pids = pid_names(kernel)
    if any(names_in(b) & pids or any(callee(c) in PID_CALLS | NUM_PROGRAMS for c in ast.walk(b))
           for b in bounds):
        return (f"`{kernel.name}`'s K loop takes its bounds from the program's own tile: "
                "it is already split")
    if SPLIT in {a.arg for a in kernel.args.args + kernel.args.kwonlyargs}:
        return f"`{kernel.name}` already has a `{SPLIT}` parameter"
    if kernel.args.vararg or kernel.args.kwarg or kernel.args.kwonlyargs:
        return f"`{kernel.name}` takes *args, **kwargs or keyword-only parameters"
    accs = accumulators(loop)
    if len(accs) != 1:
        return f"`{kernel.name}`'s dot loop accumulates into {len(accs)} names, not one"
    acc = next(iter(accs))
    if any(isinstance(n, (ast.Break, ast.Continue, ast.Return)) for n in ast.walk(loop)):
        return f"`{kernel.name}`'s dot loop leaves early (break, continue or return)"
    body = [n for s in loop.body for n in ast.walk(s) if isinstance(n, ast.stmt)]
    writes = [s for s in body if acc in _assigned([s]) and isinstance(s, (ast.Assign, ast.AugAssign))
              and not isinstance(s, (ast.For, ast.While, ast.If))]
    reads = [n for s in loop.body for n in ast.walk(s)
             if isinstance(n, ast.Name) and n.id == acc and isinstance(n.ctx, ast.Load)]
    if not writes or not all(_linear_update(s, acc) for s in writes) \
            or len(reads) > sum(1 for s in writes if not isinstance(s, ast.AugAssign)):
        return f"`{kernel.name}`'s loop does more with `{acc}` than add tile products into it"
    carried = (_assigned(loop.body) - {acc, loop.target.id}) & _assigned(before)
    advanced = {n: _advance(loop, n) for n in sorted(carried)}
    odd = [n for n, x in advanced.items() if x is None]
    if odd:
        return (f"`{kernel.name}`'s loop carries {', '.join(f'`{n}`' for n in odd)} from trip to "
                "trip other than by one `+=` of a fixed amount: its trips are not independent")
    inits = [s for s in before if acc in _assigned([s])]
    if len(inits) != 1 or not isinstance(inits[0], ast.Assign) \
            or not isinstance(inits[0].value, ast.Call) or callee(inits[0].value) not in SHAPED \
            or (callee(inits[0].value).endswith("full")
                and not (len(inits[0].value.args) > 1 and isinstance(inits[0].value.args[1], ast.Constant)
                         and inits[0].value.args[1].value == 0)):
        return f"`{kernel.name}`'s accumulator `{acc}` does not start at zero"
    if (_assigned(loop.body) - {acc}) & names_in(ast.Module(body=after, type_ignores=[])):
        return f"`{kernel.name}` reads after the loop a value its last trip left"
    stores = [n for n in ast.walk(kernel) if isinstance(n, ast.Call)
              and (callee(n) in STORE or callee(n).split(".")[-1].startswith("atomic_"))]
    if len(stores) != 1:
        return f"`{kernel.name}` writes memory {len(stores)} times; split-K takes one store"
    store = stores[0]
    stmt = next((s for s in after if isinstance(s, ast.Expr) and s.value is store), None)
    if stmt is None or callee(store) not in STORE:
        return f"`{kernel.name}`'s store is not a plain tl.store statement after the dot loop"
    extra = [k.arg for k in store.keywords if k.arg != "mask"]
    if len(store.args) not in (2, 3) or extra:
        return f"`{kernel.name}`'s store passes {extra or 'more than a mask'}: atomic_add takes a mask only"
    mask = store.args[2] if len(store.args) == 3 else next(
        (k.value for k in store.keywords if k.arg == "mask"), None)
    aliases: set[str] = set()
    for s in after:
        if s is stmt:
            continue
        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name) \
                and _stored(s.value, acc, set()) and s.targets[0].id != acc:
            aliases.add(s.targets[0].id)
            continue
        if ({acc} | aliases) & names_in(s):
            return (f"`{kernel.name}`'s epilogue is not linear in the accumulator (line "
                    f"{s.lineno}): each K slice would apply it to its partial sum")
    if not _stored(store.args[1], acc, aliases) or ({acc} | aliases) & (
            names_in(store.args[0]) | (names_in(mask) if mask is not None else set())):
        return (f"`{kernel.name}` stores `{ast.unparse(store.args[1])}`, not the accumulator as "
                "it is: the epilogue is not linear across K slices")
    reached, frontier = set(), names_in(store.args[0])
    assigns = [n for n in ast.walk(kernel) if isinstance(n, ast.Assign)]
    while frontier - reached:
        reached |= frontier
        frontier = reached | {m for a in assigns if _assigned([a]) & reached for m in names_in(a.value)}
    outputs = reached & _ptr_like(kernel)
    if len(outputs) != 1:
        return f"`{kernel.name}`'s store address reads {len(outputs)} pointer parameters, not one"
    axes = [program_axis(c) for c in ast.walk(kernel)
            if isinstance(c, ast.Call) and callee(c) in PID_CALLS | NUM_PROGRAMS]
    if any(a is None for a in axes):
        return f"`{kernel.name}` reads a program axis that is not a literal"
    axis = max(axes, default=-1) + 1
    if axis > 2:
        return f"`{kernel.name}` uses all three program axes: no axis is left for the K slices"
    tiles = frozenset(reached & set(constexpr_params(kernel)))
    return _Kernel(loop, acc, stmt, store.args[0], mask, outputs.pop(), axis,
                   tuple(advanced.items()), tiles)


@dataclass(frozen=True, slots=True)
class _Launch:
    stmt: ast.Expr
    call: ast.Call
    grid: list[str]
    grid_node: ast.AST
    count: str
    output: ast.Name
    meta: str | None = None
    """The autotuned kernel's grid reads SPLIT_K from this parameter of its lambda (None: the
    host picks SPLIT_K; a tuple grid under an autotuner becomes a lambda of a fresh name)."""


def _read_launches(mod: PyModule, kernel: ast.FunctionDef, found: _Kernel) -> list[_Launch] | str:
    tuned = mod.decorator(kernel, "autotune") is not None
    if tuned:
        configs = autotune_entries(mod, kernel)
        if not configs:
            return f"`{kernel.name}`'s autotune list is not a literal list of triton.Config"
        if any(PyModule.keyword(c, "pre_hook") for c in configs):
            return f"`{kernel.name}`'s configurations have a pre_hook of their own"
        if any(isinstance(k, ast.Constant) and k.value == SPLIT for c in configs for k in c.args[0].keys):
            return f"`{kernel.name}`'s configurations already set {SPLIT}"
        if found.output not in names_in(found.ptr):
            return (f"`{kernel.name}`'s store address is not written on its output parameter "
                    f"`{found.output}`: the workspace's address cannot be written beside it")
    launches = kernel_launches(mod, kernel)
    if not launches:
        return f"`{kernel.name}` is not launched in the module"
    out = []
    for launch in launches:
        call = launch.call
        why = mod.shared_launch(call)
        if why or launch.partial is not None or launch.opaque or launch.spreads:
            return why or f"`{kernel.name}` is launched through a partial or a ** dict"
        stmt = mod.parents.get(call)
        if not isinstance(stmt, ast.Expr):
            return f"the launch on line {call.lineno} is not a statement of its own"
        if SPLIT in launch.passed:
            return f"the launch on line {call.lineno} already passes {SPLIT}"
        grid = launch_grid(mod, call)
        node = call.func.slice  # type: ignore[attr-defined]
        meta = None
        if tuned and isinstance(grid, ast.Lambda) and isinstance(grid.body, (ast.Tuple, ast.List)) \
                and len(grid.args.args) == 1:
            meta, node, grid = grid.args.args[0].arg, grid.body, grid.body
        elif not isinstance(grid, (ast.Tuple, ast.List)):
            return (f"the launch on line {call.lineno} has a grid that is not a tuple "
                    + ("or a lambda of one" if tuned else "(a grid over the meta-parameters): "
                       "its program count is not known before the launch"))
        if isinstance(node, ast.Name) and meta is None:
            texts = [f"{node.id}[{i}]" for i in range(len(grid.elts))]
            elts = [f"*{node.id}"]
        else:
            texts = elts = [mod.text(e) for e in grid.elts]
        if len(grid.elts) > found.axis:
            return (f"the grid on line {call.lineno} has {len(grid.elts)} axes, more than "
                    f"`{kernel.name}` reads: the next free one is not known")
        elts = elts + ["1"] * (found.axis - len(grid.elts))
        value = launch.values().get(found.output)
        host = mod.enclosing(call, ast.FunctionDef)
        if not isinstance(value, ast.Name) or host is None:
            return f"`{kernel.name}`'s output `{found.output}` is not a host name"
        bound = [s for s in ast.walk(host) if isinstance(s, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == value.id for t in s.targets)]
        if len(bound) != 1 or not isinstance(bound[0].value, ast.Call) \
                or callee(bound[0].value).split(".")[-1] not in ALLOCATIONS:
            return (f"the output `{value.id}` of the launch on line {call.lineno} is not "
                    "allocated once here with torch.empty / torch.empty_like")
        count = " * ".join(f"({t})" for t in texts) or "1"
        out.append(_Launch(stmt, call, elts, node, count, value,
                           meta or ("" if tuned else None)))
    return out


@dataclass(frozen=True, slots=True)
class SplitK(Pass):
    """A dot kernel's K loop split over a new grid axis of SPLIT_K programs whose partial sums
    are added atomically into a zeroed fp32 workspace, cast into the output by a small Triton
    kernel; SPLIT_K chosen at the launch from the grid and the SM count. Optimization only:
    a de-optimization would take a kernel's split off, which no lineage records yet."""

    name: ClassVar[str] = "split-k"
    category: ClassVar[Category] = Category.ALGORITHMIC
    summary: ClassVar[str] = ("a dot kernel's K loop split over a new grid axis (SPLIT_K programs "
                              "a tile, partial sums added atomically), for outputs of few tiles")
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    languages: ClassVar[tuple[str, ...]] = ("triton",)
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    # Offered without a card wherever a dot kernel takes it. The host splits only launches
    # whose tiles are fewer than the SMs, so where the tiles fill the GPU the rewrite runs the
    # kernel as before. On an H200 (bench/results/ab.md, f9707af) the split was slower on the
    # shape it was built for (M=8, N=8192, K=4096 bf16: 0.0397 -> 0.0574 ms under the generic
    # list), the workspace's memset and cast costing more than the programs gained. No gain is
    # expected (1.0), and a rule at 1.0 is not offered on its own (`lineage.moves.rule_moves`):
    # it stays a pass for `klineage` and for cards a lineage records.
    prior: ClassVar[float] = 1.0

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out = []
        for kernel in mod.kernels():
            loops = dot_loops(kernel)
            if len(loops) != 1:
                continue
            # never present: a loop whose bounds read the program's tile may be split over K
            # or walk a triangle (trmm), which no de-optimization of this rule takes apart
            out.append(make_site(self.name, ir, index, (0, len(ir.source)), False,
                                 {"kernel": kernel.name}, mod.span(loops[0])))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return Skipped("split-k only splits a K loop; it takes none off", {"site": site.anchor})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        kernel = next((k for k in mod.kernels() if k.name == site.detail.get("kernel")), None)
        if kernel is None:
            return Skipped("no kernel at the site", {"site": site.anchor})
        found = read_kernel(kernel)
        if isinstance(found, str):
            return Skipped(found, {"kernel": kernel.name})
        launches = _read_launches(mod, kernel, found)
        if isinstance(launches, str):
            return Skipped(launches, {"kernel": kernel.name})
        return finish(ir, site, sorted(_edits(mod, kernel, found, launches), key=lambda e: e.start))


def _edits(mod: PyModule, kernel: ast.FunctionDef, found: _Kernel,
           launches: list[_Launch]) -> list[ByteEdit]:
    src = mod.source
    taken = {n.id for n in ast.walk(mod.tree) if isinstance(n, ast.Name)} \
        | {f.name for f in mod.functions()} | {a.arg for n in ast.walk(mod.tree)
                                               if isinstance(n, ast.arguments) for a in n.args}
    tuned = launches[0].meta is not None
    edits: list[ByteEdit] = []
    # the signature: SPLIT_K last, defaulting to 1 (under an autotuner, then the workspace)
    args = kernel.args
    last = max([*(a.annotation or a for a in args.args), *args.defaults], key=mod.end)
    workspace = fresh_name("partial_ptr", taken) if tuned else ""
    edits.append(ByteEdit(mod.end(last), mod.end(last), f", {SPLIT}: tl.constexpr = 1"
                          + (f", {workspace}=None" if tuned else "")))
    # the loop: this slice's trips of the original ones
    loop, it = found.loop, found.loop.iter
    pid = fresh_name("pid_k", taken)
    ind = indent_of(src, mod.start(loop))
    starts = "".join(f"{ind}{name} += {pid} * ({mod.text(x)})\n" for name, x in found.advanced)
    edits.append(ByteEdit(line_start(src, mod.start(loop)), line_start(src, mod.start(loop)),
                          f"{ind}{pid} = tl.program_id({found.axis})\n{starts}"))
    edits += [ByteEdit(*mod.span(x), f"({mod.text(x)}) * {SPLIT}") for _, x in found.advanced]
    start = mod.text(it.args[0]) if len(it.args) > 1 else "0"
    stop = mod.text(it.args[1] if len(it.args) > 1 else it.args[0])
    step = mod.text(it.args[2]) if len(it.args) > 2 else "1"
    edits.append(ByteEdit(mod.start(it.args[0]), mod.end(it.args[-1]),
                          f"({start}) + {pid} * ({step}), {stop}, ({step}) * {SPLIT}"))
    # the store: plain at SPLIT_K 1, atomic into the workspace otherwise
    stmt = found.store
    ind = indent_of(src, mod.start(stmt))
    a, b = line_start(src, mod.start(stmt)), line_end(src, mod.end(stmt) - 1)
    plain = "".join("    " + line if line.strip() else line
                    for line in src[a:b].decode("utf-8").splitlines(keepends=True))
    mask = f", mask={mod.text(found.mask)}" if found.mask is not None else ""
    ptr = _renamed(mod, found.ptr, found.output, workspace) if tuned else mod.text(found.ptr)
    edits.append(ByteEdit(a, b, f"{ind}if {SPLIT} == 1:\n{plain}{ind}else:\n"
                                f"{ind}    tl.atomic_add({ptr}, {found.acc}{mask}, "
                                "sem=\"relaxed\")\n"))
    # the host: the split chosen (by the host, or the autotuner), the workspace, the grid axis,
    # the cast
    count, cast = _helpers(mod, taken)
    hook = fresh_name(f"_zero_{workspace}", taken) if tuned else ""
    if tuned:
        edits += _config_edits(mod, kernel, found, hook)
    for launch in launches:
        out = launch.output.id
        ind = indent_of(src, mod.start(launch.stmt))
        at = line_start(src, mod.start(launch.stmt))
        part = fresh_name("partial", taken)
        casting = (f"{cast}[(triton.cdiv({out}.numel(), 1024),)]"
                   f"({part}, {out}, {out}.numel(), BLOCK=1024)")
        end = line_end(src, mod.end(launch.stmt) - 1)
        if tuned:
            meta = launch.meta or fresh_name("meta", taken)
            axes = f"({', '.join(launch.grid)}, {meta}[\"{SPLIT}\"])"
            edits.append(ByteEdit(at, at, f"{ind}{part} = torch.empty_like({out}, dtype=torch.float32)\n"))
            edits.append(ByteEdit(*mod.span(launch.grid_node),
                                  axes if launch.meta else f"lambda {meta}: {axes}"))
            edits.append(mod.insert_argument(launch.call, len(PyModule.arguments(launch.call)),
                                             f"{workspace}={part}"))
            runs = mod.text(launch.call.func.value)  # type: ignore[attr-defined]
            edits.append(ByteEdit(end, end, f"{ind}if {runs}.best_config.kwargs.get(\"{SPLIT}\", 1) > 1:\n"
                                            f"{ind}    {casting}\n"))
            continue
        split = fresh_name("split_k", taken)
        edits.append(ByteEdit(at, at, f"{ind}{split} = {count}({launch.count}, {out}.device)\n"
                                      f"{ind}{part} = {out} if {split} == 1 else "
                                      f"torch.zeros_like({out}, dtype=torch.float32)\n"))
        edits.append(ByteEdit(*mod.span(launch.grid_node), f"({', '.join(launch.grid)}, {split})"))
        edits.append(ByteEdit(*mod.span(launch.output), part))
        edits.append(mod.insert_argument(launch.call, len(PyModule.arguments(launch.call)),
                                         f"{SPLIT}={split}"))
        edits.append(ByteEdit(end, end, f"{ind}if {part} is not {out}:\n{ind}    {casting}\n"))
    imports = [n for n in mod.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    at = line_end(src, mod.end(imports[-1]) - 1) if imports else 0
    header = ""
    if not any(f.name == count for f in mod.tree.body if isinstance(f, ast.FunctionDef)):
        plain_imports = {a.name for n in imports if isinstance(n, ast.Import) for a in n.names
                         if a.asname is None}
        header = ("".join(f"import {m}\n" for m in ("torch", "triton") if m not in plain_imports)
                  + "\n\n" + _COUNT.format(count=count, most=MAX_SPLIT)
                  + "\n\n@triton.jit\n" + _CAST.format(cast=cast))
    if tuned:
        header += "\n\n" + _HOOK.format(hook=hook, split=SPLIT, workspace=workspace)
    if header:
        edits.append(ByteEdit(at, at, header))
    return edits


def _renamed(mod: PyModule, node: ast.AST, name: str, to: str) -> str:
    """The text of `node` with each read of `name` written `to`."""
    base = mod.start(node)
    text = mod.source[base:mod.end(node)]
    for n in sorted((n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == name),
                    key=mod.start, reverse=True):
        text = text[:mod.start(n) - base] + to.encode() + text[mod.end(n) - base:]
    return text.decode("utf-8")


def _config_edits(mod: PyModule, kernel: ast.FunctionDef, found: _Kernel, hook: str) -> list[ByteEdit]:
    """Each configuration at SPLIT_K 1 with the workspace hook; after them, copies at 2 and 4 of
    those with the fewest output tiles (the largest product of the tile sizes the store's
    address reads), no more copies than configurations."""
    configs = autotune_entries(mod, kernel)

    def text(cfg: ast.Call, split: int) -> str:
        entries = cfg.args[0]
        base = mod.start(cfg)
        body = mod.text(cfg)
        close = mod.end(entries) - 1 - base  # the dict's closing brace
        item = f'"{SPLIT}": {split}'
        body = body[:close] + (", " if entries.keys else "") + item + body[close:]
        return body[:-1].rstrip().rstrip(",") + f", pre_hook={hook})"

    def area(cfg: ast.Call) -> int:
        out = 1
        for k, v in zip(cfg.args[0].keys, cfg.args[0].values):
            if isinstance(k, ast.Constant) and k.value in found.tiles and isinstance(v, ast.Constant) \
                    and isinstance(v.value, int):
                out *= v.value
        return out

    edits = [ByteEdit(*mod.span(c), text(c, 1)) for c in configs]
    largest = sorted(configs, key=area, reverse=True)
    copies = [text(c, split) for c in largest for split in (2, 4)][:len(configs)]
    last = configs[-1]
    ind = indent_of(mod.source, mod.start(last))
    at = mod.end(last)
    joined = "".join(f",\n{ind}{c}" for c in copies)
    edits[-1] = ByteEdit(mod.start(last), at, text(last, 1) + joined)
    return edits


def _helpers(mod: PyModule, taken: set[str]) -> tuple[str, str]:
    """The names of the host helpers: those an earlier split of this module wrote (recognized
    by their text), else fresh ones."""
    def bare(text: str) -> str:
        return "".join(text.split())

    defs = [f for f in mod.tree.body if isinstance(f, ast.FunctionDef)]
    count = next((f.name for f in defs
                  if bare(mod.text(f)) == bare(_COUNT.format(count=f.name, most=MAX_SPLIT))), None)
    cast = next((f.name for f in defs if bare(mod.text(f)) == bare(_CAST.format(cast=f.name))), None)
    if count is None or cast is None:
        return fresh_name("split_k_for", taken), fresh_name("split_k_cast", taken)
    return count, cast
