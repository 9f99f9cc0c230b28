"""A one-tile-per-program kernel turned persistent, read by role: no recorded loop needed.

A kernel launched over a 1-D grid whose body starts its work at `pid = tl.program_id(0)` does
one tile per program. Made persistent, it launches `min(tiles, resident)` programs, as many as
the GPU holds at once (below), and each walks the tiles `pid, pid + programs, ...`: the body
after the program id becomes the body of
`for pid in tl.range(tl.program_id(0), TILES, tl.num_programs(0), ...)`, right for any number
of programs. TILES is the
host grid's expression read in the kernel's terms: each launch argument becomes the kernel
parameter it is passed as, `meta["P"]` the constexpr P, `triton.cdiv` `tl.cdiv`. Work the
programs share before the loop (descriptors, constants) is then done once per program, and so
are tensor descriptor declarations in the walked body that read nothing it computes. The
loop's keywords are the caller's (`loop_keywords`); a body whose K loop feeds `tl.dot` from
tensor descriptors is where the expert's `flatten=True` was recorded (Triton pipelines the tile
loop and the K loop as one, so the next tile's loads overlap this tile's epilogue); over pointer
loads the flattened loop measured slower, and no keyword is carried there (`feeds_dot`).

A grid of several axes (row tiles, column tiles, a batch) is walked as one linear tile index in
launch order, axis 0 fastest: the grid becomes `(min(T0 * T1 * ..., programs),)` and each
`tl.program_id(a)` of the body reads its axis decoded from the index (`tile % T0`,
`tile // T0 % T1`, ...). So is a 1-D grid whose program id is read inline
(`tl.program_id(0) * COLS`) rather than in a statement of its own. A program id whose methods
the body calls (`.to(tl.int64)`) is bound through `tl.cast`: the interpreter hands a loop's
variable out as a Python int.

A literal divisor of the host grid (`cdiv(M, 32)` launched with `BLOCK_M=32`) that data flow
tells is one tile's host copy (`literal_tiles`) is read as that tile (`tl.cdiv(M, BLOCK_M)`).

Each `tl.num_programs(a)` the walked body reads becomes axis a's tile count (a rank-3
descriptor's batch extent). Refused, with the reason: `tl.num_programs` read before the first
program id, a `return` in the body (it would end
the walk), a grid that reads a host value the kernel does not receive, or counts tiles of a
literal size no tile owns (the kernel's count would go stale when a sweep retunes the tiles:
the sweep goes first and its grid reads `meta`), or tiles of unequal work: a range loop one of
whose bounds reads the program id while the other does not (a causal key loop stopping at the
diagonal, a triangular K loop). The GPU balances launched programs as they finish; a walk deals
tiles in turn, and its programs end unevenly (the causal attention state at 64x32 tiles on an
H200: 0.187 ms walked with the resident count, 0.158 launched). A split-K loop, whose start
alone reads the program id, is refused too, though its trips differ by one at most.

How many programs are resident is read from the compiled kernel, at the launch. One program per
SM gives up the occupancy of a kernel whose programs fit several to an SM (nw_attn_flat_ptrs's
persistent step at 64-row tiles and 4 warps: 0.301 ms against 0.161 one tile per program on an
H200), and an estimate from the source cannot tell how many fit: an sm_90 SM holds 64 warps,
65,536 registers and 228 KiB of shared memory (1 KiB of it reserved a block), at most 32
blocks, and for Triton's dot kernels registers bind, which only ptxas knows (Triton lets it use
up to 255 a thread). Compiled for sm_90 by Triton 3.9, that attention start kernel at 64x32
tiles and 4 warps takes 200 registers a thread (254 made persistent) and 12 KiB: 2 programs an
SM, where its warps would allow 16 and its shared memory 17; a 128x128x64 fp16 GEMM tile at 8
warps takes 166 to 255 registers and 32 to 96 KiB (nw_mm_group_cols's start; a walked GEMM
pipelined 3 deep): 1, where its warps would allow 8 and its shared memory 2 to 6. Launching more
programs than fit costs a partial wave, fewer gives up occupancy: neither is free. Nor does a grid see the
launch's `num_warps` or `num_stages`: Triton (3.6 as 3.9) calls it with the kernel's arguments
alone, and an autotuner's configurations vary them at the same tiles. So the rewrite makes each
grid a callable and hands it the launch's options through a pre-run hook on the kernel's jit
function (Triton calls those hooks with the launch's keywords, a configuration's among them,
before it calls the grid); the grid asks the jit function's `warmup` with the same arguments
and options for the kernel this launch compiled (a cache hit), reads its `n_regs`,
`metadata.shared` and `metadata.num_warps` as Triton's fused-softmax tutorial does, divides the
device's limits (`torch.cuda`'s properties) by them, and keeps the count per device, argument
types and options. The interpreter launches 4 programs.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from passes._source import ByteEdit, indent_of, line_end, line_start
from passes.triton._py import PyModule, callee, fresh_name, is_cdiv, names_in
from passes.triton.roles import NUM_PROGRAMS, dot_loops, launch_arguments, launch_grid, program_axis

PID = frozenset({"tl.program_id", "triton.language.program_id"})
MAKE_DESCRIPTOR = frozenset({"tl.make_tensor_descriptor", "triton.language.make_tensor_descriptor"})

# The host half of a persistent launch, put after the module's imports (`str.format` fields:
# the helpers' fresh names). A launch hands its options to its grid through a pre-run hook:
# Triton (3.6 as 3.9) calls a grid with the kernel's arguments alone, and a jit function's
# pre-run hooks with the launch's keywords (an autotuner's configuration among them) before it.
_HOST = '''

@functools.lru_cache(maxsize=None)
def {h_on}(index: int) -> tuple[int, int, int, int]:
    """CUDA device `index`'s SM count and what one SM holds: threads, registers, shared bytes."""
    p = torch.cuda.get_device_properties(index)
    return (p.multi_processor_count, getattr(p, "max_threads_per_multi_processor", 2048),
            getattr(p, "regs_per_multiprocessor", 65536),
            getattr(p, "shared_memory_per_multiprocessor", 233472))


