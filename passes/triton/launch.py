"""Launch-parameter passes of Triton kernels: tile sizes, warps, software pipelining.

Their values live in three places, all handled alike: keyword arguments of a launch
(`kernel[grid](..., BLOCK_M=128, num_warps=8)`), entries of `triton.Config({...}, num_warps=8,
num_stages=3)` (in any config list, literal or built by a function), and, for pipelining,
`tl.range(..., num_stages=3)` loops inside a kernel. A site is one literal value.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from passes._source import ByteEdit, finish, line_end, line_start, make_site
from passes.base import Category, Pass, PassContext, PassResult, Site, Skipped
from passes.triton._py import PyModule, callee, is_cdiv, literal_int, names_in
from passes.triton.loops import CountedWhile, as_for, counted_while
from passes.triton.roles import (
    DEFAULT_WARPS,
    heuristic_constant,
    heuristic_entries,
    host_binding,
)

if TYPE_CHECKING:
    from anchors import AnchorIndex
    from kir import KernelIR

TRITON: tuple[str, ...] = ("triton",)
CONFIG_NAMES = frozenset({"triton.Config", "Config"})
RANGE_NAMES = frozenset({"tl.range", "triton.language.range"})


@dataclass(frozen=True, slots=True)
class Holder:
    """A call that carries launch parameters: a kernel launch or a `triton.Config`."""

    call: ast.Call
    kind: str  # "launch" | "config"
    kernel: ast.FunctionDef | None  # the launched kernel (launch holders)


def holders(mod: PyModule) -> list[Holder]:
    """Every launch of a jit kernel and every `triton.Config(...)` call that can run, in
    source order, each once. A launch in a host helper the kernel is passed to counts
    (`PyModule.launches`); one that helper makes for several kernels is held by the first,
    and a rewrite there refuses (`_shared`). Configs that a slice of their literal list cuts
    off (`[c0, c1, c2][:1]`, an autotune list pinned to its first config) never run on any
    tier, so they are left out: editing them would change nothing the gate can see."""
    found: list[Holder] = []
    seen: set[int] = set()
    for kernel in mod.kernels():
        for call in mod.launches(kernel.name, shared=True):
            if id(call) not in seen:
                seen.add(id(call))
                found.append(Holder(call, "launch", kernel))
    dead = cut_off_configs(mod)
    found.extend(Holder(call, "config", None) for call in mod.calls(mod.tree, CONFIG_NAMES)
                 if id(call) not in dead)
    return sorted(found, key=lambda h: mod.start(h.call))


def slice_keep(expr: ast.AST) -> int | None:
    """How many leading elements `E[:n]` (or `E[0:n]`) keeps: n for a literal n >= 0, else None."""
    if not (isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Slice)):
        return None
    part = expr.slice
    if part.step is not None or not (part.lower is None or literal_int(part.lower) == 0):
        return None
    keep = literal_int(part.upper)
    return keep if keep is not None and keep >= 0 else None


def cut_off_configs(mod: PyModule) -> set[int]:
    """`id()`s of the `triton.Config` calls a literal-list slice drops (`[c0, c1][:1]` -> c1)."""
    dead: set[int] = set()
    for node in ast.walk(mod.tree):
        keep = slice_keep(node)
        if keep is None or not isinstance(node.value, ast.List):
            continue
        dead.update(id(e) for e in node.value.elts[keep:]
                    if isinstance(e, ast.Call) and callee(e) in CONFIG_NAMES)
    return dead


def autotuned(mod: PyModule, kernel: ast.FunctionDef | None) -> bool:
    return kernel is not None and mod.decorator(kernel, "autotune") is not None


def _shared(mod: PyModule, node: ast.AST | None) -> Skipped | None:
    """A rewrite of a launch (or of a keyword value in one) that a host helper makes for
    several kernels refuses: the edit would retune every kernel it runs
    (`PyModule.shared_launch`)."""
    parent = mod.parents.get(node) if node is not None else None
    call = mod.parents.get(parent) if isinstance(parent, ast.keyword) else node
    reason = mod.shared_launch(call) if isinstance(call, ast.Call) else None
    return Skipped(reason, {"line": call.lineno}) if reason is not None else None


def comment_above(source: bytes, pos: int) -> int:
    """Start of the comment lines directly above the line holding `pos` (no blank line between,
    same indentation), or that line's start when there are none. A rewrite that removes the
    construct such a comment explains takes the comment with it, so the result does not read as
    if the removed code were still there."""
    start = line_start(source, pos)
    line = source[start:line_end(source, start)]
    indent = line[:len(line) - len(line.lstrip(b" \t"))]
    while start > 0:
        above = line_start(source, start - 1)
        line = source[above:start]
        if not (line.startswith(indent + b"#") and not line[len(indent):].startswith(b"#!")):
            break
        start = above
    return start


# The name a literal is bound to, read backwards from the literal: `X=`, `"X": `, `X: T = `.
_NAME_BEFORE = re.compile(r"""["']?([A-Za-z_]\w*)["']?\s*(?::\s*[\w.]+\s*)?[:=]\s*$""")


TILE_ROLES = frozenset({"m", "n", "k", "grid", "loop", "vec"})


def kernel_tiles(mod: PyModule) -> dict[str, dict[str, str]]:
    """Kernel name -> {tile constexpr: role} (`passes.triton.roles.tile_roles`)."""
    from passes.triton.roles import jit_functions, tile_roles  # noqa: PLC0415

    functions = jit_functions(mod)
    return {k.name: {n: r for n, r in tile_roles(k, functions).items() if r in TILE_ROLES}
            for k in mod.kernels()}


def _all_tiles(tiles: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for names in tiles.values():
        for n, r in names.items():
            out.setdefault(n, r)
    return out


def _config_kernel(mod: PyModule, call: ast.Call) -> ast.FunctionDef | None:
    """The kernel whose autotune decorator lists this config (None: a list built elsewhere)."""
    for kernel in mod.kernels():
        dec = mod.decorator(kernel, "autotune")
        if dec is not None and any(n is call for n in ast.walk(dec)):
            return kernel
    return None


def _role_in(source: str, name: str) -> str:
    """The role of tile constexpr `name` in any kernel of `source` ('' when none)."""
    from kir import parse  # noqa: PLC0415

    try:
        mod = PyModule(parse(source, "triton"))
    except Exception:  # noqa: BLE001 — an unparsable record just has no role
        return ""
    return _all_tiles(kernel_tiles(mod)).get(name, "")


def _value_edit(mod: PyModule, node: ast.AST, value: int) -> ByteEdit:
    start, end = mod.span(node)
    return ByteEdit(start, end, str(value))


def _already_listed(mod: PyModule, node: ast.AST, value: int) -> Skipped | None:
    """A value edit inside one `triton.Config(...)` of an autotune list that would make it the
    same configuration as another entry of the list: the list would only time it twice."""
    config = mod.parents.get(node)
    while config is not None and not (isinstance(config, ast.Call) and callee(config) in CONFIG_NAMES):
        config = mod.parents.get(config)
    listed = mod.parents.get(config) if config is not None else None
    if not isinstance(listed, (ast.List, ast.Tuple)):
        return None
    start, end = mod.span(config)
    at, upto = mod.span(node)
    src = mod.source
    edited = src[start:at] + str(value).encode() + src[upto:end]
    try:
        after = ast.dump(ast.parse(edited.decode("utf-8"), mode="eval").body)
    except SyntaxError:
        return None
    for other in listed.elts:
        if other is not config and isinstance(other, ast.Call) and ast.dump(other) == after:
            return Skipped("the configuration it would write is already in the autotune list",
                           {"config": edited.decode("utf-8")})
    return None


def _find_site(mod: PyModule, site: Site) -> ast.AST | None:
    """The literal node the site was built on (by its recorded byte span)."""
    want = tuple(site.detail.get("value_span", ()))
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Constant) and hasattr(node, "lineno") and mod.span(node) == want:
            return node
    return None


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TileSizes(Pass):
    """Tile sizes (block constexprs): de-optimization halves a tile, optimization doubles it
    (or sets the recorded size)."""

    value: int = 0
    """The tile size to set; 0 = twice the current size (optimize) / half of it (deoptimize)."""
    floor: int = 16
    """The smallest tile a de-optimization produces (tl.dot needs 16)."""
    cap: int = 256
    """The largest tile an optimization without a recorded size produces."""
    tile: str = ""
    """The tile constexpr the recorded step resized (`BLOCK_N`); '' = any tile. Binding only
    on a kernel that has a tile of that name and when no `role` is recorded."""
    role: str = ""
    """The role of the tile the recorded step resized (`m`, `n`, `k`, `grid`, `loop`, `vec`:
    `passes.triton.roles`); '' = any. A card resizes the tile of the same role on any kernel."""

    name: ClassVar[str] = "tile-sizes"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "grow/shrink BLOCK_* tile constexprs (launch kwargs, configs, defaults)"
    provides: ClassVar[tuple[str, ...]] = ("tiled",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("pow2(tile)", "tile >= 16")

    def _literals(self, mod: PyModule) -> list[tuple[str, ast.Constant, ast.AST]]:
        """(tile name, its int literal, the construct holding it). A tile is a constexpr that
        sizes or steps a block of the kernel (`passes.triton.roles`), whatever its name."""
        found: list[tuple[str, ast.Constant, ast.AST]] = []
        tiles = kernel_tiles(mod)
        for holder in holders(mod):
            call = holder.call
            if holder.kind == "config" and call.args and isinstance(call.args[0], ast.Dict):
                owner = _config_kernel(mod, call)
                names = tiles.get(owner.name, {}) if owner is not None else _all_tiles(tiles)
                for key, val in zip(call.args[0].keys, call.args[0].values):
                    if (isinstance(key, ast.Constant) and isinstance(key.value, str)
                            and key.value in names and literal_int(val) is not None):
                        found.append((key.value, val, call))
            elif holder.kind == "launch":
                names = tiles.get(holder.kernel.name, {}) if holder.kernel is not None else {}
                for kw in call.keywords:
                    if kw.arg and kw.arg in names and literal_int(kw.value) is not None:
                        found.append((kw.arg, kw.value, call))
                    elif kw.arg and kw.arg in names:  # `BLOCK_M=bm` with `bm = 64` on the host
                        bound = host_binding(mod, call, kw.value)
                        if bound is not None:
                            found.append((kw.arg, bound, call))
        for kernel in mod.kernels():
            args = kernel.args
            defaults = args.defaults
            params = args.args[len(args.args) - len(defaults):]
            for param, default in zip(params, defaults):
                if param.arg in tiles.get(kernel.name, {}) and literal_int(default) is not None:
                    found.append((param.arg, default, kernel))
            # `"ROWS": lambda args: 2`: Triton runs heuristics last, so this is the value
            for name, fn in heuristic_entries(mod, kernel)[1].items():
                if name in tiles.get(kernel.name, {}) and heuristic_constant(fn) is not None:
                    found.append((name, fn.body, kernel))
        return found

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out: list[Site] = []
        roles = _all_tiles(kernel_tiles(mod))
        for name, lit, holder in self._literals(mod):
            value = lit.value
            # the region holds the grid's copies of the literal too: they are resized with it
            spans = [mod.span(lit), *(mod.span(c) for c, _ in _grid_copies(mod, holder, name, lit))]
            span = (min(a for a, _ in spans), max(b for _, b in spans))
            detail = {"tile": name, "role": roles.get(name, ""), "size": value,
                      "value_span": list(mod.span(lit))}
            if value > self.floor:
                out.append(make_site(self.name, ir, index, span, True, detail, mod.span(holder)))
            out.append(make_site(self.name, ir, index, span, False, detail, mod.span(holder)))
        return out

    def _resize(self, ir: KernelIR, site: Site, ctx: PassContext | None, grow: bool) -> PassResult:
        mod = PyModule(ir)
        node = _find_site(mod, site)
        if node is None:
            return Skipped("the tile literal is not at the site", {"site": site.anchor})
        name = str(site.detail.get("tile", ""))
        role = str(site.detail.get("role", ""))
        if self.role and role and role != self.role:
            return Skipped(f"the recorded step resized a {self.role} tile, not a {role} tile "
                           f"({name})", {"tile": name, "recorded": self.role})
        if not self.role and self.tile and name != self.tile \
                and self.tile in _all_tiles(kernel_tiles(mod)):
            return Skipped(f"the recorded step resized {self.tile}, not {name}",
                           {"tile": name, "recorded": self.tile})
        holder = next((h for n, lit, h in self._literals(mod) if lit is node), None)
        copies = _grid_copies(mod, holder, name, node)
        refusal = _shared(mod, holder) or _host_copy(mod, holder, name, node) or (
            None if copies else _grid_refusal(mod, holder, name, _host_name(mod, node)))
        if refusal is not None:
            return refusal
        current = node.value
        target = self.value or (current * 2 if grow else current // 2)
        # a size the card recorded is its lineage's evidence; a doubling is checked
        checked = bool(name) and target > current and not self.value
        cap = _unchecked(mod, holder).get(name) if checked else None
        if cap is not None and (target > cap or cap % target):
            return Skipped(f"the kernel never bounds-checks the {name} block: it is correct only "
                           f"on sizes that are multiples of {cap}, and {target} may read past "
                           f"them", {"tile": name, "size": cap})
        group = _unchecked(mod, holder, grouped=True).get(name) if checked else None
        if group is not None and (target > group or group % target):
            return Skipped(f"the kernel divides the counter of the loop the {name} block steps "
                           f"by {group} (one row of a group per step): {name}={target} would "
                           f"span several groups", {"tile": name, "group": group})
        if not grow:
            target = max(target, self.floor)
        elif not self.value and target > self.cap:
            return Skipped(f"{site.detail.get('tile')} is {current}: doubling it passes the cap "
                           f"{self.cap}", {"tile": current, "cap": self.cap})
        facts = {"tile": target, site.detail.get("tile", "tile"): target}
        results, skip = self.check(ctx, facts)
        if skip:
            return skip
        if target == current:
            return Skipped(f"{site.detail.get('tile')} is already {current}", {"tile": current})
        options: dict[str, Any] = {"value": current}
        if name:
            options["tile"] = name
        if role:
            options["role"] = role
        edits = [_value_edit(mod, node, target)]
        for copy, less in copies:  # the grid's copies of the tile's value follow it
            edits.append(ByteEdit(*mod.span(copy), less.format(target)) if isinstance(less, str)
                         else _value_edit(mod, copy, target - less))
        return finish(ir, site, edits, options=options, preconditions=results)

    @classmethod
    def recorded_options(cls, options: Mapping[str, Any], before: str,
                         diff: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Older lineages recorded only the size: the tile is the name written before the
        edited literal (`BLOCK_N=64`, `"BLOCK_N": 64`, `BLOCK_N: tl.constexpr = 64`)."""
        out = dict(options)
        if out.get("tile") and not out.get("role"):
            role = _role_in(before, str(out["tile"]))
            if role:
                out["role"] = role
        if out.get("tile") or len(diff) != 1:
            return out
        span = diff[0].get("src_span")
        if not span:
            return out
        m = _NAME_BEFORE.search(before[max(0, int(span[0]) - 64):int(span[0])])
        if m:
            out["tile"] = m.group(1)
            role = _role_in(before, m.group(1))
            if role:
                out["role"] = role
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return self._resize(ir, site, ctx, grow=False)

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        return self._resize(ir, site, ctx, grow=True)


def _unchecked(mod: PyModule, holder: ast.AST | None, grouped: bool = False) -> dict[str, int]:
    """The tiles the kernel a launch / config / signature default sizes never bounds-checks,
    each with the largest size its author runs it with (`passes.triton.roles.unchecked_caps`;
    every kernel's when the holder names none). `grouped`: instead the tiles whose loop
    counter the kernel divides by a group, each with the value it must divide
    (`passes.triton.roles.grouped_caps`; where several kernels have one, a divisor of each:
    `joined_caps`)."""
    from passes.triton.roles import (  # noqa: PLC0415
        grouped_caps, joined_caps, kernel_config, unchecked_caps)

    if isinstance(holder, ast.FunctionDef):
        kernels = [holder]
    else:
        owner = None
        if isinstance(holder, ast.Call):
            owner = _config_kernel(mod, holder) if callee(holder) in CONFIG_NAMES else next(
                (h.kernel for h in holders(mod) if h.call is holder), None)
        kernels = [owner] if owner is not None else list(mod.kernels())
    caps: dict[str, int] = {}
    for k in kernels:
        if grouped:
            caps = joined_caps(caps, grouped_caps(mod, k, kernel_config(mod, k)))
            continue
        for name, cap in unchecked_caps(mod, k, kernel_config(mod, k)).items():
            caps[name] = max(cap, caps.get(name, cap))
    return caps


def _host_name(mod: PyModule, node: ast.AST) -> str:
    """The host name a tile literal is bound to (`bm` of `bm = 64`, of `bm, bn = 64, 32`);
    '' for a literal written at a launch, a config or a signature."""
    parent = mod.parents.get(node)
    if isinstance(parent, (ast.Tuple, ast.List)):
        at = parent.elts.index(node)
        parent = mod.parents.get(parent)
        targets = parent.targets if isinstance(parent, ast.Assign) else []
        names = [t.elts[at] for t in targets if isinstance(t, (ast.Tuple, ast.List))
                 and len(t.elts) > at]
    else:
        names = list(getattr(parent, "targets", None) or [getattr(parent, "target", None)])
    named = [n.id for n in names if isinstance(n, ast.Name)]
    return named[0] if isinstance(parent, (ast.Assign, ast.AnnAssign)) and named else ""


def _grid_copies(mod: PyModule, holder: ast.AST | None, tile: str,
                 literal: ast.AST) -> list[tuple[ast.AST, int | str]]:
    """The literals of a host-computed grid that copy the value a launch passes `tile` as the
    `literal` it writes (`kernel[(cdiv(M, 32), ...)](..., BM=32)`), told by data flow
    (`roles._literal_owners`), each with what it is less than the tile (0 for `cdiv(M, 32)`,
    1 for the 31 of `(M + 31) // 32`): resized with the tile, they keep the grid covering the
    output (`roles._count_copies`). Empty where the grid has none, where one of the tile's
    value cannot be told apart from another tile's, where a count floors (`M // 32`) or rounds
    in a way the tile cannot take along, or where the grid is a name read beyond this launch.
    Where no literal is such a copy, an element that counts the tile's blocks written
    otherwise is rewritten whole (`_counted_elements`), its entry's text a template of the
    new value."""
    from passes.triton.roles import (  # noqa: PLC0415
        _count_copies,
        _division,
        _literal_owners,
        kernel_launches,
        launch_grid,
    )

    if not (isinstance(holder, ast.Call) and isinstance(holder.func, ast.Subscript)
            and any(kw.value is literal for kw in holder.keywords)):
        return []
    kernel = next((h.kernel for h in holders(mod) if h.call is holder), None)
    launch = next((x for x in kernel_launches(mod, kernel) if x.call is holder), None) \
        if kernel is not None else None
    grid = launch_grid(mod, launch.site) if launch is not None else None
    if grid is None or isinstance(grid, (ast.Lambda, ast.FunctionDef)):
        return []
    named = holder.func.slice
    host = mod.enclosing(holder, ast.FunctionDef)
    if isinstance(named, ast.Name) and host is not None and sum(
            isinstance(n, ast.Name) and n.id == named.id and isinstance(n.ctx, ast.Load)
            for n in ast.walk(host)) != 1:
        return []
    value, args = literal_int(literal), launch.values()
    out: list[tuple[ast.AST, int | str]] = []
    for division in ast.walk(grid):
        found = _division(division)
        if found is None or literal_int(found[1]) != value:
            continue
        owners = _literal_owners(mod, kernel, grid, found[1], args)
        if owners is None:
            return []
        if tile not in owners:
            continue
        # the round-up term of `(M + 31) // 32` follows the tile; a floor `M // 32` would
        # leave the rows past a larger tile's last whole block unwritten
        copies = _count_copies(grid, found[1])
        if copies is None or copies == "floor":
            return []
        out += [(found[1], 0), *copies]
    return out or _counted_elements(mod, kernel, launch, grid, tile, value)


def _counted_elements(mod: PyModule, kernel: ast.FunctionDef, launch: Any, grid: ast.AST,
                      tile: str, value: int | None) -> list[tuple[ast.AST, int | str]]:
    """The elements of a host grid that count `tile`'s blocks rounded up however written
    (`-(n // -64)`, `len(range(0, n, 64))`, `q + (r > 0)` of `divmod(n, 64)`:
    `roles._grid_counts_canonical` tells them by evaluating them), each with its one form
    for a new value (`triton.cdiv(n, {})`): an element tied to the tile by data flow, the
    size it counts being one the tile tiles or the axis one whose program id it scales, and
    no other tile passed the same value. Empty where the grid's counts are told otherwise."""
    from passes.triton.host_counts import Rounding, counts_blocks  # noqa: PLC0415
    from passes.triton.host_sizes import host_form  # noqa: PLC0415
    from passes.triton.roles import (  # noqa: PLC0415
        _division,
        _follower,
        _host_literal,
        _tile_axes,
        _tile_dims,
        _tiles_size,
    )

    args = launch.values()
    same = [t for t, a in args.items() if t != tile and _host_literal(mod, launch.site, a) == value]
    scope = mod.enclosing(launch.site, ast.FunctionDef)
    if value is None or same or scope is None or not isinstance(grid, (ast.Tuple, ast.List)) \
            or not any(isinstance(n, ast.Import) and any(a.name == "triton" and a.asname is None
                                                         for a in n.names) for n in mod.tree.body):
        return []
    follow = _follower(mod, scope, grid)
    sizes = {host_form(mod, args[d]) for d in _tile_dims(kernel).get(tile, ()) if d in args}
    axes = _tile_axes(kernel)
    out: list[tuple[ast.AST, int | str]] = []
    for axis, element in enumerate(grid.elts):
        division = _division(element)
        if division is not None and literal_int(division[1]) == value:
            continue  # a literal copy, told by `_literal_owners`
        found = counts_blocks(element, {value}, follow)
        if found is None or found[2] is not Rounding.CEIL:
            continue
        # as for a literal copy: a fact for the tie, none against it
        by_size = _tiles_size(mod, found[0], sizes) if sizes else None
        by_axis = axis in axes[tile] if tile in axes else None
        if (by_size or by_axis) and by_size is not False and by_axis is not False:
            out.append((element, f"triton.cdiv({mod.text(found[0])}, {{}})"))
    return out


def _host_copy(mod: PyModule, holder: ast.AST | None, tile: str,
               literal: ast.AST) -> Skipped | None:
    """A launch's literal tile whose value the host also divides the tile's size by beyond the
    launch grid (`parts = torch.empty(cdiv(n, 256))` beside `BLOCK=256`, in the launching
    function or a helper it calls: `roles._divides_elsewhere`) is not resized: the buffer
    would keep the old tile's count (entries never written at a larger tile, writes past its
    end at a smaller one)."""
    from passes.triton.host_sizes import host_form  # noqa: PLC0415
    from passes.triton.roles import (  # noqa: PLC0415
        _divides_elsewhere,
        _grid_nodes,
        _tile_dims,
        kernel_launches,
    )

    value = literal_int(literal)
    if value is None or not (isinstance(holder, ast.Call) and isinstance(holder.func, ast.Subscript)
                             and any(kw.value is literal for kw in holder.keywords)):
        return None
    kernel = next((h.kernel for h in holders(mod) if h.call is holder), None)
    launch = next((x for x in kernel_launches(mod, kernel) if x.call is holder), None) \
        if kernel is not None else None
    if launch is None:
        return None
    args = launch.values()
    sizes = {host_form(mod, args[d]) for d in _tile_dims(kernel).get(tile, ()) if d in args}
    allowed = {id(n) for n in ast.walk(holder)} | _grid_nodes(mod, kernel)
    stray = _divides_elsewhere(mod, launch.site, allowed, value, sizes) if sizes else None
    if stray is None:
        return None
    return Skipped(f"the host divides the size {tile} tiles by {value} beyond the launch "
                   f"(line {stray.lineno}): resizing {tile} would leave that count behind",
                   {"tile": tile, "line": stray.lineno})


def _grid_refusal(mod: PyModule, holder: ast.AST | None, tile: str,
                  host: str = "") -> Skipped | None:
    """Resizing a tile that maps programs to output tiles needs a launch grid computed from
    the same tile (`grid = lambda meta: (cdiv(M, meta["BLOCK_M"]), ...)`, or from the host
    name `host` the tile is passed from); a grid fixed on the host would leave tiles
    unwritten or write out of bounds."""
    if isinstance(holder, ast.Call) and isinstance(holder.func, ast.Subscript):
        kernel = next((h.kernel for h in holders(mod) if h.call is holder), None)
        launches = [holder]
    elif isinstance(holder, ast.FunctionDef):
        kernel, launches = holder, mod.launches(holder.name, shared=True)
    else:
        return None  # a config entry: the autotuned launch computes its grid from meta
    if kernel is None or tile not in _grid_tiles(kernel):
        return None
    from passes.triton.roles import _count_copies  # noqa: PLC0415

    for launch in launches:
        grid = _grid(mod, launch)
        if not (_grid_reads(mod, launch, tile) or host and host in names_in(grid)):
            return Skipped(f"the launch grid does not derive from {tile}: resizing it would "
                           "change which output tiles the programs cover",
                           {"tile": tile, "grid": mod.text(launch.func.slice)})
        # `n // block`: whole blocks of the written tile are not whole blocks of another
        floor = next((n for n in ast.walk(grid) if host and isinstance(n, ast.BinOp)
                      and isinstance(n.op, ast.FloorDiv) and isinstance(n.right, ast.Name)
                      and n.right.id == host and _count_copies(grid, n.right) == "floor"), None)
        if floor is not None:
            return Skipped(f"the launch grid floors its count of {tile}'s blocks "
                           f"({mod.text(floor)}): another {tile} would leave its last partial "
                           "block unwritten", {"tile": tile, "grid": mod.text(floor)})
    return None


def _grid_tiles(kernel: ast.FunctionDef) -> set[str]:
    """Tile names that take part in mapping program ids to output tiles."""
    assigns = [n for n in ast.walk(kernel) if isinstance(n, ast.Assign)]
    pid = {t.id for a in assigns for t in a.targets if isinstance(t, ast.Name)
           and callee(a.value) in ("tl.program_id", "triton.language.program_id")}
    # index arithmetic only: tensors loaded or computed from the indices do not count
    scalar = [a for a in assigns if not any(isinstance(c, ast.Call) and (
        callee(c).endswith(".load") or callee(c) in ("tl.load", "tl.dot")) for c in ast.walk(a.value))]
    changed = True
    while changed:
        changed = False
        for a in scalar:
            targets = {t.id for t in a.targets if isinstance(t, ast.Name)}
            if names_in(a.value) & pid and not targets <= pid:
                pid |= targets
                changed = True
    from passes.triton.roles import tile_roles  # noqa: PLC0415

    known = {n for n, r in tile_roles(kernel).items() if r in TILE_ROLES}
    tiles: set[str] = set()
    derived: dict[str, set[str]] = {}  # tile counts: `num_pid_n = tl.cdiv(N, BLOCK_N)`
    for a in assigns:
        if is_cdiv(a.value):
            for t in a.targets:
                if isinstance(t, ast.Name):
                    derived[t.id] = {n for n in names_in(a.value) if n in known}
    for a in scalar:
        used = names_in(a.value)
        # `cols = tl.program_id(1) * BLOCK_C + ...`: a program id read in place counts too
        if used & pid or _reads_program_id(a.value) \
                or any(isinstance(t, ast.Name) and t.id in pid for t in a.targets):
            for n in used:
                if n in known:
                    tiles.add(n)
                tiles |= derived.get(n, set())
    return tiles


def _reads_program_id(expr: ast.AST) -> bool:
    return any(isinstance(c, ast.Call)
               and callee(c) in ("tl.program_id", "triton.language.program_id")
               for c in ast.walk(expr))


def _grid_reads(mod: PyModule, launch: ast.Call, tile: str) -> bool:
    """Whether the launch grid is computed from the launch's meta-parameter `tile`."""
    grid = _grid(mod, launch)
    if not isinstance(grid, (ast.Lambda, ast.FunctionDef)):
        return False
    return any(isinstance(n, ast.Constant) and n.value == tile for n in ast.walk(grid))


def _grid(mod: PyModule, launch: ast.Call) -> ast.AST:
    """The launch's grid: the subscript, or what the name there is bound to in the host."""
    grid = launch.func.slice
    if isinstance(grid, ast.Name):
        host = mod.enclosing(launch, ast.FunctionDef) or mod.tree
        for node in ast.walk(host):
            if isinstance(node, ast.FunctionDef) and node.name == grid.id:
                grid = node
                break
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == grid.id
                                                    for t in node.targets):
                grid = node.value
                break
    return grid


# ---------------------------------------------------------------------------------------------
class _KeywordPass(Pass):
    """A launch keyword (`num_warps`, `num_stages`) found in launches and configs."""

    __slots__ = ()
    keyword_name: ClassVar[str] = ""

    def _holders(self, mod: PyModule) -> list[Holder]:
        # a launch of an autotuned kernel cannot carry meta-parameters its configs set
        return [h for h in holders(mod) if not (h.kind == "launch" and autotuned(mod, h.kernel))]

    def _site_of(self, ir: KernelIR, index: AnchorIndex | None, mod: PyModule, call: ast.Call,
                 present: bool, detail: dict) -> Site:
        detail = {"holder": callee(call) or mod.text(call.func), **detail}
        return make_site(self.name, ir, index, mod.span(call), present, detail)

    def _holder_at(self, mod: PyModule, site: Site) -> ast.Call | None:
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.Call) and mod.span(node) == tuple(site.span):
                return node
        return None


@dataclass(frozen=True, slots=True)
class NumWarps(_KeywordPass):
    """Warps per program: de-optimization drops an explicit `num_warps` (Triton's default of 4
    applies), optimization sets it (at the recorded argument position)."""

    value: int = 8
    """The number of warps an optimization sets."""
    position: int = -1
    """Where the keyword goes in the argument list (-1: last)."""

    name: ClassVar[str] = "num-warps"
    category: ClassVar[Category] = Category.COMPUTE
    summary: ClassVar[str] = "explicit num_warps on launches / configs"
    keyword_name: ClassVar[str] = "num_warps"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("warps-tuned",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("*",)
    preconditions: ClassVar[tuple[str, ...]] = ("pow2(num_warps) and num_warps <= 32",)

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out: list[Site] = []
        for holder in self._holders(mod):
            kw = mod.keyword(holder.call, "num_warps")
            value = literal_int(kw.value) if kw is not None else None
            if kw is None:
                if not any(k.arg is None for k in holder.call.keywords):  # `**config` may set it
                    out.append(self._site_of(ir, index, mod, holder.call, False, {}))
            elif value == DEFAULT_WARPS:  # written out, Triton's default is still unchosen
                out.append(self._site_of(ir, index, mod, holder.call, False, {"num_warps": value}))
            elif value is not None:
                out.append(self._site_of(ir, index, mod, holder.call, True, {"num_warps": value}))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        call = self._holder_at(mod, site)
        kw = mod.keyword(call, "num_warps") if call is not None else None
        if kw is None or literal_int(kw.value) is None:
            return Skipped("no literal num_warps at the site", {"site": site.anchor})
        shared = _shared(mod, call)
        if shared is not None:
            return shared
        position = mod.arguments(call).index(kw)
        return finish(ir, site, [mod.remove_argument(call, kw)],
                      options={"value": kw.value.value, "position": position})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        call = self._holder_at(mod, site)
        if call is None:
            return Skipped("no launch or config at the site", {"site": site.anchor})
        kw = mod.keyword(call, "num_warps")
        written = literal_int(kw.value) if kw is not None else None
        if kw is not None and (written != DEFAULT_WARPS or self.value == written):
            return Skipped("num_warps is already set", {"site": site.anchor})
        shared = _shared(mod, call)
        if shared is not None:
            return shared
        results, skip = self.check(ctx, {"num_warps": self.value})
        if skip:
            return skip
        if kw is not None:  # the default written out: the value changes where it is written
            return finish(ir, site, [_value_edit(mod, kw.value, self.value)], options={},
                          preconditions=results)
        position = self.position if self.position >= 0 else len(mod.arguments(call))
        edit = mod.insert_argument(call, position, f"num_warps={self.value}")
        return finish(ir, site, [edit], options={}, preconditions=results)


STATIC_RANGES = ("tl.static_range", "triton.language.static_range")


def _depthless(mod: PyModule, call: ast.Call) -> bool:
    """A `tl.range(start, end, step)` that sets no pipeline depth (the launch's applies)."""
    return (callee(call) in RANGE_NAMES and len(call.args) <= 3
            and mod.keyword(call, "num_stages") is None
            and not any(k.arg is None for k in call.keywords))


def _loads(node: ast.AST) -> bool:
    """Whether `node` loads memory (`tl.load`, a descriptor's or block pointer's `.load`)."""
    return any(isinstance(c, ast.Call) and (callee(c) == "tl.load" or callee(c).endswith(".load"))
               for c in ast.walk(node))


def _inner_loop_loads(loop: ast.For | ast.While) -> bool:
    """Whether a loop nested in `loop` loads memory: then that loop, not this one, is the one
    whose loads a pipeline overlaps (the K loop inside a loop over tiles or filter taps)."""
    return any(inner is not loop and isinstance(inner, (ast.For, ast.While)) and _loads(inner)
               for inner in ast.walk(loop))


def _read_at_compile_time(loop: ast.For, name: str) -> bool:
    """Whether the body reads `name` where only a compile-time value will do: a `tl.static_*`
    call, an inner static range, an `if` test (a branch chosen per unrolled trip) or an index
    into a Python tuple or list."""
    for node in ast.walk(loop):
        if node is loop:
            continue
        if isinstance(node, ast.Call) and callee(node).split(".")[-1].startswith("static_") \
                and name in names_in(node):
            return True
        if isinstance(node, (ast.If, ast.IfExp)) and name in names_in(node.test):
            return True
        if isinstance(node, ast.Subscript) and name in names_in(node.slice) \
                and not any(isinstance(s, ast.Slice) for s in ast.walk(node.slice)):
            return True
    return False


@dataclass(frozen=True, slots=True)
class SoftwarePipelining(_KeywordPass):
    """Software pipelining depth: de-optimization sets `num_stages=1` (no prefetch) on a
    launch, a config or a `tl.range` loop; optimization restores the recorded depth, or turns
    a kernel loop over loads into `tl.range(..., num_stages=stages)`."""

    stages: int = 3
    """The pipeline depth an optimization sets."""

    name: ClassVar[str] = "software-pipelining"
    category: ClassVar[Category] = Category.STAGING
    summary: ClassVar[str] = "num_stages on launches / configs / tl.range loops"
    keyword_name: ClassVar[str] = "num_stages"
    requires: ClassVar[tuple[str, ...]] = ("tiled",)
    provides: ClassVar[tuple[str, ...]] = ("pipelined",)
    languages: ClassVar[tuple[str, ...]] = TRITON
    platforms: ClassVar[tuple[str, ...]] = ("cuda",)
    preconditions: ClassVar[tuple[str, ...]] = ("stages <= 1 or arch >= sm_80",)

    def _calls(self, mod: PyModule) -> list[ast.Call]:
        calls = [h.call for h in self._holders(mod)]
        for kernel in mod.kernels():
            calls.extend(mod.calls(kernel, RANGE_NAMES))
        return calls

    def _loops(self, mod: PyModule) -> list[ast.For]:
        """Kernel loops over plain `range(...)` (or a `tl.range(...)` that sets no depth)
        whose body loads memory, and unrolled `tl.static_range(...)` loops whose body loads the
        operands of a `tl.dot` (an unrolled loop is not pipelined) and whose variable no
        compile-time construct reads."""
        out = []
        for kernel in mod.kernels():
            for node in ast.walk(kernel):
                if not (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)):
                    continue
                loads = _loads(node)
                if loads and _inner_loop_loads(node):
                    continue  # the loop inside is the one to pipeline (a K loop in a tile loop)
                if (callee(node.iter) == "range" or _depthless(mod, node.iter)) and loads:
                    out.append(node)
                elif (callee(node.iter) in STATIC_RANGES and loads and any(
                        callee(c) == "tl.dot" for c in ast.walk(node) if isinstance(c, ast.Call))
                      and isinstance(node.target, ast.Name)
                      and not _read_at_compile_time(node, node.target.id)):
                    out.append(node)
        return out

    def _counted_whiles(self, mod: PyModule) -> list[tuple[ast.While, CountedWhile]]:
        """Kernel `while` loops over loads that count a name up by a fixed step: Triton
        pipelines only counted (`for`) loops, so these cannot be pipelined as written."""
        out = []
        for kernel in mod.kernels():
            for node in ast.walk(kernel):
                if isinstance(node, ast.While) and _loads(node) and not _inner_loop_loads(node):
                    counted = counted_while(mod, node)
                    if counted is not None:
                        out.append((node, counted))
        return out

    def sites(self, ir: KernelIR, index: AnchorIndex | None = None) -> list[Site]:
        mod = PyModule(ir)
        out: list[Site] = []
        for call in self._calls(mod):
            kw = mod.keyword(call, "num_stages")
            value = literal_int(kw.value) if kw is not None else None
            if value is None:
                continue
            detail = {"num_stages": value, "value_span": list(mod.span(kw.value))}
            out.append(self._site_of(ir, index, mod, call, value > 1, detail))
        for loop in self._loops(mod):
            out.append(make_site(self.name, ir, index, mod.span(loop.iter), False,
                                 {"loop": mod.text(loop.target)}, mod.span(loop)))
        for loop, counted in self._counted_whiles(mod):
            first = counted.init if counted.init is not None else loop
            out.append(make_site(self.name, ir, index, (mod.stmt_span(first)[0], mod.stmt_span(loop)[1]),
                                 False, {"loop": counted.name, "while": True}, mod.span(loop)))
        return out

    def deoptimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        node = _find_site(mod, site)
        if node is None or literal_int(node) is None or node.value <= 1:
            return Skipped("no pipelined num_stages at the site", {"site": site.anchor})
        shared = _shared(mod, node)
        if shared is not None:
            return shared
        return finish(ir, site, [_value_edit(mod, node, 1)], options={"stages": node.value})

    def optimize(self, ir: KernelIR, site: Site, ctx: PassContext | None = None) -> PassResult:
        mod = PyModule(ir)
        results, skip = self.check(ctx, {"stages": self.stages})
        if skip:
            return skip
        node = _find_site(mod, site)
        if node is not None:
            shared = _shared(mod, node)
            if shared is not None:
                return shared
            if node.value == self.stages:
                return Skipped(f"num_stages is already {self.stages}", {"num_stages": node.value})
            listed = _already_listed(mod, node, self.stages)
            if listed is not None:
                return listed
            return finish(ir, site, [_value_edit(mod, node, self.stages)], preconditions=results)
        found = next(((w, c) for w, c in self._counted_whiles(mod)
                      if mod.stmt_span(w)[1] == site.span[1]
                      and mod.stmt_span(c.init if c.init is not None else w)[0] == site.span[0]), None)
        if found is not None:
            return finish(ir, site, as_for(mod, *found, stages=self.stages), preconditions=results)
        call = self._holder_at(mod, site)
        if call is None or not (callee(call) in ("range", *STATIC_RANGES) or _depthless(mod, call)):
            return Skipped("no loop or num_stages at the site", {"site": site.anchor})
        start, _ = mod.span(call.func)
        edits = [] if callee(call) in RANGE_NAMES else [ByteEdit(start, mod.end(call.func), "tl.range")]
        edits.append(mod.insert_argument(call, len(mod.arguments(call)), f"num_stages={self.stages}"))
        return finish(ir, site, edits, preconditions=results)