def {h_per_sm}(warps: int, regs: int, shared: int, threads: int = 2048,
        registers: int = 65536, smem: int = 233472) -> int:
    """Programs of `warps` warps, `regs` registers a thread and `shared` bytes of shared memory
    that one SM holds at once, by CUDA's rules since sm_80: registers go 8 a thread at a time,
    shared memory 128 bytes at a time plus 1 KiB a block, at most 32 blocks."""
    by_regs = registers // max(1, -(-regs // 8) * 8 * 32 * warps)
    by_smem = smem // (-(-shared // 128) * 128 + 1024)
    return max(1, min(32, threads // (32 * warps), by_regs, by_smem))


{h_options}: dict = {{}}  # id of a jit function -> the options of its launch in flight
{h_seen}: dict = {{}}  # (jit function, device, arguments, options) -> programs


def {h_jit}(kernel):
    """The jit function under `kernel`'s autotuner and heuristics."""
    while not hasattr(kernel, "add_pre_run_hook"):
        kernel = kernel.fn
    return kernel


def {h_watch}(kernel) -> None:
    """Each launch of `kernel` keeps its options (`num_warps`, `num_stages`, ...) for its grid."""
    fn = {h_jit}(kernel)
    names = set(fn.arg_names)
    fn.add_pre_run_hook(lambda *args, **kwargs: {h_options}.__setitem__(
        id(fn), {{k: v for k, v in kwargs.items() if k not in names}}))


def {h_key}(fn, meta: dict) -> tuple:
    """What Triton compiles a launch of `fn` with arguments `meta` for: each constexpr's value,
    an integer's being 1, a multiple of 16 and 32-bit, a tensor's dtype and 16-byte alignment,
    the type of anything else (a seed that changes each call is not a new kernel)."""
    constexprs = {{p.name for p in getattr(fn, "params", ()) if p.is_constexpr}}
    out = []
    for k, v in meta.items():
        if k in constexprs and isinstance(v, (int, float, str)):
            out.append((k, v))
        elif isinstance(v, int):
            out.append((k, v == 1, v % 16 == 0, -2**31 <= v < 2**31))
        elif hasattr(v, "data_ptr") and hasattr(v, "dtype"):
            out.append((k, str(v.dtype), v.data_ptr() % 16 == 0))
        else:
            out.append((k, type(v).__name__))
    return tuple(out)


def {h}(kernel, meta) -> int:
    """Programs a persistent grid launches: as many as the GPU holds at once, its SMs times the
    programs of the compiled kernel (its warps, registers and shared memory) one SM holds; a few
    on the CPU interpreter. Read once per device, kernel, argument types and options: `run` is
    on the timed path."""
    if not torch.cuda.is_available():
        return 4
    fn = {h_jit}(kernel)
    options = {h_options}.get(id(fn), {{}})
    device = torch.cuda.current_device()
    key = (id(fn), device, *{h_key}(fn, meta), *((k, repr(v)) for k, v in options.items()))
    programs = {h_seen}.get(key)
    if programs is None:
        compiled = fn.warmup(grid=(1,), **meta, **options)  # compiled for this launch already
        if compiled is None:  # the interpreter
            return 4
        compiled._init_handles()  # loads it, as the launch would: its register count
        sms, threads, registers, smem = {h_on}(device)
        per_sm = {h_per_sm}(compiled.metadata.num_warps, compiled.n_regs,
                compiled.metadata.shared, threads, registers, smem)
        programs = {h_seen}[key] = max(1, sms * per_sm // getattr(compiled.metadata, "num_ctas", 1))
    return programs
'''


@dataclass(frozen=True, slots=True)
class Walk:
    """How a kernel becomes persistent: where the walk starts in its body, the grid node(s) to
    rewrite, and the kernel-side tile count of each grid axis.

    One axis: `pid_stmt` is the program-id statement (it becomes the loop) and `grids` are the
    axis expressions to cap. Several: `pid_stmt` is None, `start` is the first body statement
    that reads a program id, and `grids` are the whole grid tuples (each becomes one capped
    axis, `hosts` holds each launch's per-axis host expressions)."""

    kernel: ast.FunctionDef
    pid_stmt: ast.Assign | None
    grids: tuple[ast.AST, ...]
    tiles: str
    start: int = 0
    axes: tuple[str, ...] = ()
    hosts: tuple[tuple[str, ...], ...] = ()
    passed: tuple[tuple[str, str], ...] = ()
    """New kernel parameters the launches pass (name, host expression): grid values the kernel
    did not receive."""
    launches: tuple[ast.Call, ...] = ()
    metas: tuple[str | None, ...] = ()
    """Each grid's meta parameter (a lambda's or a grid function's), None for a tuple: the
    rewrite makes that grid a lambda, so that it is evaluated at the launch."""

    @property
    def tile(self) -> str:
        """The loop's variable: the program-id name (one axis) or the linear tile index (`tile`,
        or the first of `tile_2`, ... the kernel does not use)."""
        if self.pid_stmt is not None:
            return self.pid_stmt.targets[0].id  # type: ignore[attr-defined]
        return fresh_name("tile", kernel_names(self.kernel))


def kernel_names(kernel: ast.FunctionDef) -> set[str]:
    """Every name a kernel reads, binds or takes: a name a rewrite adds must be none of them."""
    return {n.id for n in ast.walk(kernel) if isinstance(n, ast.Name)} | {
        a.arg for a in kernel.args.args + kernel.args.kwonlyargs}


def _grid_tuple(grid: ast.AST | None) -> ast.Tuple | ast.List | str:
    """The grid's tuple: itself, a lambda's body, or a grid function's one returned value."""
    body: ast.AST | None = grid.body if isinstance(grid, ast.Lambda) else grid
    if isinstance(grid, ast.FunctionDef):
        returns = [n for n in ast.walk(grid) if isinstance(n, ast.Return)]
        body = returns[0].value if len(returns) == 1 else None
    if isinstance(body, (ast.Tuple, ast.List)) and body.elts:
        return body
    return "the grid is not a tuple, a lambda returning one, or a function returning one"


def _meta_name(grid: ast.AST | None) -> str | None:
    if isinstance(grid, (ast.Lambda, ast.FunctionDef)) and grid.args.args:
        return grid.args.args[0].arg
    return None


def _in_kernel_terms(mod: PyModule, node: ast.AST, args: dict[str, ast.AST], meta: str | None,
                     params: set[str], extra: dict[str, str] | None = None,
                     owned: dict[int, str] | None = None,
                     local: dict[str, ast.AST | None] | None = None) -> str | None:
    """`node` (a host grid expression) written with the kernel's parameters, or None.

    With `extra`, a host value the kernel does not receive (a name, an attribute, a subscript or
    a call that does not read the grid's `meta`) becomes a new parameter: `extra` maps its host
    text to the parameter's name. `owned` maps a literal divisor (by id) to the tile constexpr
    it is the host's copy of (`literal_tiles`): it is written as that tile. `local` maps a
    name a grid function binds before its return (`_grid_locals`) to the value it is bound to
    (read in its place), or to None where that is not one value (the grid cannot be told)."""

    def again(n: ast.AST) -> str | None:
        return _in_kernel_terms(mod, n, args, meta, params, extra, owned, local)

    if isinstance(node, ast.Name) and node.id in (local or {}):
        bound = (local or {})[node.id]
        return None if bound is None else again(bound)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return str(node.value)
    by_text = {mod.text(v): p for p, v in args.items() if not isinstance(v, ast.Constant)}
    if mod.text(node) in by_text:
        return by_text[mod.text(node)]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == meta \
            and isinstance(node.slice, ast.Constant) and node.slice.value in params:
        return str(node.slice.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
        left = again(node.left)
        right = again(node.right)
        if left is None or right is None:
            return None
        op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//"}[type(node.op)]
        return f"({left} {op} {right})"
    if is_cdiv(node, 2):
        if isinstance(node.args[1], ast.Constant):
            if id(node.args[1]) not in (owned or {}):
                return None  # a literal tile size of no known tile: stale once the tiles are swept
            part = again(node.args[0])
            return None if part is None else f"tl.cdiv({part}, {owned[id(node.args[1])]})"  # type: ignore[index]
        parts = [again(a) for a in node.args]
        return None if None in parts else f"tl.cdiv({parts[0]}, {parts[1]})"
    if extra is not None and isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) \
            and not (meta and any(isinstance(n, ast.Name) and n.id == meta for n in ast.walk(node))):
        text = mod.text(node)
        if text not in extra:
            base = "_".join(re.findall(r"[A-Za-z0-9]+", text))[:24] or "count"
            extra[text] = fresh_name(f"grid_{base}", params | set(extra.values()))
        return extra[text]
    return None


def _grid_locals(grid: ast.AST | None) -> dict[str, ast.AST | None]:
    """Name -> value of each name a grid function binds before its return (`nb = cdiv(n,
    META["BLOCK"])`; None where it is not bound once by a plain assignment at the top of its
    body): these are no host values the launch can pass, but the grid's own terms."""
    if not isinstance(grid, ast.FunctionDef):
        return {}
    out: dict[str, ast.AST | None] = {}
    for node in ast.walk(grid):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out[node.id] = None if node.id in out else node
    for st in grid.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 \
                and isinstance(st.targets[0], ast.Name) and out.get(st.targets[0].id) is st.targets[0]:
            out[st.targets[0].id] = st.value
    return {k: (None if isinstance(v, ast.Name) and isinstance(v.ctx, ast.Store) else v)
            for k, v in out.items()}


def literal_tiles(mod: PyModule, kernel: ast.FunctionDef, grid: ast.AST | None,
                  args: dict[str, ast.AST]) -> dict[int, str]:
    """Each literal divisor of a host grid (`cdiv(M, 32)`, by id) that is the copy of exactly
    one tile constexpr the launch passes that literal, told by data flow
    (`roles._literal_owners`): in the kernel's terms it is that tile, so a count written with
    it follows the tile when a sweep retunes it."""
    from passes.triton.roles import _division, _literal_owners  # noqa: PLC0415

    out: dict[int, str] = {}
    for node in ast.walk(grid) if grid is not None else ():
        found = _division(node)
        if found is None or not isinstance(found[1], ast.Constant):
            continue
        owners = _literal_owners(mod, kernel, grid, found[1], args)
        if owners is not None and len(owners) == 1:
            out[id(found[1])] = next(iter(owners))
    return out


def walk_of(mod: PyModule, kernel: ast.FunctionDef) -> Walk | str:
    """How `kernel` becomes persistent, or why it cannot."""
    pids = mod.calls(kernel, PID)
    if not pids:
        return "the kernel reads no program id"
    launches = mod.launches(kernel.name)
    if not launches:
        return "the kernel is never launched in this module"
    params = {a.arg for a in kernel.args.args + kernel.args.kwonlyargs}
    grids, hosts, metas, axes = [], [], [], None
    extra: dict[str, str] = {}
    for launch in launches:
        grid = launch_grid(mod, launch)
        elts = _grid_tuple(grid)
        if isinstance(elts, str):
            return elts
        if isinstance(grid, (ast.Lambda, ast.FunctionDef)) and _meta_name(grid) is None:
            return "the grid function takes no meta argument"
        metas.append(_meta_name(grid))
        args = launch_arguments(mod, kernel, launch)
        owned = literal_tiles(mod, kernel, grid, args)
        local = _grid_locals(grid)
        texts = [_in_kernel_terms(mod, e, args, _meta_name(grid), params, extra, owned, local)
                 for e in elts.elts]
        bad = next((e for e, t in zip(elts.elts, texts) if t is None), None)
        if bad is not None:
            return ("the grid reads a host value the kernel does not receive, or counts tiles of a "
                    f"literal size (sweep the tiles first): {mod.text(bad)}")
        if axes is not None and tuple(texts) != axes:
            return "the launches count tiles differently"
        axes = tuple(texts)  # type: ignore[arg-type]
        grids.append(elts)
        hosts.append(tuple(mod.text(e) for e in elts.elts))
    assert axes is not None
    if any(program_axis(c) is None or program_axis(c) >= len(axes) for c in pids):
        return "a program id's axis is not a constant within the grid"
    start = next(i for i, s in enumerate(kernel.body)
                 if any(isinstance(n, ast.Call) and callee(n) in PID for n in ast.walk(s)))
    counts = mod.calls(kernel, NUM_PROGRAMS)
    steps = {id(n) for loop in ast.walk(kernel) if isinstance(loop, ast.For) for n in ast.walk(loop.iter)}
    if any(id(c) in steps for c in counts):
        return "the kernel already walks its tiles: a loop steps by tl.num_programs"
    walked = {id(n) for st in kernel.body[start:] for n in ast.walk(st)}
    if any(id(c) not in walked or program_axis(c) is None or program_axis(c) >= len(axes) for c in counts):
        # in the walked body each reads its axis's tile count; before it, the count of
        # programs would change meaning
        return "the kernel reads tl.num_programs before its first program id, or of no grid axis"
    if any(isinstance(n, ast.Return) for s in kernel.body[start:] for n in ast.walk(s)):
        return "the body returns early: in a loop over tiles that would end the program's walk"
    uneven = _tile_dependent_loop(kernel)
    if uneven is not None:
        return (f"the work of a tile depends on the tile: `{mod.text(uneven)}` runs a number of "
                "steps set by the program id, and a walk that deals tiles in turn leaves the "
                "programs with unequal shares where launched programs are balanced by the GPU")
    before = params | {n.id for st in kernel.body[:start] for n in ast.walk(st)
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    carried = carried_names(kernel.body[start:], before)
    if carried:
        return (f"the body changes {', '.join(sorted(carried))} after reading its value from before "
                "(`a_ptr += batch * stride`): in a loop over tiles each tile would start from the "
                "previous tile's value")
    stmt = kernel.body[start]
    if len(axes) == 1 and len(pids) == 1 and isinstance(stmt, ast.Assign) \
            and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
            and isinstance(stmt.value, ast.Call) and callee(stmt.value) in PID:
        return Walk(kernel, stmt, tuple(g.elts[0] for g in grids), axes[0], start, axes,
                    tuple(hosts), tuple((v, k) for k, v in extra.items()), tuple(launches),
                    tuple(metas))
    # a program id read inline (`tl.program_id(0) * COLS`) or on several axes: each read
    # becomes its axis decoded from one linear tile index
    tiles = " * ".join(f"({a})" for a in axes if a != "1") or "1"
    return Walk(kernel, None, tuple(grids), tiles, start, axes, tuple(hosts),
                tuple((v, k) for k, v in extra.items()), tuple(launches), tuple(metas))


def _tile_dependent_loop(kernel: ast.FunctionDef) -> ast.AST | None:
    """The first `range`/`tl.range` loop whose trip count the tile sets: one of its bounds
    (start or stop) reads the program id, directly or through names assigned from it, and the
    other does not (a causal attention's key loop that stops at the query tile's diagonal, a
    grouped GEMM's per-group depth). A loop whose two bounds both move with the tile (a fixed
    window) or neither does walks the same number of steps in every tile."""
    tainted: set[str] = set()

    def reads_pid(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Call) and callee(n) in PID for n in ast.walk(node)) \
            or bool(names_in(node) & tainted)

    grew = True
    while grew:
        grew = False
        for node in ast.walk(kernel):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None \
                    and reads_pid(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                new = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)} - tainted
                tainted |= new
                grew = grew or bool(new)
    for loop in ast.walk(kernel):
        if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)
                and callee(loop.iter).split(".")[-1] == "range" and loop.iter.args):
            continue
        args = loop.iter.args
        start, stop = (args[0], args[1]) if len(args) > 1 else (None, args[0])
        if (start is not None and reads_pid(start)) != reads_pid(stop):
            return loop.iter
    return None


def carried_names(body: list[ast.stmt], before: set[str]) -> set[str]:
    """Names of `before` (those with a value when `body` begins: parameters, earlier
    statements) that the statements of `body` assign after reading that value
    (`a_ptr += pid_b * stride_ab`, `x = x * 2`): run once per tile in a loop, each tile would
    start from what the previous one left. A name an earlier statement of `body` (re)defines
    on every path is not carried, nor are loop variables and the accumulators of loops inside
    it; a name `body` alone defines has no value from before to carry. Unlike
    `loop_interchange._exposed` (where a loop may run no trip), what an inner loop assigns
    counts as assigned after it, as the walk refuses range loops whose trip count the tile
    sets (`_tile_dependent_loop`): a name read after a `while` loop or a loop of no trip
    could be missed."""
    exposed: set[str] = set()
    written: set[str] = set()

    def targets(node: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    def scan(stmts: list[ast.stmt], defined: set[str]) -> set[str]:
        """Walk `stmts` in order; returns the names they definitely define."""
        for st in stmts:
            if isinstance(st, (ast.Assign, ast.AnnAssign)):
                value = st.value
                exposed.update(names_in(value) - defined if value is not None else set())
                new = set().union(*(targets(t) for t in (st.targets if isinstance(st, ast.Assign)
                                                         else [st.target])))
                written.update(new)
                defined |= new
            elif isinstance(st, ast.AugAssign):
                new = targets(st.target)
                exposed.update((names_in(st.value) | new) - defined)
                written.update(new)
                defined |= new
            elif isinstance(st, (ast.For, ast.While)):
                head = st.iter if isinstance(st, ast.For) else st.test
                exposed.update(names_in(head) - defined)
                inner = set(defined) | (targets(st.target) if isinstance(st, ast.For) else set())
                written.update(inner - defined)
                defined |= scan(st.body, inner) | scan(st.orelse, set(inner))
            elif isinstance(st, ast.If):
                exposed.update(names_in(st.test) - defined)
                both = scan(st.body, set(defined)) & scan(st.orelse, set(defined))
                defined |= both
            else:
                exposed.update(names_in(st) - defined)
        return defined

    scan(body, set())
    return exposed & written & before


def _decode(tile: str, axes: tuple[str, ...]) -> list[str]:
    """Each axis's program id from the linear tile index, axis 0 fastest."""
    out, below = [], []
    for a, count in enumerate(axes):
        if count == "1":
            out.append("0")
            continue
        index = f"({tile} // ({' * '.join(below)}))" if below else tile
        out.append(index if a == len(axes) - 1 else f"{index} % ({count})")
        below.append(f"({count})")
    return out


def _invariant_descriptors(mod: PyModule, walk: Walk) -> list[tuple[int, int]]:
    """(start, end) byte spans of the walked body's top-level statements that only declare tensor
    descriptors (`d = tl.make_tensor_descriptor(...)`, or an `if` of such declarations, as the
    descriptor rewrite writes them behind its fast-path flag) from names the walked body does
    not assign: the same for every tile, they stay before the loop, built once per program."""
    body = walk.kernel.body[walk.start:]
    assigned: set[str] = set()
    for n in (n for s in body for n in ast.walk(s)):
        if isinstance(n, ast.Assign):
            assigned |= {t.id for target in n.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For)):
            assigned |= {t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)}

    def declares(node: ast.stmt) -> bool:
        return (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and callee(node.value) in MAKE_DESCRIPTOR)

    out: list[tuple[int, int]] = []
    for node in body:
        if walk.pid_stmt is not None and node is walk.pid_stmt:
            continue
        only = declares(node) or (isinstance(node, ast.If) and not node.orelse
                                  and all(declares(b) for b in node.body))
        targets = {t.id for n in ast.walk(node) if isinstance(n, ast.Assign)
                   for t in n.targets if isinstance(t, ast.Name)}
        reads = names_in(node) - targets
        if only and not reads & assigned and not any(
                isinstance(c, ast.Call) and callee(c) in PID for c in ast.walk(node)):
            src = mod.source
            out.append((line_start(src, mod.start(node)), line_end(src, mod.end(node) - 1)))
    return out


def feeds_dot(walk: Walk) -> bool:
    """Whether the walked body holds a K loop feeding `tl.dot` whose operands come through
    tensor descriptors (`desc.load(...)`, also behind a fast-path flag), as in the expert the
    flattened loop was recorded from. On pointer loads a flattened tile loop measured twice as
    slow as the one-tile kernel (held-out addmm 0.115 -> 0.243 ms, bmm 0.064 -> 0.133 ms, H100),
    so flattening is carried only where the loads are what they were in its evidence."""
    loops = [loop for s in walk.kernel.body[walk.start:] for loop in dot_loops(s)]
    return bool(loops) and all(_descriptor_loads(loop) for loop in loops)


def _descriptor_loads(loop: ast.AST) -> bool:
    """Whether a loop loads through a tensor descriptor: a `.load` called on a name that is not
    the `tl` / `triton.language` module."""
    return any(isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
               and c.func.attr == "load" and isinstance(c.func.value, ast.Name)
               and c.func.value.id not in ("tl", "triton", "language")
               for c in ast.walk(loop))


def loop_keywords(header: str) -> str:
    """The literal keywords (`flatten=True`, `num_stages=2`) of the `tl.range` a recorded loop
    header iterates, as source text: what a loop written elsewhere may carry (the header's
    bounds are its own kernel's names, its literal keywords are not)."""
    line = next((ln.strip() for ln in header.splitlines() if ln.strip().startswith("for ")), "")
    try:
        loop = ast.parse(f"{line}\n    pass").body[0]
    except SyntaxError:
        return ""
    if not (isinstance(loop, ast.For) and isinstance(loop.iter, ast.Call)):
        return ""
    return ", ".join(f"{k.arg}={ast.unparse(k.value)}" for k in loop.iter.keywords
                     if k.arg and isinstance(k.value, ast.Constant))


def walk_edits(mod: PyModule, walk: Walk, taken: set[str], keywords: str = "") -> list[ByteEdit]:
    """The edits that make the kernel persistent: the loop over tiles (a `tl.range` with
    `keywords`, a plain `range` without), each grid a callable capped by the programs the GPU
    holds at once, the host helpers that count them (`_HOST`, after the imports) and the hook
    that hands them each launch's options (after the kernel)."""
    src = mod.source
    stmt, kernel = walk.pid_stmt, walk.kernel
    first = kernel.body[walk.start]
    indent = indent_of(src, mod.start(first))
    start = line_start(src, mod.start(first))
    end = line_end(src, mod.end(kernel.body[-1]) - 1)
    step = " " * 4
    helper = fresh_name("_resident_programs", taken)
    hoisted = _invariant_descriptors(mod, walk)

    # Each `tl.num_programs(a)` of the walked body reads axis a's tile count: the grid the
    # programs walk, not the persistent grid's program count.
    counts = sorted((c for s in kernel.body[walk.start:] for c in ast.walk(s)
                     if isinstance(c, ast.Call) and callee(c) in NUM_PROGRAMS), key=mod.start)

    def raw(a: int, b: int) -> str:  # the source from a to b, each tile count read in place
        out, at = [], a
        for c in counts:
            if a <= mod.start(c) and mod.end(c) <= b:
                out += [src[at:mod.start(c)].decode("utf-8"), f"({walk.axes[program_axis(c)]})"]  # type: ignore[index]
                at = mod.end(c)
        return "".join(out) + src[at:b].decode("utf-8")

    before = "".join(raw(a, b) for a, b in hoisted)

    def text(a: int, b: int) -> str:  # the source from a to b, the hoisted statements left out
        out, at = [], a
        for h0, h1 in hoisted:
            if a <= h0 and h1 <= b:
                out.append(raw(at, h0))
                at = h1
        return "".join(out) + raw(at, b)

    if stmt is not None:
        tile, begin = stmt.targets[0].id, line_end(src, mod.end(stmt) - 1)  # type: ignore[attr-defined]
        decoded = ""
        if _read_as_tensor(kernel.body[walk.start:], tile):
            # The program id was a tensor and the body calls its methods (`row.to(tl.int64)`);
            # the interpreter hands a loop's variable out as a Python int, so the walk binds
            # the id from a fresh variable through `tl.cast` (a no-op when compiled).
            pid_name, tile = tile, fresh_name("tile", taken | kernel_names(kernel))
            decoded = f"{indent}{step}{pid_name} = tl.cast({tile}, tl.int32)\n"
        body = text(begin, end)
    else:  # several axes: one linear index, each program id decoded from it
        local = taken | kernel_names(kernel)  # a body that assigns `tile` keeps its own
        tile = fresh_name("tile", local)
        names = [fresh_name(f"pid_axis{a}", local) for a in range(len(walk.axes))]
        calls = sorted((c for s in kernel.body[walk.start:] for c in ast.walk(s)
                        if isinstance(c, ast.Call) and callee(c) in PID), key=mod.start)
        # a program id whose methods the body calls (`tl.program_id(0).to(tl.int64)`) stays a
        # tensor in the interpreter too, where the loop's variable is a Python int
        methods = {id(n.value) for s in kernel.body[walk.start:] for n in ast.walk(s)
                   if isinstance(n, ast.Attribute)}
        cast = {program_axis(c) for c in calls if id(c) in methods}
        decoded = "".join(f"{indent}{step}{n} = {f'tl.cast({v}, tl.int32)' if a in cast else v}\n"
                          for a, (n, v) in enumerate(zip(names, _decode(tile, walk.axes))))
        parts, at = [], start
        for c in calls:
            parts += [text(at, mod.start(c)), names[program_axis(c)]]  # type: ignore[index]
            at = mod.end(c)
        body = "".join(parts) + text(at, end)
    body = "".join(step + line if line.strip() else line for line in body.splitlines(keepends=True))
    header = (f"{indent}# persistent: each program walks the tiles pid, pid + programs, ...\n"
              f"{indent}for {tile} in {'tl.range' if keywords else 'range'}(tl.program_id(0), "
              f"{walk.tiles}, tl.num_programs(0){', ' + keywords if keywords else ''}):\n")
    fields = {"h": helper} | {f"h_{part}": fresh_name(f"{helper}_{part}", taken | {helper})
                              for part in ("on", "per_sm", "jit", "watch", "key", "options", "seen")}
    # the kernel's launches hand their options to its grid (`_HOST`): registered once, where
    # the kernel is defined
    watch = f"\n\n{indent_of(src, mod.start(kernel))}{fields['h_watch']}({kernel.name})\n"
    edits = [ByteEdit(start, end, before + header + decoded + body + watch)]
    grids: dict[tuple[int, int], str] = {}
    for g, host, meta, launch in zip(walk.grids, walk.hosts, walk.metas, walk.launches):
        count = mod.text(g) if stmt is not None else " * ".join(f"({h})" for h in host if h != "1") or "1"
        if meta is not None:
            capped = f"min({count}, {helper}({kernel.name}, {meta}))"
            grids[mod.span(g)] = capped if stmt is not None else f"({capped},)"
        else:  # a tuple is evaluated before the launch: the launch's grid becomes a lambda
            node = launch.func.slice  # type: ignore[attr-defined]
            if isinstance(node, ast.Name):  # the tuple it is bound to, as it was bound
                count = " * ".join(f"{node.id}[{i}]" for i, h in enumerate(host) if h != "1") or "1"
            meta = fresh_name("meta", set(names_in(g)) | set(names_in(node)))
            grids[mod.span(node)] = f"lambda {meta}: (min({count}, {helper}({kernel.name}, {meta})),)"
    edits += [ByteEdit(a, b, capped) for (a, b), capped in grids.items()]
    edits += _pass_new_parameters(mod, walk)
    imports = [n for n in mod.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    at = line_end(src, mod.end(imports[-1]) - 1) if imports else 0
    plain = {a.name for n in imports if isinstance(n, ast.Import) for a in n.names if a.asname is None}
    edits.append(ByteEdit(at, at, "".join(f"import {m}\n" for m in ("functools", "torch") if m not in plain)
                          + _HOST.format(**fields)))
    return edits


def _read_as_tensor(body: list[ast.stmt], name: str) -> bool:
    """Whether `body` reads an attribute of `name` (`name.to(...)`, `name.dtype`)."""
    return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name
               for s in body for n in ast.walk(s))


def _pass_new_parameters(mod: PyModule, walk: Walk) -> list[ByteEdit]:
    """The kernel takes each grid value it did not receive as a new last parameter (with a
    default, so that it may follow parameters that have one), and every launch passes it by
    keyword."""
    if not walk.passed:
        return []
    src, kernel = mod.source, walk.kernel
    args = kernel.args
    last = (args.kwonlyargs or args.args)[-1]
    defaults = args.kw_defaults if args.kwonlyargs else args.defaults
    tail = [d for d in defaults if d is not None and mod.end(d) >= mod.end(last)]
    at = max([mod.end(last)] + [mod.end(d) for d in tail])
    edits = [ByteEdit(at, at, "".join(f", {name}=1" for name, _ in walk.passed))]
    for call in walk.launches:
        close = mod.end(call) - 1
        before = src[:close].rstrip()
        lead = "" if before.endswith(b",") or before.endswith(b"(") else ", "
        edits.append(ByteEdit(close, close, lead + ", ".join(f"{n}={h}" for n, h in walk.passed)))
    return edits
